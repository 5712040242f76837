"""launch: ``tl.launch`` and the machinery behind it, from the kernel down to each rank.

In the kernel: ``api`` (``launch``, ``start``, ``select_runner``: check, pick a runner, start) takes a
``job`` (what to run, checked before anything starts; ``hosts``: what ``hosts=`` names) and hands it to
one runner (``runners/``), each implementing ``runner.Runner`` (start, stream, stop, wait, result).
What every runner shares: ``torchrun_command`` (one node's torchrun argv and environment, pure),
``tpu_env`` (torch_tpu's launch environment and the rank-count checks), ``process`` (the one module that
spawns, signals and reaps processes) and ``run_dirs`` (each launch's run folder, and which are kept).
On each node: ``torchrun_main`` (torchrun's own main, with a rendezvous store bound to one address).
Inside each rank: ``rank_worker`` (runs the user's script, arms the compile watcher, writes the status).

May import: ``tp.results`` (what a launch hands back), ``tpu_lab.host``, ``tpu_lab.compile`` (the
rank-side watcher, armed by ``rank_worker``) and the base. Never ``tp.preflight``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["launch", "select_runner", "start"]

if TYPE_CHECKING:
    from tpu_lab.tp.launch.api import launch, select_runner, start


def __getattr__(name: str) -> Any:
    """``tpu_lab.tp.launch.start`` (and ``launch``, ``select_runner``), imported on first use: a rank that
    imports ``tpu_lab.tp.launch.rank_worker`` imports nothing else of the launch."""
    if name in __all__:
        from tpu_lab.tp.launch import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
