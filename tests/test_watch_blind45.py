"""tl.watch() checked blind, forty-fifth round: SSD's tied box and class targets marked one and not the other,
boolean-mask indexing named as torch.nonzero, and CleanRL's recurrent PPO reading ``self.lstm.input_size``
(Dynamo's ``Missing as_proxy()`` shown as it was). Each is checked against Dynamo's own account, with the printed
fixes applied."""

import torch
from _dynamo_oracle import watched_clean


def watched(run):
    return watched_clean(run)[0]


def multibox_loss(loc_data, conf_t):  # SSD's MultiBoxLoss: predictions and targets share the prior count
    return (loc_data * 2).sum() + conf_t.float().sum()


def test_inputs_tied_in_one_change_are_each_marked_and_the_marks_applied_as_printed_hold():
    f = torch.compile(multibox_loss, backend="eager", dynamic=False)
    table = watched(lambda: [f(torch.randn(2, n, 4), torch.zeros(2, n, dtype=torch.long)) for n in (40, 64)])
    (fix,) = {c.fix for r in table.rows for c in r.causes if c.kind == "size"}
    marks = "torch._dynamo.maybe_mark_dynamic(loc_data, 1); torch._dynamo.maybe_mark_dynamic(conf_t, 1)"
    assert marks in fix or marks.replace("loc_data", "X").replace("conf_t", "loc_data").replace("X", "conf_t") in fix

    def marked():
        for n in (40, 64, 52):
            loc, conf = torch.randn(2, n, 4), torch.zeros(2, n, dtype=torch.long)
            torch._dynamo.maybe_mark_dynamic(loc, 1)
            torch._dynamo.maybe_mark_dynamic(conf, 1)
            f(loc, conf)

    assert watched(marked).total_compiles == 1


def test_indexing_by_a_boolean_mask_is_named_so_never_torch_nonzero():
    @torch.compile(backend="eager")
    def positives(loc_data, pos_idx):
        return loc_data[pos_idx].view(-1, 4).sum()

    table = watched(lambda: positives(torch.randn(8, 4), torch.rand(8) > 0.5))
    (b,) = table.breaks
    assert b.words.startswith("indexing by a boolean mask (x[mask]) (aten.nonzero.default): its output's shape")
    assert "torch.nonzero" not in b.words


class RecurrentAgent(torch.nn.Module):  # CleanRL's ppo_atari_lstm.py get_states, trimmed
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 8)

    def forward(self, hidden):
        return hidden.reshape((-1, 2, self.lstm.input_size)) * 2


class SizedAgent(RecurrentAgent):  # the second fix: the size kept as a plain int of its own
    def __init__(self):
        super().__init__()
        self.input_size = 8

    def forward(self, hidden):
        return hidden.reshape((-1, 2, self.input_size)) * 2


def test_an_rnn_modules_attribute_dynamo_cannot_pass_on_is_said_with_fixes_that_hold():
    f = torch.compile(RecurrentAgent(), backend="eager")
    table = watched(lambda: f(torch.randn(4, 8)))
    (b,) = table.breaks  # torch 2.13 words it as Dynamo's RNN break, which says allow_rnn too
    assert "as_proxy" not in b.words and "RNN" in b.words and "allow_rnn" in b.fix, b
    if "RNN module" in b.words:
        assert b.words.startswith("self.lstm.input_size is read from an RNN module, which Dynamo does not trace")
        assert b.fix.startswith("set torch._dynamo.config.allow_rnn = True before the first call")

    with torch._dynamo.config.patch(allow_rnn=True):  # the first fix as printed
        assert watched(lambda: f(torch.randn(4, 8))).breaks == ()
    own = torch.compile(SizedAgent(), backend="eager")  # the second fix as printed
    assert watched(lambda: own(torch.randn(4, 8))).breaks == ()


def test_an_errors_escaped_newlines_are_never_printed_as_backslash_n():
    from tpu_lab.compile.causes.break_words import graph_break_words

    reason = r"RuntimeError when making fake tensor call: CUDA error: driver too old\nSearch for `cudaError'\nDone."
    said = graph_break_words(reason).words
    assert "\\n" not in said and "driver too old Search for" in said, said


class PosEmbed(torch.nn.Module):  # DINO's interpolate_pos_encoding: a grid of position embeddings resized
    def __init__(self, by_size=False):
        super().__init__()
        self.grid, self.by_size = torch.nn.Parameter(torch.randn(1, 4, 8, 8)), by_size

    def forward(self, x):
        w0, h0 = x.shape[-2] // 4 + 0.1, x.shape[-1] // 4 + 0.1
        if self.by_size:  # the fix as printed: sizes, not a float computed from them
            return torch.nn.functional.interpolate(self.grid, size=(int(w0), int(h0)), mode="bilinear")
        return torch.nn.functional.interpolate(self.grid, scale_factor=(w0 / 8, h0 / 8), mode="bilinear")


def test_a_scale_factor_computed_from_the_image_size_is_held_per_size_and_passing_sizes_holds():
    sizes = (32, 48, 40, 56, 64)
    f = torch.compile(PosEmbed(), backend="eager")
    table = watched(lambda: [f(torch.randn(1, 3, s, s)) for s in sizes])
    held = [c for r in table.rows for c in r.causes if c.words.startswith("a float computed from a size changed")]
    assert held and all("torch takes it as one fixed value there (a scale factor)" in c.words for c in held)
    assert held[0].fix.startswith("pass the op sizes, not a float computed from them (F.interpolate(size=(h, w))")
    per_size = table.total_compiles

    fixed = torch.compile(PosEmbed(by_size=True), backend="eager")
    assert watched(lambda: [fixed(torch.randn(1, 3, s, s)) for s in sizes]).total_compiles < per_size


def test_a_with_on_torchs_backend_settings_inside_is_fixed_by_entering_it_around_the_call():
    def loss(x):  # wav2vec2's CTC loss: cuDNN switched off around the loss, inside the compiled forward
        with torch.backends.cudnn.flags(enabled=False):
            return (x * 2).sum()

    f = torch.compile(loss, backend="eager")
    table = watched(lambda: [f(torch.randn(4)) for _ in range(2)])
    assert table.breaks and all(
        b.fix.startswith("enter `with torch.backends.cudnn.flags(...)` around your call of the compiled function")
        for b in table.breaks
    ), table.breaks

    inner = torch.compile(lambda x: (x * 2).sum(), backend="eager")

    def around():  # the fix as printed
        for _ in range(2):
            with torch.backends.cudnn.flags(enabled=False):
                inner(torch.randn(4))

    assert watched(around).breaks == ()
