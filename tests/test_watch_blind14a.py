"""tl.watch() checked blind, fourteenth round (s9, s9b, s9c): a RoPE helper caches cos/sin in a module-level
dict keyed by ``(x.shape[1], x.shape[-1])`` and fills it itself on a miss, inside a compiled ``step`` called
at growing sequence lengths, with a small recompile limit, a ``print(x.shape)`` in it, and in notebook cells
whose ``step`` is defined again. What the reviewer found wrong is asserted right here; every run is also
checked against Dynamo's own records and the watch's invariants."""

import re

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"
_rope_cache: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def rotary(x):
    key = (x.shape[1], x.shape[-1])
    if key not in _rope_cache:  # the usual lazy cache: filled on a miss, inside the compiled code
        inv = 1.0 / (10000 ** (torch.arange(0, x.shape[-1], 2, dtype=torch.float32) / x.shape[-1]))
        freqs = torch.outer(torch.arange(x.shape[1], dtype=torch.float32), inv)
        emb = torch.cat([freqs, freqs], -1)
        _rope_cache[key] = (emb.cos(), emb.sin())
    cos, sin = _rope_cache[key]
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


def step(x):
    return rotary(x) * 2


def step_printing(x):
    print(x.shape)
    return rotary(x) * 2


def _marks_dynamic(text: str) -> list[str]:
    """Lines that tell the user to mark a size dynamic (or compile dynamic=True) as a way out."""
    told = r"torch\._dynamo\.mark_dynamic\(x|mark x dim 1 dynamic|dynamic=True|mark the function's own input"
    return [line for line in text.splitlines() if re.search(told, line)]


def test_a_lazily_filled_global_cache_keyed_by_size_is_named_and_never_told_to_mark_dynamic(dynamo):
    _rope_cache.clear()
    f = torch.compile(step, backend=BACKEND, recompile_limit=3)
    with tl.watch() as w:
        for n in (4, 8, 12, 16):
            f(torch.randn(2, n, 8))
    check_against_dynamo(w, dynamo, also=("___dict_contains((4, 8)", "not G['_rope_cache']", "len(G['_rope_cache'])"))
    # mark_dynamic(x, 1) raises ConstraintViolationError here: the size is hashed into the cache's key
    assert _marks_dynamic(str(w)) == []
    (limit,) = [c for r in w.table for c in r.causes if c.kind == "limit"]
    assert limit.fix.startswith("pad to a few sizes (buckets)")
    causes = [c for r in w.table for c in r.causes]
    (key,) = [c for c in causes if c.kind == "dict_keys"]
    assert key.words.startswith("_rope_cache (a global dict) gained the key (4, 8) (absent when this graph")
    assert "pass the dict with the same keys" not in key.fix
    assert key.fix.startswith("keep the cached values in one tensor computed for the longest size")
    size = next(c for c in causes if c.kind == "size")
    assert "the code uses x.shape[1] as a dict key" in size.words
    grows = [c for c in causes if c.kind == "length"]
    assert grows and all("(a global dict: a cache filled on a miss) grows at every compile" in c.words for c in grows)


def test_a_print_of_a_size_is_not_sent_to_reorderable_logging_and_no_part_marks_the_key_dynamic(dynamo):
    _rope_cache.clear()
    f = torch.compile(step_printing, backend=BACKEND)
    with tl.watch() as w, torch._dynamo.config.patch(recompile_limit=3):
        for n in (4, 8, 12, 16):
            f(torch.randn(2, n, 8))
    check_against_dynamo(w, dynamo, also=("___dict_contains((4, 8)", "not G['_rope_cache']", "len(G['_rope_cache'])"))
    (brk,) = w.table.breaks
    # Dynamo reorders a logging call only for tensors, constants and string formats (can_reorder_logs)
    assert "reorderable_logging_functions" not in brk.fix
    assert "if not torch.compiler.is_compiling(): print(...)" in brk.fix
    # the part before the print made x dim 1 dynamic; marking it would raise in the part after it
    assert _marks_dynamic(str(w)) == []
    before = next(c for r in w.table if "after the graph break" not in r.function for c in r.causes if c.kind == "size")
    assert "the code after the graph break uses x.shape[1] as a dict key" in before.fix


_CELL = (
    "import torch\nfrom test_watch_blind14a import rotary\n"
    "def step(x):\n    return rotary(x) * 2\nrun_{0} = torch.compile(step, backend='eager')"
)


def _cell(words: str) -> list[int]:
    return [int(n) for n in re.findall(r"In\[(\d+)\]", words)]


def test_a_re_run_cell_is_named_in_the_order_the_cells_ran(ipython_shell, dynamo):
    ip = ipython_shell
    _rope_cache.clear()
    ip.run_cell(_CELL.format("old"), store_history=True)
    ip.run_cell(_CELL.format("new"), store_history=True)  # the cell defining step, run again
    # both definitions compile for the first time in one watch: the older one first
    ip.run_cell_magic("watch", "", "run_old(torch.randn(1, 4, 8))\nrun_new(torch.randn(1, 4, 8))")
    w = ip.user_ns["_watch"]
    check_against_dynamo(w, dynamo)
    old, new = (r.causes[0].words for r in w.table)
    assert old == "first compile"
    assert "defined again in cell" in new and _cell(new)[0] > _cell(new)[1]


def test_the_older_definition_compiling_after_the_newer_is_not_called_a_re_run(ipython_shell, dynamo):
    ip = ipython_shell
    _rope_cache.clear()
    ip.run_cell(_CELL.format("old"), store_history=True)
    ip.run_cell(_CELL.format("new"), store_history=True)
    # the newer definition compiles first, then a reference the notebook still holds to the older one
    ip.run_cell_magic("watch", "", "run_new(torch.randn(1, 4, 8))\nrun_old(torch.randn(1, 4, 8))")
    w = ip.user_ns["_watch"]
    check_against_dynamo(w, dynamo)
    old = w.table.rows[1].causes[0].words
    assert "(a re-run cell)" not in old
    older, newer = _cell(old)
    assert older < newer and old.startswith(f"first compile: the step defined in cell In[{older}], an older")
