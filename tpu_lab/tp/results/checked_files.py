"""Files the kernel reads back from a run folder, checked before anything uses them: ranks run the
user's code, which can write anything there. A file too large, nested too deep, or not the shape tpu_lab
writes is not trusted: it reads as absent (a status, a compile table) and the launch says so, instead of
the kernel crashing on it or believing it. Pure: paths and JSON in, checked values out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 64 * 2**20
"""A rank file above this is not read (``tl.report`` refuses values above ``MAX_REPORT_BYTES``)."""
MAX_REPORT_BYTES = 16 * 2**20
"""The largest JSON text ``tl.report(value)`` hands back; for more, write a file and report its path."""
MAX_DEPTH = 200
MAX_TEXT = 100_000  # a string field of a status or compile table (an error's traceback)


def read_checked(path: Path) -> tuple[Any, str]:
    """(value, '') for a readable JSON file of sane size and depth; (None, why) otherwise ('' and None: absent)."""
    try:
        size = path.stat().st_size
    except OSError:
        return None, ""
    if size > MAX_FILE_BYTES:
        return None, f"{path.name} is {size / 2**20:.0f} MiB, above the {MAX_FILE_BYTES // 2**20} MiB read back"
    try:
        value = json.loads(path.read_text(errors="replace"))
    except OSError:
        return None, ""
    except (ValueError, RecursionError):
        return None, f"{path.name} is not the JSON tpu_lab writes"
    if _too_deep(value):
        return None, f"{path.name} is nested more than {MAX_DEPTH} levels deep"
    return value, ""


def checked_status(data: Any) -> dict[str, Any] | None:
    """A rank's status file as ``{"exit_code": int, "error": str | None, "time": float | None}``, or None."""
    if not isinstance(data, dict) or not _is_int(data.get("exit_code")):
        return None
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        error = json.dumps(error)[:MAX_TEXT]  # shown as text, never used as a structure
    when = data.get("time")
    return {"exit_code": data["exit_code"], "error": error, "time": when if _is_number(when) else None}


_ROW_TEXT = ("function", "signature", "cause", "guard", "dynamic")
_ROW_COUNTS = ("compiles", "cached", "uncompiled", "refused", "raised", "failed")
_CAUSE_TEXT = ("words", "guard", "fix", "kind", "shown_guard")
_BREAK_TEXT = ("words", "where", "fix", "reason")


def checked_compile_file(data: Any) -> dict[str, Any] | None:
    """A rank watcher's file with every field the kernel reads of the type it expects (anything else
    dropped or defaulted), or None when it is not such a file at all."""
    if not isinstance(data, dict):
        return None
    out: dict[str, Any] = {"compiles": _count(data.get("compiles")), "done": data.get("done") is True}
    out["dynamo_disabled"] = data.get("dynamo_disabled") is True
    for key in ("rank", "pid", "updated"):
        if _is_number(data.get(key)):
            out[key] = data[key]
    if isinstance(data.get("error"), str):
        out["error"] = data["error"][:MAX_TEXT]
    for key in ("compiling", "last"):
        part = data.get(key)
        if isinstance(part, dict):
            out[key] = {k: v for k, v in part.items() if isinstance(v, str) or _is_number(v)}
    if isinstance(data.get("tpu"), dict):
        out["tpu"] = {k: v for k, v in data["tpu"].items() if isinstance(k, str) and _is_number(v)}
    table = data.get("table")
    if isinstance(table, dict):
        out["table"] = _checked_table(table)
    return out


def _checked_table(table: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for row in table.get("rows", ()) if isinstance(table.get("rows"), list) else ():
        if not isinstance(row, dict) or not isinstance(row.get("function"), str):
            continue
        clean: dict[str, Any] = {k: _text(row.get(k)) for k in _ROW_TEXT}
        clean |= {k: _count(row.get(k)) for k in _ROW_COUNTS}
        clean["calls"] = row["calls"] if _is_int(row.get("calls")) else None
        clean["compile_seconds"] = row["compile_seconds"] if _is_number(row.get("compile_seconds")) else 0.0
        clean["limit_hit"] = row.get("limit_hit") is True
        causes: list[Any] = row["causes"] if isinstance(row.get("causes"), list) else []
        clean["causes"] = [
            {**{k: _text(c.get(k)) for k in _CAUSE_TEXT}, "count": _count(c.get("count"))}
            for c in causes
            if isinstance(c, dict)
        ]
        rows.append(clean)
    breaks: list[Any] = table["graph_breaks"] if isinstance(table.get("graph_breaks"), list) else []
    return {
        **{k: v for k, v in table.items() if _is_number(v) or isinstance(v, bool)},
        "rows": rows,
        "graph_breaks": [
            {**{k: _text(b.get(k)) for k in _BREAK_TEXT}, "count": _count(b.get("count"))}
            for b in breaks
            if isinstance(b, dict)
        ],
        "limit_hit": table.get("limit_hit") is True,
    }


def _too_deep(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return True
        if isinstance(item, dict):
            stack += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            stack += [(v, depth + 1) for v in item]
    return False


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(value: Any) -> int:
    return value if _is_int(value) and value >= 0 else 0


def _text(value: Any) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""
