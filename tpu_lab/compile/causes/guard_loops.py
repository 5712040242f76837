"""Guards on a loop's iterator, in words: Dynamo checks how far a ``for`` loop's iterator has gone (items
left, the range left, a counter's next value) when a graph break inside the loop carries the iterator over;
each resume position is a graph of its own. Strings (and the user's source lines) in, ``Cause`` out."""

from __future__ import annotations

import linecache
import re

from tpu_lab.compile.causes.cause import Cause, Failure

# every form Dynamo's guards take on an iterator (torch/_dynamo/guards.py: TUPLE_ITERATOR_LEN,
# RANGE_ITERATOR_MATCH, COUNT_ITERATOR_MATCH, LIST_REVERSEITERATOR_LEN, and an item read ahead)
_ITERATOR = re.compile(
    r"___(?:tuple_iterator_len|tuple_iterator_getitem|normalize_range_iter|normalize_count_iter|"
    r"list_reverseiterator_len|list_reverseiterator_backing_list)\("
)
_FOR = re.compile(r"^(?P<indent>\s*)(?:async\s+)?for\b.+\bin\b.+:")


def iterator_words(f: Failure) -> Cause | None:
    """The cause for a failed guard on a loop's iterator; None for any other guard."""
    if not _ITERATOR.search(f.guard):
        return None
    path, _, line = f.where.rpartition(":")
    at = int(line) if line.isdigit() else 0
    loop = _loop_line(path, at) if at else 0
    where = f" at line {loop}" if loop else ""
    after = f" after the graph break at line {at}" if at else " after a graph break inside it"
    return Cause(
        "loop_position",
        f"the loop{where} resumes at another position{after} (the graph break is inside the loop, so Dynamo "
        "compiles the rest of the loop once per count of iterations left: each is a graph of its own)",
        f.guard,
        "move the graph break out of the loop: compute every exit with tensor ops and pick one after the loop "
        "(torch.where on a mask of exits), or express the early exit with torch.cond",
        f.where,
    )


def _loop_line(path: str, at: int) -> int:
    """The line of the innermost ``for`` loop around line ``at`` of ``path`` (0 where none is found); a path
    Dynamo shortened is matched to a file already read for a traceback."""
    if not linecache.getline(path, at):
        path = next((p for p in list(linecache.cache) if p.endswith(path)), path)
    body = linecache.getline(path, at)
    indent = len(body) - len(body.lstrip())
    for n in range(at - 1, max(at - 200, 0), -1):
        text = linecache.getline(path, n)
        if not text.strip():
            continue
        depth = len(text) - len(text.lstrip())
        if depth < indent:
            if _FOR.match(text):
                return n
            if text.lstrip().startswith(("def ", "async def ", "class ")):
                return 0
            indent = depth
    return 0
