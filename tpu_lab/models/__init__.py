"""models: checkpoints and loading. Tiny offline checkpoints and their corpus (``tiny``, ``corpus``,
``workload``), checks before loading (``checkpoint``: source resolution, hub reachability, folder
contents), ``load_model`` (``loading``) and the placement report after it (``placement``).

May import: ``tpu_lab.host`` and the base (``errors``, ``_report``, ``_checks``). Never compile, tp or widgets.
"""
