"""compile: counting compilations and bounding them. ``frames`` hears each compile start (function,
inputs, thread) and ``sources`` reads Dynamo's records and torch_tpu's cache counters; ``watch`` folds
them into per-function, per-signature rows (``tl.watch``, rendered by ``watch_table``), the one
compile-counting seam; ``guard`` refuses compiles (``tl.no_recompiles``); ``explain`` gives causes in
words; ``signature``, ``tally`` and ``table`` are the generation session's per-shape rows; ``buckets``
picks shape buckets; ``session`` (with ``hooks`` and ``record``) generates with bounded shapes.

May import: ``tpu_lab.host`` and the base (``errors``, ``_report``, ``_checks``). Never models, tp or widgets.
"""
