"""A function ``tl.watch()`` decorates: each call runs inside the watch and is counted per input signature,
after the call, so the row it counts on shows the flags (boolean arguments) whose change made a graph, at
this call's value, as the compiles' rows do: two calls differing only by such a flag are two rows."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Protocol

from tpu_lab.compile.sources import frames
from tpu_lab.compile.sources.frames import FunctionKey


class Counting(Protocol):
    """What the decorator needs of a ``Watch`` (typed by its parts: ``watch`` imports this module)."""

    refusals: int

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> None: ...

    def count_call(
        self, key: FunctionKey, signature: tuple, flags: tuple = (), *, refused: bool = False, values: Any = None
    ) -> None: ...


def watched(watch: Counting, fn: Callable) -> Callable:
    """``fn`` wrapped: every call inside ``watch``, counted per input signature."""
    if not callable(fn):
        from tpu_lab.errors import InvalidArgument

        raise InvalidArgument(
            f"tl.watch() decorates a function, got {type(fn).__name__}.", fix="Use @tl.watch() on a def."
        )
    inner = inspect.unwrap(getattr(fn, "_torchdynamo_orig_callable", fn))
    forward = getattr(getattr(inner, "forward", None), "__code__", None)
    code = getattr(inner, "__code__", None) or forward
    key = None
    if code is not None:
        name = f"{type(inner).__name__}.forward" if code is forward else code.co_name
        key = FunctionKey(name, code.co_filename, code.co_firstlineno)
    try:
        bind = inspect.signature(inner).bind
    except (TypeError, ValueError):
        bind = None

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if key is None or code is None or bind is None:
            with watch:
                return fn(*args, **kwargs)
        try:
            values = bind(*args, **kwargs).arguments
        except TypeError:
            values = {}
        signature, flags = frames.describe_inputs(code, values), frames.flag_inputs(code, values)
        refused = watch.refusals
        try:
            with watch:  # leaving it folds this call's compiles: the flags they changed are known then
                return fn(*args, **kwargs)
        finally:
            watch.count_call(key, signature, flags, refused=watch.refusals > refused, values=values)

    return call
