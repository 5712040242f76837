"""Guards whose check raised, which Dynamo counts as failed guards and reports by the exception's text alone:
an input it compared by value with == (a tuple of ints) now holds tensors, whose == is elementwise; one whose
type no longer supports the check; a view's base now None, or of fewer dimensions. Pure: text in, a Cause out."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import Cause

_TENSOR_TRUTH = "Boolean value of Tensor with more than one value is ambiguous"
_NONE_HAS = "'NoneType' object has no attribute"
_RAISED = re.compile(
    r"^(?:unsupported operand type\(s\) for .+|'\w+' object (?:is not (?:subscriptable|iterable|callable)|has no "
    r"attribute '\w+')|\w+\(\) argument .+|object of type '\w+' has no len\(\))$"
)


def raised_guard(g: str) -> Cause | None:
    """The guard ``g`` (Dynamo's text for it) in words where it is the text of an exception its check raised;
    None for any other guard."""
    if g.strip().startswith(_NONE_HAS):
        return Cause(
            "view_base" if re.search(r"attribute '(?:size|stride|storage_offset|dim)'", g) else "type",
            f"checking one of Dynamo's guards raised ({g.strip()}), which Dynamo counts as a failed guard: what it "
            "checks is now None (the tensor a view was taken from, once an input that was a slice is a tensor of "
            "its own; or an attribute set to None)",
            g,
            "pass each input the same way every call (a tensor of its own: .contiguous() or .clone() where a slice "
            "is made; or always a view), and keep attributes the code reads from becoming None",
        )
    if g.strip() == "tuple index out of range":  # focal loss's target.view(-1, 1): of a 3-d tensor, then a 1-d one
        return Cause(
            "view_base",
            f"checking one of Dynamo's guards raised ({g.strip()}), which Dynamo counts as a failed guard: a size it "
            "checks is gone (an input is a view, the graph guards the sizes of the tensor it was taken from, and "
            "that tensor has fewer dimensions now; or a tuple input is shorter)",
            g,
            "expected once per rank of what the view is taken from; where nothing else differs, .clone() the view "
            "where it is made (a tensor of its own has no base for the graph to guard)",
        )
    if _RAISED.match(g.strip()):
        return Cause(
            "type",
            f"an input is now of another type, so checking one of Dynamo's guards on it raised ({g.strip()}), which "
            "Dynamo counts as a failed guard",
            g,
            "expected once per case; pass the same types every call (a tuple stays a tuple, a number a number)",
        )
    if g.strip() == _TENSOR_TRUTH:
        return Cause(
            "type",
            f"an input Dynamo compared by value (a number or a tuple of numbers) now holds tensors: checking that "
            f"guard raised ({_TENSOR_TRUTH}), which Dynamo counts as a failed guard",
            g,
            "expected once per case; pass the same kind every call (always numbers, or always tensors)",
        )
    return None
