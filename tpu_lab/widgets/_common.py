"""Shared bits for the widgets: how an error and a status line look."""

from __future__ import annotations

from html import escape

from tpu_lab.errors import TpuLabError


def error_html(exc: BaseException) -> str:
    """An exception as a red box: what happened, the likely cause and the fix when tpu_lab knows them."""
    if isinstance(exc, TpuLabError):
        parts = [f"<b>{escape(exc.what)}</b>"]
        if exc.cause:
            parts.append(f"<i>Likely cause:</i> {escape(exc.cause)}")
        if exc.fix:
            parts.append(f"<i>Fix:</i> {escape(exc.fix)}")
    else:
        parts = [f"<b>{escape(type(exc).__name__)}</b>: {escape(str(exc))}"]
    body = "<br>".join(parts)
    return f"<div class='tpu-lab-error' style='border-left:4px solid #c62828;padding:2px 8px'>{body}</div>"
