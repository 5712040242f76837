"""A compiler stance (``torch.compiler.set_stance``) leaves no record in Dynamo for the calls it runs eagerly or
makes raise, so the watch says which stance was in force and where the code set it (blind round 42's set_stance
tutorial scenario), in every form set_stance takes: a call, a with-block, a decorator, before the watch."""

import pytest
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl
from tpu_lab.compile.sources import dynamo_stance


def embed(text):
    return text.float().mean(-1)


def line_of(text):
    return next(i for i, line in enumerate(open(__file__), 1) if line.strip() == text)


@pytest.fixture(autouse=True)
def default_stance():
    torch._dynamo.reset()
    yield
    torch.compiler.set_stance("default")


def test_calls_a_stance_ran_eagerly_or_made_raise_are_said_with_where_the_stance_was_set(dynamo):
    f = torch.compile(embed, backend="eager")
    with tl.watch() as w:
        f(torch.ones(2, 12))
        torch.compiler.set_stance("eager_on_recompile")
        f(torch.ones(2, 20))
        f(torch.ones(2, 33))
        torch.compiler.set_stance("fail_on_recompile")
        with pytest.raises(RuntimeError, match="fail_on_recompile"):
            f(torch.ones(2, 40))
        torch.compiler.set_stance("default")
        f(torch.ones(2, 40))
    check_against_dynamo(w, dynamo)
    eager_line = line_of('torch.compiler.set_stance("eager_on_recompile")')
    assert w.table.total_compiles == 2  # the calls under the two stances compiled nothing, and Dynamo recorded none
    eager, fail = w.table.stances
    assert eager == (
        f'torch.compiler.set_stance("eager_on_recompile") at test_watch_stances.py:{eager_line} was in force during '
        "this watch: while it was, a call that needed a new graph ran eagerly instead, every time, and Dynamo keeps "
        "no record of such calls, so they are not in this table"
    )
    assert fail.startswith(f'torch.compiler.set_stance("fail_on_recompile") at test_watch_stances.py:{eager_line + 3} ')
    assert "raised RuntimeError" in fail
    text = str(w)
    assert eager in text and fail in text and w.to_dict()["stances"] == [eager, fail]


def test_a_with_block_a_decorator_and_a_stance_set_before_the_watch_are_heard_each_once():
    f = torch.compile(embed, backend="eager")

    @torch.compiler.set_stance("force_eager")
    def probe(x):
        return f(x)

    with tl.watch() as w:
        with torch.compiler.set_stance("force_eager"):
            f(torch.ones(3, 4))
        for n in (5, 6):
            probe(torch.ones(3, n))
    assert w.table.total_compiles == 0
    assert len(w.table.stances) == 2 and all("ran eagerly: nothing compiled" in s for s in w.table.stances)

    torch.compiler.set_stance("eager_then_compile")
    with tl.watch() as w:
        f(torch.ones(2, 4))
        f(torch.ones(2, 5))
    (said,) = w.table.stances
    assert said.startswith('torch.compiler.set_stance("eager_then_compile"), set before this watch, was in force')
    assert w.table.total_compiles == 1  # the first call ran eagerly

    torch.compiler.set_stance("default")
    with tl.watch() as w:
        torch.compiler.set_stance(force_backend="eager")
        f(torch.ones(2, 9))
        torch.compiler.set_stance("default")
    (said,) = w.table.stances
    assert 'set_stance(force_backend="eager")' in said and "used the eager backend" in said


def test_a_watch_without_a_stance_says_nothing_of_stances():
    f = torch.compile(embed, backend="eager")
    with tl.watch() as w:
        f(torch.ones(2, 3))
    assert w.table.stances == () and "set_stance" not in str(w)


def test_contract_the_stance_setter_every_set_stance_goes_through():
    """set_stance (a call, a with-block, a decorator) sets Dynamo's stance through
    ``torch._dynamo.decorators._set_stance``, and ``eval_frame._stance`` holds it: a torch that moves either
    fails here, naming its version."""
    from torch._dynamo import decorators, eval_frame

    tl.watch().__enter__().__exit__(None, None, None)  # installs the hook
    assert getattr(decorators._set_stance, "_tpu_lab", False), torch.__version__
    mark = dynamo_stance.mark()
    with torch.compiler.set_stance("eager_on_recompile"):
        assert eval_frame._stance.stance == "eager_on_recompile", torch.__version__
        assert dynamo_stance.current().stance == "eager_on_recompile"
    assert dynamo_stance.current() is None
    heard = [s.stance for s in dynamo_stance.heard_since(mark, __import__("threading").get_ident())]
    assert heard[0] == "eager_on_recompile" and heard[-1] == "default", (torch.__version__, heard)
