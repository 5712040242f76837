"""Compiles of a process that ran elsewhere, from its TORCH_TRACE log: ``trace_log`` streams one log file
into its compiles; ``trace_fold`` folds them into the same ``WatchTable`` the live watch gives, through the
same fold and words (``watching.fold``). May import the rest of ``compile``."""
