"""tl.watch() checked blind, forty-eighth round: a float torch.quantile takes as a Python number though it
takes a tensor too (an autoencoder's anomaly threshold), one-argument torch.where (SORT), Dynamo's own 2**53 bound, and an
attribute set on the first call of a plain object (EarlyStopping). Each is checked against Dynamo's own account,
with the printed fixes applied."""

import torch
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


def detect(err, contamination):  # PyOD's threshold: the (1 - contamination) quantile of the errors
    threshold = torch.quantile(err, 1 - contamination)
    is_anomaly = err > threshold
    return threshold, int(is_anomaly.sum())


def test_a_float_an_op_also_takes_as_a_tensor_is_told_to_be_passed_as_one_and_that_holds():
    f = torch.compile(detect, backend="aot_eager")
    err = torch.rand(64)
    table = watched(lambda: [f(err, c) for c in (0.1, 0.05, 0.01)])
    held = [c for r in table.rows for c in r.causes if "torch.quantile took it as a Python number" in c.words]
    assert held and all(c.fix.startswith("pass it as a 0-d tensor (torch.tensor(value)): torch.quantile") for c in held)
    torch._dynamo.reset()
    fixed = watched(lambda: [f(err, torch.tensor(c)) for c in (0.1, 0.05, 0.01)])
    assert fixed.total_compiles < table.total_compiles and fixed.total_compiles <= 2, fixed.to_text()


def test_dynamos_own_float_bound_on_a_size_is_never_said_as_a_condition():
    from tpu_lab.compile.causes.guard_places import held

    kept = held(["L['x'].size()[0] <= 9007199254740992", "L['x'].size()[0] >= 10"], ())
    assert [w for w, _ in kept["x dim 0"]] == ["x.size()[0] >= 10"]


def test_one_argument_torch_where_is_named_as_such_and_never_told_to_use_torch_where():
    @torch.compile(backend="eager")
    def matched(iou):  # SORT's associate_detections_to_trackers: the matched pairs
        return torch.stack(torch.where(iou > 0.3), dim=1).sum()

    table = watched(lambda: matched(torch.rand(4, 5)))
    (b,) = table.breaks
    assert b.words.startswith("torch.where with one argument (the indices where it holds, as torch.nonzero)"), b.words
    assert "torch.where in place of nonzero" not in b.fix and "the three-argument torch.where(cond, x, y)" in b.fix


class EarlyStopping:  # Bjarten/early-stopping-pytorch's pytorchtools.EarlyStopping, trimmed
    def __init__(self):
        self.best_score = None

    def __call__(self, val_loss, model):
        score = -val_loss
        if self.best_score is None:
            self.best_score = score
        return score * 2


def test_an_attribute_set_on_the_first_call_of_a_plain_object_is_set_on_that_object_never_on_model():
    stopper, model = EarlyStopping(), torch.nn.Linear(2, 2)
    f = torch.compile(stopper.__call__, backend="eager")  # as a frame of its own, self its input
    table = watched(lambda: [f(torch.tensor(1.0), model) for _ in range(2)])
    (none,) = [c for r in table.rows for c in r.causes if c.kind == "none"]
    assert "early_stopping.best_score = its value now, early_stopping being your EarlyStopping object" in none.fix
    assert "model." not in none.fix and "<your" not in none.fix  # an example name, said as one, never a placeholder

    fresh = EarlyStopping()
    fresh.best_score = torch.tensor(-1.0)  # the fix as printed, on the object that holds it
    g = torch.compile(fresh.__call__, backend="eager")
    assert watched(lambda: [g(torch.tensor(1.0), model) for _ in range(2)]).total_compiles == 1


def balancing_loss(gate_logits, attention_mask=None):  # transformers' Mixtral load_balancing_loss_func, trimmed
    probs = gate_logits.softmax(-1)
    if attention_mask is None:
        return probs.mean(0).pow(2).sum()
    mask = attention_mask.reshape(-1, 1).float()
    return (probs * mask).sum(0).pow(2).sum() / mask.sum()


def test_a_mark_for_a_graph_of_a_later_case_is_told_at_the_first_call_of_that_case_and_that_holds():
    f = torch.compile(balancing_loss, backend="eager")

    def calls(mark=False):
        f(torch.randn(16, 4))
        for s in (8, 12):
            gate, mask = torch.randn(2 * s, 4), torch.ones(2, s, dtype=torch.long)
            if mark and s == 8:  # the fix as printed: on the first call with attention_mask given
                torch._dynamo.maybe_mark_dynamic(gate, 0)
                torch._dynamo.maybe_mark_dynamic(mask, 1)
            f(gate, mask)

    table = watched(calls)
    sizes = [c for r in table.rows for c in r.causes if c.kind == "size"]
    assert sizes and all("before the first call with attention_mask given (" in c.fix for c in sizes), sizes
    torch._dynamo.reset()
    assert watched(lambda: calls(mark=True)).total_compiles == table.total_compiles - 1


class MultiHead(torch.nn.Module):  # avalanche's MultiHeadClassifier: one head per task, picked by str(task)
    def __init__(self):
        super().__init__()
        self.heads = torch.nn.ModuleDict({str(t): torch.nn.Linear(4, 2) for t in range(3)})

    def forward(self, x, task_label):
        return self.heads[str(task_label)](x)


def test_str_of_a_dynamic_int_warns_that_text_passed_in_is_still_a_graph_per_value():
    model = MultiHead()
    f = torch.compile(model, backend="eager")
    table = watched(lambda: [f(torch.randn(2, 4), t) for t in range(3)])
    (b,) = [b for b in table.breaks if b.words.startswith("str() or repr()")]
    assert "each text passed in is still a graph of its own" in b.fix

    class Keyed(MultiHead):  # the text built outside, as the fix says: each key still a graph of its own
        def forward(self, x, key):
            return self.heads[key](x)

    g = torch.compile(Keyed(), backend="eager")
    assert watched(lambda: [g(torch.randn(2, 4), str(t)) for t in range(3)]).total_compiles == 3
