"""Report types and how they render: ``Finding``, the severity order, HTML pieces, and ``Report``.

Every result object (probe, load, preflight, launch, compile tables) inherits ``Report``: it writes
``to_text()`` and ``to_html()`` once, and gets ``__str__`` and ``_repr_mimebundle_`` (which honours
IPython's include/exclude) from here, so one object reads well in a terminal, in nbconvert output and
in a notebook. No widget or torch import here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
SEVERITY_COLOURS = {"error": "#c62828", "warning": "#ef6c00", "info": "#1565c0"}


@dataclass(frozen=True)
class Finding:
    """A trap or problem that applies here, with its fix."""

    code: str
    """Stable identifier, e.g. ``"auto-device-map-cpu"`` (docs/troubleshooting.md lists them)."""
    severity: str
    """``"error"`` (this will fail), ``"warning"`` (this will surprise you) or ``"info"``."""
    message: str
    """What applies here and why it matters."""
    fix: str
    """What to do about it."""

    @property
    def summary(self) -> str:
        """The message's first clause, in words (``device_map="auto" would load the model on CPU here``):
        what a one-line mention says instead of the code."""
        return re.split(r": |; |\. ", self.message, maxsplit=1)[0].rstrip(".")


def most_severe_first(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity]))


def has_error(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


class Report:
    """Mixin: subclasses define ``to_text()`` and ``to_html()``; this gives the rest."""

    def to_text(self) -> str:
        raise NotImplementedError

    def to_html(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.to_text()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        makers = {"text/plain": self.to_text, "text/html": self.to_html}
        wanted = [m for m in makers if (not include or m in include) and not (exclude and m in exclude)]
        return {m: makers[m]() for m in wanted}


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


def findings_html(items: Iterable[Finding]) -> str:
    """Findings as coloured boxes: severity, message and fix (the code only as ``data-code``, for tools:
    readers get words)."""
    boxes = []
    for f in items:
        colour = SEVERITY_COLOURS.get(f.severity, "#555")
        boxes.append(
            f"<div class='tpu-lab-finding tpu-lab-{escape(f.severity)}' data-code='{escape(f.code)}' "
            f"style='border-left:4px solid {colour};padding:2px 8px;margin:4px 0'>"
            f"<b style='color:{colour}'>{escape(f.severity)}</b>: "
            f"{escape(f.message)}<br><i>Fix:</i> {escape(f.fix)}</div>"
        )
    return "".join(boxes) or "<div class='tpu-lab-finding-none'>No findings: nothing to fix here.</div>"


def findings_text(items: Iterable[Finding]) -> list[str]:
    lines = []
    for f in items:
        lines += [f"  [{f.severity}] {f.message}", f"      fix: {f.fix}"]
    return lines


def report_text(title: str, rows: Iterable[Sequence[Any]], items: Iterable[Finding] = (), *, width: int = 18) -> str:
    """A titled key/value block followed by the findings, for terminals."""
    return "\n".join([title, *(f"  {k:<{width}} {v}" for k, v in rows), *findings_text(items)])


def report_html(title: str, rows: Iterable[Sequence[Any]], items: Iterable[Finding] = ()) -> str:
    return f"<div class='tpu-lab-report'><h4 style='margin:4px 0'>{escape(title)}</h4>{table(rows)}{findings_html(items)}</div>"


def banner_html(title: str, text: str, *, css_class: str = "tpu-lab-banner") -> str:
    return (
        f"<div class='{css_class}' style='background:#ffebee;border-left:4px solid #c62828;padding:4px 8px'>"
        f"<b>{escape(title)}</b> {escape(text)}</div>"
    )
