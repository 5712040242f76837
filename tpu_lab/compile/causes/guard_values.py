"""Python values, global state, dispatch keys and tensor kinds in words, with the fix for the backend
(a tensor argument, or a few values; sizes are ``guard_sizes``'). Pure."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from tpu_lab.compile.causes.cause import BAKED, CARRIED, LOOP_COUNT_FIX, LOOP_RANGE, VERBATIM_FIX, Cause, local_name
from tpu_lab.compile.causes.guard_containers import optimizer_step
from tpu_lab.compile.causes.guard_globals import global_cause
from tpu_lab.compile.causes.guard_objects import none_fix
from tpu_lab.compile.causes.numpy_values import numpy_scalar_words
from tpu_lab.compile.causes.own_graph import STRING_FIX
from tpu_lab.compile.sources.value_text import shown_float

_ONCE = "set it once, before the first compiled call"
_WARN_ONLY = "torch.use_deterministic_algorithms(warn_only=...) was switched (a nondeterministic op warns or raises)"
_STATE = {
    "grad_mode": (
        "grad mode changed (torch.no_grad(), inference_mode or enable_grad around the call)",
        "expected once per mode; run each call under the same mode (always no_grad for evaluation)",
    ),
    "num_threads": (
        "torch's thread count changed (torch.set_num_threads; torch.utils.benchmark.Timer sets it)",
        "set the thread count once before compiling (Timer(..., num_threads=torch.get_num_threads()))",
    ),
    "deterministic_algorithms_warn_only": (_WARN_ONLY, _ONCE),  # before its prefix: a name matches by its start
    "deterministic_algorithms": ("torch.use_deterministic_algorithms() was switched", _ONCE),
    "cuda_matmul_precision": ("the float32 matmul precision changed (torch.set_float32_matmul_precision)", _ONCE),
    "allow_tf32": ("the float32 matmul precision changed (torch.set_float32_matmul_precision)", _ONCE),  # torch 2.13
    "allow_fp16_reduce": ("fp16 reduced-precision reductions were switched (torch.backends.cuda.matmul)", _ONCE),
    "allow_bf16_reduce": ("bf16 reduced-precision reductions were switched (torch.backends.cuda.matmul)", _ONCE),
    "default_dtype": (
        "torch's default dtype changed (torch.set_default_dtype)",
        "set the default dtype once, before the first compiled call",
    ),
    "autocast": (
        "autocast was switched on or off, or its dtype changed (torch.autocast around the call)",
        "expected once per setting (each setting keeps its own graph: an evaluation pass in full precision costs "
        "one); to keep one graph, call the compiled function under the same autocast setting each time",
    ),
    "torch_function": (
        "a torch function mode was entered or left around the call",
        "enter the same modes around every call",
    ),
}


_TENSOR_NOW = re.compile(r"^[a-z]+\d*\[")  # a tensor's description: f32[2, 3]


def _a(word: str) -> str:
    return "an" if word[:1] in "aeiou" or word == "ndarray" else "a"  # an int, an ndarray


def _moved(value: str, now: str) -> bool:
    """Whether the number in ``now`` (``float 4.0``) is another value than ``value`` (``3``), not only another type."""
    try:
        return float(value) != float(now.split()[1])
    except (IndexError, ValueError):
        return False


def value_words(raw: str, value: str, g: str, static: bool, now: str = "", caller: str = "") -> Cause:
    """``now``: the input's description in the new call (``float 2.5``), to name a change of type; ``caller``:
    the library that called the compiled function, when not the user."""
    name = local_name(raw)
    if "param_groups" in name and "'lr'" in name:
        return Cause(
            "lr",
            f"the optimizer's learning rate changed (was {value}; an LR scheduler sets a new one each "
            "step, and a Python float is baked into the graph)",
            g,
            "hold the learning rate in a tensor: the optimizer's lr=torch.tensor(0.01)",
        )
    if cause := optimizer_step(name, value, g):  # its step count: a Python int kept per parameter
        return cause
    kind = "string" if value.startswith("'") else "float" if re.search(r"[.e]|inf|nan", value) else "int"
    if kind == "float" and re.fullmatch(r"-?[\d.]+(?:e[-+]?\d+)?", value):
        value = shown_float(float(value))  # 0.3, not 0.30000000000000004 (the guard beside keeps it exact)
    if raw.startswith("G["):
        return global_cause(name, value, g, switch=kind == "string" or value in ("True", "False"))
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
            f"expected: {caller} sets it as it runs (its own state, not a value you pass), one graph per value"
            if caller and re.search(r"[.\[]", name)  # an object's field, and the library made the call
            else "expected once per value; pass a constant if it should not change",
            flag=(name, value),
        )
    if "cell_contents" in raw:  # named by the closure's own code where read, see closures_unnamed
        name = f"the closure variable {name}"
    words = f"Python {kind} {name} changed (was {value}{BAKED})"
    became = now.split()[0] if now else kind
    if became.startswith("np.") and kind in ("int", "float"):  # np.maximum's np.float64 in place of a float
        return numpy_scalar_words(name, kind, value, now, g)
    if became != kind and kind in ("int", "float") and (became.isidentifier() or _TENSOR_NOW.match(became)):
        if became in ("int", "float") and _moved(value, now):  # 3 -> 4.0: a new value, which recompiles anyway
            cause = value_words(raw, value, g, static, "", caller)
            was = f"Python {kind} {name} changed (was {value}"
            return dataclasses.replace(cause, words=cause.words.replace(was, f"{was}, now the {now}", 1))
        # said of the type alone: whether a value is baked in is the graph's own (Dynamo may have made it dynamic)
        if became == "None":
            return Cause(
                "type", f"{name} is now None, was the {kind} {value} (each case is its own graph)", g, none_fix(name)
            )
        became = "tensor" if _TENSOR_NOW.match(became) else "list or tuple" if became == "sequence" else became
        numbers = became in ("int", "float", "bool")
        return Cause(
            "type",
            f"{name} is now {_a(became)} {became}, was the {kind} {value} (each type is its own graph)",
            g,
            "pass the same type every call (e.g. always a float: 2.0, not 2)"
            if numbers
            else f"pass the same type every call (always {_a(kind)} {kind}, or always {_a(became)} {became})",
        )
    if kind == "string":
        return Cause("string", words, g, STRING_FIX)
    if (
        "." in name and "cell_contents" not in raw and (kind == "float" or static)
    ):  # an attribute: a library's code may need a float
        fix = "set it once before the first compiled call, or hold it in a tensor where the code accepts one"
    elif kind == "float" or static:
        fix = (
            "where the code accepts a tensor there, pass one (torch.tensor(value)) so the graph reads it at run "
            "time; where the value sets a shape or an argument that must be a number (a scale factor, a slice, "
            "a loss option), each value is a graph: keep it to a few values"
        )
        if kind == "int":
            fix += " (with automatic dynamic off, and on a TPU, every int value is a graph too)"
    else:
        fix = "usually none: after a second value Dynamo makes an int dynamic; where it is data, pass a tensor"
    return Cause("value", words, g, fix)


def state_words(g: str) -> Cause:
    fields = g.split("GLOBAL_STATE changed:", 1)[-1].split()
    said = [_autocast(f) or next((v for k, v in _STATE.items() if f.startswith(k)), None) for f in fields]
    if not fields or not any(said):
        return Cause("verbatim", f"Dynamo's guard, not translated: {local_name(g)}", g, VERBATIM_FIX)
    # a setting of a newer torch: named as Dynamo names it, beside the ones known
    named = [s or (f"torch's global setting {f} changed", _ONCE) for f, s in zip(fields, said, strict=True)]
    return Cause("global_state", "; ".join(s[0] for s in named), g, "; ".join(dict.fromkeys(s[1] for s in named)))


def _autocast(field: str) -> tuple[str, str] | None:
    """``autocast(cpu)_enabled`` / ``autocast(cuda)_dtype``: which of autocast's settings changed, on which device."""
    m = re.fullmatch(r"autocast\((?P<device>\w+)\)_(?P<what>enabled|dtype)", field)
    if m is None:
        return None
    words = (
        f"autocast on {m['device']} was switched on or off (torch.autocast around the call)"
        if m["what"] == "enabled"
        else f"autocast's dtype on {m['device']} changed (torch.autocast(..., dtype=...) around the call)"
    )
    return words, _STATE["autocast"][1]


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
    # the tensor kept its own keys; inference mode (thread-local) turns autograd off for every tensor
    if dropped and not added and all(k.startswith("Autograd") for k in dropped):
        words = "the call ran under torch.inference_mode(), the graph was compiled outside it"
        return Cause("inference", f"{name} is seen without autograd: {words}", g, _MODE_FIX)
    if added and not dropped and all(k.startswith("Autograd") for k in added):
        words = "the graph was compiled under torch.inference_mode(), the call ran outside it (no_grad or training)"
        return Cause("inference", f"{name} is seen with autograd again: {words}", g, _MODE_FIX)
    return Cause(
        "dispatch",
        f"{name}'s dispatch keys changed (added: {', '.join(added) or 'none'}; dropped: "
        f"{', '.join(dropped) or 'none'}): a tensor subclass, mode or functorch transform wraps it",
        g,
        "pass tensors made the same way every call",
    )


_MODE_FIX = (
    "expected once per mode; evaluate under one of torch.no_grad() or torch.inference_mode() throughout, not both"
)
_INFERENCE_FIX = (
    "expected once per kind; make inputs the same way every call (all under torch.inference_mode(), "
    "or evaluate under torch.no_grad() throughout)"
)


def closures_unnamed(words: str) -> str:
    """A closure variable the inputs' names did not name (its function was not at hand) said as one."""
    return re.sub(r"the closure variable \S+\.__closure__\[\d+\]\.cell_contents", "a closure variable", words)


DRAW = r"(?:np\.|numpy\.)?random\.\w+\("  # a number named by the random draw that made it


def held_fix(name: str) -> str:
    """A number made dynamic whose computed value the graph still holds to one value (``math.exp(-n / tau)``)."""
    if re.match(DRAW, name):  # a draw carried over a break (CutMix's box corners): drawn outside, no value held
        return f"draw {name} outside the compiled function and pass the numbers in (Python ints, made dynamic)"
    return (
        f"compute what depends on {name} outside the compiled function and pass it in as a tensor (math on a "
        f"Python number, math.exp or round, fixes the result into the graph), or compute it with torch ops on a "
        f"tensor {name} (torch.exp); else keep it to a few values"
    )


_NUM = r"-?[\d.]+(?:e[-+]?\d+)?"
_NAME = r"[A-Za-z_][\w.]*(?:\[[\w']+\][\w.]*)*"  # self.drop_path.drop_prob, draws[0]
_MATH = re.compile(r"(?:math|torch|operator)\.\w+$|(?:sym_\w+|abs|round|int|float|min|max|Max|Min|TruncToInt)$")
_ORDERED = re.compile(rf"(?:{_NUM} <=? )?(?P<name>{_NAME}) (?:<=?|>=?|!=) {_NUM}")


def numbers_compared(g: str, inputs: Mapping[str, str]) -> str:
    """The Python numbers a guard compares (``(step % 2) != 0``, ``n <= 3``: a branch on a number Dynamo
    made dynamic), by the user's names; '' when the guard is about anything else."""
    text = local_name(g).replace(CARRIED, _CARRIED_NAME)  # a value carried over a break, compared: one name
    if not re.search(r"[<>]=?|[!=]=", text):
        return ""
    names = [n for n in dict.fromkeys(re.findall(_NAME, text)) if n not in ("and", "or", "not") and not _MATH.match(n)]
    numbers = [n for n in names if inputs.get(n, "").startswith(("int ", "float "))]
    if not numbers and (m := _ORDERED.fullmatch(text.strip())) and ".size()" not in m["name"]:
        # Dynamo guards a plain value by an order (<, >=, !=) only where it made it symbolic: a number it made
        # dynamic that the inputs do not show (an attribute, self.drop_path.drop_prob)
        return m["name"].replace(_CARRIED_NAME, CARRIED)
    return ", ".join(numbers) if numbers and len(numbers) == len(names) else ""


_CARRIED_NAME = "___carried_value"


def number_condition_words(g: str, numbers: str, line: str, library: str, at: str) -> Cause:
    """A guard on Python numbers Dynamo made dynamic: a branch condition (each side its own graph), or an
    expression held to one result (math on the number: each value its own graph)."""
    if re.search(r"\) == \(?[-\d.e+]+\)?$", g.strip()):  # math on the number (math.exp), held to one result
        words = f"a value computed from {numbers} is baked into this graph ({local_name(g)}), set{line}: each new "
        return Cause("value", words + f"value of {numbers} compiles a graph of its own", g, held_fix(numbers), at)
    return Cause(
        "number_branch",
        f"{numbers} crossed a condition the graph assumed ({local_name(g)})"
        + (f", set{line}" if line else "")
        + ": each side of it is a graph of its own",
        g,
        "expected once per side of that condition (two graphs for it at most); keep the value on one side of it where "
        "you can"
        if library
        else "expected once per side of that branch; if values cross it often, branch on a tensor instead "
        "(torch.where, or torch.cond)",
        at,
    )


def loop_count_words(name: str, value: str, code: str, where: str, g: str) -> Cause | None:
    """An int the user's loop runs over (``for _ in range(iters):``): Dynamo unrolls the loop into the
    graph, so each count is a graph of its own, and a tensor in its place would break the graph there."""
    loop = LOOP_RANGE.match(code or "")
    read = rf"(?<![\w.]){re.escape(name)}(?!\w)"
    if "[" in name:  # a child's own count, read as tree.num_children in the recursive call
        read += rf"|\.{re.escape(name.rpartition('.')[2])}\b"
    if loop is None or not re.search(read, loop["args"]) or not value.isdigit():
        return None
    line = where.rpartition(":")[2]
    return Cause(
        "loop_count",
        f"Python int {name} changed (was {value}): it sets how many times the loop at line {line} runs "
        f"({code.strip()}), which Dynamo unrolls into the graph, so each value is a graph of its own",
        g,
        LOOP_COUNT_FIX.format(name),
        where,
    )
