"""A first compile in words: after torch._dynamo.reset(), a function a re-run notebook cell defined again
(its graphs are new), a backward graph compiled autograd captured; a backward graph's row (compiled lazily,
or with its forward); and compiled autograd's own graphs told as such wherever they show (the sizes it marks dynamic itself, the break at ``loss.backward()`` that hands
the backward to it). Pure: names in, words out."""

from __future__ import annotations

import re

from tpu_lab.compile.sources.frames import FunctionKey, where_label

CA_FIRST = (
    "first compile: a backward graph compiled autograd captured (torch._dynamo.config.compiled_autograd): the "
    "autograd graph of a backward call, compiled as a graph of its own; a new one where that graph's structure "
    "or sizes differ"
)
EAGER_BACKWARD = "backward, with its forward"
"""The trigger of a backward graph AOTAutograd compiled together with its forward (no callback of its own)."""
EAGER_BACKWARD_WORDS = (
    "backward graph, compiled together with this forward graph: AOTAutograd compiles the backward of a graph "
    "with dynamic sizes at once, inside the forward's compile (its time is in the forward's)"
)
CA_MARK = "compiled autograd"
"""Who marked a compiled-autograd graph's sizes dynamic: compiled autograd itself, never the user's code."""
CA_BACKWARD_FIX = (
    "expected with compiled autograd on: the break at loss.backward() hands the backward to compiled autograd, "
    "which compiles it as its own graphs (the CompiledAutograd rows); moving backward() out of the compiled "
    "function removes the break, but compiled autograd then captures no backward"
)


def backward_words(trigger: str) -> str:
    """A backward graph's row: compiled lazily, at the first backward pass, or with its forward."""
    if trigger == EAGER_BACKWARD:
        return EAGER_BACKWARD_WORDS
    return "backward graph, compiled at the first backward pass through this forward graph"


def is_compiled_autograd(function: FunctionKey) -> bool:
    """The graph compiled autograd builds for a backward call (``CompiledAutograd0.forward``, code generated
    by torch.fx: ``<eval_with_key>.4``)."""
    return bool(re.fullmatch(r"CompiledAutograd\d+\.forward", function.name)) and function.filename.startswith(
        "<eval_with_key>"
    )


def first_compile_words(function: FunctionKey, earlier: FunctionKey | None, *, after_reset: bool) -> str:
    """A first compile; a function a re-run notebook cell defined again says so (``earlier``: the previous
    definition, seen compiling): Dynamo keys graphs by code object, so the new definition starts afresh."""
    if after_reset:
        return "first compile after torch._dynamo.reset()"
    cell, before = (where_label(k.filename, k.line).split(",")[0] for k in (function, earlier or function))
    if is_compiled_autograd(function):  # compiled autograd's graph of one backward call: new code each time
        return CA_FIRST
    if earlier is None or not (cell.startswith("cell ") and before.startswith("cell ")):
        return "first compile"
    name = function.name
    if _run_count(cell) < _run_count(before):  # the older definition, still called, compiling after the newer one
        return (
            f"first compile: the {name} defined in {cell}, an older definition than the {name} in {before} "
            f"(defined again there): each definition compiles graphs of its own, neither reuses the other's"
        )
    return f"first compile: {name} was defined again in {cell} (a re-run cell), so its graphs are new; those of the {name} in {before} are not reused"


def _run_count(cell: str) -> int:
    """IPython's execution count in a cell's label (``cell In[4]`` -> 4); 0 where it shows none."""
    m = re.search(r"\[(\d+)\]", cell)
    return int(m[1]) if m else 0
