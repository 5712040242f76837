"""models: checkpoints and loading. Tiny offline checkpoints, their cache and corpus (``tiny``,
``tiny_cache``, ``corpus``, ``workload``), checks before loading (``checkpoint``: source resolution, hub
reachability, folder contents), ``load_model`` (``loading``) with the checks around it (``load_checks``:
options, memory, finite weights) and the placement report after it (``placement``).

May import: ``tpu_lab.host`` and the base (``errors``, ``_report``, ``_checks``). Never compile, tp or widgets.
"""
