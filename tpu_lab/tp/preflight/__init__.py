"""preflight: predict tensor-parallel sharding failures from a model's config before any process starts,
and propose the ``tp_plan`` that fixes what can be fixed (``tl.tp_preflight`` -> ``PreflightReport``).

``preflight`` is the entry and the report; ``meta_model`` reads the config and builds the model on the
meta device (no weights, no memory); ``plan`` checks the ``tp_plan`` against it (keys, styles, whole
heads per rank); ``ranks`` checks ``tp_size`` against the chips of one host or of several.

May import: ``tpu_lab.host`` (the chips), ``tpu_lab.models`` (resolving a name to a config),
``tp.launch.hosts`` (the host list, checked as ``tl.launch`` checks it) and the base. Never the rest of
``tp.launch``, nor ``tp.results``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["PreflightReport", "tp_preflight"]

if TYPE_CHECKING:
    from tpu_lab.tp.preflight.preflight import PreflightReport, tp_preflight


def __getattr__(name: str) -> Any:
    """``tpu_lab.tp.preflight.tp_preflight`` and ``PreflightReport``, imported on first use."""
    if name in __all__:
        from tpu_lab.tp.preflight import preflight

        return getattr(preflight, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
