"""Watching any code: ``watch`` folds the sources' events into rows (``tl.watch``), rendered by
``watch_table``; ``failed`` words a compile Dynamo gave up on, ``what_next`` what a compile made dynamic
and containers that grow, ``leftover`` the records no heard compile claims; ``guard`` refuses compiles
(``tl.no_recompiles``); ``rank_watch`` keeps a launched rank's watch table in its run folder (armed by
``tp.launch.rank_worker``)."""
