"""NumPy values where the code meant Python numbers: Dynamo traces a NumPy scalar (``np.maximum``'s
``np.float64``, an ``np.linspace`` schedule's item) as a tensor, so a type change is a graph of its own
even at the same value. Pure: strings in, a Cause out."""

from __future__ import annotations

from tpu_lab.compile.causes.cause import Cause


def numpy_scalar_words(name: str, kind: str, value: str, now: str, g: str) -> Cause:
    """``name``, a Python ``kind`` (int, float) of ``value`` in the graph, is a NumPy scalar in the new call
    (``now``: its description, ``np.float64 1.0``)."""
    became, said = now.split()[0], [*now.split(), ""][1]
    same = "the same value" if said == value else f"now {said}"
    return Cause(
        "type",
        f"{name} is now a NumPy {became[3:]} ({same}), was the Python {kind} {value}: Dynamo traces a NumPy "
        "scalar as a tensor, so each type is its own graph",
        g,
        f"pass a Python number: {kind}(...) around the NumPy value where it is made (np.maximum, np.linspace "
        "and their like return NumPy scalars)",
    )
