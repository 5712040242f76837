"""compile: counting compilations and bounding them. ``frames`` hears each compile start (function,
inputs, thread) and ``sources`` reads Dynamo's records and torch_tpu's cache counters; ``watch`` folds
them (with ``records``) into per-function, per-signature rows (``tl.watch``, rendered by
``watch_table``), the one compile-counting seam; ``guard`` refuses compiles (``tl.no_recompiles``);
``explain`` gives causes in words; ``signature``, ``tally`` and ``table`` are the generation session's
per-shape rows; ``buckets`` pads to shape buckets and compares policies, ``advice`` finds the buckets
that pad least (1-D and batch x length), ``policies`` is the panel's menu; ``session`` (with
``session_checks``, ``hooks``, ``batching`` and ``record``) generates single prompts and batches with
bounded shapes. ``rank_watch`` keeps a launched rank's watch table in its run folder.

May import: ``tpu_lab.host`` and the base (``errors``, ``_report``, ``_checks``). Never models, tp or widgets.
"""
