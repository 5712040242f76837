"""How one value reads among a compile's inputs: a tensor by dtype, shape, requires_grad, layout and marks, a
Python number or string by its value, a module by train/eval, a cache by its length, a partial by its function;
each is what a guard specialises on, so two calls that read alike share a graph."""

from __future__ import annotations

import enum
import functools
import re
from typing import Any

from tpu_lab.compile.sources.tensor_text import layout_of, numpy_text, tensor_text


def first_tensor(value: Any) -> tuple[str, Any] | None:
    """A ModelOutput's (a dict of tensors: an encoder's output passed to the decoder) first tensor, by key."""
    import torch

    if not isinstance(value, dict) or type(value) is dict:
        return None
    return next(((k, v) for k, v in value.items() if isinstance(v, torch.Tensor)), None)


def shown_float(value: float) -> str:
    """A float as a reader writes it: ``0.3`` for 0.30000000000000004 (binary rounding, not the value; the
    exact value stays in Dynamo's guard), else its repr."""
    return f"{value:.12g}" if len(repr(value)) > 14 else repr(value)


def describe(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        marked = getattr(value, "_dynamo_dynamic_indices", None)  # torch._dynamo.mark_dynamic
        extra = f" mark_dynamic{sorted(marked)}" if marked else ""
        maybe = getattr(value, "_dynamo_weak_dynamic_indices", None)  # torch._dynamo.maybe_mark_dynamic
        extra += f" maybe_mark_dynamic{sorted(maybe)}" if maybe else ""
        unbacked = getattr(value, "_dynamo_unbacked_indices", None)  # torch._dynamo.decorators.mark_unbacked
        extra += f" mark_unbacked{sorted(unbacked)}" if unbacked else ""
        static = getattr(value, "_dynamo_static_indices", None)  # torch._dynamo.mark_static
        extra += f" mark_static{sorted(static)}" if static else ""
        extra += " Parameter" if isinstance(value, torch.nn.Parameter) else ""
        extra += " on meta" if value.is_meta else ""  # a dry run: a graph of its own, and no real numbers
        strided = value.layout == torch.strided  # else sparse_coo, sparse_csr: no strides to read
        layout = layout_of(value.shape, value.stride()) if strided else str(value.layout).removeprefix("torch.")
        extra += "" if layout == "contiguous" else f" {layout}"  # each layout is a graph of its own
        return tensor_text(str(value.dtype), value.shape, value.requires_grad) + extra
    if (said := numpy_text(value)) or isinstance(value, bool) or value is None:  # np.float64 is a float too
        return said or repr(value)
    if isinstance(value, str) and len(value) <= 24:
        return f"str {value!r}"
    if isinstance(value, float):
        return f"float {shown_float(value)}"
    if isinstance(value, int):
        return f"{type(value).__name__} {value!r}"
    if isinstance(value, torch.nn.Module):
        return f"{type(value).__name__} ({'train' if value.training else 'eval'})"
    if isinstance(value, (torch.dtype, torch.device)):  # torch.float32, not "dtype"
        return str(value)
    if isinstance(value, enum.Enum):  # each member is a graph of its own: Mode.TRAIN, not "Mode"
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, functools.partial):  # its function is what the graph runs, and guards
        return f"partial({getattr(value.func, '__name__', type(value.func).__name__)})"
    if first := first_tensor(value):  # BaseModelOutput: its first tensor, the one the decoder reads
        return f"{type(value).__name__} {first[0]}={describe(first[1])}"
    layers = getattr(getattr(value, "self_attention_cache", value), "layers", None)  # an encoder-decoder's: its own
    if layers:  # a transformers cache: its length is what a static cache specialises on
        size = getattr(layers[0], "max_cache_len", None)
        if size is None:  # a cache that grows (DynamicCache): its length is the tokens it holds now
            try:
                size = int(value.get_seq_length())
            except Exception:
                return type(value).__name__
        return f"{type(value).__name__} len={size}"
    return type(value).__name__


def length_text(value: list | tuple) -> str:
    """A list or tuple whose items are not shown, by its length (what a length guard checks), and where every
    item is a dict (state dicts, records), a number (quantiles) or an object the code calls (logits processors)
    so: then no item is a name picking a code path."""
    numbers = value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    import torch

    plain = (str, bytes, bool, int, float, dict, list, tuple, type(None), torch.Tensor, torch.nn.Module)
    objects = value and all(not isinstance(v, plain) and hasattr(v, "__dict__") for v in value)  # processors
    kind = " of dicts" if value and all(isinstance(v, dict) for v in value) else " of numbers" if numbers else ""
    kind = kind or (" of objects" if objects else "")
    return f"{type(value).__name__} len={len(value)}{kind}"


def other_number(value: str, now: str) -> bool:
    """Whether ``now`` (an input's description: ``int -1``) is a number other than ``value`` (``0.25``): the
    value changed, whatever its type did."""
    try:
        return bool(re.fullmatch(r"(?:int|float) \S+", now)) and float(now.split()[1]) != float(value)
    except ValueError:
        return False
