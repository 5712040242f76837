"""results: what a launch hands back, while it runs and once it ends; every runner fills the same objects.

While it runs: ``run_state`` (``RunState``: each rank's host, state, latest lines and exit, read by
``LaunchPanel`` and ``%%tp_run``), ``live_compiles`` (each rank's compiles so far, and who compiles
while who waits) and ``rank_files`` (what each rank writes into its run folder: ``tl.report``'s value,
its status, its compiles). Once it ends: ``launch_result`` (``LaunchResult``, ``RankResult``,
``HostResult``), ``launch_error`` (the ``LaunchError`` a failed launch deserves), and each rank's
compiles: ``rank_table`` (one rank's table), ``rank_compiles`` (``RunCompiles``: every rank's, merged)
and ``divergence`` (where ranks compiled differently, in words). A job tpu_lab never launched gives the
same objects from its TORCH_TRACE logs: ``trace_report`` (``tl.read_trace``, ``TraceReport``).

May import: the base (``errors``, ``_report``) and ``compile`` (a log's tables, through the watch's own
fold). Nothing else of tp: the launch machinery imports this, never the other way.
"""
