"""Compiles per rank on a real Ray cluster (a head and two worker nodes on 127.0.0.1): each host actor
forwards its ranks' live compiles in its poll replies and their final tables in its result."""

import pytest

import tpu_lab as tl
from tpu_lab.testing.ray_cluster import HOST_RESOURCE, LocalRayCluster
from tpu_lab.tp.launch.api import start

pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DIVERGE = """
import os, torch
rank = int(os.environ["RANK"])
f = torch.compile(lambda x: (x * 2).sum(), backend="aot_eager", dynamic=False)
f(torch.ones(1, 64 + 32 * rank))
"""


def test_ray_hosts_forward_each_ranks_compiles():
    local = LocalRayCluster(workers=2)
    try:
        cluster = tl.RayCluster(address=local.address, hosts=2, resources={"CPU": 1, HOST_RESOURCE: 1})
        run = start(DIVERGE, nproc=1, cluster=cluster)
        result = run.wait(240)
        assert [r.compiles.count for r in run.state.ranks] == [1, 1]  # forwarded live by each host actor
        assert [t.rows[0]["signature"] for t in result.compiles.tables] == ["x: f32[1, 64]", "x: f32[1, 96]"]
        assert result.compiles.findings[0].message.startswith("rank 1: <lambda> x f32[1, 96] where rank 0 had")
    finally:
        local.stop()
