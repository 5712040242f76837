"""A backend that failed on the graph Dynamo handed it, in words: the whole frame then runs eagerly on every
call, so its graph break has a fix like any failure. Where the op it failed on makes a size that depends on
a tensor's values (aten.nonzero behind a boolean mask), Dynamo names only the op; the user's line that makes
it is read from that graph (``sources.dynamo_failures``)."""

from __future__ import annotations

import dataclasses
import linecache
import re

from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.causes.source_file import whole_statement
from tpu_lab.compile.sources import frames

BACKEND_FAILED = "Backend compiler "  # Dynamo's words for a backend that raised on the graph it was handed

VALUE_SIZED_FIX = (
    "set torch._dynamo.config.capture_dynamic_output_shape_ops = True before the first call (the backend then "
    "compiles a size that depends on values), or move that line into a torch.compiler.disable'd helper"
)


def backend_told(cause: Cause, reason: str, sized: tuple[str, int, str], name: str) -> tuple[Cause, bool]:
    """A backend's failure (``reason``), told at the user's line that makes its op where ``sized`` names one,
    with a fix either way: the frame runs eagerly, its break is no break Dynamo goes on past. Also whether the
    words now say where (a failure's words then need no place of their own)."""
    if not reason.startswith(BACKEND_FAILED):
        return cause, False
    if sized[0]:
        return value_sized(cause, *sized), True
    fix = (
        f"keep the op the backend failed on (named above) out of {name}'s compiled code (a "
        "torch.compiler.disable'd helper around its line), or compile with a backend that supports it"
    )
    return dataclasses.replace(cause, fix=cause.fix or fix), False


def value_sized(cause: Cause, file: str, line: int, what: str) -> Cause:
    """The cause told at the user's line that makes the op (``what``: "a boolean-mask assignment")."""
    op = re.search(r"failed with (aten\.\w+)", cause.words)
    code = whole_statement(linecache.getline(file, line).strip())
    at = f" at {frames.where_label(file, line)}" + (f" ({code})" if code else "")
    backend = re.search(r"Backend compiler `([^`]+)`", cause.words)
    tail = cause.words.partition(". Adding a graph break")[2]  # ", and Dynamo cannot resume ...", where said
    words = (
        f"the {backend[1] if backend else 'compile'} backend cannot compile {op[1] if op else 'an op'}, whose output "
        f"size depends on a tensor's values: {what}{at} needs it{tail}"
    )
    return dataclasses.replace(cause, words=words, fix=VALUE_SIZED_FIX)
