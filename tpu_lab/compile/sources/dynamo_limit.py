"""The recompile limit a refusal hit, and where it was set: the function's own
``torch.compile(..., recompile_limit=N)`` or Dynamo's global config. Part of the Dynamo source seam."""

from __future__ import annotations

import logging
import re
import sys
from typing import Any


def limit_of(record: logging.LogRecord) -> int | None:
    """The limit Dynamo refused at, from its warning's own arguments (``hit config.%s (%s)``)."""
    args = record.args if isinstance(record.args, tuple) else ()
    return next((a for a in args if isinstance(a, int) and not isinstance(a, bool)), None)


def limit_words(value: int | None) -> str:
    """The recompile limit and where it was set: the function's own ``torch.compile(recompile_limit=)``
    (torch patches Dynamo's config with it around that function's compiles, from its ConvertFrame's
    ``_recompile_limit``) or the global ``torch._dynamo.config.recompile_limit``."""
    import torch._dynamo.config as config

    own = None
    f: Any = sys._getframe(1)
    while f is not None and own is None:
        holder = f.f_locals.get("self")
        own = getattr(holder, "_recompile_limit", None) if f.f_code.co_filename.endswith("convert_frame.py") else None
        f = f.f_back
    if own is None and value is not None and value != getattr(config, "recompile_limit", value):
        own = value  # read after the compile, when torch's patch is undone: not the global value, so the function's
    if own is not None:
        return f"the limit is {own}, set for this function by torch.compile(..., recompile_limit={own})"
    value = value if value is not None else getattr(config, "recompile_limit", None)
    old = " (or cache_size_limit, its old name)" if hasattr(config, "cache_size_limit") else ""
    return f"the limit is {value}, torch._dynamo.config.recompile_limit (global){old}" if value is not None else ""


def limit_from_text(text: str) -> int | None:
    """The limit as Dynamo's refusal record states it (``... (currently set to 8)``)."""
    m = re.search(r"currently set to (\d+)", text or "")
    return int(m[1]) if m else None


def recompile_limit() -> int | None:
    import torch._dynamo.config as config

    return getattr(config, "recompile_limit", None)


RAISES_FULLGRAPH = "fullgraph=True"
RAISES_CONFIG = "torch._dynamo.config.fail_on_recompile_limit_hit = True"
LIMIT_ERROR = "FailOnRecompileLimitHit"
"""The exception Dynamo raises at the recompile limit instead of running the call uncompiled."""


def limit_raises(one_graph: bool) -> str:
    """What turns a refusal at the recompile limit into an error, decided as Dynamo decides it at that
    refusal (its config first, then the compile's ``fullgraph``); "" where the call runs uncompiled."""
    import torch._dynamo.config as config

    if getattr(config, "fail_on_recompile_limit_hit", False):
        return RAISES_CONFIG
    return RAISES_FULLGRAPH if one_graph else ""


def raises_of(record: Any) -> str:
    """The same, from Dynamo's record of the refusal (``fail_type`` FailOnRecompileLimitHit, its reason
    naming the setting): "" for a refusal that ran the call uncompiled."""
    if getattr(record, "fail_type", None) != LIMIT_ERROR:
        return ""
    reason = str(getattr(record, "fail_reason", "") or "")
    return RAISES_CONFIG if "fail_on_recompile_limit_hit" in reason else RAISES_FULLGRAPH
