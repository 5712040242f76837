"""What a compile is for: the function (``FunctionKey``, named by file:line or by notebook cell) and the
inputs it specialised on, described (shapes, dtypes, requires_grad, Python scalars, modules' train/eval).
Read from the live frame Dynamo compiles (``dynamo_source`` hands it over); never on a warm call."""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from tpu_lab.compile.sources.packages import short_path
from tpu_lab.compile.sources.resume_code import RESUME, carried_slots
from tpu_lab.compile.sources.tensor_text import autocast_modes
from tpu_lab.compile.sources.value_text import describe, first_tensor, length_text

MAX_ENTRIES = 12  # inputs described per signature; the rest are summarised in one entry named MORE
MORE = "..."
"""The name of a cut signature's entry for the inputs past MAX_ENTRIES (``2 more (v[4], v[5])``)."""


def where_label(filename: str, line: int) -> str:
    """``train.py:12``; a function defined in a notebook cell: ``cell In[3], line 2`` (IPython's own map
    from its cell file names to execution counts)."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    named = None
    if shell is not None and hasattr(getattr(shell, "compile", None), "format_code_name"):
        try:
            named = shell.compile.format_code_name(filename)
        except Exception:  # an older IPython or a foreign compiler: keep the file name
            named = None
    if named:
        return f"cell {named[1]}, line {line}"
    if not filename:
        return "?"
    short = short_path(filename)  # a library's file from its package on (torch/nn/...), one way everywhere
    return f"{short}:{line}" if line else short  # 0: not known


CARRIED_VALUE = "the value carried over the graph break"
"""A resumed frame's input (Dynamo's ``___stack0``) in words: a value the code before the break computed."""
_CARRIED = re.compile(r"___stack\d+")


Signature = tuple[tuple[str, str], ...]


class FunctionKey(NamedTuple):
    """A compiled function: its name and where it is defined."""

    name: str
    filename: str
    line: int
    resumes_at: int = 0
    """For the part of a function after a graph break: the line it resumes at (one branch's target)."""
    via: str = ""
    """The decorator whose wrapper Dynamo compiled for this function (``profile_hook_step``), where the
    function is named through it: the wrapper and the function itself are two frames, two rows."""
    resumes_in: str = ""
    """Where on the break's own line it resumes, where work is left there (``at .rand(...) in line``)."""

    @property
    def label(self) -> str:
        """The function as its code names it: ``refine`` or ``refine after the graph break at line 8``."""
        if self.name.startswith(RESUME):
            name, backward = _backward(self.name)
            fn, _, line = name[len(RESUME) :].rpartition("_at_")
            return f"{fn} after the graph break at line {line}{backward}"
        return self.name

    def __str__(self) -> str:
        where = where_label(self.filename, self.line)
        if self.name.startswith(RESUME):  # the part of fn after a graph break, as Dynamo names it
            name, backward = _backward(self.name)
            fn, _, line = name[len(RESUME) :].rpartition("_at_")
            at = f", resuming at line {self.resumes_at}" if self.resumes_at else ""
            at = f", resuming {self.resumes_in} {self.resumes_at}" if self.resumes_in else at
            return f"{fn} after the graph break at line {line}{at}{backward} ({where})"
        if self.via.startswith("torch.") and self.via != "torch.compile":  # a grad-mode decorator: always said
            return self.through
        return f"{self.name} ({where})"

    @property
    def through(self) -> str:
        """The function named with the wrapper Dynamo compiled for it (``step via @logged``), for when the
        function compiled as a frame of its own as well: two rows that would otherwise read the same."""
        return f"{self.name} via {self.wrapper} ({where_label(self.filename, self.line)})" if self.via else str(self)

    @property
    def wrapper(self) -> str:
        """The wrapper ``via`` names: ``@logged``, or ``Module's wrapper`` for a hook's (``Module.__call__``)."""
        owner, _, last = self.via.rpartition(".")
        if self.via == "torch.compile":  # its own frame around a callable object: no decorator of the user's
            return "torch.compile's wrapper"
        return f"{owner}'s wrapper" if last.startswith("__") and owner else f"@{self.via}"


def _backward(name: str) -> tuple[str, str]:
    """A backward graph's function name (``... (backward)``) split into the forward's name and that mark."""
    return (name.removesuffix(" (backward)"), " (backward)") if name.endswith(" (backward)") else (name, "")


class Capture(NamedTuple):
    """One compile Dynamo started, as seen from the start callback."""

    compile_id: str
    """Dynamo's id (``"frame/attempt"``), the key of its compilation record."""
    function: FunctionKey
    signature: Signature
    """(input name, description) pairs, e.g. ``(("x", "f32[4, 3]"), ("n", "int 2"))``."""
    reason: str | None
    """Dynamo's first recompile reason, None for a first compile."""
    at: float
    """time.perf_counter() when the compile started."""
    trigger: str
    previous: Signature | None = None
    """The inputs this function last compiled for (None: not seen compiling before)."""
    reasons: tuple[str, ...] = ()
    """Every recompile reason: one failed guard per graph Dynamo already held for this code."""
    graphs: tuple[tuple[str, Signature], ...] = ()
    """(compile id, inputs) of those graphs, where this process saw them compile."""
    static: bool = False
    """Compiled with automatic dynamic shapes off (``torch.compile(dynamic=False)``): every size is a graph."""
    resets: int = 0
    """torch._dynamo.reset() calls seen when this compile started."""
    names: tuple[tuple[str, str], ...] = ()
    """Dynamo's input names -> the user's, where a wrapper hides them (``args[0]`` -> ``input``)."""
    caller: str = ""
    """The library that called the compiled function (``transformers``) when that was not the user."""
    pipeline: bool = False
    """Called from inside a transformers pipeline (its batch_size shapes the calls)."""
    fullgraph: bool = False
    """Compiled with ``torch.compile(fullgraph=True)``: a break raises instead of splitting the graph."""
    limit: str = ""
    """At a recompile-limit refusal: the limit and where it was set, in words."""
    limit_value: int | None = None
    """The recompile limit in force for this compile (a function's own, or a ``config.patch``'s)."""
    raises: str = ""
    """At a limit refusal that raised (``FailOnRecompileLimitHit``): what made it an error (``fullgraph=True``, config)."""
    code: Any = None
    """The code object compiled, to read the new graph's own guards once it exists."""
    earlier: FunctionKey | None = None
    """Another definition of the same function seen compiling before this compile began (a re-run cell's)."""
    subjects: tuple[tuple[str, str], ...] = ()
    """What the objects behind the failed guards that are not inputs are now (``self.act``: ``SiLU (train)``)."""
    flags: tuple[tuple[str, str], ...] = ()
    """The call's boolean arguments (``flag_inputs``), by the user's names."""
    compared: tuple[tuple[str, str], ...] = ()
    """(compile id, whose) of the graphs Dynamo checked that were compiled for another instance of the same
    class (``another instance of ModelEmaV3``) or another function through one shared wrapper (its name)."""
    all_dynamic: bool = False
    """Compiled with ``torch.compile(dynamic=True)``: every size is dynamic from the graph's start."""
    hooks: tuple[tuple[str, Any, tuple[int, ...]], ...] = ()
    """(name, weak reference, hook count) of each submodule of the compiled module, as the graph saw them."""
    callers: tuple[Any, ...] = ()
    """(file, first line, name) of the code on the stack as it started: a function compiled inside another's call."""
    passed: tuple[tuple[str, str, str], ...] = ()
    """(input, the name a caller up the stack holds the same tensor under, that caller's function): a mark there reaches it."""
    scope: Any = None
    """The compiled frame's globals, where Dynamo installs the compiled graph (``__compiled_fn_*``)."""
    pins: tuple[Any, ...] = ()
    """The sizes the compile fixed to one value, with the line that did it (``dynamo_pins.Pin``), once it ended."""
    rewritten: tuple[tuple[str, str], ...] = ()
    """(tensor, where) of the failed guards' tensors that the module's own forward rewrites (``self_writes``)."""

    @property
    def shown(self) -> Signature:
        """The inputs under the user's names (``input`` for a compiled module's ``args[0]``)."""
        return tuple((renamed(n, self.names), d) for n, d in self.signature) if self.names else self.signature


def renamed(text: str, names: Sequence[tuple[str, str]]) -> str:
    """``text`` with Dynamo's input names replaced by the user's (see ``user_names``)."""
    for raw, user in names:
        text = re.sub(re.escape(raw) + r"(?![\w(])", user, text)
    return text


def describe_inputs(code: Any, values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The inputs a compiled function specialises on, described: tensors by dtype, shape and
    requires_grad; Python scalars by value; modules by class and train/eval; containers one level in."""
    import torch

    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
    names = [n for n in code.co_varnames[:nargs] if not n.startswith("__") or _CARRIED.fullmatch(n)] or [
        n for n in values if not n.startswith("__")
    ]
    out: list[tuple[str, str]] = []
    slots = carried_slots(code, values) if code.co_name.startswith(RESUME) else {}
    for name in names:
        if name not in values:
            continue
        value, raw = values[name], name
        name = slots.get(name) or carried_name(name)
        if raw in slots and name in names:  # self of self.h += f(...): the function's own input, shown once
            continue
        if raw in slots and (isinstance(value, type) or inspect.isroutine(value)):  # a callable the line calls
            # int(...), len(...): never another one; contextlib's: Dynamo's stand-in for a context it rebuilds
            entered = isinstance(value, type) and hasattr(value, "__enter__")  # a with block re-entered after it
            if getattr(value, "__module__", None) not in ("builtins", "contextlib") and not entered:
                out.append((name, "class" if isinstance(value, type) else "function"))
            continue
        # a piece of a message the line builds (f"..."), or of an index (x[:, :n]'s `:`), carried over the
        # break: no input of the user's
        if (
            isinstance(value, (str, slice))
            and _CARRIED.fullmatch(raw)
            and (raw not in slots or isinstance(value, slice))
        ):
            continue
        if value is None or isinstance(value, bool):
            continue  # flags: shown by Dynamo's guard text when they are what changed; kept out of the table
        if isinstance(value, dict):
            # a **kwargs dict: each keyword passed is guarded (its presence), so a flag passed is shown too
            passed = bool(code.co_flags & 8) and name == code.co_varnames[nargs - 1]
            out += [
                (f"{name}[{k!r}]", _entry(v))
                for k, v in value.items()
                if _interesting(v) or (passed and isinstance(v, bool)) or _holds_tensors(v)
            ]
        elif isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: by field, as the code reads it
            out += [(f"{name}.{k}", describe(v)) for k, v in zip(value._fields, value, strict=False) if _interesting(v)]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):  # a dataclass: by field too
            fields = ((f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value))
            out += [(f"{name}.{k}", describe(v)) for k, v in fields if _interesting(v) or isinstance(v, (bool, str))]
        elif isinstance(value, (list, tuple)):
            if value and any(_interesting(v) for v in value):
                out += [(f"{name}[{i}]", describe(v)) for i, v in enumerate(value) if _interesting(v)]
            elif value and any(isinstance(v, (list, tuple)) for v in value):  # *args holding a list: one level in
                out += [(f"{name}[{i}]", _entry(v)) for i, v in enumerate(value) if isinstance(v, (list, tuple))]
            elif value and code.co_flags & 4 and name == code.co_varnames[code.co_argcount + code.co_kwonlyargcount]:
                out += [(f"{name}[{i}]", describe(v)) for i, v in enumerate(value)]  # *args: each, to be named
            elif value:
                out.append((name, length_text(value)))
        else:
            out.append((name, describe(value)))
    cut, out = out[MAX_ENTRIES:], out[:MAX_ENTRIES]
    if cut:  # said, never dropped silently: a list cut short would read as a shorter list
        named = ", ".join(n for n, _ in cut) if len(cut) <= 2 else f"{cut[0][0]} to {cut[-1][0]}"
        out.append((MORE, f"{len(cut)} more ({named})"))
    out += autocast_modes()  # outside the cap, as the grad mode: every graph is guarded on both
    if not torch.is_grad_enabled():  # always said, last; inference mode apart: its tensors are graphs apart too
        out.append(("grad mode", "off (inference_mode)" if torch.is_inference_mode_enabled() else "off"))
    return tuple(out)


def carried_name(name: str) -> str:
    """A resumed frame's input (``___stack1``: what the code before the break computed) as a row names it;
    a comprehension's hidden argument (``.0``) as what it is."""
    if name == ".0":
        return "the iterable it walks"
    if not _CARRIED.fullmatch(name):
        return name
    number = int(name[len("___stack") :])
    return "the carried value" + (f" {number + 1}" if number else "")


def signature_text(signature: Sequence[tuple[str, str]]) -> str:
    """A signature as a row shows it: ``x: f32[4], n: int 2, ... and 2 more (v[4], v[5]), grad mode: off``."""
    return ", ".join(f"{MORE} and {d}" if n == MORE else f"{n}: {d}" for n, d in signature)


def flag_inputs(code: Any, values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The call's boolean arguments by name (``("observe", "True")``): kept out of the inputs shown, but a row
    shows each one whose change made a graph, at this call's value."""
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    return tuple((n, repr(values[n])) for n in names if isinstance(values.get(n), bool))


def _holds_tensors(value: Any) -> bool:
    """A list or tuple of tensors inside a dict (a ModelOutput's hidden_states): its presence is guarded."""
    import torch

    return isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value)


def _entry(value: Any) -> str:
    """A container one level in by its length, and by its first tensor where it holds any (a layer's (key,
    value) pair of a KV cache): a new size there is a new graph, so it is a row of its own."""
    if _holds_tensors(value) or (isinstance(value, (list, tuple)) and not hasattr(value, "_fields")):
        import torch

        first = next((v for v in value if isinstance(v, torch.Tensor)), None) if _holds_tensors(value) else None
        return f"{type(value).__name__} len={len(value)}" + (f" ({describe(first)}, ...)" if first is not None else "")
    return describe(value)


def _interesting(value: Any) -> bool:
    import torch

    shown = isinstance(value, (torch.Tensor, int, float, torch.nn.Module)) or hasattr(value, "get_seq_length")
    return (shown or first_tensor(value) is not None) and not isinstance(value, bool)


def with_nones(signature: Signature, names: Iterable[str]) -> Signature:
    """``signature`` with each of ``names`` shown as None (sorted, before the grad mode, said last)."""
    have = {n for n, _ in signature}
    extra = tuple((n, "None") for n in sorted(set(names) - have))
    grad = tuple(e for e in signature[-1:] if e[0] == "grad mode")
    return signature[: len(signature) - len(grad)] + extra + grad


def shows(signature: Signature, name: str) -> bool:
    """Whether ``signature`` shows the input ``name`` or a part of it (``hidden[0]``, ``settings.top_k``)."""
    return any(n == name or n.startswith((f"{name}[", f"{name}.")) for n, _ in signature)
