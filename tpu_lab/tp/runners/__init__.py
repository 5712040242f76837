"""tp.runners: the runners that reach hosts beyond this one, each filling the same launch result.
``ray`` drives a launch on a Ray cluster (``RayLaunch``), ``ray_cluster`` attaches to the cluster and
reserves its hosts (``RayCluster``), ``_ray_host`` is what runs in each host's Ray actor.

May import: ``tpu_lab.tp`` (the command builder, the spawn module, results), ``tpu_lab.host`` and the base.
"""
