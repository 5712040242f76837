"""compile: counting compilations, saying why each happened, and bounding them.

Watching: ``dynamo_source`` (every read of Dynamo's internals) and ``tpu_source`` (torch_tpu's cache
counters) feed ``watch``, which only folds their events into rows (``tl.watch``, rendered by
``watch_table`` on ``table_base``); ``frames`` describes the compiled function and its inputs; ``guard``
refuses compiles (``tl.no_recompiles``). Causes: ``explain`` picks the failed guards against the nearest
compiled graph, ``guard_words`` and ``guard_values`` put each in words with the fix for the backend
(``cause`` holds the result), ``break_words`` does graph breaks.
Generation session: ``session`` (with ``session_checks``, ``hooks``, ``batching`` and
``generation_record``) generates with bounded shapes; ``signature``, ``tally`` and ``table`` are its
per-shape rows. Buckets and advice: ``buckets`` pads to shape buckets and compares policies, ``advice``
finds the buckets that pad least (1-D and batch x length), ``policies`` is the panel's menu.
Launched ranks: ``rank_watch`` keeps a rank's watch table in its run folder (armed by ``tp._worker``).

May import: ``tpu_lab.host`` and the base (``errors``, ``_report``, ``_checks``). Never models, tp or widgets.
"""
