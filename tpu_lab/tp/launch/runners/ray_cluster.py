"""Reaching a Ray cluster and reserving its hosts for a launch: ``RayCluster`` (what the user passes as
``cluster=``), a bounded connect with a clear error, the check that the cluster has enough hosts with the
resources asked (before anything is reserved), and the placement group itself: one bundle per host,
``STRICT_SPREAD`` (every bundle on another node), or a whole TPU slice through ``ray.util.tpu``.

ray is imported inside functions only: ``RayCluster`` and the pure checks work without it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpu_lab.errors import InvalidArgument, LaunchError
from tpu_lab.tp.launch.process import interrupts_held
from tpu_lab.tp.launch.torchrun_command import is_loopback

NOTHING = "Nothing was started on any host."
_LOOPBACK_NODE = "127.0.0.1"
_CLUSTER_MODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_ATTACHED: dict[str, str] = {}  # the address tpu_lab attached this process to


@dataclass(frozen=True)
class RayCluster:
    """A Ray cluster to launch on, and what to reserve there (every field has a working default)."""

    address: str = "auto"
    """``"auto"`` (the cluster this machine belongs to), ``"HOST:PORT"`` (its GCS, usually port 6379) or
    ``"ray://HOST:10001"`` (Ray Client). An already connected ``ray.init()`` is used as it is."""
    hosts: int | None = None
    """How many hosts (one torchrun each). None: every node that has ``resources`` free; on TPU the
    slice's host count."""
    resources: Mapping[str, float] | None = None
    """What one host's bundle reserves (the Ray actor that runs its torchrun holds it), e.g.
    ``{"CPU": 4, "my_host": 1}``. None: one CPU per rank (``{"CPU": nproc}``), so a node is picked only
    where its ranks fit. On TPU the slice's bundle (its chips) is used instead."""
    tpu_topology: str | None = None
    """A TPU slice to reserve whole (e.g. ``"4x4"``), with ``tpu_version``: through
    ``ray.util.tpu.slice_placement_group``, one bundle per TPU host."""
    tpu_version: str | None = None
    """The TPU generation of the slice, e.g. ``"v6e"``."""
    connect_timeout: float = 20.0
    """Seconds to wait for the cluster to answer."""
    reserve_timeout: float = 30.0
    """Seconds to wait for the placement group once the cluster has said the resources exist."""


def check_cluster(cluster: Any) -> RayCluster:
    """``cluster`` (an address or a RayCluster) as a checked RayCluster, or a clear InvalidArgument."""
    if isinstance(cluster, str):
        cluster = RayCluster(address=cluster)
    if not isinstance(cluster, RayCluster):
        raise InvalidArgument(
            f"cluster={cluster!r} is neither a Ray address nor a tl.RayCluster.",
            fix='Pass cluster="ray://HEAD:10001", "HEAD:6379", "auto", or tl.RayCluster(address=..., hosts=N).',
        )
    if not isinstance(cluster.address, str) or not cluster.address.strip():
        raise InvalidArgument(
            f"RayCluster.address={cluster.address!r} is not a Ray address.",
            fix='Use "auto", "HEAD:6379" or "ray://HEAD:10001" (a string).',
        )
    for name in ("connect_timeout", "reserve_timeout"):
        value = getattr(cluster, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
            raise InvalidArgument(
                f"RayCluster.{name}={value!r} must be a number of seconds above 0.",
                fix=f"e.g. {name}=30 (seconds).",
            )
    if cluster.hosts is not None and (not isinstance(cluster.hosts, int) or cluster.hosts < 1):
        raise InvalidArgument(f"RayCluster.hosts={cluster.hosts!r} must be a positive int.", fix="e.g. hosts=2.")
    if (cluster.tpu_topology is None) != (cluster.tpu_version is None):
        raise InvalidArgument(
            "A TPU slice needs both tpu_topology and tpu_version.",
            fix='e.g. tl.RayCluster(tpu_topology="4x4", tpu_version="v6e").',
        )
    if cluster.resources is None:
        return cluster
    if not isinstance(cluster.resources, Mapping):
        raise InvalidArgument(
            f"RayCluster.resources={cluster.resources!r} is not a mapping of resource names to amounts.",
            fix='e.g. resources={"CPU": 4}, or leave it out for one CPU per rank.',
        )
    bad = {
        k: v
        for k, v in cluster.resources.items()
        if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < float("inf")
    }
    if not cluster.resources or bad:
        raise InvalidArgument(
            f"RayCluster.resources={dict(cluster.resources)!r} must name at least one resource with an amount >= 0.",
            fix='e.g. resources={"CPU": 1}.',
        )
    return cluster


def _host_port(address: str) -> tuple[str, int] | None:
    rest = address.removeprefix("ray://")
    host, colon, port = rest.rpartition(":")
    return (host.strip("[]"), int(port)) if colon and port.isdigit() else None


def stay_on_loopback() -> None:
    """A cluster started on loopback listens only there, but on Linux Ray rewrites a loopback address to
    this machine's interface address (``ray._private.services.resolve_ip_for_localhost``) and then retries
    that address forever (measured: FACTS.md, Ray). Its "cluster mode" switch turns the rewrite off; it is
    read at import (the variable) and at each call (the constant), so set both."""
    os.environ[_CLUSTER_MODE_ENV] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def _gcs_address(ray: Any) -> str | None:
    """The GCS address this process is attached to (also when the user called ray.init() themselves)."""
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # Ray Client mode has no local GCS address
        return None


def connect(cluster: RayCluster) -> bool:
    """Attach this process to the cluster (a bounded wait). Returns False when it was already attached
    there (``"auto"`` takes whatever cluster this process is attached to)."""
    import ray

    target = _host_port(cluster.address)
    if target is not None and cluster.address not in (_ATTACHED.get("address"), "auto"):
        try:
            socket.create_connection(target, timeout=cluster.connect_timeout).close()
        except OSError as e:
            raise LaunchError(
                f"Launch refused: cannot reach the Ray cluster at {cluster.address} ({e.strerror or e}). {NOTHING}",
                cause="the cluster is not running, the address or port is wrong, or a firewall is in the way",
                fix="Start it (`ray start --head`) or check the address: GCS port 6379, Ray Client ray://HEAD:10001.",
            ) from e
    if ray.is_initialized():
        current = _ATTACHED.get("address")
        if cluster.address in ("auto", current) or cluster.address == _gcs_address(ray):
            return False
        if current is None:
            raise LaunchError(
                f"This kernel is already attached to another Ray cluster (by ray.init()), not {cluster.address}.",
                cause="one process can be attached to one Ray cluster at a time",
                fix="Pass cluster='auto' to use that one, or call ray.shutdown() first.",
            )
        with interrupts_held():
            ray.shutdown()  # tpu_lab attached it for an earlier launch: move to the one asked for now
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
    if target is not None and is_loopback(target[0]) and not cluster.address.startswith("ray://"):
        stay_on_loopback()
        kwargs["_node_ip_address"] = _LOOPBACK_NODE
    try:
        # An interrupt inside ray.init leaves Ray's core worker half made, and the next ray.init aborts the
        # whole process (measured, Ray 2.60): the interrupt waits until the attach is done.
        with interrupts_held():
            ray.init(address=cluster.address, **kwargs)
            _ATTACHED["address"] = cluster.address
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise LaunchError(
            f"Launch refused: could not attach to the Ray cluster at {cluster.address}: {e} {NOTHING}",
            cause="no cluster runs there (address 'auto' looks for one started on this machine)",
            fix="Start one with `ray start --head`, or pass its address: cluster='HEAD:6379' or 'ray://HEAD:10001'.",
        ) from e
    return True


def tpu_bundles(topology: str, version: str) -> tuple[int, dict[str, float]]:
    """(hosts, one host's bundle) of a TPU slice, as ``ray.util.tpu`` reserves it. Needs no TPU."""
    from ray.util.tpu import get_tpu_worker_resources

    try:
        hosts, bundle = get_tpu_worker_resources(topology=topology, accelerator_type=version)
    except ValueError as e:
        raise InvalidArgument(f"TPU slice {version} {topology}: {e}", fix='e.g. tpu_topology="4x4", tpu_version="v6e".')
    return int(hosts), {k: float(v) for k, v in bundle.items()}


def fitting_nodes(nodes: Sequence[Mapping[str, Any]], bundle: Mapping[str, float]) -> list[Mapping[str, Any]]:
    """The alive nodes whose total resources hold ``bundle``. Pure (reads ``ray.nodes()`` records)."""
    return [
        n
        for n in nodes
        if n.get("Alive") and all(float(n.get("Resources", {}).get(k, 0)) >= v for k, v in bundle.items())
    ]


def check_hosts(nodes: Sequence[Mapping[str, Any]], bundle: Mapping[str, float], hosts: int | None) -> int:
    """How many hosts the launch gets; a LaunchError saying what is missing when too few nodes fit. Pure."""
    fit = fitting_nodes(nodes, bundle)
    wanted = hosts or len(fit)
    if len(fit) >= wanted > 0:
        return wanted
    alive = [n for n in nodes if n.get("Alive")]
    lacking = []
    for n in alive:
        if n in fit:
            continue
        have = n.get("Resources", {})
        short = {k: f"{float(have.get(k, 0)):g}/{v:g}" for k, v in bundle.items() if float(have.get(k, 0)) < v}
        lacking.append(
            f"{n.get('NodeManagerAddress')} ({str(n.get('NodeID'))[:8]}) has "
            + ", ".join(f"{k} {s}" for k, s in short.items())
        )
    need = ", ".join(f"{k}: {v:g}" for k, v in bundle.items())
    raise LaunchError(
        f"Launch refused: it needs {wanted or 1} host(s) with {{{need}}} each, and the Ray cluster has "
        f"{len(fit)} such node(s) of {len(alive)} alive. {NOTHING}"
        + ("\nNodes that lack them (have/need): " + "; ".join(lacking) if lacking else ""),
        cause="the cluster is smaller than asked, or its nodes do not carry the resources named in the bundle",
        fix="Add nodes (or wait for the autoscaler), ask for fewer hosts (tl.RayCluster(hosts=N)), "
        "or change RayCluster.resources to what the nodes have.",
    )


def host_bundle(cluster: RayCluster, nproc: int) -> dict[str, float]:
    """What one host reserves: ``cluster.resources``, or by default one CPU per rank it runs."""
    return {k: float(v) for k, v in (cluster.resources or {"CPU": nproc}).items()}


def reserve(cluster: RayCluster, name: str, hold: Callable[[Any, Any], None], nproc: int = 1) -> list[dict[str, float]]:
    """Reserve one bundle per host and wait until it is granted; returns the bundles. ``hold(group,
    slice handle or None)`` gets the group the moment it exists (no interrupt in between), so the caller
    can always remove it. A LaunchError, before anything started, when the cluster cannot grant it."""
    import ray
    from ray.util.placement_group import placement_group

    if cluster.tpu_topology is not None:
        assert cluster.tpu_version is not None
        hosts, bundle = tpu_bundles(cluster.tpu_topology, cluster.tpu_version)
        check_hosts(ray.nodes(), bundle, hosts)
        from ray.util.tpu import slice_placement_group

        with interrupts_held():
            handle = slice_placement_group(cluster.tpu_topology, cluster.tpu_version, name=name)
            hold(handle.placement_group, handle)
        group, bundles = handle.placement_group, [dict(handle.bundle_resources)] * handle.num_hosts
    else:
        bundle = host_bundle(cluster, nproc)
        bundles = [bundle] * check_hosts(ray.nodes(), bundle, cluster.hosts)
        with interrupts_held():
            group = placement_group(bundles, strategy="STRICT_SPREAD", name=name)
            hold(group, None)
    try:
        ray.get(group.ready(), timeout=cluster.reserve_timeout)
    except ray.exceptions.GetTimeoutError as e:
        raise LaunchError(
            f"Launch refused: the Ray cluster did not grant {len(bundles)} bundle(s) of {bundles[0]} on "
            f"distinct nodes within {cluster.reserve_timeout:g} s. {NOTHING}",
            cause="other jobs hold those resources, or the autoscaler is still adding nodes",
            fix="Wait for the other jobs, raise RayCluster(reserve_timeout=...), or ask for fewer hosts.",
        ) from e
    return bundles


def bundle_nodes(group: Any) -> list[tuple[str, str]]:
    """(node id, node address) of each bundle of a ready placement group, in bundle order."""
    import ray
    from ray.util.placement_group import placement_group_table

    where = placement_group_table(group)["bundles_to_node_id"]
    ips = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    return [(where[i], ips.get(where[i], "?")) for i in sorted(where)]


def host_names(placed: Sequence[tuple[str, str]]) -> list[str]:
    """A name per host: its address, with the node id's start where addresses repeat (one machine). Pure."""
    ips = [ip for _, ip in placed]
    return [ip if ips.count(ip) == 1 else f"{ip}/{node[:6]}" for node, ip in placed]
