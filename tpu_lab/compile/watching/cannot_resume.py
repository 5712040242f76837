"""A frame Dynamo gave up on because it could not resume after a graph break, told by that break: its cause
and its fix, with why Dynamo could not split the frame there. Dynamo either cannot rebuild a loop's iterator
(a ``zip`` over a ModuleList: "Reconstruction failure", logged at the break's own place), or cannot rebuild
the generator a comprehension walks (DETR's matcher: a NumPy call inside a list comprehension), where the
break is the one the same compile met first, deeper in the call."""

from __future__ import annotations

import dataclasses
import linecache

from tpu_lab.compile.causes.branch_origin import enclosing_loop
from tpu_lab.compile.causes.break_words import graph_break_words
from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.causes.source_file import whole_statement
from tpu_lab.compile.sources import frames
from tpu_lab.compile.sources.dynamo_breaks import first_break
from tpu_lab.compile.sources.stack_place import break_location

_REBUILD = "Reconstruction failure"  # Dynamo cannot rebuild, for the code after a break, what it needs
_GENERATOR = "Generator reconstruction"  # ... nor the generator behind the iterator a line walks


def cannot_resume(cause: Cause, reason: str, compile_id: str, at: tuple[str, int], same_place: Cause | None) -> Cause:
    """``cause`` of a failure at ``at`` (file, line), told by the break Dynamo could not resume after, where
    ``reason`` says so; ``same_place``: the latest break heard at that place."""
    if reason.startswith(_REBUILD) and same_place is not None and same_place.words not in cause.words:
        return _rebuilt(same_place, *at)
    first = first_break(compile_id) if reason.startswith(_GENERATOR) else None
    if first is None:
        return cause
    file, line, library = break_location(first[1])
    code = linecache.getline(file, line).strip() if file else ""
    earlier = graph_break_words(first[0], library, code, (file, line))
    if _GENERATOR in earlier.words or earlier.words in cause.words:
        return cause
    there = whole_statement(linecache.getline(at[0], at[1]).strip())
    place = f" at {frames.where_label(file, line)}" + (f" ({whole_statement(code)})" if whole_statement(code) else "")
    words = (
        f"{earlier.words.rstrip('.')}{place if file else ''}, and Dynamo cannot resume after that break inside line "
        f"{at[1]}" + (f" ({there})" if there else "") + ": it would have to rebuild the iterator that line walks (a "
        "comprehension's or enumerate's), so it gave up on the whole function"
    )
    helper = (
        f"move line {at[1]}'s loop into a function of its own decorated with @torch.compiler.disable (Dynamo "
        "resumes after a break at that call, not inside the loop)"
    )
    return dataclasses.replace(earlier, words=words, fix=f"{earlier.fix}; or {helper}" if earlier.fix else helper)


def _rebuilt(earlier: Cause, file: str, line: int) -> Cause:
    """A frame given up on because Dynamo could not resume after a graph break (it cannot rebuild the loop's
    iterator, a ``zip`` over a ModuleList): the break is the cause, and its fix the fix."""
    number, code = enclosing_loop(file, line)
    inside = (
        f" inside the loop at line {number}" + (f" ({whole_statement(code)})" if whole_statement(code) else "")
        if number
        else ""
    )
    what = "the loop's iterator" if number else "the values live there"
    words = f"{earlier.words}, and it cannot resume after that break{inside}: it cannot rebuild {what}"
    return dataclasses.replace(earlier, words=words)
