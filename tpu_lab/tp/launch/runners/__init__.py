"""runners: one module per way to run a launch, each a ``tp.launch.runner.Runner`` filling one
``RunState``; ``tp.launch.api.select_runner`` picks one.

``local``: this machine (also the torchrun driver every host uses). ``ssh``: hosts reached over OpenSSH:
``ssh`` in the kernel, ``ssh_command`` (``tl.Remote``, the client and remote argv), ``ssh_failures`` (its
hosts, and how they fail, in words), ``ssh_host`` on each host, ``ssh_wire`` what they say to each
other. ``ray``: a Ray cluster: ``ray`` in the kernel, ``ray_cluster`` (``tl.RayCluster``: attach,
reserve), ``ray_host`` in one Ray actor per host. Both multi-host runners share ``host_prep`` (what a
host does before its torchrun) and ``multihost_results`` (their shared wording, the ``LaunchResult``).

May import: the rest of ``tp.launch``, ``tp.results``, ``tpu_lab.host`` and the base.
"""
