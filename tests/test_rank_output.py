"""A rank's bytes speak only for that rank: over ssh a rank's text cannot forge another rank's line or
the host runner's control lines; a \\r progress bar shows its newest state, not a flood; and the default
printer shows terminal escapes and control characters harmlessly. Real torchrun, a real loopback sshd."""

import pytest

import tpu_lab as tl
from tpu_lab.tp.launch.runner import shown
from tpu_lab.tp.launch.runners import ssh_wire

pytestmark = pytest.mark.slow

FORGER = r"""
import os, sys, time
rank = int(os.environ['RANK'])
if rank == 0:
    sys.stdout.write('hello\r1\tFORGED LINE FROM RANK 1\n')
    sys.stdout.write('\x1etpu_lab {"kind": "result", "ok": false}\n')
    sys.stdout.write('x\r\x1etpu_lab {"kind": "error", "message": "forged"}\n')
    for i in range(200):
        sys.stdout.write(f'\rprogress {i}%')
    sys.stdout.write('\n')
    sys.stdout.flush()
time.sleep(0.5)
print(f'rank {rank} done', flush=True)
"""


def check(lines):
    assert (1, "FORGED LINE FROM RANK 1") not in lines
    assert all(not text.startswith("FORGED") for rank, text in lines if rank == 1)
    mine = [text for rank, text in lines if rank == 0]
    assert "progress 199%" in mine and not any("progress 5%" in t for t in mine)  # the newest state only
    assert [t for r, t in lines if r == 1] == ["rank 1 done"]


def test_one_host_a_progress_bar_is_its_newest_state():
    lines = []
    result = tl.launch(FORGER, nproc=2, on_output=lambda rank, line: lines.append((rank, line)))
    assert result.ok
    check(lines)


def test_over_ssh_a_rank_cannot_forge_another_ranks_line_or_a_control_line(sshd):
    lines = []
    result = tl.launch(
        FORGER, nproc=1, hosts=["127.0.0.2", "127.0.0.3"], remote=sshd.remote, timeout=240,
        on_output=lambda rank, line: lines.append((rank, line)),
    )  # fmt: skip
    assert result.ok  # a forged "result" or "error" control line would have ended or failed the run
    check(lines)


def test_the_wire_round_trips_any_text_as_one_line():
    for text in ("a\rb", "1\tx", "\x1etpu_lab {}", "tail\n", "\x00\x1b[2J"):
        line = ssh_wire.output_line(3, text)
        assert "\n" not in line and "\r" not in line and not line.startswith(ssh_wire.CONTROL)
        assert ssh_wire.parse(line) == ("line", (3, text))


def test_the_printer_shows_escapes_harmlessly():
    assert shown("\x1b[2J\x1b[31mred\x1b[0m") == "red"
    assert shown("a\x00b\x07c") == "a\\x00b\\x07c"
    assert shown("tab\tkept") == "tab\tkept"


def test_a_rank_that_prints_a_lot_at_once_has_every_line_delivered():
    # the runner reads each rank's log a chunk at a time (benchmarks/rank_output_memory.py: memory)
    code = "import sys\nfor i in range(200_000): sys.stdout.write(f'{i:07d} ' + 'x' * 60 + '\\n')\n"
    seen = []
    result = tl.launch(code, nproc=1, on_output=lambda rank, line: seen.append(line) if rank == 0 else None)
    assert result.ok and len(seen) == 200_000 and seen[-1].startswith("0199999 ")
    assert len(result.ranks[0].output.splitlines()) <= 200  # the result keeps a tail
