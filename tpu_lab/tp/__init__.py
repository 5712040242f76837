"""tp: tensor parallel from a notebook, in three stories, one sub-package each:

* ``preflight``: before any process starts, ``tl.tp_preflight`` predicts sharding failures from the
  config alone (heads against ``tp_size``, ``tp_plan`` keys, the chips of one host or several) and
  proposes the fix. No process, no weights.
* ``launch``: ``tl.launch`` and what it takes to run it: the job, the one runner interface, the runners
  (``launch/runners/``: this machine, ssh hosts, a Ray cluster), the torchrun command and environment,
  the processes, the run folders, and what runs on each node and inside each rank.
* ``results``: what a launch hands back: the live run state, each rank's files, the ``LaunchResult``,
  the error a failed launch raises, and each rank's compiles (live, merged, and where ranks diverge).

Inside tp, imports go one way: ``preflight`` -> ``launch`` (its host list) -> ``results``.

May import: ``tpu_lab.host``, ``tpu_lab.models`` (config resolution for the preflight),
``tpu_lab.compile`` (the rank-side watcher) and the base. Never widgets.
"""
