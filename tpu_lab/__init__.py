"""tpu_lab: run Hugging Face transformers on Google TPUs from a notebook, and learn it on CPU.

``import tpu_lab`` is cheap: it imports neither torch nor ipywidgets. Names are resolved on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "probe": "tpu_lab.device",
    "DeviceReport": "tpu_lab.device",
    "Finding": "tpu_lab.device",
    "tiny_model": "tpu_lab.models",
    "load_model": "tpu_lab.loading",
    "LoadedModel": "tpu_lab.loading",
    "LoadReport": "tpu_lab.loading",
    "TpuLabError": "tpu_lab.errors",
    "GenerationSession": "tpu_lab.generation",
    "GenerationRecord": "tpu_lab.generation",
    "RecompileError": "tpu_lab.generation",
    "recommend_buckets": "tpu_lab.buckets",
    "compare_policies": "tpu_lab.buckets",
    "tp_preflight": "tpu_lab.tp.preflight",
    "PreflightReport": "tpu_lab.tp.preflight",
    "launch": "tpu_lab.tp.launch",
    "LaunchResult": "tpu_lab.tp.launch",
    "LaunchError": "tpu_lab.tp.launch",
    "report": "tpu_lab.tp.results",
}
_SUBMODULES = {"widgets", "testing", "errors", "hardware", "tp"}

__all__ = sorted([*_EXPORTS, *_SUBMODULES])

if TYPE_CHECKING:
    from tpu_lab import errors, hardware, testing, tp, widgets
    from tpu_lab.buckets import compare_policies, recommend_buckets
    from tpu_lab.device import DeviceReport, Finding, probe
    from tpu_lab.errors import TpuLabError
    from tpu_lab.generation import GenerationRecord, GenerationSession, RecompileError
    from tpu_lab.loading import LoadedModel, LoadReport, load_model
    from tpu_lab.models import tiny_model
    from tpu_lab.tp.launch import LaunchError, LaunchResult, launch
    from tpu_lab.tp.preflight import PreflightReport, tp_preflight
    from tpu_lab.tp.results import report


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
