"""tl.watch() checked blind, rounds 76 and 77, what was left: DnCNN's noise, drawn per image with NumPy and
filled in with the legacy ``torch.FloatTensor(size).normal_(std=...)``. Each is checked against Dynamo's own
account, with the printed fix applied and measured where it is an action."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _dynamo_oracle import watched_clean
from torch import nn

from tpu_lab.testing.dynamo_account import DynamoAccount, counting_backend

NOISE_LEVELS = [0, 55]
_OLD_DYNAMO = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < (2, 15)


def dncnn_step(model, img_train):  # SaoYan/DnCNN-PyTorch train.py, blind mode: a noise level per image
    noise = torch.zeros(img_train.size())
    stdN = np.random.uniform(NOISE_LEVELS[0], NOISE_LEVELS[1], size=noise.size()[0])
    for n in range(noise.size()[0]):
        sizeN = noise[0, :, :, :].size()
        noise[n, :, :, :] = torch.FloatTensor(sizeN).normal_(mean=0, std=stdN[n] / 255.0)
    return ((model(img_train + noise) - noise) ** 2).sum()


def dncnn_step_fixed(model, img_train):  # the printed fix: a torch draw per image, one op over the batch
    std = torch.empty(img_train.size(0), 1, 1, 1).uniform_(NOISE_LEVELS[0], NOISE_LEVELS[1])
    noise = torch.randn_like(img_train) * (std / 255.0)
    return ((model(img_train + noise) - noise) ** 2).sum()


def test_a_numpy_draw_a_random_fill_takes_as_one_value_gets_the_tensor_draw_which_compiles_once(dynamo):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 1, 3, padding=1))
    np.random.seed(0)
    step = torch.compile(dncnn_step, backend="aot_eager")
    table, _ = watched_clean(lambda: [step(model, torch.rand(4, 1, 8, 8)) for _ in range(3)])
    (row,) = [r for r in table.rows if r.function.startswith("dncnn_step")]
    (cause,) = row.causes
    assert row.failed and "random draw" in cause.words, table.to_text()
    # never "pass it in as a Python int argument": normal_ takes std as one fixed value, a graph per value
    assert "pass it in as an argument" not in cause.fix, cause.fix
    assert "torch.randn_like(x) * std" in cause.fix and "normal_ takes the number as one fixed value" in cause.fix
    assert "write torch.FloatTensor(sizeN) as torch.empty(sizeN, dtype=torch.float32)" in cause.fix, cause.fix
    assert [b.fix for b in table.breaks] == [cause.fix], table.to_text()

    # applied: the whole step compiles, once for three calls, with nothing given up
    torch._dynamo.reset()
    fixed = torch.compile(dncnn_step_fixed, backend=counting_backend)
    with DynamoAccount() as account:
        for _ in range(3):
            fixed(model, torch.rand(4, 1, 8, 8)).backward()
    assert {r.compile_id for r in account.records} == {"0/0"}, account.records  # (the lazy backward: 0/0 too)
    assert not [r for r in account.records if r.fail_type], account.records
    assert account.graphs == {"forward": 1, "backward": 1}


def test_the_words_claims_hold_on_this_torch():
    # "each value passed in (as a Python float argument too) is a graph of its own" for normal_'s std
    torch._dynamo.reset()
    with DynamoAccount() as account:
        fill = torch.compile(lambda x, s: torch.empty(x.size()).normal_(mean=0, std=s) + x, backend="eager")
        for s in (0.1, 0.2, 0.3):
            fill(torch.zeros(2, 3), s)
    assert len(account.records) == 3, account.records
    # "Dynamo builds a tensor that holds sizeN's numbers": eagerly a 5x6 tensor, compiled a tensor of [5., 6.]
    torch._dynamo.reset()
    made = torch.compile(lambda x: torch.FloatTensor(x[0].size()).shape, backend="eager")(torch.zeros(4, 5, 6))
    assert torch.FloatTensor(torch.zeros(4, 5, 6)[0].size()).shape == (5, 6)
    assert made == (2,), made


class Retention(nn.Module):  # microsoft/torchscale retnet.py, cut down: the decoding state is the caller's dict
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x, incremental_state):
        kv = self.proj(x[:, -1:])
        if "prev_key_value" in incremental_state:
            kv = kv + incremental_state["prev_key_value"]
        incremental_state["prev_key_value"] = kv
        return x + kv


class RetNetDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.layers = nn.ModuleList([Retention(), Retention()])

    def forward(self, tokens, incremental_state):
        x = self.embed(tokens)
        for idx, layer in enumerate(self.layers):
            if idx not in incremental_state:
                incremental_state[idx] = {}
            x = layer(x, incremental_state[idx])
        return x[:, -1].argmax(-1, keepdim=True)


def test_a_dict_the_compiled_function_fills_is_expected_once_never_same_keys_and_no_mark_beside_it():
    torch.manual_seed(0)
    model = RetNetDecoder().eval()
    compiled = torch.compile(model, backend="aot_eager")

    def decode():
        tokens, state = torch.randint(0, 16, (2, 1)), {}
        for _ in range(4):
            tokens = torch.cat([tokens, compiled(tokens, incremental_state=state)], dim=1)

    with torch.no_grad():
        table, _ = watched_clean(decode)
        (filled,) = [c for r in table.rows for c in r.causes if c.kind == "dict_keys"]
        line = RetNetDecoder.forward.__code__.co_firstlineno + 4
        assert f"test_watch_blind78.py:{line}: incremental_state[idx] = {{}}) fills it itself" in filled.words
        assert filled.fix.startswith("expected once: the compiled function fills the container you pass")
        assert "same keys" not in table.to_text(), table.to_text()
        # the size's change in the same compile: nothing to mark there, the filled dict needs its own graph anyway
        (size,) = [c for r in table.rows for c in r.causes if c.kind == "size" and filled.words in c.fix]
        assert "mark_unbacked" not in size.fix, size.fix

        # "every later call, or a fresh empty one, reuses them": a second decoding compiles nothing
        with DynamoAccount() as account:
            decode()
    assert account.records == [], account.records


class LayerNorm(nn.Module):  # facebookresearch/ConvNeXt models/convnext.py: both data formats, one class
    def __init__(self, width, data_format="channels_last"):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(width)), nn.Parameter(torch.zeros(width))
        self.data_format, self.normalized_shape = data_format, (width,)

    def forward(self, x):
        if self.data_format == "channels_last":
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, 1e-6)
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        return self.weight[:, None, None] * ((x - u) / torch.sqrt(s + 1e-6)) + self.bias[:, None, None]


def convnext_norms(limit):
    """Each of ConvNeXt's norms compiled on its own (``m.compile()``), at two image sizes: the outputs, with the
    watch's table and Dynamo's account."""
    norms = [LayerNorm(w, f) for w in (4, 8, 16) for f in ("channels_first", "channels_last")]
    for m in norms:
        m.compile(backend="eager")
    out = []

    def run():
        for size in (8, 16):
            for m in norms:
                shape = (
                    (2, m.weight.numel(), size, size)
                    if m.data_format == "channels_first"
                    else (2, size, size, m.weight.numel())
                )
                out.append(m(torch.ones(shape)))

    with torch._dynamo.config.patch(recompile_limit=limit):
        table, account = watched_clean(run)
    return out, table, account


def test_instances_that_share_a_methods_graphs_are_told_to_share_its_one_limit_and_raising_it_is_measured():
    out, table, _ = convnext_norms(limit=4)
    (limited,) = [c for r in table.rows if r.limit_hit for c in r.causes if c.kind == "limit"]
    assert limited.fix.startswith("the instances of LayerNorm share this code's graphs and its one recompile limit (4)")
    # the pin a channels_first graph puts on x dim 1 (it follows the weight) is no reason a channels_last mark raises
    assert "mark_dynamic would raise" not in limited.fix, limited.fix
    assert "not translated" not in table.to_text(), table.to_text()  # self.normalized_shape == (4,): a 1-tuple
    # applied: the limit above the number of configurations, no refusal, the same outputs
    again, raised, _ = convnext_norms(limit=16)
    assert not [r for r in raised.rows if r.limit_hit], raised.to_text()
    assert all(torch.allclose(a, b) for a, b in zip(out, again, strict=True))


def focal_loss(input, target, clone=False):  # clcarwin/focal_loss_pytorch focalloss.py, cut down
    if input.dim() > 2:
        input = input.view(input.size(0), input.size(1), -1).transpose(1, 2).contiguous().view(-1, input.size(1))
        input = input.clone() if clone else input
    target = target.view(-1, 1).clone() if clone else target.view(-1, 1)
    torch._dynamo.graph_break()  # where Variable(...) broke: the part after it takes target, a view, as its input
    logpt = F.log_softmax(input, dim=1).gather(1, target)
    return -logpt.mean()


def test_a_guard_on_a_views_base_that_raised_is_named_and_its_clone_fix_measured():
    def run(clone):
        loss = torch.compile(focal_loss, backend="eager")
        for shape in ((2, 4, 8, 8), (2, 4, 6, 10), (16, 4)):  # segmentation crops, then a classification batch
            target = torch.zeros((shape[0], *shape[2:]), dtype=torch.long)
            loss(torch.randn(shape), target, clone)

    table, account = watched_clean(lambda: run(False))
    raised = [c for r in table.rows for c in r.causes if c.kind == "view_base"]
    assert len(raised) == 1 and raised[0].count == 1, table.to_text()
    # Dynamo logs the first guard that raised: input's base, None now (a 2-d input is no view)
    assert "what it checks is now None (the tensor a view was taken from" in raised[0].words, raised[0].words
    last = [r for r in table.rows if r.function.startswith("focal_loss after")][-1]
    assert not [c for c in last.causes if "dimension 0 changed" in c.words], table.to_text()  # never against 1/0
    # applied: each view cloned where it is made, the part after the break compiles once less
    _, fixed = watched_clean(lambda: run(True))
    assert len(fixed.compiled()) == len(account.compiled()) - 1, (account.records, fixed.records)


def targets(target, clone=False):  # the same loss's target alone: a view of a 3-d tensor, then of a 1-d one
    target = target.view(-1, 1).clone() if clone else target.view(-1, 1)
    torch._dynamo.graph_break()
    return target.sum()


def test_a_guard_on_a_views_base_of_fewer_dimensions_is_named_and_its_clone_fix_measured():
    def run(clone):
        f = torch.compile(targets, backend="eager")
        for shape in ((2, 8, 8), (2, 6, 10), (16,)):
            f(torch.zeros(shape, dtype=torch.long), clone)

    table, account = watched_clean(lambda: run(False))
    (raised,) = [c for r in table.rows for c in r.causes if c.kind == "view_base"]
    assert raised.words.startswith("checking one of Dynamo's guards raised (tuple index out of range)"), raised.words
    assert "that tensor has fewer dimensions now" in raised.words
    _, fixed = watched_clean(lambda: run(True))
    assert len(fixed.compiled()) == len(account.compiled()) - 1, (account.records, fixed.records)


def test_a_one_tuple_a_module_keeps_is_read_as_a_setting():  # ConvNeXt's LayerNorm: normalized_shape = (C,)
    from tpu_lab.compile.causes.held_numbers import tuple_words

    said = tuple_words("self.normalized_shape == (8,)")
    assert said is not None and said.words.startswith("tuple self.normalized_shape changed (was (8,))"), said
    assert said.fix.startswith("expected once per value of self.normalized_shape, a setting of the module")


def test_a_dimension_the_graph_pins_is_not_also_said_to_be_made_dynamic():  # round 77's Switch MoE row
    from tpu_lab.compile.watching.watch_table import RowCause
    from tpu_lab.compile.watching.what_next import unpinned_note

    pinned = RowCause(
        "indexes_list[3] dimension 0 changed 4 -> 2 (the graph pins indexes_list[3] dim 0 to one size again, as an "
        "earlier graph did: the code fixes this size ..., so every size is its own graph)",
        kind="size",
    )
    note = RowCause("Dynamo made x dim 0, indexes_list[3] dim 0 dynamic (automatic dynamic shapes)", kind="dynamic")
    kept = unpinned_note(note, [pinned])
    assert kept is not None and kept.words == "Dynamo made x dim 0 dynamic (automatic dynamic shapes)"
    only = RowCause("Dynamo made indexes_list[3] dim 0 dynamic (automatic dynamic shapes)", kind="dynamic")
    assert unpinned_note(only, [pinned]) is None
    assert unpinned_note(note, []) is note


def special_mask(inputs, labels):  # transformers' DataCollatorForLanguageModeling.torch_mask_tokens, cut down
    special = [
        [1 if t in (0, 1) else 0 for t in row]
        for row in labels.tolist()  # a statement over lines, as there
    ]
    return inputs.masked_fill(torch.tensor(special, dtype=torch.bool), 0)


def test_a_value_carried_beside_a_comprehension_is_named_by_the_call_that_made_it():
    f = torch.compile(special_mask, backend="eager")
    table, _ = watched_clean(lambda: [f(torch.ones(2, 4), torch.tensor([[0, 5, 6, 1], [0, v, 7, 1]])) for v in (3, 4)])
    text = table.to_text()
    assert "carried over the graph break" not in text, text
    assert "labels.tolist()[1][1]" in text, text


def window_pad(x, H, W, ws=4, integer=False):  # microsoft/Swin-Transformer: pad the feature map to whole windows
    if integer:  # the printed fix
        Hp, Wp = -(-H // ws) * ws, -(-W // ws) * ws
    else:
        Hp = int(np.ceil(H / ws)) * ws
        Wp = int(np.ceil(W / ws)) * ws
    return F.pad(x.view(1, H, W, -1), (0, 0, 0, Wp - W, 0, Hp - H)).sum()


def test_a_numpy_ceil_of_a_quotient_is_a_graph_per_value_and_integer_rounding_is_measured():
    sizes = ((8, 8), (10, 12), (9, 7), (6, 6), (8, 8))

    def run(integer):
        f = torch.compile(window_pad, backend="eager")
        return [float(f(torch.ones(h * w, 2), h, w, integer=integer)) for h, w in sizes]

    out = []
    table, account = watched_clean(lambda: out.append(run(False)))
    text = table.to_text()
    assert "so later values reuse this graph while H stays" not in text, text  # the quotient holds one value
    assert "Dynamo made H, W dynamic, but in this graph H stays 10" in text, text
    assert "np.ceil takes the quotient as a float, which Dynamo bakes into the graph" in text, text
    fixes = {c.fix for r in table.rows for c in r.causes if c.count}
    assert any("-(-H // ws)" in f for f in fixes), fixes
    _, fixed = watched_clean(lambda: out.append(run(True)))
    assert len(fixed.compiled()) < len(account.compiled()), (fixed.records, account.records)
    assert out[0] == out[1]


def data_parallel(model, input, ngpu, fixed=False):  # meijieru/crnn.pytorch utils.py (its older data_parallel)
    on_gpu = (
        (input.is_cuda and input.dtype == torch.float32) if fixed else isinstance(input.data, torch.cuda.FloatTensor)
    )
    if on_gpu and ngpu > 1:
        return nn.parallel.data_parallel(model, input, range(ngpu))
    return model(input)


@pytest.mark.skipif(_OLD_DYNAMO, reason="torch 2.13's Dynamo traces this isinstance: no break to name")
def test_a_legacy_type_checked_with_isinstance_is_named_and_the_property_test_measured():
    model = nn.Linear(4, 4)
    f = torch.compile(data_parallel, backend="eager")
    table, _ = watched_clean(lambda: f(model, torch.ones(2, 4), 1))
    (brk,) = table.breaks
    assert brk.words.startswith("isinstance(input.data, torch.cuda.FloatTensor) checks a legacy tensor type"), brk
    assert brk.fix.startswith(
        "test the tensor's own properties in place of the legacy type: input.is_cuda and input.dtype == torch.float32"
    ), brk.fix
    fixed, _ = watched_clean(lambda: f(model, torch.ones(2, 4), 1, fixed=True))
    assert not fixed.breaks, fixed.to_text()


def attention_head(x, adj):
    torch._dynamo.graph_break()  # where pyGAT's sparse attention breaks (adj.nonzero())
    return adj @ x


def gat_forward(x, adj):  # Diego999/pyGAT models.py SpGAT.forward, cut down: a head's output carried over its break
    return F.elu(attention_head(x, adj)).sum()


def test_a_carried_call_with_several_arguments_is_named_whole_where_it_is_made_dynamic():
    f = torch.compile(gat_forward, backend="eager")
    table, _ = watched_clean(lambda: [f(torch.ones(n, 4), torch.ones(n, n)) for n in (10, 14, 12)])
    text = table.to_text()
    assert "Dynamo made attention_head(x, adj) dim 0 dynamic" in text, text
    assert "adj) dim 0" not in text.replace("attention_head(x, adj) dim 0", ""), text  # never cut at its comma


def quantize_input(input):  # rosinality/vq-vae-2-pytorch vqvae.py, cut down: an image whose height and width change
    return F.avg_pool2d(input, 2).flatten(1).sum(1)


def test_marks_said_together_paste_as_statements_that_each_run():
    import re

    f = torch.compile(quantize_input, backend="eager")
    table, _ = watched_clean(lambda: [f(torch.ones(2, 3, s, s)) for s in (8, 12)])
    summary = "\n".join(table.summary())
    pasted = re.search(r"torch\._dynamo\.maybe_mark_dynamic\(input, 2\)[^:]*\(input, 3\)", summary)
    assert pasted, summary
    marked = torch.ones(2, 3, 16, 16)
    exec(pasted[0], {"torch": torch, "input": marked})  # as a user pastes it
    assert getattr(marked, "_dynamo_weak_dynamic_indices", set()) == {2, 3}, pasted[0]


class Clip(nn.Module):  # moein-shariatnia/OpenAI-CLIP CLIP.py, cut down: a dict batch of three tensors
    def __init__(self):
        super().__init__()
        self.image, self.text, self.temperature = nn.Linear(6, 4), nn.Embedding(10, 4), 1.0

    def forward(self, batch):
        i = self.image(batch["image"])
        t = (self.text(batch["input_ids"]) * batch["attention_mask"][..., None]).mean(1)
        targets = F.softmax((i @ i.T + t @ t.T) / 2 * self.temperature, dim=-1)
        return (-targets * F.log_softmax(t @ i.T / self.temperature, -1)).sum()


def test_a_batch_whose_keys_changed_together_is_marked_on_every_key_and_the_marks_measured():
    import re

    def run(marks=""):
        torch.manual_seed(0)
        model = Clip()
        f = torch.compile(model, backend=counting_backend)
        for n, train in ((4, True), (4, True), (3, True), (4, False), (3, False)):
            batch = {
                "image": torch.randn(n, 6),
                "input_ids": torch.randint(0, 10, (n, 5)),
                "attention_mask": torch.ones(n, 5),
            }
            exec(marks, {"torch": torch, "batch": batch})  # the printed marks, pasted before each call
            model.train(train)
            with torch.set_grad_enabled(train):
                loss = f(batch)
            loss.backward() if train else None

    table, account = watched_clean(run)
    summary = "\n".join(table.summary())
    marks = re.search(
        r"torch\._dynamo\.maybe_mark_dynamic\(batch\['image'\], 0\)[^:]*?\(batch\['attention_mask'\], 0\)", summary
    )
    assert marks and "batch['input_ids'], 0)" in marks[0], summary
    _, marked = watched_clean(lambda: run(marks[0]))
    assert len(marked.compiled()) < len(account.compiled()), (marked.records, account.records)


def sparse_attention(h, fixed=False):  # Diego999/pyGAT layers.py SpGraphAttentionLayer.forward, cut down
    h = h.exp()
    if fixed:
        torch._assert_async(~torch.isnan(h).any())
    else:
        assert not torch.isnan(h).any()
    return h / h.sum()


def test_an_assert_on_a_tensor_is_a_check_with_the_device_assertion_as_its_fix_never_torch_cond():
    f = torch.compile(sparse_attention, backend="eager")
    table, _ = watched_clean(lambda: f(torch.ones(3)))
    (brk,) = table.breaks
    assert "torch.cond" not in brk.fix and "torch._assert_async(" in brk.fix, brk.fix
    fixed, _ = watched_clean(lambda: f(torch.ones(3), fixed=True))
    assert not fixed.breaks, fixed.to_text()


def apply_module(model, input, ngpu):  # meijieru/crnn.pytorch utils.py data_parallel, on one device
    return model(input)


def test_a_helper_called_with_several_modules_is_told_so_and_compiling_the_modules_measured():
    cnn, fc = nn.Sequential(nn.Linear(4, 4)), nn.Linear(4, 4)
    f = torch.compile(apply_module, backend="eager")
    table, _ = watched_clean(lambda: [f(fc, f(cnn, torch.ones(3, 4), 1), 1) for _ in range(2)])
    (typed,) = [c for r in table.rows for c in r.causes if c.kind == "type"]
    assert "model is now a Linear, was a Sequential, another module passed in" in typed.words, typed.words
    assert typed.count == 1 and "a submodule was replaced" not in typed.words

    # applied: the model that calls the helper compiled in place of it: one graph for both modules
    class Crnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn, self.fc = cnn, fc

        def forward(self, x):
            return apply_module(self.fc, apply_module(self.cnn, x, 1), 1)

    model = torch.compile(Crnn(), backend="eager")
    _, fixed = watched_clean(lambda: [model(torch.ones(3, 4)) for _ in range(2)])
    assert len(fixed.records) == 1 and not fixed.records[0].fail_type, fixed.records
