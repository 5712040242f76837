"""What a compile is for: the function (``FunctionKey``, named by file:line or by notebook cell) and the
inputs it specialised on, described (shapes, dtypes, requires_grad, Python scalars, modules' train/eval).
Read from the live frame Dynamo compiles (``dynamo_source`` hands it over); never on a warm call."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

from tpu_lab.compile.sources.packages import USER, package_of, short_path

MAX_ENTRIES = 12  # inputs described per signature; the rest are summarised
_SHORT_DTYPES = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
}


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
    return f"{filename.rsplit('/', 1)[-1]}:{line}" if filename else "?"


RESUME = "torch_dynamo_resume_in_"
_CARRIED = re.compile(r"___stack\d+")


Signature = tuple[tuple[str, str], ...]


class FunctionKey(NamedTuple):
    """A compiled function: its name and where it is defined."""

    name: str
    filename: str
    line: int
    resumes_at: int = 0
    """For the part of a function after a graph break: the line it resumes at (one branch's target)."""

    @property
    def label(self) -> str:
        """The function as its code names it: ``refine`` or ``refine after the graph break at line 8``."""
        if self.name.startswith(RESUME):
            fn, _, line = self.name[len(RESUME) :].rpartition("_at_")
            return f"{fn} after the graph break at line {line}"
        return self.name

    def __str__(self) -> str:
        where = where_label(self.filename, self.line)
        if self.name.startswith(RESUME):  # the part of fn after a graph break, as Dynamo names it
            fn, _, line = self.name[len(RESUME) :].rpartition("_at_")
            at = f", resuming at line {self.resumes_at}" if self.resumes_at else ""
            return f"{fn} after the graph break at line {line}{at} ({where})"
        return f"{self.name} ({where})"


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
    fullgraph: bool = False
    """Compiled with ``torch.compile(fullgraph=True)``: a break raises instead of splitting the graph."""
    limit: str = ""
    """At a recompile-limit refusal: the limit and where it was set, in words."""
    limit_value: int | None = None
    """The recompile limit in force for this compile (a function's own, or a ``config.patch``'s)."""
    code: Any = None
    """The code object compiled, to read the new graph's own guards once it exists."""


def function_key(code: Any, values: dict[str, Any]) -> FunctionKey:
    """The compiled function; a model's forward reached through a generic wrapper (transformers'
    decorators, torch.compile's own) is named after the model's class."""
    import torch

    if code.co_name in ("wrapped_func", "wrapper", "inner", "_fn", "forward") or code.co_name.startswith(
        "tpu_lab_forward_"
    ):
        first = values.get("self", values.get("fn"))  # torch.compile(module) wraps it in inner(fn, ...)
        first = getattr(first, "__self__", first)  # the session's private copy wraps a bound forward
        args = values.get("args")
        if first is None and isinstance(args, tuple) and args:
            first = args[0]
        if isinstance(first, torch.nn.Module):
            fwd = getattr(inspect.unwrap(type(first).forward), "__code__", None)
            if fwd is not None:
                return FunctionKey(f"{type(first).__name__}.forward", fwd.co_filename, fwd.co_firstlineno)
        elif first is not None and "fn" in values and code.co_name == "inner":  # torch.compile(partial/object)
            return _wrapped_key(first) or FunctionKey(code.co_name, code.co_filename, code.co_firstlineno)
    if code.co_name.startswith(RESUME):  # one resume function per branch target: tell them apart
        later = [line for _, _, line in code.co_lines() if line and line > code.co_firstlineno]
        return FunctionKey(code.co_name, code.co_filename, code.co_firstlineno, min(later, default=0))
    return _decorated_key(code, values) or FunctionKey(code.co_name, code.co_filename, code.co_firstlineno)


def user_names(code: Any, values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Dynamo's names for a module's inputs reached through a generic wrapper (``args[0]``,
    ``kwargs['input_ids']``: torch.compile(module)'s ``inner``, transformers' decorators) -> the names in
    the module's ``forward`` signature (``input``, ``input_ids``); the module itself reads ``self``."""
    import torch

    args, kwargs = values.get("args"), values.get("kwargs")
    wrapper = code.co_name in ("wrapped_func", "wrapper", "inner", "_fn", "forward")
    if not (wrapper or code.co_name.startswith("tpu_lab_forward_")) or not isinstance(args, tuple):
        return _wrapped_names(code, values)
    module, skip = getattr(values.get("fn"), "__self__", values.get("fn")), 0  # the session's is a bound forward
    if isinstance(values.get("fn"), functools.partial):  # torch.compile(partial(f, ...)): f's free parameters
        return _partial_names(values["fn"], args, kwargs)
    if not isinstance(module, torch.nn.Module) and args and isinstance(args[0], torch.nn.Module):
        module, skip = args[0], 1  # a decorated forward: args[0] is the model
    if not isinstance(module, torch.nn.Module):
        return _wrapped_names(code, values)
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return ()
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    out = [("args[0]", "self")] if skip else []
    out += [(f"args[{i + skip}]", n) for i, n in enumerate(positional[: max(len(args) - skip, 0)])]
    out += [(f"kwargs[{k!r}]", k) for k in (kwargs or {}) if isinstance(k, str) and k.isidentifier()]
    return tuple(out)


def _wrapped_names(code: Any, values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A ``*args, **kwargs`` decorator's inputs by the wrapped function's parameter names: the function
    it calls is a free variable of its closure (``functools.wraps`` also sets ``__wrapped__``)."""
    if not code.co_flags & 0x0C or not code.co_freevars:  # no *args/**kwargs, or no closure
        return ()
    at = code.co_argcount + code.co_kwonlyargcount
    star = code.co_varnames[at] if code.co_flags & 0x04 else ""
    stars = code.co_varnames[at + bool(star)] if code.co_flags & 0x08 else ""
    args, kwargs = values.get(star, ()) if star else (), values.get(stars, {}) if stars else {}
    if not isinstance(args, tuple) or not isinstance(kwargs, dict):
        return ()
    # the wrapper's own leading parameters (``self`` of ``def wrapper(self, *args, **kwargs)``) are passed on first
    own = [values[n] for n in code.co_varnames[: code.co_argcount] if n in values]
    for name in code.co_freevars:
        fn = values.get(name)
        if not inspect.isfunction(fn):
            continue
        try:
            params = inspect.signature(inspect.unwrap(fn)).parameters
            bound = inspect.signature(inspect.unwrap(fn)).bind_partial(*own, *args, **kwargs)
        except (TypeError, ValueError):
            continue
        positional = [
            n for n in bound.arguments if params[n].kind in (params[n].POSITIONAL_ONLY, params[n].POSITIONAL_OR_KEYWORD)
        ][len(own) :]
        out = [(f"{star}[{i}]", n) for i, n in enumerate(positional[: len(args)])]
        return tuple(out + [(f"{stars}[{k!r}]", k) for k in kwargs if isinstance(k, str) and k.isidentifier()])
    return ()


def _decorated_key(code: Any, values: dict[str, Any]) -> FunctionKey | None:
    """A ``*args``/``**kwargs`` decorator (``functools.wraps``' wrappers: transformers' ``deprecate_kwarg``,
    gradient checkpointing's forward, ``torch.func.vmap``) named after the function it wraps, as the user's
    code names it: ``Layer.forward`` for a method of a module, ``compute_loss`` for a function."""
    if not code.co_flags & 0x0C or not code.co_freevars:
        return None
    wrapped = [values[n] for n in code.co_freevars if inspect.isfunction(values.get(n))]
    wrapped = [fn for fn in wrapped if fn.__code__ is not code]  # a wrapper may name itself (is it outermost?)
    if len(wrapped) != 1:  # none, or several functions in the closure: which one it calls is not known
        return None
    fn = inspect.unwrap(wrapped[0])
    while isinstance(fn, functools.partial):  # torch.func.grad(partial(loss, model)): the function it binds
        fn = inspect.unwrap(fn.func)
    inner = getattr(fn, "__code__", None)
    if inner is None or inner is code:
        return None
    name = getattr(fn, "__qualname__", fn.__name__).rsplit("<locals>.", 1)[-1]
    owner = values.get(code.co_varnames[0]) if code.co_argcount else None
    if owner is not None and "." in name and not isinstance(owner, type):  # a method: by the instance's class
        name = f"{type(owner).__name__}.{fn.__name__}"
    return FunctionKey(name, inner.co_filename, inner.co_firstlineno)


def library_caller(stack: Any) -> str:
    """The package whose code called the compiled function ('' for the user's code), from the stack of
    Dynamo's compile callback (torch's and tpu_lab's frames skipped): a pipeline or generate() builds
    the inputs, so advice must not ask the user to mark them."""
    f = stack
    while f is not None and package_of(f.f_code.co_filename) in _PASSED_THROUGH:
        f = f.f_back
    return package_of(f.f_code.co_filename) if f is not None else USER


# torch's, tpu_lab's and the standard library's frames (contextlib, functools) between a call and Dynamo
_PASSED_THROUGH = ("torch", "tpu_lab", "stdlib", "<builtin>")


def _partial_names(fn: Any, args: tuple, kwargs: Any) -> tuple[tuple[str, str], ...]:
    try:
        params = list(inspect.signature(fn).parameters.values())  # a partial's signature drops what it binds
    except (TypeError, ValueError):
        return ()
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    out = [(f"args[{i}]", n) for i, n in enumerate(positional[: len(args)])]
    return tuple(out + [(f"kwargs[{k!r}]", k) for k in (kwargs or {}) if isinstance(k, str) and k.isidentifier()])


def renamed(text: str, names: Sequence[tuple[str, str]]) -> str:
    """``text`` with Dynamo's input names replaced by the user's (see ``user_names``)."""
    for raw, user in names:
        text = re.sub(re.escape(raw) + r"(?![\w(])", user, text)
    return text


def break_location(stack: list[Any]) -> tuple[str, int, str]:
    """Where a graph break is, from its stack (``traceback.FrameSummary``s): the user's innermost file
    and line, and file:line of the break itself when that is library code (torch, site-packages)."""
    library = [package_of(s.filename) not in (USER, "tpu_lab") for s in stack]
    mine = [s for s, lib in zip(stack, library, strict=True) if not lib] or stack
    if not mine:
        return "", 0, ""
    inner = stack[-1]
    return (
        mine[-1].filename,
        int(mine[-1].lineno or 0),
        f"{short_path(inner.filename)}:{inner.lineno}" if library[-1] else "",
    )


def _wrapped_key(fn: Any) -> FunctionKey | None:
    """A functools.partial by the function it binds; a callable object by its class's ``__call__``."""
    import functools

    while isinstance(fn, functools.partial):
        fn = fn.func
    code = getattr(inspect.unwrap(fn), "__code__", None) if inspect.isroutine(fn) else None
    name = getattr(fn, "__qualname__", "")
    if code is None and callable(fn):
        call = inspect.unwrap(type(fn).__call__)
        code, name = getattr(call, "__code__", None), f"{type(fn).__name__}.__call__"
    return FunctionKey(name.rsplit("<locals>.", 1)[-1], code.co_filename, code.co_firstlineno) if code else None


def describe_inputs(code: Any, values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The inputs a compiled function specialises on, described: tensors by dtype, shape and
    requires_grad; Python scalars by value; modules by class and train/eval; containers one level in."""
    import torch

    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
    names = [n for n in code.co_varnames[:nargs] if not n.startswith("__") or _CARRIED.fullmatch(n)] or [
        n for n in values if not n.startswith("__")
    ]
    out: list[tuple[str, str]] = []
    for name in names:
        if name not in values:
            continue
        value = values[name]
        if _CARRIED.fullmatch(name):  # a resumed frame's input: what the code before the break computed
            number = int(name[len("___stack") :])
            name = "the carried value" + (f" {number + 1}" if number else "")
        if value is None or isinstance(value, bool):
            continue  # flags: shown by Dynamo's guard text when they are what changed; kept out of the table
        if isinstance(value, dict):
            # a **kwargs dict: each keyword passed is guarded (its presence), so a flag passed is shown too
            passed = bool(code.co_flags & 8) and name == code.co_varnames[nargs - 1]
            out += [
                (f"{name}[{k!r}]", describe(v))
                for k, v in value.items()
                if _interesting(v) or (passed and isinstance(v, bool))
            ]
        elif isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple: by field, as the code reads it
            out += [(f"{name}.{k}", describe(v)) for k, v in zip(value._fields, value, strict=False) if _interesting(v)]
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):  # a dataclass: by field too
            fields = ((f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value))
            out += [(f"{name}.{k}", describe(v)) for k, v in fields if _interesting(v) or isinstance(v, (bool, str))]
        elif isinstance(value, (list, tuple)):
            if value and any(_interesting(v) for v in value):
                out += [(f"{name}[{i}]", describe(v)) for i, v in enumerate(value) if _interesting(v)]
            elif value:
                out.append((name, f"{type(value).__name__} len={len(value)}"))
        else:
            out.append((name, describe(value)))
    if not torch.is_grad_enabled():
        out.append(("grad mode", "off"))
    return tuple(out[:MAX_ENTRIES])


def _interesting(value: Any) -> bool:
    import torch

    if isinstance(value, bool):
        return False
    return isinstance(value, (torch.Tensor, int, float, torch.nn.Module)) or hasattr(value, "layers")


def describe(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        grad = " requires_grad" if value.requires_grad else ""
        marked = getattr(value, "_dynamo_dynamic_indices", None)  # torch._dynamo.mark_dynamic
        extra = f" mark_dynamic{sorted(marked)}" if marked else ""
        static = getattr(value, "_dynamo_static_indices", None)  # torch._dynamo.mark_static
        extra += f" mark_static{sorted(static)}" if static else ""
        extra += " Parameter" if isinstance(value, torch.nn.Parameter) else ""
        return f"{_SHORT_DTYPES.get(dtype, dtype)}[{', '.join(map(str, value.shape))}]{grad}{extra}"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str) and len(value) <= 24:
        return f"str {value!r}"
    if isinstance(value, (int, float)):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, torch.nn.Module):
        return f"{type(value).__name__} ({'train' if value.training else 'eval'})"
    layers = getattr(value, "layers", None)
    if layers:  # a transformers cache: its length is what a static cache specialises on
        return f"{type(value).__name__} len={getattr(layers[0], 'max_cache_len', '?')}"
    return type(value).__name__
