"""%%tp_run through IPython's own shell, with real torchrun processes."""

import pytest
from _processes import leftovers
from IPython.core.error import UsageError

pytestmark = pytest.mark.slow


@pytest.fixture()
def ip(ipython_shell):
    return ipython_shell


def test_tp_run_streams_and_returns_the_result(ip, capsys):
    result = ip.run_cell_magic(
        "tp_run",
        "-n 2",
        "import os, tpu_lab as tl\nprint('hi from', os.environ['RANK'])\ntl.report(int(os.environ['RANK']))",
    )
    assert result.ok and result.values == [0, 1]
    assert ip.user_ns["_tp_result"] is result
    out = capsys.readouterr().out
    assert "[rank 0] hi from 0" in out and "[rank 1] hi from 1" in out


def test_tp_run_failure_is_a_clean_usage_error(ip):
    with pytest.raises(UsageError, match="Rank 0 failed") as e:
        ip.run_cell_magic("tp_run", "-n 2 --timeout 60", "import os\nif os.environ['RANK'] == '0':\n    1 / 0")
    assert "ZeroDivisionError" in str(e.value)
    assert ip.user_ns["_tp_result"].ranks[0].exit_code == 1
    assert leftovers() == []


def test_tp_run_bad_input(ip):
    with pytest.raises(UsageError, match="syntax error at line 1"):
        ip.run_cell_magic("tp_run", "-n 2", "print(")
    with pytest.raises(UsageError, match="nproc=0"):
        ip.run_cell_magic("tp_run", "-n 0", "print(1)")


def test_tp_run_panel(ip):
    panel = ip.run_cell_magic("tp_run", "-n 2 --panel", "import tpu_lab as tl\ntl.report('p')")
    assert panel.wait(120).values == ["p", "p"]


def test_watch_magic_shows_the_table(ip):
    ip.run_cell("import torch\nsq = torch.compile(lambda x: x * x, backend='eager')")
    table = ip.run_cell_magic("watch", "", "sq(torch.ones(2))\nsq(torch.ones(2, 2))")
    assert table.total_compiles == 2 and "x has 2 dimensions, was 1" in str(table)
    assert "<lambda> (cell In[" in str(table)  # a notebook cell's function is named by its cell
    assert ip.user_ns["_watch"].table.total_compiles == 2


def test_watch_magic_with_a_live_panel(ip):
    ip.run_cell("import torch\nplus = torch.compile(lambda x: x + 1, backend='eager')")
    assert (
        ip.run_cell_magic("watch", "--panel", "plus(torch.ones(2))\nplus(torch.ones(3, 3))") is None
    )  # the panel shows it
    assert ip.user_ns["_watch"].table.total_compiles == 2


def test_a_function_defined_again_by_a_re_run_cell_is_named_as_such(ipython_shell):
    ip = ipython_shell
    cell = "import torch\ndef redefined(x):\n    return x + 1\nrc = torch.compile(redefined, backend='eager')"
    ip.run_cell(cell, store_history=True)
    first = ip.run_cell_magic("watch", "", "rc(torch.ones(2))")
    assert first.rows[0].causes[0].words == "first compile"
    ip.run_cell(cell, store_history=True)  # the same cell run again: a new function, a new code object
    again = ip.run_cell_magic("watch", "", "rc(torch.ones(2))")
    words = again.rows[0].causes[0].words
    assert words.startswith("first compile: redefined was defined again in cell In[")
    assert "(a re-run cell), so its graphs are new" in words
