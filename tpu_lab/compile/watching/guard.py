"""``tl.no_recompiles(allow=...)``: any compile inside raises ``tl.RecompileError`` naming the function,
its file:line and what changed. ``allow`` lets expected compiles through: a count (the first N), or a
predicate over the compile (``allow(capture) -> bool``; ``capture.function.name``, ``.signature``,
``.reason``), for a warm-up window. Dynamo's stance is never touched, so nothing needs restoring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpu_lab.compile.causes.explain import capture_causes
from tpu_lab.compile.sources import dynamo_source, listening
from tpu_lab.compile.sources.frames import Capture, signature_text
from tpu_lab.errors import InvalidArgument, RecompileError


class NoRecompiles:
    """Context manager; see the module docstring. ``.allowed`` counts the compiles it let through."""

    def __init__(self, allow: int | Callable[[Capture], bool] = 0) -> None:
        if isinstance(allow, bool) or not (callable(allow) or (isinstance(allow, int) and allow >= 0)):
            raise InvalidArgument(
                f"allow={allow!r} must be a count of compiles to let through (an int >= 0) or a function "
                "that takes the compile and returns True to allow it.",
                fix="Use e.g. allow=2, or allow=lambda c: c.function.name == 'warmup'.",
            )
        self.allow = allow
        self.allowed = 0
        self._refused: RecompileError | None = None
        self._scopes: list[listening.Scope] = []

    def __enter__(self) -> NoRecompiles:
        self._refused = None
        self._scopes.append(dynamo_source.add_listener(self._check))
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        usage = "Use `with tl.no_recompiles():`, which enters and exits it once each."
        scope = listening.innermost_here(self._scopes, "This no_recompiles() block", usage)
        self._scopes.remove(scope)
        dynamo_source.remove_listener(scope)
        refused = self._refused
        if refused is not None and exc is not None and not isinstance(exc, RecompileError) and _caused_by(exc, refused):
            # Dynamo wraps what a compile callback raises (InternalTorchDynamoError): show ours.
            raise refused.with_traceback(None) from None

    def _check(self, capture: Capture) -> None:
        try:
            ok = bool(self.allow(capture)) if callable(self.allow) else self.allowed < self.allow
        except Exception as e:
            self._refused = RecompileError(
                f"The allow= function of no_recompiles() raised {type(e).__name__}: {e} when asked about "
                f"the compile of {capture.function}.",
                fix="Make it return True or False for any compile (it gets one with .function.name, "
                ".signature and .reason), e.g. allow=lambda c: c.function.name == 'warmup'.",
            )
            raise self._refused from e
        if ok:
            self.allowed += 1
            return
        causes = capture_causes(capture)
        if causes:
            changed = "; ".join(dict.fromkeys(c.words for c in causes))
        else:
            changed = "Dynamo holds no graph for it yet (a first compile, or one after torch._dynamo.reset())"
        inputs = signature_text(capture.shown)
        fixes = "; ".join(dict.fromkeys(c.fix.removeprefix("usually none: ") for c in causes if c.fix))
        self._refused = RecompileError(
            f"{capture.function} would compile inside no_recompiles() because {changed}"
            + (f" (inputs: {inputs})." if inputs else "."),
            fix="Warm this case up before the block, or let it through with allow="
            + (f"; to avoid the compile altogether: {fixes}." if fixes else "."),
        )
        raise self._refused


NoRecompiles._check.hears_limit = False  # type: ignore[attr-defined]  # a refusal compiles nothing


def _caused_by(exc: BaseException, target: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 20:
        if exc is target:
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return False


def no_recompiles(allow: int | Callable[[Capture], bool] = 0) -> NoRecompiles:
    """Any compile inside raises RecompileError; ``allow`` lets a count or a predicate through."""
    return NoRecompiles(allow)
