from pathlib import Path

from tpu_lab.tp.launch.torchrun_command import LaunchSpec, build_command
from tpu_lab.tp.results.launch_result import LaunchResult


def test_launch_result_knows_its_run_id():
    # Process counts in a notebook must be scoped to one run: run_pids(result.run_id), not every launch.
    spec = LaunchSpec(script=Path("/r/w.py"), nproc=2, run_dir=Path("/r"), run_id="abc123", port=29555)
    argv, env = build_command(spec, {})
    result = LaunchResult(tuple(argv), Path("/r"), 1.0, ())
    assert result.run_id == "abc123" and "abc123" in env.values()
    assert LaunchResult(("python",), Path("/r"), 1.0, ()).run_id is None
