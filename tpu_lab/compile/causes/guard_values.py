"""Sizes, Python values and global state in words, with the fix for the backend (buckets on a TPU;
mark_dynamic, drop_last or a tensor argument elsewhere, TPU advice labelled so). Pure, but for
``static_number_fix``, which asks the installed Dynamo whether the config it names exists."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import CARRIED, Cause, local_name

_STATE = {
    "grad_mode": (
        "grad mode changed (torch.no_grad(), inference_mode or enable_grad around the call)",
        "expected once per mode; run each call under the same mode (always no_grad for evaluation)",
    ),
    "num_threads": (
        "torch's thread count changed (torch.set_num_threads; torch.utils.benchmark.Timer sets it)",
        "set the thread count once before compiling (Timer(..., num_threads=torch.get_num_threads()))",
    ),
    "deterministic_algorithms": (
        "torch.use_deterministic_algorithms() was switched",
        "set it once, before the first compiled call",
    ),
    "default_dtype": (
        "torch's default dtype changed (torch.set_default_dtype)",
        "set the default dtype once, before the first compiled call",
    ),
    "autocast": (
        "autocast was switched on or off, or its dtype changed (torch.autocast around the call)",
        "call the compiled function under the same autocast setting each time",
    ),
    "torch_function": (
        "a torch function mode was entered or left around the call",
        "enter the same modes around every call",
    ),
}


_BATCHED = ("input_ids", "attention_mask", "position_ids", "cache_position", "inputs_embeds", "labels")
STATIC_WORDS = (
    "automatic dynamic shapes off, by torch.compile(dynamic=False) or "
    "torch._dynamo.config.automatic_dynamic_shapes = False: every size is its own graph"
)


def with_note(words: str, note: str) -> str:
    """``note`` in the words' closing parenthesis, or in one of its own: one aside, not two."""
    return f"{words[:-1]}; {note})" if words.endswith(")") else f"{words} ({note})"


def without_note(words: str, note: str) -> str:
    return words.replace(f"; {note})", ")").replace(f" ({note})", "")


PREFILL_DECODE_FIX = (
    "expected: prefill and decode are separate graphs (a static cache with a fixed max_cache_len keeps "
    "decode to one graph)"
)


def prompt_length_words(a: str, b: str, where: str = "") -> str:
    """The token dimension of input_ids changed: a decode step (1 token) after a prefill, a prompt after a
    1-token graph, or a new prompt length; ``where``: the inputs that changed alike (`` in input_ids, ...``)."""
    if b == "1" and a != "1":
        return f"a decode step (1 token per call){where}, where the graph held was compiled for a {a}-token prompt (prefill -> decode)"
    if a == "1" and b != "1":
        return f"a {b}-token prompt (prefill){where}, where the graph held was compiled for 1 token (a decode step or a 1-token prompt)"
    return f"prompt length changed {a} -> {b}{where}"


def size_words(m: re.Match, g: str, tpu: bool, static: bool, cache: str = "", caller: str = "") -> Cause:
    """``cache``: the class of the KV cache among the inputs (``StaticCache``, ``DynamicCache``), if any;
    ``caller``: the library that called the compiled function (``transformers``), when not the user."""
    name, i, a, b = local_name(m["name"]), m["i"], m["a"], m["b"]
    if is_parameter(m["name"], g):
        return Cause(
            "parameter_shape",
            f"parameter {name} has another shape (dimension {i}: {a} -> {b}): a model of another size",
            g,
            "expected once per model size (parameter shapes are static; "
            "torch._dynamo.config.force_parameter_static_shapes = False makes them dynamic)",
        )
    bucket = "pad to a few bucket sizes (tl.recommend_buckets): torch_tpu rejects dynamic shapes"
    if name == CARRIED:  # computed before the break (boolean masking, nonzero, ...): nothing the user can mark
        return Cause(
            "size",
            f"{CARRIED} changed size (dimension {i}: {a} -> {b}): the code before the break made it",
            g,
            "remove the graph break (see its fix) and this recompile goes with it; "
            + (
                "or pad before the break to a few sizes"
                if tpu
                else "else none needed once Dynamo makes the size dynamic"
            ),
        )
    if ("cache" in name or "keys" in name or "values" in name) and i == "2":
        if cache and not cache.startswith("Static"):
            return Cause(
                "cache_length",
                f"KV cache length changed {a} -> {b} (a {cache} grows by one token per step)",
                g,
                "expected until Dynamo makes the length dynamic; for one decode graph use a static cache of one "
                "size: generate(..., cache_implementation='static', max_cache_len=N)",
            )
        if cache.startswith("Static"):
            return Cause(
                "cache_length",
                f"static cache length changed {a} -> {b}",
                g,
                "fix max_cache_len so every call shares one cache size",
            )
        return Cause(  # the cache's class is not among the inputs (inside an encoder-decoder's, a kwargs dict)
            "cache_length",
            f"KV cache length changed {a} -> {b}",
            g,
            "expected until Dynamo makes the length dynamic (a cache that grows per token); with a static cache, "
            "generate(..., cache_implementation='static', max_cache_len=N) keeps one size",
        )
    if i == "0" and any(k in name for k in _BATCHED):
        words = f"batch size changed {a} -> {b} ({name})"
    elif "input_ids" in name and i == "1":
        words = prompt_length_words(a, b)
        if b == "1" and a != "1":  # prefill -> decode: padding prompts never merges those two
            return Cause("size", words, g, PREFILL_DECODE_FIX)
    elif "attention_mask" in name:
        words = f"attention mask length changed {a} -> {b}"
    else:
        words = f"{name} dimension {i} changed {a} -> {b}"
    dynamic = f"mark the dimension dynamic before the first call (torch._dynamo.mark_dynamic({name}, {i}))"
    if "1" in (a, b) or "0" in (a, b):  # sizes 0 and 1 are always graphs of their own: mark_dynamic keeps them so
        dynamic = (
            f"sizes 0 and 1 always compile graphs of their own: torch._dynamo.decorators.mark_unbacked({name}, {i}) "
            "before the first call shares one graph"
        )
    if caller == "torch.func":  # vmap and grad trace each size as a constant: mark_dynamic on it fails
        fix = (
            f"vmap/grad fix each size into the graph, so every size compiles one: keep it fixed "
            f"(DataLoader(drop_last=True), or pad the last batch to {a})"
        )
        return Cause("size", words, g, fix if not tpu else f"{fix}; on a TPU: {bucket}")
    if caller and i == "0":  # the user never holds this tensor: mark_dynamic is out of reach
        dynamic = (
            f"{caller} builds this input from your batch: keep the batch size fixed (pad the list of prompts "
            "to a few batch sizes), else none needed once Dynamo makes the batch size dynamic"
        )
    elif caller:
        dynamic = (
            f"{caller} builds this input, so mark_dynamic is out of reach: pad your inputs to a few lengths "
            "(tokenizer padding='max_length' or pad_to_multiple_of=...), or compile with dynamic=True"
        )
    if tpu:
        fix = bucket
    elif i == "0" and int(b) < int(a) and not caller:
        fix = f"for a short last batch, DataLoader(drop_last=True) or pad it to {a}; else {dynamic}"
    else:
        fix = dynamic if caller else f"{dynamic}, or pad to a few sizes"
    if static and not tpu:
        words = with_note(words, STATIC_WORDS)
        fix = dynamic if caller else f"pad to a few sizes, or {dynamic}: it is honoured with automatic dynamic off too"
    if not tpu:
        fix += "; on a TPU: pad to buckets instead (torch_tpu rejects dynamic shapes)"
    return Cause("size", words, g, fix)


def is_parameter(raw: str, g: str) -> bool:
    """The guard is on a module's parameter (Dynamo says so), not on an input."""
    return "Guard failed on a parameter" in g or "._parameters[" in raw


def value_words(raw: str, value: str, g: str, static: bool, now: str = "") -> Cause:
    """``now``: the input's description in the new call (``float 2.5``), to name a change of type."""
    name = local_name(raw)
    if "param_groups" in name and "'lr'" in name:
        return Cause(
            "lr",
            f"the optimizer's learning rate changed (was {value}; an LR scheduler sets a new one each "
            "step, and a Python float is baked into the graph)",
            g,
            "hold the learning rate in a tensor: the optimizer's lr=torch.tensor(0.01)",
        )
    kind = "string" if value.startswith("'") else "float" if re.search(r"[.e]", value) else "int"
    if raw.startswith("G["):
        return Cause(
            "global",
            f"the global {name} changed (was {value}; its value is baked into the graph)",
            g,
            "expected once per value; keep it fixed while the function runs compiled (an op such as dropout's p "
            "fixes it in the graph even when passed as an argument; a tensor instead may cost a graph break)",
        )
    if name.endswith(".is_initialized") and "cache" in name:
        return Cause(
            "cache_state",
            "the KV cache was "
            + (
                "empty, now holds tokens (prefill -> decode)"
                if value == "False"
                else "filled, now empty (a new prompt's prefill)"
            ),
            g,
            "expected once: prefill and decode are separate graphs",
        )
    if value in ("True", "False"):
        return Cause(
            "flag",
            f"the flag {name} was {value} (each value is its own graph)",
            g,
            "expected once per value; pass a constant if it should not change",
            flag=(name, value),
        )
    if "cell_contents" in raw:
        name = "a closure variable"
    words = f"Python {kind} {name} changed (was {value}; its value is baked into the graph)"
    became = now.split()[0] if now else kind
    if became != kind and kind in ("int", "float") and became in ("int", "float", "bool", "str", "None"):
        return Cause(
            "type",
            f"{name} is now {'None' if became == 'None' else f'a {became}'}, was the {kind} {value} "
            "(each type is its own graph, and an int or float value is baked into it)",
            g,
            "pass the same type every call (e.g. always a float: 2.0, not 2)",
        )
    if kind == "string":
        return Cause("string", words, g, "expected once per value")
    if "." in name and (kind == "float" or static):  # an attribute: a library's code may need a float
        fix = "set it once before the first compiled call, or hold it in a tensor where the code accepts one"
    elif kind == "float" or static:
        fix = (
            "where the code accepts a tensor there, pass one (torch.tensor(value)) so the graph reads it at run "
            "time; where the value sets a shape or an argument that must be a number (a scale factor, a slice, "
            "a loss option), each value is a graph: keep it to a few values"
        )
        if kind == "int":
            fix += ", or keep it to a few values (with automatic dynamic off, and on a TPU, each value is a graph)"
    else:
        fix = "usually none: after a second value Dynamo makes an int dynamic; where it is data, pass a tensor"
    return Cause("value", words, g, fix)


def state_words(g: str) -> Cause:
    fields = g.split("GLOBAL_STATE changed:", 1)[-1].split()
    said = [next((v for k, v in _STATE.items() if f.startswith(k)), None) for f in fields]
    if not fields or None in said:
        return Cause("verbatim", f"Dynamo's guard, not translated: {local_name(g)}", g)
    return Cause("global_state", "; ".join(s[0] for s in said if s), g, "; ".join(s[1] for s in said if s))


def dispatch_words(name: str, expected: str, actual: str, g: str) -> Cause:
    """A tensor's dispatch keys changed: another device, or an inference tensor (torch.inference_mode())
    where a normal one was compiled for (or the reverse); other key changes are named as they are."""
    a, b = ([k.strip() for k in s.split(",") if k.strip()] for s in (expected, actual))
    if a[:1] != b[:1]:
        return Cause(
            "device",
            f"{name} moved device: {a[0] if a else '?'} -> {b[0] if b else '?'}",
            g,
            "expected once per device; move inputs to one device before the call",
        )
    inference, normal = "an inference tensor (made under torch.inference_mode())", "a normal tensor"
    for had, has, now, was in ((a, b, inference, normal), (b, a, normal, inference)):
        autograd = [k for k in had if k.startswith(("Autograd", "ADInplaceOrView"))]
        if autograd and not any(k in has for k in autograd):  # autograd's keys gone: made without them
            return Cause("inference", f"{name} is now {now}, was {was}", g, _INFERENCE_FIX)
    added, dropped = [k for k in b if k not in a], [k for k in a if k not in b]
    if dropped and not added and all(k.startswith("Autograd") for k in dropped):
        # the tensor kept its own keys; inference mode (thread-local) turns autograd off for every tensor
        return Cause(
            "inference",
            f"{name} is seen without autograd: the call ran under torch.inference_mode(), the graph was "
            "compiled outside it",
            g,
            _INFERENCE_FIX,
        )
    return Cause(
        "dispatch",
        f"{name}'s dispatch keys changed (added: {', '.join(added) or 'none'}; dropped: "
        f"{', '.join(dropped) or 'none'}): a tensor subclass, mode or functorch transform wraps it",
        g,
        "pass tensors made the same way every call",
    )


_INFERENCE_FIX = (
    "expected once per kind; make inputs the same way every call (all under torch.inference_mode(), "
    "or evaluate under torch.no_grad() throughout)"
)


def tensor_type_words(name: str, cls: str, want: str | None, g: str) -> Cause:
    """Another kind of value where a tensor was compiled for (or the reverse): a Parameter, a tensor
    subclass, a Python number (``want``: the type compiled for, where torch names it)."""
    now = cls.rsplit(".", 1)[-1]
    if now in ("float", "int", "bool"):
        return Cause(
            "tensor_type",
            f"{name} is now a {now}, was a tensor (a Python number is baked into the graph)",
            g,
            "keep passing a tensor (torch.tensor(value)): the graph then reads it at run time",
        )
    if want:  # torch 2.14 names the type compiled for
        was = "plain tensor" if want == "torch.Tensor" else want.rsplit(".", 1)[-1]
    else:  # 2.13 does not: a plain Tensor found means a subclass was compiled for, and the reverse
        was = "tensor subclass (such as nn.Parameter)" if now == "Tensor" else "plain tensor"
    if "Parameter" in (now, was) or now == "Tensor":
        return Cause(
            "tensor_type",
            f"{name} is now a {now}, not the {was} compiled for (nn.Parameter vs Tensor)",
            g,
            "pass the same kind each time (p.detach() for a plain tensor)",
        )
    return Cause(
        "tensor_type",
        f"{name} is now a {now} (a tensor subclass), not the {was} compiled for",
        g,
        "pass the same kind each time (x.as_subclass(torch.Tensor) for a plain tensor)",
    )


def static_number_fix(name: str) -> str:
    """The fix for a Python int Dynamo keeps static after it changed (each value a graph)."""
    import torch._dynamo.config as config

    if name.startswith("self.") and hasattr(config, "allow_unspec_int_on_nn_module"):
        # an nn.Module's int attribute: Dynamo keeps those static unless told otherwise
        return (
            f"keep {name} out of the compiled forward's Python values: hold it in a tensor (a buffer, "
            "self.register_buffer), or set torch._dynamo.config.allow_unspec_int_on_nn_module = True "
            "so Dynamo may make it dynamic"
        )
    return "pass it as a tensor (torch.tensor(value)) so the graph reads it at run time, or keep it to a few values"
