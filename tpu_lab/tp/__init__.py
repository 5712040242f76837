"""tp: tensor parallel from a notebook. ``preflight`` predicts sharding failures from the config;
``command`` builds torchrun's argv and environment (pure); ``process`` is the one module that spawns,
signals and reaps processes; ``launch`` is the API that checks, then starts; ``rundirs`` keeps the last
run folders; ``results`` holds what comes back (values, statuses, RankResult, LaunchResult); ``_torchrun``
runs torchrun's main with a loopback-only rendezvous; ``_worker`` is what each rank runs; ``skeleton``
gives the preflight a config and a meta-device model.

Across hosts: ``remote_command`` builds the ssh argv, the quoted remote command and each node's
torchrun argv (pure); ``wire`` is what the kernel and a host runner say to each other; ``launch_hosts``
checks and starts; ``multihost`` drives one torchrun per host (``HostLaunch``); ``host_results`` words
its checks and results; ``_remote`` is what runs on each host; ``preflight_hosts`` checks tp_size
against the chips of several hosts.

May import: ``tpu_lab.host``, ``tpu_lab.models`` (config resolution for the preflight) and the base.
Never compile or widgets.
"""
