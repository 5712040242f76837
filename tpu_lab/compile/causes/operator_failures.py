"""A compile that failed inside a higher-order operator (torch.cond, torch.while_loop, ...), in words: where in
the operator it failed (its backward, its tracing of a branch) and what that operator asks of the functions it
is given, as the fix."""

from __future__ import annotations

# Dynamo's own words for what an operator rejects -> the fix
TEXT_FIXES = {
    "do not support input mutation": "the branches of torch.cond (or the body of torch.while_loop) may not change "
    "their inputs in place: return the new value as an output instead, or update it outside",
    "do not support aliasing": "the branches of torch.cond may not return an input itself (or a view of it): "
    "return a copy (x.clone())",
    "expected to contain only concrete integers": "an op on this path has no kernel for dynamic sizes (Dynamo "
    "made a size dynamic after it changed, and the backend could not run that op with it): keep that size fixed "
    "(drop or pad a short last batch), or compile with torch.compile(..., dynamic=False), which compiles each "
    "size as a graph of its own instead of failing",
    "Cannot set version_counter for inference tensor": "compile the function without its @torch.inference_mode() "
    "decorator and call it inside `with torch.inference_mode():`, or decorate it with @torch.no_grad() instead: "
    "the backend cannot trace inference mode entered inside the compiled function; this failure also leaves "
    "torch unable to make new tensors in this process (INTERNAL ASSERT FAILED ... PythonDispatcherTLS, torch "
    "2.13-2.15): restart the kernel before going on",
}

_BACKWARD_FIXES = {
    "cond": "torch.cond traces the backward of both branches, which needs their outputs to match: make both "
    "branches return tensors of the same shape and dtype (pad or project the smaller one), or call it under "
    "torch.no_grad() where no gradient flows through it",
}


def operator_words(operator: str) -> str:
    """``cond.py:358 in backward`` -> ``inside torch.cond's backward (torch/_higher_order_ops/cond.py:358)``."""
    if not operator:
        return ""
    place, _, function = operator.partition(" in ")
    name = place.split(".py", 1)[0]
    return f", inside torch.{name}'s {function} (torch/_higher_order_ops/{place})"


def operator_fix(operator: str, reason: str) -> str:
    """The fix for a failure inside ``operator`` (``cond.py:358 in backward``), or for Dynamo's ``reason``."""
    if found := next((k for k in TEXT_FIXES if k in reason), ""):
        return TEXT_FIXES[found]
    place, _, function = operator.partition(" in ")
    return _BACKWARD_FIXES.get(place.split(".py", 1)[0], "") if function == "backward" else ""


def fake_fix(op: str) -> str:
    """The fix for the user's own custom op ``op`` with no fake implementation (the compiler needs its shapes)."""
    return (
        f"give the custom op a fake implementation, which tells the compiler its output's shape and dtype without "
        f"running it: @{op}.register_fake on a function of the same inputs returning an empty tensor of the output's "
        "shape (torch.empty_like(x) where it keeps the input's)"
    )
