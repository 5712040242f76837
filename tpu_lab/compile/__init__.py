"""compile: counting compilations, saying why each happened, and bounding them.

Grouped by story, each sub-package's docstring says more:

* ``sources``: where compile events come from (Dynamo's internals, every failed guard, torch_tpu's
  counters, the compiled function and its inputs);
* ``causes``: why each compile happened, in words, with the fix for the backend;
* ``watching``: ``tl.watch`` on any code, ``tl.no_recompiles``, and the rank-side watch of launched runs;
* ``generation``: the generation session and its per-shape rows;
* ``buckets``: shape buckets, the padding-least advice, and the panel's policies.

``table_base`` (both tables' base) and ``chart`` serve the watch's and the session's tables alike.

May import: ``tpu_lab.host`` and the base (``errors``, ``_report``, ``_checks``). Never models, tp or widgets.
"""
