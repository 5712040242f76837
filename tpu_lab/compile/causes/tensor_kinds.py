"""Another kind of value where a tensor was compiled for (or the reverse): an nn.Parameter for a plain tensor, a
tensor subclass, a Python number (baked into the graph), a container. Dynamo guards the type id of each tensor
input, so each kind is a graph of its own."""

from __future__ import annotations

from tpu_lab.compile.causes.cause import Cause


def tensor_type_words(name: str, cls: str, want: str | None, g: str) -> Cause:
    """Another kind of value where a tensor was compiled for (or the reverse): a Parameter, a tensor
    subclass, a Python number (``want``: the type compiled for, where torch names it)."""
    now = cls.rsplit(".", 1)[-1]
    if now in ("float", "int", "bool"):
        return Cause(
            "tensor_type",
            f"{name} is now {'an' if now == 'int' else 'a'} {now}, was a tensor (a Python "
            + (
                "bool is baked into the graph: each value is its own graph)"
                if now == "bool"
                else "number is baked into the graph)"
            ),
            g,
            "keep passing a tensor (torch.tensor(value)): the graph then reads it at run time",
        )
    if now in ("list", "tuple", "dict", "NoneType", "str"):  # a container where a tensor was compiled for
        return Cause(
            "type",
            f"{name} is now a {now}, was a tensor (each type is its own graph)",
            g,
            "pass one type each time: stack the items into one tensor (torch.stack) before the call",
        )
    if want:  # torch 2.14 names the type compiled for
        was = "plain tensor" if want == "torch.Tensor" else want.rsplit(".", 1)[-1]
    else:  # 2.13 does not: a plain Tensor found means a subclass was compiled for, and the reverse
        was = "tensor subclass (such as nn.Parameter)" if now == "Tensor" else "plain tensor"
    if "Parameter" in (now, was) or now == "Tensor":
        return Cause(
            "tensor_type",
            f"{name} is now a {now}, not the {was} compiled for (nn.Parameter vs Tensor)",
            g,
            "pass the same kind each time: p.view_as(p) for a plain tensor that keeps its gradient path (what a "
            "meta-learning step's weights need); p.detach() only where no gradient must flow back to p",
        )
    return Cause(
        "tensor_type",
        f"{name} is now a {now} (a tensor subclass), not the {was} compiled for",
        g,
        "pass the same kind each time (x.as_subclass(torch.Tensor) for a plain tensor)",
    )
