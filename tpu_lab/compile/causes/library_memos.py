"""A library's own module-level memo in a guard (``torch.distributions.kl._KL_MEMOIZE``, einops'
``_backends._type2backend``): the library fills it at its first call, or while Dynamo traces it (a tensor type
it meets then), so the compile it costs is expected once and is none of the user's code."""

from __future__ import annotations

import importlib.util
import sys

from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.sources.packages import USER, package_of

_MEMO_FIX = (
    "expected once (the library fills it at its first call, once per case it caches); to skip even this compile, "
    "make one such call eagerly before the first compiled one"
)
_GROWN_FIX = "expected once: nothing in your code to change (the library's own cache, filled while Dynamo traced it)"


def memo_words(name: str, guard: str, was: str = "") -> Cause | None:
    """A library's memo that held no items when the graph was compiled (``was``: '' for that truthiness guard),
    or another number of them (``was``); None for a container of the user's own."""
    if not (package := library_global(name)):
        return None
    whose = f"{package}'" if package.endswith("s") else f"{package}'s"
    if not was:
        words = f"{name} holds items now; the graph was compiled while it was empty: {whose} own memo, filled at the first call"
        return Cause("length", words, guard, _MEMO_FIX)
    words = f"{name} holds another number of items (was {was}): {whose} own cache, filled as it ran"
    return Cause("length", words, guard, _GROWN_FIX)


def library_global(name: str) -> str:
    """The installed package whose module-level container ``name`` is (``torch.distributions.kl._KL_MEMOIZE``:
    ``"torch"``), '' for the user's own or an unknown one."""
    top = name.split(".", 1)[0]
    if "." not in name or not top.isidentifier():
        return ""
    spec = importlib.util.find_spec(top) if top in sys.modules else None
    package = package_of(spec.origin) if spec is not None and spec.origin else USER
    return "" if package in (USER, "tpu_lab") else package
