"""runners: one module per way to run a launch, each a ``tp.runner.Runner`` filling one ``RunState``.

``local`` (this machine; also the torchrun driver every host uses), ``ssh`` (hosts reached over OpenSSH:
``ssh`` in the kernel, ``ssh_host`` on each host, ``ssh_wire`` what they say to each other) and ``ray``
(a Ray cluster: ``ray`` in the kernel, ``ray_host`` in one Ray actor per host, ``ray_cluster`` attaching
and reserving the hosts). Both multi-host runners share ``host_prep`` (what a host does before its
torchrun) and ``multihost_results`` (how their checks and results are worded, the ``LaunchResult``).
``tp.launch.select_runner`` picks one.
"""
