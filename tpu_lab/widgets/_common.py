"""Shared bits for the widgets: how an error and a status line look."""

from __future__ import annotations

from html import escape

from tpu_lab.errors import TpuLabError


def error_html(exc: BaseException) -> str:
    """An exception as a red box: what happened, the likely cause and the fix when tpu_lab knows them."""
    if isinstance(exc, TpuLabError):
        # The first line says what happened; the rest (argv, rank states, a traceback tail) keeps its lines.
        first, _, rest = exc.what.partition("\n")
        parts = [f"<b>{escape(first)}</b>"]
        if rest:
            parts.append(f"<pre style='white-space:pre-wrap;font-size:11px;margin:2px 0'>{escape(rest)}</pre>")
        if exc.cause:
            parts.append(f"<i>Likely cause:</i> {escape(exc.cause)}")
        if exc.fix:
            parts.append(f"<i>Fix:</i> {escape(exc.fix)}")
    else:
        parts = [f"<b>{escape(type(exc).__name__)}</b>: {escape(str(exc))}"]
    body = "<br>".join(parts)
    return f"<div class='tpu-lab-error' style='border-left:4px solid #c62828;padding:2px 8px'>{body}</div>"
