"""A watch and no_recompiles() hear only the code that opened them: across generators suspended inside
them, asyncio tasks that run during an await, threads, and entries and exits out of order; and an
allow= function that raises."""

import asyncio
import contextlib
import threading

import pytest
import torch

import tpu_lab as tl


def compiled():
    def add_one(x):
        return x + 1

    return torch.compile(add_one, backend="eager")


def compiles_in(w):
    return sum(r.compiles for r in w.table)


def test_a_generator_suspended_inside_no_recompiles_does_not_refuse_its_callers_compiles(dynamo):
    outside, inside = compiled(), compiled()

    def steps():
        with tl.no_recompiles():
            yield "warm"
            inside(torch.ones(3))  # runs when the generator is resumed: refused

    g = steps()
    next(g)
    assert outside(torch.ones(2)).tolist() == [2.0, 2.0]  # the caller, outside the block: compiles freely
    with pytest.raises(tl.RecompileError, match="add_one"):
        next(g)


def test_a_watch_in_a_generator_counts_only_while_the_generator_runs(dynamo):
    outside, inside = compiled(), compiled()

    def steps():
        with tl.watch() as w:
            yield w
            inside(torch.ones(3))
            yield w

    g = steps()
    w = next(g)
    outside(torch.ones(2))
    assert compiles_in(w) == 0
    next(g)
    assert compiles_in(w) == 1


def test_asyncio_another_tasks_compile_during_an_await_is_neither_counted_nor_refused(dynamo):
    mine, theirs = compiled(), compiled()
    seen = {}

    async def watcher(started, done):
        with tl.watch() as w, tl.no_recompiles(allow=1):
            mine(torch.ones(2))
            started.set()
            await done.wait()  # the other task compiles now
        seen["w"] = w

    async def other(started, done):
        await started.wait()
        theirs(torch.ones(4))  # would raise RecompileError if the other task's block heard it
        done.set()

    async def main():
        started, done = asyncio.Event(), asyncio.Event()
        await asyncio.gather(watcher(started, done), other(started, done))

    asyncio.run(main())
    (row,) = seen["w"].table
    assert row.compiles == 1 and "f32[2]" in str(row.signature)


def test_a_watch_exited_from_another_thread_stops_counting(dynamo):
    f = compiled()
    w = tl.watch()
    w.__enter__()
    t = threading.Thread(target=w.__exit__, args=(None, None, None))
    t.start()
    t.join()
    f(torch.ones(2))
    assert compiles_in(w) == 0


def test_exiting_a_watch_never_entered_is_a_clear_error_and_the_watch_still_works(dynamo):
    f = compiled()
    w = tl.watch()
    with pytest.raises(tl.TpuLabError, match="without being entered"):
        w.__exit__(None, None, None)
    with w:
        f(torch.ones(2))
    assert compiles_in(w) == 1
    with pytest.raises(tl.TpuLabError, match="without being entered"):
        tl.no_recompiles().__exit__(None, None, None)


def test_a_contextmanager_around_a_watch_counts_its_callers_block(dynamo):
    f = compiled()

    @contextlib.contextmanager
    def watching():
        with tl.watch() as w:
            yield w

    with watching() as w:
        f(torch.ones(2))
    assert compiles_in(w) == 1


def test_a_watch_entered_in_one_call_and_exited_in_another_counts_in_between(dynamo):
    # what a notebook does with w.__enter__() in one cell and w.__exit__() in a later one
    f = compiled()
    w = tl.watch()

    def cell_one():
        w.__enter__()

    def cell_two():
        f(torch.ones(2))

    def cell_three():
        w.__exit__(None, None, None)

    cell_one()
    cell_two()
    cell_three()
    assert compiles_in(w) == 1


def test_a_compile_in_another_thread_is_left_out_and_said_so(dynamo):
    f = compiled()
    with tl.watch() as w:
        t = threading.Thread(target=f, args=(torch.ones(2),))
        t.start()
        t.join()
    assert compiles_in(w) == 0
    assert w.table.elsewhere == 1


def test_an_allow_function_that_raises_is_named_not_dynamos_internal_error(dynamo):
    f = compiled()

    def allow(compile):
        return compile.function.nmae == "warmup"  # a typo: AttributeError

    refused = pytest.raises(tl.RecompileError, match="allow= function of no_recompiles\\(\\) raised AttributeError")
    with refused as e, tl.no_recompiles(allow=allow):
        f(torch.ones(2))
    assert "return True or False" in e.value.fix
