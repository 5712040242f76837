"""A global whose value a graph was compiled for, in words with its fix: the user's own (a counter, a
schedule, a switch), or torch's own setting that a torch API sets (``parametrize.cached()`` sets
``torch.nn.utils.parametrize._cache_enabled``), which the user never holds. Pure: strings in, ``Cause`` out."""

from __future__ import annotations

from tpu_lab.compile.causes.cause import BAKED, Cause

_NUMBER_FIX = (
    "Dynamo keeps a global's value baked in: each value is a graph of its own. If it changes per call (a "
    "counter, a schedule), compute what depends on it outside the compiled function and pass the result "
    "in as a tensor (torch.tensor(value)), or pass the number as an argument (a changing int argument is "
    "made dynamic after one recompile, though a value computed from it with math functions stays baked "
    "in); where it sets an argument that must be a Python number (a loss option such as label_smoothing, "
    "a scale factor, a slice), each value is a graph wherever it comes from: keep it to a few values"
)
_SWITCH_FIX = (
    "expected once per value (a switch that picks a code path: a graph for each); set it before the "
    "first compiled call if it should not change while the function runs compiled"
)


def global_cause(name: str, value: str, g: str, *, switch: bool) -> Cause:
    """``name`` (a global, as the user's code or torch names it) changed from ``value``; ``switch``: a bool or
    a string, which picks a code path."""
    if name.startswith("torch."):  # torch's own module state: a mode a torch API switches, not the user's value
        return Cause(
            "global",
            f"torch's own setting {name} changed (was {value}): a torch API sets it (a context manager or a mode "
            "your code entered or left), and each setting is a graph of its own",
            g,
            "expected once per setting: make every call under the same setting (always inside the context manager "
            "or mode that sets it, or always outside it)",
        )
    return Cause("global", f"the global {name} changed (was {value}{BAKED})", g, _SWITCH_FIX if switch else _NUMBER_FIX)
