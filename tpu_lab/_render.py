"""HTML for result objects: one small vocabulary shared by every report, no widget imports."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

SEVERITY_COLOURS = {"error": "#c62828", "warning": "#ef6c00", "info": "#1565c0"}


def table(rows: Iterable[Sequence[Any]], header: Sequence[str] | None = None) -> str:
    """A plain HTML table; every cell is escaped."""
    head = ""
    if header:
        head = "<thead><tr>" + "".join(f"<th style='text-align:left'>{escape(str(h))}</th>" for h in header)
        head += "</tr></thead>"
    body = "".join(
        "<tr>" + "".join(f"<td style='text-align:left'>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table class='tpu-lab-table'>{head}<tbody>{body}</tbody></table>"


def findings(items: Iterable[Any]) -> str:
    """Findings as coloured boxes: severity, code, message and fix (objects with those attributes)."""
    boxes = []
    for f in items:
        colour = SEVERITY_COLOURS.get(f.severity, "#555")
        boxes.append(
            f"<div class='tpu-lab-finding tpu-lab-{escape(f.severity)}' data-code='{escape(f.code)}' "
            f"style='border-left:4px solid {colour};padding:2px 8px;margin:4px 0'>"
            f"<b style='color:{colour}'>{escape(f.severity)}</b> <code>{escape(f.code)}</code>: "
            f"{escape(f.message)}<br><i>Fix:</i> {escape(f.fix)}</div>"
        )
    return "".join(boxes) or "<div class='tpu-lab-finding-none'>No findings: nothing to fix here.</div>"


def report_html(title: str, rows: Iterable[Sequence[Any]], items: Iterable[Any] = ()) -> str:
    return (
        f"<div class='tpu-lab-report'><h4 style='margin:4px 0'>{escape(title)}</h4>{table(rows)}{findings(items)}</div>"
    )
