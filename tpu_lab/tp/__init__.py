"""tp: tensor parallel from a notebook.

Before a launch: ``preflight`` (and ``preflight_hosts``) predict sharding failures from the config;
``skeleton`` gives them a config and a meta-device model.

A launch: ``launch`` is the API (checks, then picks a runner: ``select_runner``); ``job`` checks what to
run; ``runner`` declares the one interface every runner implements (start, stream, stop, wait, result)
and ``run_state`` the one live state they fill (per rank: host, state, output tail, exit); ``runners/``
holds one module per way to run (``local``, ``ssh`` + ``ssh_host`` on each host, later ``ray``);
``command`` builds any node's torchrun argv and environment (pure); ``launch_env`` computes torch_tpu's
launch environment in a short-lived child; ``process`` is the one module that spawns, signals and reaps
processes; ``remote_command`` says how hosts are reached (``tl.Remote``, pure); ``results`` holds what
comes back and ``outcome`` the error a failed launch raises; ``rundirs`` keeps the last run folders;
``_torchrun`` runs torchrun's main with a store bound to one address; ``_worker`` is what each rank runs.
Compiles per rank: ``rank_files`` (arming each rank's watcher, reading its file), ``rank_compiles``
(``LaunchResult.compiles``: each rank's table, merged) with
``divergence`` (where ranks differ, in words) and ``rank_live`` (each rank's compiles while it runs, in
``RunState``). The rank-side watcher is ``tpu_lab.compile.watching.rank_watch``, armed by ``_worker``.

May import: ``tpu_lab.host``, ``tpu_lab.models`` (config resolution for the preflight),
``tpu_lab.compile`` (the rank-side watcher) and the base. Never widgets.
"""
