"""tl.watch() checked blind, seventeenth round and round 16's leftovers: a recompile is told against the
graph of its own code path (a PEFT adapter's flag matched, its scaling changed), a number logged with
``.item()`` is told to stay a tensor (capture_scalar_outputs would trace the logging and recompile as its
list grows), and the values a line left pending when its call broke are named as the line writes them.
Checked against Dynamo's own records too."""

import enum
import math
import random

import pytest
import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


class LoraLinear(torch.nn.Module):  # PEFT's LoRA layer: a flag to switch it off, a scaling per adapter
    def __init__(self, d=8):
        super().__init__()
        self.base, self.a, self.b = torch.nn.Linear(d, d), torch.nn.Linear(d, 2), torch.nn.Linear(2, d)
        self.scaling, self.disable_adapters = {"default": 2.0}, False

    def forward(self, x):
        out = self.base(x)
        if self.disable_adapters:
            return out
        return out + self.b(self.a(x)) * self.scaling["default"]


def test_a_recompile_is_told_against_the_graph_whose_flags_match_not_the_last_one(dynamo):
    layer = LoraLinear()
    f = torch.compile(layer, backend=BACKEND)
    with tl.watch() as w:
        x = torch.randn(2, 8)
        f(x)
        layer.disable_adapters = True  # TRL's DPO reference pass, then back
        f(x)
        layer.disable_adapters = False
        layer.scaling["default"] = 1.0  # PEFT's set_scale: the graph with adapters on fails on this
        f(x)
    check_against_dynamo(w, dynamo, also=("disable_adapters", "scaling"))
    on, off = w.table.rows  # a row per value of the flag, in the order first compiled
    assert on.signature.endswith("self.disable_adapters: False") and on.compiles == 2
    assert off.signature.endswith("self.disable_adapters: True") and off.compiles == 1
    (scaling,) = [c for c in on.causes if c.kind != "first"]  # the third compile, against the graph adapters on
    assert scaling.words.startswith("Python float self.scaling['default'] changed (was 2.0)"), scaling.words
    (flag,) = off.causes
    assert flag.kind == "flag" and "self.disable_adapters was False" in flag.words


net = torch.nn.Linear(8, 3)
logged = []


def log(name, value):  # Lightning's self.log: the number goes to a Python list
    logged.append((name, value))


def training_step(batch, batch_idx):
    x, y = batch
    loss = F.cross_entropy(net(x), y)
    if batch_idx % 2 == 0:
        log("train_loss", loss.item())
    return loss


def test_a_number_logged_with_item_is_told_to_stay_a_tensor_not_capture_scalar_outputs(dynamo):
    f = torch.compile(training_step, backend=BACKEND)
    with tl.watch() as w:
        for batch_idx in range(4):
            f((torch.randn(4, 8), torch.randint(0, 3, (4,))), batch_idx).backward()
    check_against_dynamo(w, dynamo)
    (item,) = {b.fix for b in w.table.breaks}
    assert item.startswith("keep loss a tensor inside the compiled function (return it, or store loss.detach())")
    assert "Set torch._dynamo.config.capture_scalar_outputs" not in item
    (resumed,) = [r for r in w.table if "after the graph break" in r.function]
    assert "log's argument 1: str 'train_loss', loss.item(): float" in resumed.signature


class Schedule:  # diffusers' DDIMScheduler.step: the previous alpha picked with torch.where from a table
    def __init__(self):
        self.table, self.final = torch.linspace(1.0, 0.1, 10), torch.tensor(1.0)

    def prev_alpha(self, t, x):
        return torch.where(t > 0, self.table[t.item() - 1], x + self.final)


def test_the_values_a_line_left_pending_at_its_break_are_named_as_the_line_writes_them(dynamo):
    f = torch.compile(Schedule().prev_alpha, backend=BACKEND)
    with tl.watch() as w:
        f(torch.tensor(3), torch.randn(()))
    check_against_dynamo(w, dynamo)
    (resumed,) = [r for r in w.table if "after the graph break" in r.function]
    assert resumed.signature.startswith("where: function, t > 0: bool[], self.table: f32[10], t.item(): int 3")
    assert "carried value" not in resumed.signature


class PerImageHead(torch.nn.Module):  # torchvision-style post-processing: a Python loop over the batch
    def forward(self, images):
        scores = images.flatten(1).sigmoid()
        results = []
        for i in range(images.shape[0]):
            results.append(scores[i].amax(-1))
        return torch.stack(results)


def test_a_marked_size_the_code_fixes_names_the_line_and_counts_the_call_that_raised(dynamo):
    f = torch.compile(PerImageHead(), backend=BACKEND)
    raised = 0
    with tl.watch() as w:
        for batch in (2, 3):
            images = torch.randn(batch, 4)
            torch._dynamo.mark_dynamic(images, 0)
            try:
                f(images)
            except Exception:  # ConstraintViolationError, re-raised by Dynamo
                raised += 1
    check_against_dynamo(w, dynamo)
    loop = PerImageHead.forward.__code__.co_firstlineno + 3
    assert raised == 2 and [r.raised for r in w.table.rows] == [1, 1]
    for row, size in zip(w.table.rows, (2, 3), strict=True):
        (failed,) = row.causes
        assert f"but the code fixes it at {size} at test_watch_blind17.py:{loop} (for i in range(images.shape[0]))" in (
            failed.words
        )
    assert "0 (1 failed) (1 raised)" in str(w.table)


def test_mark_unbacked_told_before_a_later_graph_found_the_users_bound_is_withdrawn(dynamo):
    from test_watch_blind14b import TinyGPT  # nanoGPT's forward: assert t <= self.block_size

    model = torch.compile(TinyGPT(), backend=BACKEND)
    with tl.watch() as w:
        for t in (16, 1, 2, 3):  # the 16 -> 1 compile comes before the graph that holds the assert's bound
            model(torch.randint(0, 64, (1, t)))
    check_against_dynamo(w, dynamo)
    fixes = [c.fix for r in w.table for c in r.causes if c.kind == "size"]
    assert len(fixes) >= 2 and not any("mark_unbacked(idx, 1)" in f for f in fixes), fixes
    assert all("mark_unbacked is no way out here: your code compares that size" in f for f in fixes)
    assert "mark_unbacked(idx, 1)" not in str(w.table)


def test_a_requires_grad_change_on_a_parameter_is_shown_on_self_without_a_hint_about_sizes(dynamo):
    backbone = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    f = torch.compile(backbone, backend=BACKEND)
    with tl.watch() as w:
        backbone.requires_grad_(False)  # fastai's freeze, then unfreeze
        f(torch.randn(2, 4)).sum()
        backbone.requires_grad_(True)
        f(torch.randn(2, 4)).sum().backward()
    check_against_dynamo(w, dynamo, also=("requires_grad mismatch",))  # Dynamo logs the first parameter only
    shown = [c.shown_guard for r in w.table for c in r.causes if c.kind == "requires_grad"]
    assert shown and all("requires_grad mismatch" in s for s in shown)
    assert "tensor 'self[0].bias' requires_grad mismatch. expected requires_grad=0" in shown[0].splitlines()
    assert "force_parameter_static_shapes" not in str(w.table) and "'fn" not in str(w.table)  # torch.compile's name


_USE_FUSED_ATTN = True  # timm's layers.config: set_fused_attn() flips a module-level switch


def attention(q, k, v):
    if _USE_FUSED_ATTN:
        return F.scaled_dot_product_attention(q, k, v)
    return (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).softmax(-1) @ v


def test_a_global_switch_is_told_a_graph_per_value_not_to_pass_it_as_a_tensor(dynamo):
    global _USE_FUSED_ATTN
    f = torch.compile(attention, backend=BACKEND)
    q = torch.randn(1, 2, 4, 8)
    with tl.watch() as w:
        f(q, q, q)
        _USE_FUSED_ATTN = False
        try:
            f(q, q, q)
        finally:
            _USE_FUSED_ATTN = True
    check_against_dynamo(w, dynamo)
    (switch,) = [c for r in w.table for c in r.causes if c.kind == "global"]
    assert switch.words == "the global _USE_FUSED_ATTN changed (was True; its value is baked into the graph)"
    assert switch.fix.startswith("expected once per value (a switch that picks a code path: a graph for each)")
    assert "torch.tensor" not in switch.fix


def drop_path(x, drop_prob: float = 0.0, training: bool = False):  # timm's drop_path, scheduled from outside
    if drop_prob == 0.0 or not training:
        return x
    return x.div(1 - drop_prob) * (1 - drop_prob + torch.rand(x.shape[0], 1)).floor()


class DropPathBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.drop_prob = torch.nn.Linear(4, 4), 0.1

    def forward(self, x):
        return x + drop_path(self.fc(x), self.drop_prob, self.training)


def test_an_attribute_float_made_dynamic_crossing_the_users_condition_is_translated_with_its_line(dynamo):
    blocks = torch.nn.Sequential(DropPathBlock(), DropPathBlock())
    f = torch.compile(blocks, backend=BACKEND)
    with tl.watch() as w:
        for p in (0.1, 0.05, 0.0):  # the early-dropout schedule reaches 0.0
            blocks[1].drop_prob = p
            f(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    causes = [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")]
    assert not any(c.kind == "verbatim" for c in causes), [c.words for c in causes]
    line = drop_path.__code__.co_firstlineno + 1
    (crossed,) = [c for c in causes if c.kind == "number_branch"]
    assert crossed.words.startswith(
        "self[1].drop_prob crossed a condition the graph assumed (self[1].drop_prob != 0.0)"
    )
    assert f"set by your code at test_watch_blind17.py:{line} (if drop_prob == 0.0 or not training:)" in crossed.words


def causal_mask(shape, past=0):  # HF's _make_causal_mask: sizes from a Python tuple of ints
    bsz, tgt_len = shape
    mask = torch.tril(torch.ones(tgt_len, tgt_len))
    if past > 0:
        mask = torch.cat([torch.ones(tgt_len, past), mask], dim=-1)
    return mask.expand(bsz, 1, tgt_len, tgt_len + past)


def test_a_one_token_decode_step_is_said_compiled_apart_as_0_and_1_are_not_baked_in(dynamo):
    f = torch.compile(causal_mask, backend=BACKEND)
    with tl.watch() as w:
        for past, length in ((0, 12), (12, 1), (13, 1)):  # prefill, then decode steps of one token
            f((2, length), past)
    check_against_dynamo(w, dynamo, also=("shape[1] == 12",))  # Dynamo logs the first guard, on past
    (one,) = [c for r in w.table for c in r.causes if "shape[1]" in c.words]
    assert "(was 12, now 1: Dynamo compiles 0 and 1 apart from other values)" in one.words
    assert one.fix.startswith("expected once: 0 and 1 always get graphs of their own")
    assert "baked" not in one.words and "torch.tensor" not in one.fix


class SiLU(torch.nn.Module):  # yolov5's export-friendly SiLU, of the same name as torch's
    def forward(self, x):
        return x * torch.sigmoid(x)


def test_a_submodule_swapped_for_a_class_of_the_same_name_says_which_module(dynamo):
    conv = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.SiLU())
    f = torch.compile(conv, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(1, 4))
        conv[1] = SiLU()  # yolov5's export: m.act = SiLU()
        f(torch.randn(1, 4))
    check_against_dynamo(w, dynamo)
    (swap,) = [c for r in w.table for c in r.causes if c.kind == "type"]
    assert swap.words == "self[1] is now a SiLU of another module, was a torch.nn.SiLU (a submodule was replaced)"


def test_a_whole_training_step_compiled_is_told_to_compile_the_loss_never_dont_skip_tracing(dynamo):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def train_step(x, y):
        loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        return loss.detach()

    f = torch.compile(train_step, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(4, 4), torch.randint(0, 2, (4,)))
    check_against_dynamo(w, dynamo)
    mine = [b for b in w.table.breaks if b.where.startswith("test_watch_blind17.py")]
    assert len(mine) >= 4 and all(b.fix.startswith("compile the forward and the loss only") for b in mine)
    assert "dont_skip_tracing" not in str(w.table)


def prepare_latents(shape, seed):  # diffusers-style: a generator seeded inside the compiled function
    generator = torch.manual_seed(seed)
    return torch.randn(shape, generator=generator)


def test_a_generator_passed_into_a_graph_is_said_in_words_with_a_fix(dynamo):
    f = torch.compile(prepare_latents, backend=BACKEND)
    with tl.watch() as w:
        f((1, 4), 0)
    check_against_dynamo(w, dynamo)
    (generator,) = [b for b in w.table.breaks if "Generator" in b.words]
    assert generator.words.startswith("a torch.Generator is passed to a torch function (generator=...)")
    assert generator.fix.startswith("seed the global generator outside the compiled function")
    assert "as_proxy" not in str(w.table)


class Rotary(torch.nn.Module):  # HF Llama's rotary embedding before 4.38: a cache rebuilt when outgrown
    def __init__(self, dim=8, max_positions=16):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)
        self._set_cos_sin_cache(max_positions)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), self.inv_freq)
        self.register_buffer("cos_cached", torch.cat((freqs, freqs), dim=-1).cos(), persistent=False)

    def forward(self, x, seq_len):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)
        return self.cos_cached[:seq_len]


class RotaryAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.rotary_emb = torch.nn.Linear(8, 8), Rotary()

    def forward(self, hidden_states):
        q = self.q(hidden_states)
        return q * self.rotary_emb(q, seq_len=hidden_states.shape[1])


def test_a_bound_the_users_branch_sets_is_credited_to_its_line_and_buffers_read_by_name(dynamo):
    f = torch.compile(RotaryAttention(), backend=BACKEND)
    with tl.watch() as w:
        for length in (8, 12, 24, 20):  # the third outgrows the cache of 16, which the fourth finds rebuilt
            f(torch.randn(2, length, 8))
    check_against_dynamo(w, dynamo, also=("max_seq_len_cached", "cos_cached"))
    line = Rotary.forward.__code__.co_firstlineno + 1
    (bound,) = [c for r in w.table for c in r.causes if c.kind == "specialised"]
    assert f"set by your code at test_watch_blind17.py:{line} (if seq_len > self.max_seq_len_cached:)" in bound.words
    assert "not by your code" not in bound.words
    assert "__dict__" not in str(w.table) and "self.rotary_emb.cos_cached" in str(w.table)


class Queue(torch.nn.Module):  # MoCo's _dequeue_and_enqueue: the pointer read with int() (a graph break)
    def __init__(self):
        super().__init__()
        self.register_buffer("queue", torch.zeros(4, 24))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    def forward(self, keys):
        ptr = int(self.queue_ptr)
        self.queue[:, ptr : ptr + keys.shape[0]] = keys.T
        self.queue_ptr[0] = (ptr + keys.shape[0]) % 24


def test_a_value_carried_over_a_break_that_its_line_assigns_is_named_so_in_inputs_and_guard(dynamo):
    f = torch.compile(Queue(), backend=BACKEND)
    with tl.watch() as w:
        for _ in range(3):
            f(torch.randn(8, 4))
    check_against_dynamo(w, dynamo)
    resumed = [r for r in w.table if "after the graph break" in r.function]
    assert resumed and all(r.signature.startswith("ptr: int ") for r in resumed)
    assert "ptr == 0" in [c.shown_guard for r in resumed for c in r.causes]
    assert "carried" not in str(w.table)


class LayerDropEncoder(torch.nn.Module):  # HF Wav2Vec2/BART encoders: LayerDrop with Python's random
    def __init__(self):
        super().__init__()
        self.layers, self.layerdrop = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3)), 0.5

    def forward(self, hidden_states):
        for layer in self.layers:
            dropout_probability = random.uniform(0, 1)
            if self.training and dropout_probability < self.layerdrop:
                continue
            hidden_states = layer(hidden_states)
        return hidden_states


def test_a_random_skip_per_layer_is_told_branchless_not_to_pass_each_draw_in(dynamo):
    f = torch.compile(LayerDropEncoder(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2, 4))
    check_against_dynamo(w, dynamo)
    fixes = {b.fix for b in w.table.breaks} | {c.fix for r in w.table for c in r.causes if c.kind == "failed"}
    assert fixes and all(f.startswith("make the branch branchless (keep = torch.rand(()) >= p") for f in fixes)


class PerLayerCache:  # HF's DynamicCache before 4.45: one list of keys, indexed by each layer's layer_idx
    def __init__(self, n):
        self.keys = [None] * n

    def update(self, k, layer_idx):
        if self.keys[layer_idx] is None:
            self.keys[layer_idx] = k
        else:
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], k], dim=1)
        return self.keys[layer_idx]


class DecoderLayer(torch.nn.Module):
    def __init__(self, layer_idx):
        super().__init__()
        self.layer_idx, self.k = layer_idx, torch.nn.Linear(4, 4)

    def forward(self, hidden_states, past_key_values):
        k = past_key_values.update(self.k(hidden_states), self.layer_idx)
        return hidden_states + torch.softmax(hidden_states @ k.transpose(1, 2), -1) @ k


def test_layers_compiled_one_by_one_are_told_a_graph_per_instance_by_their_own_index(dynamo):
    layers = [torch.compile(DecoderLayer(i), backend=BACKEND) for i in range(4)]  # torchtitan-style per block
    with tl.watch() as w, torch.no_grad():
        cache, h = PerLayerCache(len(layers)), torch.randn(1, 3, 4)
        for layer in layers:
            h = layer(h, cache)
    check_against_dynamo(w, dynamo, also=("layer_idx", "keys["))
    counted = [c for r in w.table for c in r.causes if c.count and c.kind not in ("first", "dynamic")]
    assert len(counted) == 3 and all("self.layer_idx" in c.words for c in counted), [c.words for c in counted]
    assert all("raise torch._dynamo.config.recompile_limit above the number of DecoderLayer" in c.fix for c in counted)


def pad_images(images):  # torchvision's GeneralizedRCNNTransform.batch_images: sizes rounded up to 32
    h = max(img.shape[1] for img in images)
    h = int(math.ceil(float(h) / 32) * 32)
    batched = images[0].new_full((len(images), 3, h), 0)
    for i, img in enumerate(images):
        batched[i, :, : img.shape[1]].copy_(img)
    return batched


def test_a_bound_from_arithmetic_on_sizes_is_said_in_words_and_a_list_of_images_told_to_batch_outside(dynamo):
    f = torch.compile(pad_images, backend=BACKEND)
    with tl.watch() as w:
        for sizes in ((40, 50), (44, 50), (40, 50, 30)):
            f([torch.rand(3, s) for s in sizes])
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    text = str(w.table)
    assert "sym_float" not in text and "math.trunc" not in text and "sym_max" not in text
    (length,) = {c.fix for r in w.table for c in r.causes if c.kind == "length"}
    assert "batch them (pad and stack) outside the compiled function" in length


class Generator(torch.nn.Module):  # HiFi-GAN: weight norm on its convolutions, removed for inference
    def __init__(self):
        super().__init__()
        self.conv_pre = torch.nn.utils.weight_norm(torch.nn.Conv1d(2, 4, 3, padding=1))
        self.conv_post = torch.nn.utils.weight_norm(torch.nn.Conv1d(4, 1, 3, padding=1))

    def forward(self, x):
        return torch.tanh(self.conv_post(torch.relu(self.conv_pre(x))))


@pytest.mark.filterwarnings("ignore:.*weight_norm.*is deprecated:FutureWarning")
def test_weight_norm_removed_is_said_on_the_modules_that_held_it(dynamo):
    gen = Generator()
    f = torch.compile(gen, backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        f(torch.randn(1, 2, 8))
        torch.nn.utils.remove_weight_norm(gen.conv_pre)
        torch.nn.utils.remove_weight_norm(gen.conv_post)
        f(torch.randn(1, 2, 8))
    check_against_dynamo(w, dynamo, also=("_parameters", "_forward_pre_hooks"))
    causes = [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic")]
    params = [c for c in causes if c.kind == "parameters"]
    assert params and params[0].words.startswith("self.conv_pre has another number of parameters (was 3)")
    hooks = [c for c in causes if c.kind == "hooks"]
    assert hooks and all(c.words.startswith("a hook was added to or removed from self.conv_") for c in hooks)
    assert "_parameters" not in "".join(c.words + c.fix for c in causes)


def test_dims_the_user_marked_are_said_marked_not_automatic(dynamo):
    f = torch.compile(lambda x, y: (x * 2).sum() + y.sum(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(4, 3), torch.randn(4))
        x, y = torch.randn(8, 3), torch.randn(8)
        torch._dynamo.mark_dynamic(x, 0)
        f(x, y)
    check_against_dynamo(w, dynamo, also=("'y' size mismatch",))
    notes = [c.words for r in w.table for c in r.causes if c.kind == "dynamic"]
    assert any("x dim 0" in n and "as your code marked them (mark_dynamic)" in n for n in notes), notes


def test_a_dtype_argument_is_shown_by_its_value(dynamo):
    f = torch.compile(lambda x, dtype: x.to(dtype), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2), torch.float16)
    check_against_dynamo(w, dynamo)
    assert w.table.rows[0].signature == "x: f32[2], dtype: torch.float16"


class Mode(enum.Enum):  # RWKV's / fairseq's mode switch passed as an enum member
    TRAIN = 1
    EVAL = 2


def by_mode(x, mode):
    return x * 2 if mode is Mode.TRAIN else x + 1


def test_an_enum_argument_is_shown_by_its_member(dynamo):
    f = torch.compile(by_mode, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(2), Mode.TRAIN)
        f(torch.randn(2), Mode.EVAL)
    check_against_dynamo(w, dynamo)
    assert [r.signature for r in w.table.rows] == ["x: f32[2], mode: Mode.TRAIN", "x: f32[2], mode: Mode.EVAL"]
