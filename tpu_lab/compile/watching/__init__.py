"""Watching any code: ``watch`` folds the sources' events into rows (``tl.watch``), rendered by
``watch_table``; ``guard`` refuses compiles (``tl.no_recompiles``); ``rank_watch`` keeps a launched
rank's watch table in its run folder (armed by ``tp._worker``)."""
