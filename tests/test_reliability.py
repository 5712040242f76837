"""Reliability under misuse and attack: interrupts at random moments, a dying kernel with ranks that
ignore SIGTERM, descendants that leave the run's session, what a launch exposes on the network, run
folder retention, an unresponsive hub proxy, and an untrustworthy tiny-model cache. Real processes,
real sockets on loopback."""

import _thread
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from _processes import leftovers

import tpu_lab as tl
from tpu_lab.host.processes import alive, pids_with_env
from tpu_lab.tp.launch import run_dirs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def earlier_modules_finished_cleaning_up():
    # Every test here counts this session's processes. An earlier module's (a Ray cluster's, another
    # launch's) may still be exiting on a loaded machine: wait for them, bounded, so these tests measure
    # their own launches whatever ran before them; a process that never exits still fails here, named.
    start = time.monotonic()
    while leftovers() and time.monotonic() - start < 120:
        time.sleep(0.5)
    assert leftovers() == [], f"processes an earlier test module left running: {leftovers()}"


def wait_until(predicate, seconds: float) -> float:
    """Poll until ``predicate()`` holds; returns the seconds it took (fails the test past ``seconds``)."""
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < seconds, f"still not true after {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - start


# ---- processes ------------------------------------------------------------------------------------


def test_interrupt_storm_leaves_nothing():
    # A cell interrupt is a KeyboardInterrupt in the kernel's main thread, at any moment of the launch:
    # before torchrun starts, while it starts (held back until the run is tracked), during rendezvous,
    # while ranks run. Trivial workers keep 50 rounds affordable.
    code = "import time\nprint('started', flush=True)\ntime.sleep(120)"
    moments = random.Random(14)
    for i in range(50):
        timer = threading.Timer(moments.uniform(0.0, 2.5), _thread.interrupt_main)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                tl.launch(code, nproc=2, on_output=lambda rank, line: None)
        finally:
            timer.cancel()
        assert leftovers() == [], f"processes left after interrupt {i}"


@pytest.mark.parametrize("ending", ["timeout", "normal exit"])
def test_a_ranks_detached_child_is_stopped(tmp_path, ending):
    # The grandchild starts its own session and drops every environment marker: only the process tree
    # (torchrun is a child subreaper) still leads to it.
    code = (
        "import subprocess, sys, time, pathlib\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],\n"
        "                         start_new_session=True, env={'PATH': '/usr/bin:/bin'})\n"
        f"pathlib.Path({str(tmp_path)!r}, 'pid').write_text(str(child.pid))\n"
        + ("time.sleep(300)\n" if ending == "timeout" else "")
    )
    if ending == "timeout":
        with pytest.raises(tl.LaunchError, match="timed out"):
            tl.launch(code, nproc=1, timeout=15, on_output=lambda rank, line: None)
    else:
        assert tl.launch(code, nproc=1, on_output=lambda rank, line: None).ok
    pid = int((tmp_path / "pid").read_text())
    wait_until(lambda: not alive(pid), 2)
    assert leftovers() == []


KERNEL = "import sys, tpu_lab as tl\ntl.launch(sys.argv[1], nproc=2, args=[sys.argv[2]])\n"
STUBBORN = (
    "import os, pathlib, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "pathlib.Path(sys.argv[1], 'ready' + os.environ['RANK']).write_text(str(os.getpid()))\n"
    "time.sleep(300)\n"
)


def test_kernel_death_with_ranks_ignoring_sigterm_ends_everything_within_5s(tmp_path):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, STUBBORN, str(tmp_path)], start_new_session=True)
    try:
        wait_until(lambda: (tmp_path / "ready0").exists() and (tmp_path / "ready1").exists(), 120)
        ranks = [int((tmp_path / f"ready{r}").read_text()) for r in (0, 1)]
        assert all(alive(pid) for pid in ranks) and len(leftovers()) >= 4  # kernel, torchrun, 2 ranks
        kernel.kill()  # SIGKILL: no atexit, no clean-up in the kernel
        kernel.wait()
        took = wait_until(lambda: leftovers() == [], 5)
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
    print(f"everything gone {took:.1f} s after the kernel died")


# CI once found a rank of a run whose torchrun had been SIGKILLed still alive just after tl.launch raised:
# a SIGKILL takes effect as the process exits, and one holding memory takes a while to exit.
HOLDER = "import time\nb = bytearray(1500 * 2**20)\nb[::4096] = b'\\1' * len(b[::4096])\nprint('up', flush=True)\ntime.sleep(60)"


def test_a_killed_run_is_gone_when_kill_run_returns():
    from tpu_lab.tp.launch.process import kill_run

    env = dict(os.environ, TPU_LAB_RUN_ID="holder")
    holders = [
        subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdout=subprocess.PIPE, start_new_session=True)
        for _ in range(2)
    ]
    try:
        for proc in holders:
            assert proc.stdout.readline() == b"up\n"
        assert kill_run("holder") == 2
        assert [proc.pid for proc in holders if alive(proc.pid)] == []  # 2 of 2 were still exiting before
    finally:
        for proc in holders:
            proc.kill()
            proc.wait()
            proc.stdout.close()


def test_launch_listens_on_loopback_only():
    ss = shutil.which("ss")
    if ss is None:
        pytest.fail("`ss` (iproute2) is needed for this check; .ci/run installs it")
    code = (
        "import time, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.ones(1); dist.all_reduce(t)\n"
        "print('ready', flush=True)\n"
        "time.sleep(3)\n"
        "dist.destroy_process_group()\n"
    )
    seen: list[str] = []
    ready: set[int] = set()

    def on_output(rank, line):
        if line == "ready":
            ready.add(rank)
        if ready == {0, 1} and not seen:  # both ranks joined gloo: every socket of the run is open
            ours = {f"pid={pid}," for pid in leftovers()}
            for proto in ("-ltnpH", "-lunpH"):
                out = subprocess.run([ss, proto], capture_output=True, text=True, check=True).stdout
                seen.extend(row for row in out.splitlines() if any(p in row for p in ours))

    assert tl.launch(code, nproc=2, on_output=on_output).ok
    assert len(seen) >= 3, seen  # the rendezvous store, and each rank's gloo listener
    local = [row.split()[3] for row in seen]
    assert all(addr.startswith(("127.", "[::1]")) for addr in local), f"listening beyond loopback: {seen}"


# ---- run folders ----------------------------------------------------------------------------------


def test_run_folders_keep_the_newest_and_live_ones(tmp_path):
    folders = []
    for i in range(9):
        folder = tmp_path / f"{run_dirs.PREFIX}{i:032x}.abc{i}"
        folder.mkdir()
        os.utime(folder, (1000 + i, 1000 + i))
        folders.append(folder)
    live_id = f"{1:032x}"  # an old run still in progress in another kernel: never removed
    holder = subprocess.Popen(["sleep", "30"], env={"TPU_LAB_RUN_ID": live_id})
    try:
        # alive is not enough: until exec, /proc shows the parent's environment, without the marker
        marker = f"TPU_LAB_RUN_ID={live_id}".encode()
        wait_until(lambda: holder.pid in pids_with_env(marker), 5)
        removed = run_dirs.prune_run_dirs(tmp_path, keep=run_dirs.KEEP_RUNS)
    finally:
        holder.kill()
        holder.wait()
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == sorted(f.name for f in [folders[1], *folders[-run_dirs.KEEP_RUNS :]])
    assert len(removed) == 9 - run_dirs.KEEP_RUNS - 1


def test_folders_of_a_killed_owner_are_pruned_and_a_live_owners_kept(tmp_path):
    # a Ray actor SIGKILLed (or its node lost) cannot remove its folder: the next actor on that node does
    prefix = "tpu_lab_ray_"
    gone = subprocess.Popen(["true"])
    gone.wait()
    folders = {}
    for name, pid in (("dead", gone.pid), ("live", os.getpid())):
        folders[name] = tmp_path / f"{prefix}{name}-node0-.x"
        folders[name].mkdir()
        (folders[name] / run_dirs.OWNER_FILE).write_text(str(pid))
    unowned = tmp_path / f"{prefix}unowned-node0-.x"  # no owner file (an older tpu_lab): left alone
    unowned.mkdir()
    assert run_dirs.prune_orphan_dirs(tmp_path, prefix) == [folders["dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([folders["live"].name, unowned.name])


def test_launches_keep_at_most_the_limit_and_failed_starts_leave_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    for i in range(run_dirs.KEEP_RUNS + 1):
        old = tmp_path / f"{run_dirs.PREFIX}{i:032x}.x"
        old.mkdir()
        os.utime(old, (1000 + i, 1000 + i))
    assert tl.launch("print('hi')", nproc=1, on_output=lambda rank, line: None).ok
    runs = sorted(tmp_path.glob(f"{run_dirs.PREFIX}*"))
    assert len(runs) == run_dirs.KEEP_RUNS
    before = set(tmp_path.iterdir())
    with pytest.raises(tl.errors.InvalidArgument):
        tl.launch("print(", nproc=1)

    def no_exec(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(subprocess, "Popen", no_exec)
    with pytest.raises(tl.LaunchError, match="Could not start the launch"):
        tl.launch("print(1)", nproc=1)
    assert set(tmp_path.iterdir()) <= before  # pruned, never added to
    assert leftovers() == []


# ---- the hub behind a proxy that never answers ----------------------------------------------------


@pytest.fixture
def silent_proxy():
    """A loopback listener that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


@pytest.mark.parametrize("entry", ["load_model", "tp_preflight"])
def test_unresponsive_proxy_is_a_clear_hub_unreachable_within_15s(silent_proxy, monkeypatch, tmp_path, entry):
    url, accepted = silent_proxy
    for var in (
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # nothing cached: the hub is the only source
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    call = {
        "load_model": lambda: tl.load_model("Qwen/Qwen3-0.6B", device="cpu"),
        "tp_preflight": lambda: tl.tp_preflight("Qwen/Qwen3-0.6B", 2),
    }
    start = time.monotonic()
    with pytest.raises(tl.errors.HubUnreachable) as e:
        call[entry]()
    took = time.monotonic() - start
    assert took < 15, f"{entry} took {took:.1f} s"
    assert accepted, "the check never reached the proxy"
    assert "proxy" in str(e.value) and e.value.fix


# ---- the tiny-model cache ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One real tiny model (kv 4) and another (kv 2), built in their own cache."""
    cache = tmp_path_factory.mktemp("cache")
    env = {"TPU_LAB_CACHE": str(cache)}
    return tl.tiny_model(environ=env), tl.tiny_model(kv_heads=2, environ=env)


def forge(source: Path, folder: Path, claimed: Path) -> None:
    """A copy of ``source`` whose marker claims to be ``claimed``'s build, with digests that match its files."""
    import json

    from tpu_lab.models.tiny import MARKER, _digests

    shutil.copytree(source, folder)
    marker = json.loads((claimed / MARKER).read_text())
    marker["files"] = _digests(folder)
    (folder / MARKER).write_text(json.dumps(marker))


def test_a_symlinked_cache_entry_with_a_forged_marker_is_refused(built, tmp_path):
    kv4, kv2 = built
    elsewhere = tmp_path / "elsewhere"
    forge(kv2, elsewhere, claimed=kv4)  # other weights, a perfect marker
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / kv4.name).symlink_to(elsewhere)
    with pytest.raises(tl.errors.EnvironmentProblem, match="points outside the cache") as e:
        tl.tiny_model(environ={"TPU_LAB_CACHE": str(cache)})
    assert "Delete" in e.value.fix


def test_a_cache_entry_whose_files_changed_is_refused(built, tmp_path):
    kv4, kv2 = built
    entry = tmp_path / "cache" / "models" / kv4.name
    shutil.copytree(kv4, entry)
    assert tl.tiny_model(environ={"TPU_LAB_CACHE": str(tmp_path / "cache")}) == entry  # an honest copy is fine
    shutil.copy(kv2 / "model.safetensors", entry / "model.safetensors")  # same marker, other weights
    with pytest.raises(tl.errors.EnvironmentProblem, match="do not match what was recorded"):
        tl.tiny_model(environ={"TPU_LAB_CACHE": str(tmp_path / "cache")})


def test_stale_staging_folders_are_removed_and_live_ones_kept(built, tmp_path):
    import fcntl

    kv4, _ = built
    models = tmp_path / "cache" / "models"
    shutil.copytree(kv4, models / kv4.name)
    stale, live, young = (models / f".{kv4.name}.{s}" for s in ("killed", "building", "new"))
    for folder in (stale, live, young):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"partial")
    for folder in (stale, live):
        os.utime(folder, (time.time() - 3600, time.time() - 3600))
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # a build in progress in another process holds its folder's lock
    try:
        tl.tiny_model(kv_heads=1, environ={"TPU_LAB_CACHE": str(tmp_path / "cache")})
    finally:
        os.close(holder)
    assert not stale.exists() and live.exists() and young.exists()


@pytest.mark.parametrize("files", [None, {}, [], "x", {"model.safetensors": 1}])
def test_a_cache_marker_without_valid_digests_is_never_trusted(built, tmp_path, files):
    import json

    from tpu_lab.models.tiny import MARKER

    kv4, _ = built
    entry = tmp_path / "cache" / "models" / kv4.name
    shutil.copytree(kv4, entry)
    (entry / "model.safetensors").write_bytes(b"\0" * 64)  # zeroed weights: must not load
    marker = json.loads((entry / MARKER).read_text())
    (entry / MARKER).write_text(json.dumps({**marker, "files": files}))
    with pytest.raises(tl.errors.EnvironmentProblem, match="records no file digests") as e:
        tl.tiny_model(environ={"TPU_LAB_CACHE": str(tmp_path / "cache")})
    assert "Delete" in e.value.fix
