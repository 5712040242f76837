"""Seeing through wrappers: a compiled function reached through a decorator, ``*args``/``**kwargs``
wrapper, ``functools.partial``, ``torch.compile(module)`` or ``torch.func`` transform, named as the user's
code names it (``Layer.forward``, ``compute_loss``), and Dynamo's names for its inputs (``args[0]``,
``kwargs['input_ids']``) mapped to the wrapped function's parameters. Read from the live frame."""

from __future__ import annotations

import functools
import inspect
import re
import weakref
from typing import Any

from tpu_lab.compile.sources.frames import CARRIED_VALUE, RESUME, FunctionKey, carried_name
from tpu_lab.compile.sources.resume_code import resume_point

_WRAPPERS = ("wrapped_func", "wrapper", "inner", "_fn", "forward")  # generic wrappers' names
_SESSION = "tpu_lab_forward_"  # a generation session's private copy of a forward


def function_key(code: Any, values: dict[str, Any]) -> FunctionKey:
    """The compiled function; a model's forward reached through a generic wrapper (transformers'
    decorators, torch.compile's own) is named after the model's class."""
    import torch

    if code.co_name == "inner" and _routine(values.get("fn")):  # torch.compile(ema.update), a decorated method
        return _routine_key(values["fn"]) or FunctionKey(code.co_name, code.co_filename, code.co_firstlineno)
    if code.co_name in _WRAPPERS or code.co_name.startswith(_SESSION):
        first = method_owner(code, values) or values.get("fn")  # torch.compile(module) wraps it in inner(fn, ...)
        first = getattr(first, "__self__", first)  # the session's private copy wraps a bound forward
        args = values.get("args")
        if first is None and isinstance(args, tuple) and args:
            first = args[0]
        # a wrapper whose closure holds another function (@singleton on a method) wraps that one, not forward
        wrapped = [inspect.unwrap(f) for n in code.co_freevars if inspect.isfunction(f := values.get(n))]
        if isinstance(first, torch.nn.Module) and all(w is inspect.unwrap(type(first).forward) for w in wrapped):
            fwd = getattr(inspect.unwrap(type(first).forward), "__code__", None)
            if fwd is not None:  # a decorator's wrapper is a frame of its own beside the forward's (via)
                via = "" if code is fwd or code.co_name.startswith(_SESSION) else decorator_name(code, values)
                return FunctionKey(f"{type(first).__name__}.forward", fwd.co_filename, fwd.co_firstlineno, via=via)
        elif first is not None and "fn" in values and code.co_name == "inner":  # torch.compile(partial/object)
            return _wrapped_key(first) or FunctionKey(code.co_name, code.co_filename, code.co_firstlineno)
    if code.co_name.startswith(RESUME):  # one resume function per branch target: tell them apart
        line, rest = resume_point(code)
        return FunctionKey(code.co_name, code.co_filename, code.co_firstlineno, line, resumes_in=rest)
    name = code.co_name
    if name.startswith("__") and not isinstance(owner := method_owner(code, values), (type, type(None))):
        name = f"{type(owner).__name__}.{name}"  # a dunder method (__call__) by its class: alone it says nothing
    return _decorated_key(code, values) or FunctionKey(name, code.co_filename, code.co_firstlineno)


def method_owner(code: Any, values: dict[str, Any]) -> Any:
    """The object whose method the frame runs, whatever its first parameter is called (``self``, or ``s`` in
    ``def forward(s, x)``): its class defines a function with this very code; else the frame's ``self``, if any."""
    first = values.get(code.co_varnames[0]) if code.co_argcount else None
    for cls in type(first).__mro__ if first is not None else ():
        fn = cls.__dict__.get(code.co_name)
        fn = getattr(fn, "__func__", fn)  # a staticmethod's or classmethod's function
        try:
            if callable(fn) and getattr(inspect.unwrap(fn), "__code__", None) is code:
                return first
        except (ValueError, TypeError):  # a wrapper chain that loops, an object unwrap cannot read
            return None
    return values.get("self")


def user_names(code: Any, values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Dynamo's names for a module's inputs reached through a generic wrapper (``args[0]``,
    ``kwargs['input_ids']``: torch.compile(module)'s ``inner``, transformers' decorators) -> the names in
    the module's ``forward`` signature (``input``, ``input_ids``); the module itself reads ``self``."""
    import torch

    args, kwargs = values.get("args"), values.get("kwargs")
    if not (code.co_name in _WRAPPERS or code.co_name.startswith(_SESSION)) or not isinstance(args, tuple):
        return _wrapped_names(code, values)
    if code.co_name == "inner" and _routine(values.get("fn")):  # its signature, less a bound method's self
        return _partial_names(values["fn"], args, kwargs)
    module, skip = getattr(values.get("fn"), "__self__", values.get("fn")), 0  # the session's is a bound forward
    if isinstance(values.get("fn"), functools.partial):  # torch.compile(partial(f, ...)): f's free parameters
        return _partial_names(values["fn"], args, kwargs)
    if not isinstance(module, torch.nn.Module) and args and isinstance(args[0], torch.nn.Module):
        module, skip = args[0], 1  # a decorated forward: args[0] is the model
    if not isinstance(module, torch.nn.Module) and code.co_name == "inner" and callable(values.get("fn")):
        return _partial_names(values["fn"], args, kwargs)  # torch.compile(obj): its __call__'s, less self
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
    resumed = code.co_name.startswith(RESUME)  # the wrapper's part after a graph break: its locals as arguments
    if not (code.co_flags & 0x0C or resumed) or not code.co_freevars:  # no *args/**kwargs, or no closure
        return ()
    at = code.co_argcount + code.co_kwonlyargcount
    star = code.co_varnames[at] if code.co_flags & 0x04 else ("args" if resumed and "args" in values else "")
    stars = code.co_varnames[at + bool(star)] if code.co_flags & 0x08 else ("kwargs" if resumed else "")
    args, kwargs = values.get(star, ()) if star else (), values.get(stars, {}) if stars else {}
    if not isinstance(args, tuple) or not isinstance(kwargs, dict) or (resumed and not (args or kwargs)):
        return ()
    # the wrapper's own leading parameters (``self`` of ``def wrapper(self, *args, **kwargs)``) are passed on first
    own = [values[n] for n in code.co_varnames[: code.co_argcount] if n in values] if not resumed else []
    for name in code.co_freevars:
        fn: Any = values.get(name)
        if not _callable_code(fn):
            continue
        if resumed:  # its own leading parameters: those of the wrapped function's that are locals here (self)
            leading = list(inspect.signature(inspect.unwrap(fn)).parameters)
            own = [values[n] for n in leading[: next((i for i, n in enumerate(leading) if n not in values), 0)]]
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


def instance_of(code: Any, values: dict[str, Any]) -> tuple[str, Any] | None:
    """(class name, weak reference) of the object whose method or forward this frame runs (torch.compile(ema.update)'s
    bound method, torch.compile(model)'s module, a method's ``self``): its instances share the code's graphs. Weak:
    an id is reused once its object is freed, and a freed one is another instance than any live one."""
    import torch

    fn = values.get("fn") if code.co_name == "inner" else None
    owner = (
        fn.__self__ if inspect.ismethod(fn) else fn if isinstance(fn, torch.nn.Module) else method_owner(code, values)
    )
    args = values.get("args")
    if inspect.isfunction(fn) and isinstance(args, tuple) and args:  # torch.compile(Class.method): args[0] is self
        cls = getattr(inspect.unwrap(fn), "__qualname__", "").rsplit("<locals>.", 1)[-1].rpartition(".")[0]
        owner = args[0] if cls and cls in [k.__qualname__ for k in type(args[0]).__mro__] else owner
    if owner is None or isinstance(owner, type) or inspect.ismodule(owner):
        return None
    try:
        return type(owner).__name__, weakref.ref(owner)
    except TypeError:  # an object without weak references: which instance it was is not known
        return None


def compared(
    key: FunctionKey, owner: tuple[str, Any] | None, reasons: tuple[str, ...], graphs: dict, owners: dict
) -> tuple[tuple[str, str], ...]:
    """(compile id, whose) of the graphs Dynamo checked (``reasons``) that another callable compiled (one code
    reached through a shared wrapper, torch.compile's ``inner``), or another instance of the same class (a
    method's graphs are shared by its instances); ``graphs``/``owners``: by compile id, the function and instance."""
    out = []
    for i in dict.fromkeys(r.split(":", 1)[0] for r in reasons):
        other, was = graphs[i][0] if i in graphs else key, owners.get(i)
        if other != key:
            out.append((i, str(other)))
        elif owner and was and was[0] == owner[0] and was[1]() is not owner[1]():
            out.append((i, f"another instance of {owner[0]}"))
    return tuple(out)


def _decorated_key(code: Any, values: dict[str, Any]) -> FunctionKey | None:
    """A ``*args``/``**kwargs`` decorator (``functools.wraps``' wrappers: transformers' ``deprecate_kwarg``,
    gradient checkpointing's forward, ``torch.func.vmap``) named after the function it wraps, as the user's
    code names it: ``Layer.forward`` for a method of a module, ``compute_loss`` for a function."""
    if not code.co_flags & 0x0C or not code.co_freevars:
        return None
    wrapped = [values[n] for n in code.co_freevars if _callable_code(values.get(n))]
    wrapped = [fn for fn in wrapped if getattr(fn, "__code__", None) is not code]  # a wrapper may name itself
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
    return FunctionKey(name, inner.co_filename, inner.co_firstlineno, via=decorator_name(code, values))


def _callable_code(fn: Any) -> bool:  # a function, or a partial of one: vmap(partial(loss_for_task, net))
    return inspect.isfunction(fn.func if isinstance(fn, functools.partial) else fn)


COMPILE_WRAPPER = "torch.compile"  # the ``via`` of torch.compile's own frame around a callable object
_CALLS = ("forward", "__call__", "_call_impl", "_wrapped_call_impl")  # a module's call: named after its class


def _routine(fn: Any) -> bool:
    """A function or bound method torch.compile wrapped in its own ``inner`` (one it cannot trace as a frame
    of its own: a method decorated with ``@torch.no_grad()``, whose wrapper lives in torch), not a module's call."""
    return (inspect.isfunction(fn) or inspect.ismethod(fn)) and getattr(fn, "__name__", "") not in _CALLS


def _routine_key(fn: Any) -> FunctionKey | None:
    """By the function it runs (a bound method by its instance's class: ``ModelEmaV3.update``), through
    the decorator whose wrapper it is (``via``)."""
    wrapper = getattr(fn, "__func__", fn)
    target = inspect.unwrap(wrapper)
    code = getattr(target, "__code__", None)
    if code is None:
        return None
    name = getattr(target, "__qualname__", target.__name__).rsplit("<locals>.", 1)[-1]
    if inspect.ismethod(fn) and not isinstance(fn.__self__, type):
        name = f"{type(fn.__self__).__name__}.{target.__name__}"
    closure = dict(
        zip(wrapper.__code__.co_freevars, (c.cell_contents for c in wrapper.__closure__ or ()), strict=False)
    )
    via = decorator_name(wrapper.__code__, closure) if target is not wrapper else ""
    return FunctionKey(name, code.co_filename, code.co_firstlineno, via=via)


def decorator_name(code: Any, values: dict[str, Any]) -> str:
    """The decorator whose wrapper ``code`` is, as the user's code spells it: ``timed`` (``def timed(fn): def
    wrapper...``); torch's context-manager decorators by their public name (``torch.no_grad``: the wrapper's
    ``ctx_factory`` is a method of the context manager)."""
    name = getattr(code, "co_qualname", code.co_name).split(".<locals>", 1)[0]
    inner = getattr(values.get("fn"), "__code__", None)
    dynamo_own = code.co_filename.replace("\\", "/").endswith("torch/_dynamo/external_utils.py")
    if dynamo_own and inner is None:  # torch.compile's frame around a module or object it calls: no decorator
        return COMPILE_WRAPPER
    if dynamo_own and inner is not None:
        try:  # Dynamo's own frame around a wrapper it skips (wrap_inline): the wrapper inside it, by its cells
            cells = zip(inner.co_freevars, (c.cell_contents for c in values["fn"].__closure__ or ()), strict=False)
            return decorator_name(inner, dict(cells))
        except ValueError:  # an empty cell
            return name
    if not code.co_filename.replace("\\", "/").endswith("torch/utils/_contextlib.py"):
        return name
    import torch

    manager = getattr(values.get("ctx_factory"), "__self__", None)
    kind = type(manager) if manager is not None else None
    if kind is not None:
        name = kind.__name__
    public = kind is None or getattr(torch, name, None) is kind
    return f"torch.{name}" if public else f"{kind.__module__}.{name}"


def _partial_names(fn: Any, args: tuple, kwargs: Any) -> tuple[tuple[str, str], ...]:
    try:
        params = list(inspect.signature(fn).parameters.values())  # a partial's signature drops what it binds
    except (TypeError, ValueError):
        return ()
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    out = [(f"args[{i}]", n) for i, n in enumerate(positional[: len(args)])]
    return tuple(out + [(f"kwargs[{k!r}]", k) for k in (kwargs or {}) if isinstance(k, str) and k.isidentifier()])


def _wrapped_key(fn: Any) -> FunctionKey | None:
    """A functools.partial by the function it binds; a callable object by its class's ``__call__``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    code = getattr(inspect.unwrap(fn), "__code__", None) if inspect.isroutine(fn) else None
    name = getattr(fn, "__qualname__", "")
    via = ""
    if code is None and callable(fn):  # its __call__ compiles as a frame of its own too: this row is the wrapper's
        call = inspect.unwrap(type(fn).__call__)
        code, name, via = getattr(call, "__code__", None), f"{type(fn).__name__}.__call__", COMPILE_WRAPPER
    return (
        FunctionKey(name.rsplit("<locals>.", 1)[-1], code.co_filename, code.co_firstlineno, via=via) if code else None
    )


_CELL = re.compile(r"(?<![\w.])(?:[LG]\['(?P<quoted>\w+)'\]|(?P<plain>\w+))\.__closure__\[(?P<i>\d+)\]\.cell_contents")


def closure_names(frame: Any, reasons: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """A closure's variable a guard reads (``criterion.__closure__[0].cell_contents``) by its name in the
    closure's own code (``label_smoothing``: the function's ``co_freevars``), where the function is one of the
    frame's locals or globals; none where it cannot be read."""
    out = []
    for m in _CELL.finditer("\n".join(reasons)):
        owner, i = m["quoted"] or m["plain"], int(m["i"])
        fn = frame.f_locals.get(owner, frame.f_globals.get(owner))
        free = getattr(getattr(fn, "__code__", None), "co_freevars", ())
        if i < len(free) and isinstance(free[i], str):
            out.append((f"{owner}.__closure__[{i}].cell_contents", free[i]))
    return tuple(dict.fromkeys(out))


def field_names(values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The fields of namedtuples among the inputs (and one level into tuples), as the code reads them:
    Dynamo indexes them (``packed[0]``), the code and the inputs column say ``packed.data``."""
    out: list[tuple[str, str]] = []

    def add(name: str, value: Any, depth: int) -> None:
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            out.extend((f"{name}[{i}]", f"{name}.{f}") for i, f in enumerate(value._fields))
        elif isinstance(value, dict) and type(value) is not dict:  # a ModelOutput: Dynamo reads it by position
            out.extend((f"list({name}.values())[{i}]", f"{name}.{k}") for i, k in enumerate(list(value)[:16]))
        elif isinstance(value, tuple) and depth < 2:  # a value carried over a break: (out, (h, c))
            for i, item in enumerate(value[:8]):
                add(f"{name}[{i}]", item, depth + 1)
        elif type(value) is dict and depth == 0:  # **kwargs: by key, and by the name it is renamed to
            for k, item in list(value.items())[:32]:
                add(f"{name}[{k!r}]", item, 1)
                if isinstance(k, str) and k.isidentifier():
                    add(k, item, 1)

    for name, value in values.items():  # a carried value as the causes and the inputs column name it
        for said in (CARRIED_VALUE, carried_name(name)) if name == "___stack0" else (name,):
            add(said, value, 0)
    return tuple(out)
