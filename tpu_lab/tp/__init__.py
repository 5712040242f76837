"""tp: tensor parallel from a notebook. ``preflight`` predicts sharding failures from the config;
``command`` builds torchrun's argv and environment (pure); ``process`` is the one module that spawns,
signals and reaps processes; ``launch`` is the API that checks, then starts; ``results`` holds what comes
back (values, statuses, RankResult, LaunchResult); ``_worker`` is what each rank runs.

Across hosts: ``remote_command`` builds the ssh argv, the quoted remote command and each node's
torchrun argv (pure); ``wire`` is what the kernel and a host runner say to each other; ``launch_hosts``
checks and starts; ``multihost`` drives one torchrun per host (``HostLaunch``); ``host_results`` words
its checks and results; ``_remote`` is what runs on each host; ``preflight_hosts`` checks tp_size
against the chips of several hosts.

May import: ``tpu_lab.host``, ``tpu_lab.models`` (config resolution for the preflight) and the base.
Never compile or widgets.
"""
