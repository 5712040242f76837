"""Dynamo's records that no compile this watch heard claims: a refusal at the recompile limit whose
warning was not seen (warnings switched off), and graphs compiled where the watch was not listening
(another thread, between its blocks: counted, so the table says they are left out instead of dropping
them silently)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tpu_lab.compile.sources import dynamo_source as dynamo
from tpu_lab.compile.sources.dynamo_limit import limit_from_text, limit_words, raises_of
from tpu_lab.compile.sources.dynamo_records import is_limit_refusal
from tpu_lab.compile.sources.dynamo_source import LIMIT_TRIGGER
from tpu_lab.compile.sources.frames import Capture


def leftover_records(left: Iterable[Any], handled: set[str], now: float) -> tuple[list[Capture], int]:
    """(refusals to fold as limit rows, graphs compiled elsewhere) among the records no capture took."""
    refusals, elsewhere = [], 0
    for record in left:
        key, compile_id = dynamo.record_function(record), str(record.compile_id)
        if compile_id in handled:
            continue
        if is_limit_refusal(record) and key:
            reasons = (record.recompile_reason,) if record.recompile_reason else ()
            cap = Capture(compile_id, key, (), None, now, LIMIT_TRIGGER, None, reasons)
            limit = limit_from_text(record.fail_reason)  # a refusal that raised states none: the config's then
            limit = limit if limit is not None else getattr(record, "config_recompile_limit", None)
            refusals.append(cap._replace(limit=limit_words(limit), limit_value=limit, raises=raises_of(record)))
        elif getattr(record, "has_guarded_code", False) and getattr(record, "is_forward", True) is not False:
            elsewhere += 1
    return refusals, elsewhere
