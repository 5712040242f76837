"""A size Dynamo traced symbolic and then fixed to one value is named by the line Dynamo heard fix it (the shape
environment's own record), not guessed from the source: checked against Dynamo's records, with the fix as printed
applied; and the log it is heard from is switched on only inside watched compiles, printing nothing new."""

import inspect
import json
import logging
import textwrap

import torch
from _dynamo_oracle import check_against_dynamo
from test_trace import run_scenario

import tpu_lab as tl


class FNOGrid(torch.nn.Module):  # neuraloperator's FNO2d: a coordinate grid built per input resolution
    def __init__(self, arange: bool = False):
        super().__init__()
        self.fc0, self.arange = torch.nn.Linear(3, 4), arange

    def forward(self, x):
        b, sx, sy = x.shape[0], x.shape[1], x.shape[2]
        if self.arange:  # the printed fix: a tensor op that takes the size as it goes
            gridx = (torch.arange(sx) / (sx - 1)).reshape(1, sx, 1, 1).repeat(b, 1, sy, 1)
            gridy = (torch.arange(sy) / (sy - 1)).reshape(1, 1, sy, 1).repeat(b, sx, 1, 1)
        else:
            gridx = torch.linspace(0, 1, sx).reshape(1, sx, 1, 1).repeat(b, 1, sy, 1)
            gridy = torch.linspace(0, 1, sy).reshape(1, 1, sy, 1).repeat(b, sx, 1, 1)
        return self.fc0(torch.cat((x, gridx, gridy), dim=-1))


def _resolutions(model):
    compiled = torch.compile(model, backend="aot_eager")
    with tl.watch() as w:
        for res in (16, 32, 24, 20):  # FNO's zero-shot super-resolution: one model, several grids
            compiled(torch.randn(2, res, res, 1))
    return w


def test_the_line_that_fixed_a_size_is_the_one_dynamo_heard_and_its_fix_works(dynamo):
    w = _resolutions(FNOGrid())
    check_against_dynamo(w, dynamo, also=("at index 2",))  # both sides of the grid change at once
    line = inspect.getsourcelines(FNOGrid.forward)[1] + 6  # gridx = torch.linspace(0, 1, sx)...
    causes = [c for r in w.table for c in r.causes if c.kind == "size"]
    told = "\n".join(f"{c.words} :: {c.fix}" for c in causes)
    assert causes and all("Dynamo fixed it to" in c.words for c in causes), told
    assert f"at line {line} (gridx = torch.linspace(0, 1, sx)" in told, told
    assert f"at line {line + 1} (gridy = torch.linspace(0, 1, sy)" in told, told
    assert "as int(x.shape[1]) or a loop over range" not in told, told  # no guess where Dynamo said which line
    assert all("torch.arange" in c.fix and "mark_dynamic would raise" in c.fix for c in causes), told

    torch._dynamo.reset()
    fixed = _resolutions(FNOGrid(arange=True))
    assert fixed.table.total_compiles < w.table.total_compiles, (fixed.table.to_text(), w.table.to_text())


def test_the_shape_log_is_on_only_inside_a_watched_compile_and_prints_nothing_new(dynamo, capfd):
    log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = log.level
    _resolutions(FNOGrid())
    assert log.level == level and not log.isEnabledFor(logging.INFO)  # back as it was, for every later compile
    assert "set_replacement" not in capfd.readouterr().err  # the INFO records heard were not printed

    torch._dynamo.reset()
    torch._logging.set_logs(dynamic=logging.INFO)  # the user's own TORCH_LOGS=dynamic
    try:
        _resolutions(FNOGrid())
        assert "set_replacement" in capfd.readouterr().err  # still printed for them
    finally:
        torch._logging.set_logs()


def test_contract_the_shape_environment_reads_the_pins_rely_on():
    """The shape environment's size-fixing log message and its stacks, checked for their shape in this torch:
    a change fails here, naming the version, where a watch would otherwise say no line (never a wrong one)."""
    from torch.fx.experimental import symbolic_shapes

    from tpu_lab.compile.sources import dynamo_pins

    version = torch.__version__
    source = inspect.getsource(symbolic_shapes.ShapeEnv._set_replacement)
    assert f'"{dynamo_pins._SET}"' in source, f"torch {version}: the set_replacement log message changed"
    assert "specialization_stacks[source]" in source, f"torch {version}: the specialization stacks moved"
    assert hasattr(torch._guards.TracingContext, "try_get"), version


_GRID_RUN = textwrap.dedent(
    """
    import json, sys, torch
    import tpu_lab as tl

    def grid(x):  # FNO's coordinate grid, per input resolution
        b, sx = x.shape[0], x.shape[1]
        gridx = torch.linspace(0, 1, sx).reshape(1, sx, 1).repeat(b, 1, 1)
        return torch.cat((x, gridx), dim=-1)

    with tl.watch() as w:
        g = torch.compile(grid, backend="eager")
        for res in (16, 32, 24):
            g(torch.randn(2, res, 1))
    json.dump(w.to_dict(), open(sys.argv[1], "w"))
    """
)


def test_a_log_read_later_names_the_same_line_as_the_live_watch(tmp_path):
    """TORCH_TRACE keeps the shape environment's record of each size it fixed, with the user's stack: the
    table read from the log says the same as the live one."""
    run_scenario(tmp_path / "trace", tmp_path / "live.json", _GRID_RUN)
    live = json.loads((tmp_path / "live.json").read_text())
    offline = tl.read_trace(tmp_path / "trace").runs[0][0].to_dict()
    said = [[r["cause"] for r in t["rows"] if "Dynamo fixed it to" in r["cause"]] for t in (offline, live)]
    assert said[1] and said[0] == said[1], said
    assert "at line 7 (gridx = torch.linspace(0, 1, sx).reshape(1, sx, 1).repeat(b, 1, 1))" in said[1][0], said
