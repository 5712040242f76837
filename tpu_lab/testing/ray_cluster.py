"""A real local Ray cluster for tests, benchmarks and notebooks: a head and worker nodes, each its own
raylet, all on 127.0.0.1, CPU only, the dashboard off. Each worker node carries the custom resource ``HOST_RESOURCE``, so a
strict-spread placement group of one bundle per host lands on distinct worker nodes (never the head).

Started with Ray's own multi-node utility (``ray.cluster_utils.Cluster``), whose processes are children
of this one; start-up is retried (a node can fail waiting for its agent under load), and ``stop()``
leaves no process behind. A kernel that ends without calling it still ends them: Ray's utility stops
its nodes at exit, and its reaper process kills them when this process dies, even by SIGKILL.
"""

from __future__ import annotations

import os
import time
from typing import Any

from tpu_lab.tp.launch.runners.ray_cluster import stay_on_loopback

HOST_RESOURCE = "tpu_lab_test_host"
NODE: dict[str, Any] = {
    "node_ip_address": "127.0.0.1",
    "include_dashboard": False,
    "num_cpus": 1,
    "object_store_memory": 80 * 1024 * 1024,
}


class LocalRayCluster:
    """A head plus ``workers`` worker nodes on loopback. ``address`` is the GCS's ``127.0.0.1:PORT``."""

    def __init__(self, workers: int = 2, attempts: int = 3) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report from a test cluster
        stay_on_loopback()
        from ray.cluster_utils import Cluster

        for attempt in range(attempts):
            self.cluster = Cluster(shutdown_at_exit=True)
            try:
                self.cluster.add_node(**NODE)
                self.workers = [self.add_worker() for _ in range(workers)]
                self.cluster.wait_for_nodes(timeout=60)
                return
            except Exception:
                self.stop()
                if attempt == attempts - 1:
                    raise
                time.sleep(1)

    @property
    def address(self) -> str:
        return self.cluster.address

    def add_worker(self) -> Any:
        return self.cluster.add_node(**NODE, resources={HOST_RESOURCE: 1})

    def pids(self) -> list[int]:
        """Every process of the cluster's nodes (raylets, GCS, workers started by raylets are their children)."""
        found = []
        for node in self.cluster.list_all_nodes():
            for infos in node.all_processes.values():
                found += [info.process.pid for info in infos if info.process.poll() is None]
        return found

    def stop(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        self.cluster.shutdown()
