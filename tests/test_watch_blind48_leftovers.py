"""tl.watch() checked blind, round 48's leftovers: a recompile is told against the graph Dynamo compared it
with where that graph is the nearer case (LoRA's merged flag beside the train graph; a list attribute's item
beside its length), and the items of a value carried over a graph break are named as its line names them.
Each is checked against Dynamo's own account."""

import math

import torch
import torch.nn.functional as F
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


class LoRALinear(torch.nn.Linear):  # microsoft/LoRA loralib.layers.Linear, trimmed: eval() merges the update
    def __init__(self, n, r=4):
        super().__init__(n, n)
        self.r, self.merged, self.merge_weights, self.scaling = r, False, True, 2.0
        self.lora_A = torch.nn.Parameter(torch.empty(r, n))
        self.lora_B = torch.nn.Parameter(torch.zeros(n, r))
        torch.nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.weight.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        delta = (self.lora_B @ self.lora_A) * self.scaling
        if mode and self.merge_weights and self.merged:
            self.weight.data -= delta
            self.merged = False
        elif not mode and self.merge_weights and not self.merged:
            self.weight.data += delta
            self.merged = True
        return self

    def forward(self, x):
        if self.r > 0 and not self.merged:
            return F.linear(x, self.weight, self.bias) + (x @ self.lora_A.T @ self.lora_B.T) * self.scaling
        return F.linear(x, self.weight, self.bias)


def test_a_flag_is_told_against_the_graph_of_the_same_mode_not_against_the_train_graph():
    net = LoRALinear(8)
    model = torch.compile(net, backend="aot_eager")

    def run():
        model.train()
        model(torch.randn(4, 8)).sum().backward()
        model.eval()  # merges: the eval graph, under no_grad
        with torch.no_grad():
            model(torch.randn(4, 8))
        model.train()
        net.merge_weights = False  # evaluate unmerged from now on: only `merged` differs from the eval graph
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 8))

    table, account = watched_clean(run)
    reasons = [m.recompile_reason or "" for m in account.compiled()]
    last = [r for r in table.rows if "backward" not in r.function][-1].causes
    assert any("merged == True" in r for r in reasons), reasons  # Dynamo's account: only the flag failed there
    assert [c.kind for c in last] == ["flag"] and "self.merged was True" in last[0].words, last


class DiceLoss(torch.nn.Module):  # segmentation_models_pytorch's DiceLoss, trimmed: the classes scored
    def __init__(self, classes):
        super().__init__()
        self.classes = classes

    def forward(self, y_pred, y_true):
        y_pred = y_pred.softmax(1)[:, self.classes]
        y_true = F.one_hot(y_true, 4).permute(0, 3, 1, 2)[:, self.classes]
        return 1 - (2 * (y_pred * y_true).sum() / (y_pred + y_true).sum())


def test_a_list_items_change_is_told_against_the_graph_of_the_same_length():
    loss = DiceLoss([1, 2, 3])
    f = torch.compile(loss, backend="eager")
    y_pred, y_true = torch.randn(2, 4, 8, 8), torch.randint(0, 4, (2, 8, 8))

    def run():
        for classes in ([1, 2, 3], [1, 3], [2, 3]):
            loss.classes = classes
            f(y_pred, y_true)

    table, account = watched_clean(run)
    reasons = [m.recompile_reason or "" for m in account.compiled()]
    (row,) = table.rows
    third = row.causes[-1]
    assert any(r.startswith("0/1: ") and "classes[0] == 1" in r for r in reasons), reasons
    assert "self.classes[0] changed (was 1)" in third.words, row.causes
    assert "Dynamo keeps the ints in an nn.Module's lists static" in third.words, third.words


def test_the_items_of_a_value_carried_over_a_break_are_named_as_the_line_names_them():
    def match(x, P, a):  # SORT's association, trimmed: one-argument torch.where breaks, its pairs carried over
        x = x * 2
        pairs = torch.stack(torch.where(a), dim=1)
        return x[pairs[:, 0]] + P[pairs[:, 1]]

    f = torch.compile(match, backend="eager")
    table = watched(lambda: [f(torch.randn(n, 3), torch.randn(n, 3), torch.eye(n, dtype=torch.bool)) for n in (4, 5)])
    said = [c.words for r in table.rows for c in r.causes if "Dynamo made" in c.words]
    assert any("torch.where(a)[0] dim 0" in w for w in said), table.to_text()
    assert "the carried value" not in table.to_text(), table.to_text()
