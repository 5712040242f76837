"""tpu_lab: run Hugging Face transformers on Google TPUs from a notebook, and learn it on CPU.

``import tpu_lab`` is cheap: it imports neither torch nor ipywidgets. Names are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "probe": "tpu_lab.host.probe",
    "DeviceReport": "tpu_lab.host.probe",
    "Finding": "tpu_lab._report",
    "tiny_model": "tpu_lab.models.tiny",
    "load_model": "tpu_lab.models.loading",
    "LoadedModel": "tpu_lab.models.loading",
    "LoadReport": "tpu_lab.models.placement",
    "TpuLabError": "tpu_lab.errors",
    "RecompileError": "tpu_lab.errors",
    "LaunchError": "tpu_lab.errors",
    "LaunchInterrupted": "tpu_lab.errors",
    "watch": "tpu_lab.compile.watching.watch",
    "Watch": "tpu_lab.compile.watching.watch",
    "no_recompiles": "tpu_lab.compile.watching.guard",
    "GenerationSession": "tpu_lab.compile.generation.session",
    "GenerationRecord": "tpu_lab.compile.generation.generation_record",
    "recommend_buckets": "tpu_lab.compile.buckets.buckets",
    "compare_policies": "tpu_lab.compile.buckets.buckets",
    "tp_preflight": "tpu_lab.tp.preflight.preflight",
    "PreflightReport": "tpu_lab.tp.preflight.preflight",
    "launch": "tpu_lab.tp.launch.api",
    "Remote": "tpu_lab.tp.launch.runners.ssh_command",
    "RayCluster": "tpu_lab.tp.launch.runners.ray_cluster",
    "LaunchResult": "tpu_lab.tp.results.launch_result",
    "RunCompiles": "tpu_lab.tp.results.rank_compiles",
    "read_trace": "tpu_lab.tp.results.trace_report",
    "TraceReport": "tpu_lab.tp.results.trace_report",
    "report": "tpu_lab.tp.results.rank_files",
}
_SUBMODULES = {"widgets", "testing", "errors", "host", "models", "compile", "tp"}

__all__ = sorted([*_EXPORTS, *_SUBMODULES])

if TYPE_CHECKING:
    from tpu_lab import compile, errors, host, models, testing, tp, widgets
    from tpu_lab._report import Finding
    from tpu_lab.compile.buckets.buckets import compare_policies, recommend_buckets
    from tpu_lab.compile.generation.generation_record import GenerationRecord
    from tpu_lab.compile.generation.session import GenerationSession
    from tpu_lab.compile.watching.guard import no_recompiles
    from tpu_lab.compile.watching.watch import Watch, watch
    from tpu_lab.errors import LaunchError, LaunchInterrupted, RecompileError, TpuLabError
    from tpu_lab.host.probe import DeviceReport, probe
    from tpu_lab.models.loading import LoadedModel, load_model
    from tpu_lab.models.placement import LoadReport
    from tpu_lab.models.tiny import tiny_model
    from tpu_lab.tp.launch.api import launch
    from tpu_lab.tp.launch.runners.ray_cluster import RayCluster
    from tpu_lab.tp.launch.runners.ssh_command import Remote
    from tpu_lab.tp.preflight.preflight import PreflightReport, tp_preflight
    from tpu_lab.tp.results.launch_result import LaunchResult
    from tpu_lab.tp.results.rank_compiles import RunCompiles
    from tpu_lab.tp.results.rank_files import report
    from tpu_lab.tp.results.trace_report import TraceReport, read_trace


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"tpu_lab.{name}")
    else:
        raise AttributeError(f"module 'tpu_lab' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext tpu_lab``: registers the ``%%tp_run`` cell magic."""
    from tpu_lab.magics import load_ipython_extension as load

    load(ipython)
