"""Files a launch reads back from its run folder are the ranks' to write, so the user's code can put
anything there: each is checked (size, depth, shape) before the kernel uses it, and a rank's identity
is what the launcher gave it, not an environment variable its code can change."""

import json

import pytest

import tpu_lab as tl
from tpu_lab.tp.results.checked_files import MAX_DEPTH, checked_compile_file, checked_status, read_checked
from tpu_lab.tp.results.rank_compiles import RunCompiles


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_file_nested_too_deep_or_too_large_or_not_json_is_refused_with_the_reason(tmp_path):
    deep = tmp_path / "rank0.value.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)  # json.loads alone raises RecursionError on this
    assert read_checked(deep)[0] is None and "not the JSON" in read_checked(deep)[1]
    deeper = tmp_path / "rank1.value.json"
    deeper.write_text(json.dumps(nested(MAX_DEPTH + 5)))
    assert read_checked(deeper) == (None, f"rank1.value.json is nested more than {MAX_DEPTH} levels deep")
    fine = tmp_path / "rank2.value.json"
    fine.write_text(json.dumps({"loss": [1.5, 2.0]}))
    assert read_checked(fine) == ({"loss": [1.5, 2.0]}, "")
    assert read_checked(tmp_path / "absent.json") == (None, "")


@pytest.mark.parametrize(
    "status",
    [{"exit_code": 1, "error": {"nested": "dict"}}, {"exit_code": True}, {"exit_code": "0"}, [0], "x", None],
)
def test_a_status_of_another_shape_never_reaches_the_kernel_as_is(status):
    checked = checked_status(status)
    if checked is not None:
        assert isinstance(checked["error"], str) and checked["exit_code"] == 1
    else:
        assert not (isinstance(status, dict) and type(status.get("exit_code")) is int)


FORGED = [
    {"table": {"rows": [{"function": 5, "compiles": "many"}, "row", {"function": "f", "compiles": "3"}]}},
    {"table": {"rows": [{"function": "f", "signature": "x", "compiles": 2, "causes": ["a", {"words": 7}]}]}},
    {"table": {"graph_breaks": [1, {"words": None, "count": -3}]}, "compiling": "now", "last": [1]},
    {"compiles": "2", "last": {"function": {"x": 1}, "inputs": 3}, "error": {"e": 1}, "tpu": [1]},
    {"table": "rows"},
    [1, 2],
]


@pytest.mark.parametrize("data", FORGED)
def test_a_forged_compile_file_gives_a_table_never_a_crash(data):
    merged = RunCompiles.from_files({0: data, 1: {"table": {"rows": []}}}, 2)
    str(merged), merged.to_dict(), merged.to_html()  # renders whole
    checked = checked_compile_file(data)
    for row in (checked or {}).get("table", {}).get("rows", []):
        assert isinstance(row["function"], str) and isinstance(row["compiles"], int)
        assert all(isinstance(c["words"], str) for c in row["causes"])


@pytest.mark.slow
def test_a_rank_that_changes_RANK_still_files_its_value_under_its_own_rank():
    code = (
        "import os, tpu_lab as tl\n"
        "me = os.environ['RANK']\n"
        "os.environ['RANK'] = '1' if me == '0' else '0'  # the user's code changes it\n"
        "tl.report(f'from {me}')\n"
    )
    result = tl.launch(code, nproc=2, on_output=lambda rank, line: None)
    assert result.ok and result.values == ["from 0", "from 1"]


@pytest.mark.slow
def test_a_report_too_large_is_refused_in_the_rank_with_the_fix():
    code = "import tpu_lab as tl\ntl.report('x' * (17 * 2**20))\n"
    with pytest.raises(tl.LaunchError) as e:
        tl.launch(code, nproc=1, on_output=lambda rank, line: None)
    assert "MiB" in str(e.value) and "report its path" in str(e.value)
