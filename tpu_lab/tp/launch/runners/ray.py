"""The Ray runner: ``tl.launch(code, nproc=N, cluster=...)`` on a Ray cluster. One bundle per host is
reserved in a placement group before anything starts, one Ray actor per bundle (``runners.ray_host``)
runs that host's torchrun; one labelled stream, one run state, one stop.

``start()`` attaches to the cluster (``runners.ray_cluster``: bounded, clear errors), checks that it has
enough hosts with the resources asked, reserves them (strict spread, or a whole TPU slice), starts the
actors and waits until every host has checked itself (tpu_lab and torch importable, the same versions,
chips against nproc); a host that fails is named and nothing starts anywhere. Then every host starts
its node's torchrun (static rendezvous on the first host's address). ``stream()`` polls every host
(bounded replies over Ray's own connections: no port of tpu_lab's) and follows each rank's state. The
first failure anywhere (a rank, a torchrun, a host's actor or node lost) stops every host. ``stop()``
and the end of every launch: each actor stops its processes, then the actors are killed and the
placement group removed. A dead kernel (Ray's driver) takes its actors and placement group with it
(Ray's fate sharing), and each torchrun dies with its actor.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tpu_lab.errors import EnvironmentProblem, LaunchError
from tpu_lab.tp.launch.job import Job
from tpu_lab.tp.launch.process import interrupts_held
from tpu_lab.tp.launch.runner import OutputCallback, Runner
from tpu_lab.tp.launch.runners import multihost_results, ray_cluster
from tpu_lab.tp.launch.runners import ssh_wire as wire
from tpu_lab.tp.launch.runners.ray_cluster import NOTHING
from tpu_lab.tp.launch.runners.ssh_command import forwarded_env
from tpu_lab.tp.results.launch_result import LaunchResult
from tpu_lab.tp.results.live_compiles import RankCompiles
from tpu_lab.tp.results.run_state import TAIL_LINES, RankState, RunState

CHECK_DEADLINE_S = 150.0  # every host has checked itself (torch_tpu's launch environment takes a while)
STOP_GRACE_S = 10.0  # an actor stops its torchrun within ~6 s; then it is killed all the same
LOST = -1


@dataclass
class _Host:
    """One host as the kernel sees it (a ``multihost_results.HostView``)."""

    name: str
    node: int
    actor: Any
    hello: dict[str, Any] | None = None
    problem: str | None = None
    result: dict[str, Any] | None = None
    exit_code: int | None = None
    """LOST once its actor is gone without a result."""
    argv: tuple[str, ...] = ()
    killed_remotely: str | None = None
    own: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))


class RayRunner(Runner):
    """``tl.launch(code, nproc=N, cluster="ray://head:10001" | "HOST:6379" | "auto" | tl.RayCluster(...))``."""

    def __init__(self, job: Job, *, cluster: Any, environ: Mapping[str, str]) -> None:
        self.cluster = ray_cluster.check_cluster(cluster)
        # The host count is known once the cluster is asked (hosts=None: every node that fits); start()
        # replaces this state before any process starts.
        super().__init__(job, RunState(job.nproc * (self.cluster.hosts or 1)))
        self.environ = environ
        self.hosts: list[_Host] = []
        self._group: Any = None
        self._slice: Any = None
        self._lock = threading.Lock()
        self._torn_down = False

    # ---- start ------------------------------------------------------------------------------------

    def _hold(self, group: Any, handle: Any) -> None:
        self._group, self._slice = group, handle

    def start(self) -> None:
        try:
            import ray
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        except ImportError as e:
            raise EnvironmentProblem(
                f"cluster= needs Ray, which this kernel cannot import ({e}).",
                fix='pip install "tpu-lab[ray]" (the same Ray version as the cluster), then restart the kernel.',
            ) from e

        from tpu_lab.tp.launch.runners.ray_host import RayHost

        self.track()
        ray_cluster.connect(self.cluster)
        nproc = self.job.nproc
        bundles = ray_cluster.reserve(self.cluster, f"tpu_lab-{self.job.run_id[:8]}", self._hold, nproc)
        placed = ray_cluster.bundle_nodes(self._group)
        names = ray_cluster.host_names(placed)
        self.state = RunState(nproc * len(names), [names[r // nproc] for r in range(nproc * len(names))])
        why = (
            "the TPU slice's host bundle"
            if self.cluster.tpu_topology
            else "RayCluster.resources"
            if self.cluster.resources
            else f"one CPU for each of its {nproc} rank(s)"
        )
        self.state.add_line(
            None,
            f"Ray granted {len(names)} host(s), one per node, each reserving {bundles[0]} ({why}): {', '.join(names)}",
        )
        job = self._job_message([ip for _, ip in placed])
        actor_class = ray.remote(RayHost)
        for node, (name, bundle) in enumerate(zip(names, bundles, strict=True)):
            rest = dict(bundle)
            options = {
                "num_cpus": rest.pop("CPU", 0),
                "num_gpus": rest.pop("GPU", 0),
                "resources": {k: v for k, v in rest.items() if k not in ("memory", "object_store_memory")},
                "scheduling_strategy": PlacementGroupSchedulingStrategy(self._group, placement_group_bundle_index=node),
                "name": f"tpu_lab-{self.job.run_id[:8]}-node{node}",
                "max_restarts": 0,
            }
            with interrupts_held():  # created and known, or neither
                self.hosts.append(_Host(name, node, actor_class.options(**options).remote({**job, "node": node})))
        self._check(ray)
        first = self.hosts[0]
        assert first.hello is not None
        argvs = ray.get([h.actor.go.remote(placed[0][1], int(first.hello["port"])) for h in self.hosts])
        for h, argv in zip(self.hosts, argvs, strict=True):
            h.argv = tuple(argv)

    def _job_message(self, addresses: list[str]) -> dict[str, Any]:
        return {
            "run_id": self.job.run_id,
            "nproc": self.job.nproc,
            "addresses": addresses,
            "source": self.job.source.decode("utf-8", "surrogateescape"),
            "path": None if self.job.path is None else str(self.job.path),
            "cwd": os.getcwd(),
            "rdzv_port": None,
            "args": list(self.job.args),
            "env": dict(self.job.env),
            "forwarded": forwarded_env(self.environ),
        }

    def _check(self, ray: Any) -> None:
        """Wait until every host has checked itself; a LaunchError naming a host that cannot run it."""
        pending = {h.actor.check.remote(): h for h in self.hosts}
        deadline = time.monotonic() + CHECK_DEADLINE_S
        while pending:
            if time.monotonic() > deadline:
                raise multihost_results.not_ready(list(pending.values()), CHECK_DEADLINE_S)
            done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in done:
                host = pending.pop(ref)
                try:
                    reply = ray.get(ref)
                except ray.exceptions.RayError as e:
                    raise _cannot_run(host, e) from None
                if "error" in reply:
                    raise LaunchError(
                        f"Launch refused: host {host.name} (node {host.node}): {reply['error']} {NOTHING}",
                        cause="this host cannot run the launch as asked",
                        fix="Fix it as said above.",
                    )
                host.hello = reply["hello"]
        ours = wire.python_facts()
        for h in self.hosts:
            assert h.hello is not None
            problem = wire.facts_problem(h.name, h.hello["executable"], h.hello, ours)
            if problem:
                raise multihost_results.other_python(h, problem)

    # ---- stream -----------------------------------------------------------------------------------

    def _poll(self, on_output: OutputCallback) -> bool:
        """One round of polls; True when any line arrived."""
        import ray

        live = [h for h in self.hosts if h.result is None and h.exit_code is None]
        refs = [h.actor.poll.remote() for h in live]
        heard = False
        for h, ref in zip(live, refs, strict=True):
            try:
                reply = ray.get(ref, timeout=STOP_GRACE_S)
            except ray.exceptions.GetTimeoutError:
                continue  # a busy node: asked again next round
            except ray.exceptions.RayError as e:
                h.exit_code = LOST
                h.own.append(f"its Ray actor is gone: {type(e).__name__}: {str(e).strip().splitlines()[0][:300]}")
                continue
            if reply["dropped"]:
                self._own(h, f"({reply['dropped']} lines dropped: output faster than it could be streamed)", on_output)
            for rank, text in reply["lines"]:
                if rank is None:
                    self._own(h, text, on_output)
                else:
                    self.state.add_line(rank, text)
                    on_output(rank, text)
            for r in reply["ranks"] + (reply["result"] or {}).get("ranks", []):
                self.state.set_rank(
                    r["rank"], RankState(r["state"]), **{k: r[k] for k in ("exit_code", "signal", "failed_at")}
                )
                if r.get("compiles"):
                    self.state.set_compiles(r["rank"], RankCompiles.from_marker(r["compiles"]))
            h.result = reply["result"]
            heard = heard or bool(reply["lines"])
        return heard

    def _own(self, host: _Host, text: str, on_output: OutputCallback) -> None:
        host.own.append(text)
        self.state.add_line(None, f"{host.name}: {text}")
        on_output(None, f"{host.name}: {text}")

    def _first_trouble(self) -> str | None:
        failed = self.state.first_failed()
        if failed is not None:
            node = next((h.node for h in self.hosts if h.name == failed.host), 0)
            return f"rank {failed.rank} on host {failed.host} (node {node}) {failed.label}"
        for h in self.hosts:
            if h.exit_code == LOST:
                return f"host {h.name} (node {h.node}) was lost (its Ray actor or its node died)"
            if h.result is not None and h.result.get("failure") and not h.result.get("stopped"):
                return f"on host {h.name} (node {h.node}): {h.result['failure']}"
        return None

    def stream(self, on_output: OutputCallback, seconds: float) -> bool:
        if self._torn_down:
            with self._lock:  # a stop in another thread (the panel's Stop) may still be tearing down: wait
                return True
        heard = self._poll(on_output)
        if self.state.failure is None and self.state.stop_reason is None:
            self.state.failure = self._first_trouble()
            if self.state.failure is not None:
                self._ask_stop()
        if any(h.result is None and h.exit_code is None for h in self.hosts):
            if not heard:
                time.sleep(seconds)
            return False
        with self._lock:
            self._teardown()
        return True

    # ---- stop -------------------------------------------------------------------------------------

    def _ask_stop(self) -> None:
        for h in self.hosts:
            if h.result is None and h.exit_code is None:
                h.actor.stop.remote()  # its reply is the host's result, picked up by the next poll

    def stop(self, reason: str) -> None:
        """Every host stops its processes; then the actors are killed and the placement group removed."""
        with self._lock:
            self.state.stop_reason = self.state.stop_reason or reason
            self._teardown()

    def _teardown(self) -> None:
        if self._torn_down:
            return
        self._torn_down = True
        try:
            import ray
            from ray.util.placement_group import remove_placement_group
        except ImportError:
            return  # nothing was ever started
        if not ray.is_initialized():
            return  # detached (e.g. Ray's own exit hook ran first): the cluster ends this driver's actors
        pending = {h.actor.stop.remote(): h for h in self.hosts if h.result is None and h.exit_code is None}
        done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=STOP_GRACE_S) if pending else ([], [])
        for ref in done:
            try:
                pending[ref].result = ray.get(ref)
            except ray.exceptions.RayError:
                pending[ref].exit_code = LOST
        for h in self.hosts:
            try:
                ray.kill(h.actor, no_restart=True)
            except (ValueError, ray.exceptions.RayError):
                pass
        if self._slice is not None:
            self._slice.shutdown()
        elif self._group is not None:
            remove_placement_group(self._group)

    # ---- result -----------------------------------------------------------------------------------

    def result(self) -> LaunchResult:
        return multihost_results.launch_result(self.state, self.job, self.hosts)


def _cannot_run(host: _Host, error: Exception) -> LaunchError:
    """A host whose actor could not start or check itself (its Python lacks tpu_lab or torch, ...)."""
    text = str(error)
    if "No module named 'tpu_lab" in text:
        what, fix = (
            "cannot import tpu_lab",
            "Install this tpu_lab on every node (the same checkout or wheel), or use an image that has it.",
        )
    elif "No module named 'torch" in text:
        what, fix = "cannot import torch", "Install this kernel's torch on every node."
    else:
        what, fix = "could not start its Ray actor", "Look at the error above; `ray status` lists the nodes."
    tail = "\n    ".join(text.strip().splitlines()[-6:])
    return LaunchError(
        f"Launch refused: host {host.name} (node {host.node}) {what}:\n    {tail}\n{NOTHING}",
        cause="that node's Python environment differs from this kernel's",
        fix=fix,
    )
