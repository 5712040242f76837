"""How a tensor reads in an input signature, live or from a trace: dtype by short name, shape, requires_grad,
memory layout by name; and the autocast setting around a call, which every graph is guarded on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SHORT_DTYPES = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
}


def autocast_modes() -> list[tuple[str, str]]:
    """``("autocast (cpu)", "bf16")`` for each device whose autocast is on: Dynamo guards every graph on it,
    so each setting compiles a graph of its own, shown on a row of its own."""
    import torch

    devices = dict.fromkeys(["cpu", "cuda", torch._C._get_privateuse1_backend_name()]).keys() - {"privateuseone"}
    on = sorted(d for d in devices if torch.is_autocast_enabled(d))
    return [(f"autocast ({d})", SHORT_DTYPES.get(str(torch.get_autocast_dtype(d))[6:], "on")) for d in on]


def layout_of(shape: Sequence[int], stride: Sequence[int]) -> str:
    """A tensor's memory layout by name: ``contiguous`` (row-major), ``channels_last`` (4-D, NHWC in memory),
    ``channels_last_3d`` (5-D), else ``non-contiguous`` (a transposed, sliced or expanded view)."""
    n = len(shape)
    for name, order in (
        ("contiguous", range(n)),
        ("channels_last", (0, 2, 3, 1)),
        ("channels_last_3d", (0, 2, 3, 4, 1)),
    ):
        if len(order) != n:
            continue
        want, step = [0] * n, 1
        for i in reversed(order):  # innermost first: each stride the product of the sizes inside it
            want[i], step = step, step * max(shape[i], 1)
        if all(shape[i] <= 1 or stride[i] == want[i] for i in range(n)):  # a size-1 dimension's stride is free
            return name
    return "non-contiguous"


def tensor_text(dtype: str, shape: Sequence[Any], requires_grad: bool) -> str:
    """A tensor as a row shows it: ``f32[2, 8] requires_grad`` (a live tensor's, or one a log described)."""
    dtype = dtype.removeprefix("torch.")
    return f"{SHORT_DTYPES.get(dtype, dtype)}[{', '.join(map(str, shape))}]" + (
        " requires_grad" if requires_grad else ""
    )


def numpy_text(value: Any) -> str | None:
    """A numpy array or scalar, which Dynamo reads as a tensor: an array by its shape, a scalar by its type and
    value (``np.float64 0.5``: never ``float``, whose values a graph would bake in); None for anything else."""
    kind = type(value)
    if getattr(kind, "__module__", "") != "numpy" or not hasattr(value, "dtype"):
        return None
    if kind.__name__ == "ndarray":
        return f"ndarray {tensor_text(str(value.dtype), value.shape, False)}"
    return f"np.{kind.__name__} {value.item()!r}" if hasattr(value, "item") else None
