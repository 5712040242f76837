"""Two inputs that were one tensor when the graph was compiled, and are not now: weights tied or untied,
self-attention's query passed as the key, a module's own parameter passed in as an input (functional_call's
first call in a MAML inner loop). Text in, a Cause out."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tpu_lab.compile.causes.cause import Cause, local_name

_IS = re.compile(r"^(?P<a>[\w\[\]'.]+) is (?!None$)(?P<b>[\w\[\]'.]+)$")


def alias_words(g: str, inputs: Mapping[str, str]) -> Cause | None:
    """Two inputs that were one tensor when the graph was compiled (tied weights, self-attention's q is k, a
    module's own parameter passed in), and are not now, in words; None for other guards."""
    if not (m := _IS.match(g)):
        return None
    if ("._parameters[" in m["a"]) != ("._parameters[" in m["b"]):
        own, passed = (
            (local_name(m["a"]), local_name(m["b"]))
            if "._parameters[" in m["a"]
            else (local_name(m["b"]), local_name(m["a"]))
        )
        return Cause(  # functional_call's first call passed the module's own parameters (MAML's inner loop)
            "aliasing",
            f"{passed} is no longer {own} itself: the graph was compiled with the module's own parameter passed in",
            g,
            "expected once; to keep one graph, pass copies from the first call on ("
            + (
                f"{{k: v.clone() for k, v in {d[1]}.items()}} where you build {d[1]}"
                if (d := re.match(r"(\w+)\[", passed))
                else "dict((k, v.clone()) for k, v in model.named_parameters())"
            )
            + "), so no call passes the module's own tensors",
        )
    a, b = local_name(m["a"]), local_name(m["b"])
    thing = "tensor" if all(_is_tensor(inputs.get(local_name(x), "")) for x in (m["a"], m["b"])) else "object"
    return Cause(
        "aliasing",
        f"{a} and {b} are no longer the same {thing}: the graph was compiled with one {thing} passed as both",
        g,
        "expected once: tie (or untie) the weights before the first compiled call"
        if "._parameters[" in g
        else "expected once per case (e.g. self- vs cross-attention); pass them the same way every call",
    )


def _is_tensor(description: str) -> bool:
    """An input's description is a tensor's (``f32[2, 5, 8]``)."""
    return bool(re.match(r"\w+\[", description))
