"""A launch on a Ray cluster: one bundle per host reserved in a placement group before anything starts,
one Ray actor per bundle (``runners._ray_host.RayHost``) that runs that host's torchrun, one labelled
stream and one stop.

``start_ray()`` checks the arguments and the code, attaches to the cluster (``runners.ray_cluster``:
bounded, clear errors), checks the cluster has enough hosts, reserves them, starts the actors and waits
until every host has checked itself (tpu_lab and torch importable, the same versions, chips against
nproc); a host that fails is named and nothing starts anywhere. Then every host gets its torchrun argv
(the per-node builder: static rendezvous on the first host). ``RayLaunch.wait()`` polls every host
(bounded replies, no port of its own), labels each line with host and rank, and stops everything when a
rank fails, a host is lost, time runs out, or on an interrupt: every actor stops its processes, then the
actors are killed and the placement group removed. A dead kernel (the Ray driver) takes its actors and
placement group with it (Ray's fate sharing), and torchrun dies with its actor.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_lab._checks import environment, optional_callable, positive_int, positive_seconds, string_args
from tpu_lab.errors import LaunchError
from tpu_lab.tp import host_results, wire
from tpu_lab.tp.command import LaunchSpec
from tpu_lab.tp.process import OutputCallback
from tpu_lab.tp.remote_command import go_message
from tpu_lab.tp.results import LaunchResult
from tpu_lab.tp.runners import ray_cluster
from tpu_lab.tp.runners.ray_cluster import NOTHING, RayCluster

CHECK_DEADLINE_S = 150.0  # every host has checked itself (torch_tpu's launch environment takes a while)
POLL_S = 0.1
STOP_GRACE_S = 10.0
TAIL_LINES = 200
# torch 2.13 reads the rank label template only from the environment (2.14 also has the flag).
PREFIX_ENV = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"


@dataclass
class _Host:
    """One host as the kernel sees it (the fields ``tp.host_results`` reads)."""

    name: str
    node: int
    actor: Any
    hello: dict[str, Any] | None = None
    problem: str | None = None
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    """-1 once its actor is gone without a result (the host was lost)."""
    argv: tuple[str, ...] = ()
    own: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))


class RayLaunch:
    """A launch on a Ray cluster. ``start_ray`` builds and checks it; ``wait()`` streams and returns the
    LaunchResult; ``stop()`` ends every process, actor and the placement group (safe from any thread)."""

    def __init__(self, cluster: RayCluster, job: dict[str, Any]) -> None:
        self.cluster, self.job = cluster, job
        self.nproc: int = job["nproc"]
        self.run_id: str = job["run_id"]
        self.started = time.monotonic()
        self.finished: float | None = None
        self.stop_reason: str | None = None
        self.failure: str | None = None
        self.tails: dict[int, deque[str]] = {}
        self.hosts: list[_Host] = []
        self.addresses: list[str] = []
        self._group: Any = None
        self._slice: Any = None
        self._lock = threading.Lock()
        self._torn_down = False
        _LIVE.add(self)

    def reserve_and_check(self) -> None:
        """Attach, reserve one bundle per host, start one actor per host and check every host."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from tpu_lab.tp.runners._ray_host import RayHost

        ray_cluster.connect(self.cluster)
        self._group, bundles, self._slice = ray_cluster.reserve(self.cluster, f"tpu_lab-{self.run_id[:8]}")
        placed = ray_cluster.bundle_nodes(self._group)
        names = ray_cluster.host_names(placed)
        self.addresses = [ip for _, ip in placed]
        actor_class = ray.remote(RayHost)
        for node, (name, bundle) in enumerate(zip(names, bundles, strict=True)):
            rest = dict(bundle)
            options = {
                "num_cpus": rest.pop("CPU", 0),
                "num_gpus": rest.pop("GPU", 0),
                "resources": {k: v for k, v in rest.items() if k not in ("memory", "object_store_memory")},
                "scheduling_strategy": PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=node),
                "name": f"tpu_lab-{self.run_id[:8]}-node{node}",
                "max_restarts": 0,
            }
            job = {**self.job, "node": node, "addresses": self.addresses}
            self.hosts.append(_Host(name, node, actor_class.options(**options).remote(job)))
        self._check(ray)
        self._go()

    def _check(self, ray: Any) -> None:
        pending = {h.actor.check.remote(): h for h in self.hosts}
        deadline = time.monotonic() + CHECK_DEADLINE_S
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                names = ", ".join(f"{h.name} (node {h.node})" for h in pending.values())
                raise LaunchError(
                    f"Launch refused: host(s) {names} did not finish their checks in {CHECK_DEADLINE_S:.0f} s. {NOTHING}",
                    cause="a very slow or overloaded node, or torch_tpu's launch environment hanging there",
                    fix="Run `tpu-lab probe` on that node to see what it reports.",
                )
            done, _ = ray.wait(list(pending), num_returns=1, timeout=min(left, 1.0))
            for ref in done:
                host = pending.pop(ref)
                try:
                    reply = ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise _host_cannot_run(host, e) from None
                if "error" in reply:
                    raise LaunchError(
                        f"Launch refused: host {host.name} (node {host.node}): {reply['error']} {NOTHING}",
                        fix="Fix it as said above.",
                    )
                host.hello = reply["hello"]
        ours = wire.python_facts()
        for h in self.hosts:
            assert h.hello is not None
            problem = wire.facts_problem(h.name, h.hello["executable"], h.hello, ours)
            if problem:
                raise host_results.other_python(h, problem)

    def _go(self) -> None:
        first = self.hosts[0].hello
        assert first is not None
        master, port = self.addresses[0], int(first["port"])
        for h in self.hosts:
            assert h.hello is not None
            spec = LaunchSpec(
                script=Path(h.hello["script"]),
                nproc=self.nproc,
                run_dir=Path(h.hello["run_dir"]),
                run_id=f"{self.run_id}-node{h.node}-",  # distinct per host: a host's stop never reaches another's
                port=port,
                args=tuple(self.job["args"]),
                env={**self.job["forwarded"], PREFIX_ENV: "[default${rank}]:", **self.job["env"]},
                python=h.hello["executable"],
                first_rank=h.node * self.nproc,
                nnodes=len(self.hosts),
            )
            go = go_message(
                spec, nnodes=len(self.hosts), node_rank=h.node, master=master, port=port, rdzv_id=self.run_id
            )
            argv = [a for a in go["argv"] if not a.startswith("--log-line-prefix-template")]
            h.argv = tuple(argv)
            h.actor.go.remote(argv, go["spec"], h.hello["tpu_env"])

    @property
    def elapsed(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def running(self) -> bool:
        return self.finished is None and any(h.result is None and h.exit_code is None for h in self.hosts)

    def _ask_stop(self, reason: str) -> None:
        self.stop_reason = self.stop_reason or reason
        for h in self.hosts:
            if h.exit_code is None:
                h.actor.stop.remote(reason)

    def stop(self, reason: str = "stopped") -> None:
        """Every host stops its processes; then the actors are killed and the placement group removed."""
        with self._lock:
            self.stop_reason = self.stop_reason or reason
            self._teardown(reason)

    def _teardown(self, reason: str) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        _LIVE.discard(self)
        try:
            import ray
            from ray.util.placement_group import remove_placement_group
        except ImportError:
            return
        if not ray.is_initialized():
            return
        refs = [h.actor.stop.remote(reason) for h in self.hosts if h.exit_code is None]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=STOP_GRACE_S)
        for h in self.hosts:
            try:
                ray.kill(h.actor, no_restart=True)
            except (ValueError, ray.exceptions.RayError):
                pass
        if self._slice is not None:
            self._slice.shutdown()
        elif self._group is not None:
            remove_placement_group(self._group)

    def _poll(self, on_output: OutputCallback) -> None:
        import ray

        live = [h for h in self.hosts if h.result is None and h.exit_code is None]
        refs = [h.actor.poll.remote() for h in live]
        for h, ref in zip(live, refs, strict=True):
            try:
                reply = ray.get(ref, timeout=STOP_GRACE_S)
            except ray.exceptions.GetTimeoutError:
                continue  # a busy node: ask again next round
            except ray.exceptions.RayError as e:
                h.exit_code = -1
                h.own.append(f"its Ray actor is gone: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                continue
            if reply["dropped"]:
                on_output(None, f"{h.name}: ({reply['dropped']} lines dropped: output too fast to stream)")
            for rank, text in reply["lines"]:
                if rank is None:
                    h.own.append(text)
                    continue
                self.tails.setdefault(rank, deque(maxlen=TAIL_LINES)).append(text)
                on_output(rank, text)
            h.result = reply["result"]

    def _first_failure(self) -> str | None:
        for h in self.hosts:
            if h.exit_code == -1:
                return f"host {h.name} (node {h.node}) was lost (its Ray actor or node died)"
        return host_results.first_failure(self.hosts, self.nproc)

    def wait(self, timeout: float | None = None, on_output: OutputCallback | None = None) -> LaunchResult:
        """Stream every host's output until all have ended; raise LaunchError when a rank failed, a host
        was lost or time ran out. KeyboardInterrupt stops everything, then propagates."""
        on_output = on_output or self._print
        deadline = None if timeout is None else self.started + timeout
        try:
            while self.running():
                self._poll(on_output)
                if self.failure is None and self.stop_reason is None:
                    self.failure = self._first_failure()
                    if self.failure is not None:
                        self._ask_stop(f"stopped: {self.failure}")
                if deadline is not None and time.monotonic() > deadline and self.stop_reason is None:
                    self._ask_stop(f"timed out after {timeout:g} s")
                if self.running():
                    time.sleep(POLL_S)
        except BaseException:
            self.stop("interrupted")
            raise
        finally:
            self.finished = time.monotonic()
        with self._lock:
            self._teardown(self.stop_reason or "finished")
        result = host_results.collect(self.hosts, self.nproc, self.tails, self.elapsed, self.stop_reason)
        host_results.raise_for_failure(result, self.failure)
        return result

    def _print(self, rank: int | None, line: str) -> None:
        if rank is not None and line.strip():
            print(f"[{self.hosts[rank // self.nproc].name} rank {rank}] {line}", flush=True)

    def rank_lines(self, rank: int | None) -> list[str]:
        """The latest output lines of one rank (None: every host's own lines), up to TAIL_LINES."""
        if rank is None:
            return [f"{h.name}: {line}" for h in self.hosts for line in h.own]
        return list(self.tails.get(rank, ()))

    def rank_state(self, rank: int) -> str:
        """ "running", "ok", "failed (exit N)" or "stopped"."""
        host = self.hosts[rank // self.nproc] if rank // self.nproc < len(self.hosts) else None
        for r in ((host.result if host else None) or {}).get("ranks", []):
            if r["rank"] == rank and r["exit_code"] is not None:
                return "ok" if r["exit_code"] == 0 else f"failed (exit {r['exit_code']})"
        return "running" if self.finished is None and self.stop_reason is None else "stopped"


def _host_cannot_run(host: _Host, error: Exception) -> LaunchError:
    text = str(error)
    if "No module named 'tpu_lab" in text:
        what, fix = (
            "cannot import tpu_lab",
            "Install the same tpu_lab on every node (pip install the same checkout) or use a cluster image that has it.",
        )
    elif "No module named 'torch" in text:
        what, fix = "cannot import torch", "Install this kernel's torch on every node."
    else:
        what, fix = "could not start its Ray actor", "Look at the error above; `ray status` shows the nodes."
    tail = "\n    ".join(text.strip().splitlines()[-6:])
    return LaunchError(
        f"Launch refused: host {host.name} (node {host.node}) {what}:\n    {tail}\n{NOTHING}",
        cause="that node's Python environment differs from this kernel's",
        fix=fix,
    )


def start_ray(
    code_or_path: str | os.PathLike,
    *,
    nproc: int,
    cluster: Any,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    on_start: Any = None,
) -> RayLaunch:
    """Check the arguments, reserve and check every host, then start torchrun on each; returns the launch."""
    from tpu_lab.tp.launch import _worker_source  # the same code checks as one host (syntax, paths)

    positive_int(nproc, "nproc", example=2)
    checked = ray_cluster.check_cluster(cluster)
    env, args = environment(env), string_args(args)
    raw, path = _worker_source(code_or_path)
    job = {
        "run_id": uuid.uuid4().hex,
        "nproc": nproc,
        "source": raw.decode("utf-8", "surrogateescape"),
        "path": None if path is None else str(path),
        "cwd": os.getcwd(),
        "rdzv_port": None,
        "args": [str(a) for a in args],
        "env": env,
        "forwarded": ray_cluster.forwarded(os.environ if environ is None else environ),
    }
    run = RayLaunch(checked, job)
    (on_start or (lambda run: None))(run)  # before anything is reserved: the caller can always stop it
    try:
        run.reserve_and_check()
    except BaseException:
        run.stop("a host failed its check")
        raise
    return run


def launch_ray(
    code_or_path: str | os.PathLike, *, timeout: float | None = None, on_output: Any = None, **kw: Any
) -> LaunchResult:
    """``start_ray`` then ``wait``, with no moment where an interrupt could leave a host running."""
    timeout = positive_seconds(timeout)
    optional_callable(on_output, "on_output")
    runs: list[RayLaunch] = []
    try:
        start_ray(code_or_path, on_start=runs.append, **kw)
        return runs[0].wait(timeout, on_output)
    except BaseException:
        for run in runs:
            run.stop("interrupted")
        raise


_LIVE: set[RayLaunch] = set()


@atexit.register
def _stop_all() -> None:
    """The kernel is exiting: leave no process, actor or placement group behind."""
    for run in list(_LIVE):
        run.stop("kernel exiting")
