"""NumPy values where the code meant Python numbers: Dynamo traces a NumPy scalar (``np.maximum``'s
``np.float64``, an ``np.linspace`` schedule's item) as a tensor, so a type change is a graph of its own
even at the same value, and one set on a module (an np.linspace dropout schedule's ``module.p``) is read back
where torch needs a number, a graph break. Pure: strings in, a Cause out."""

from __future__ import annotations

import dataclasses
import re

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


_READ_BACK = "read back as a Python number"


def numpy_read_back(cause: Cause, line: str, settings: dict[str, tuple[str, str]]) -> Cause:
    """``cause``, a break where torch's code (``line``: its source, ``return F.dropout(input, self.p, ...)``) reads
    a tensor's value back as a Python number, said as the NumPy scalar a module attribute it reads holds
    (``settings``: attribute -> (where it is, ``an np.float64``), from the modules the graphs saw): Dynamo
    traces that scalar as a tensor. Any other cause comes back as it is."""
    if _READ_BACK not in cause.words:
        return cause
    found = next(((a, settings[a]) for a in re.findall(r"\bself\.(\w+)\b", line) if a in settings), None)
    if found is None:
        return cause
    attr, (path, value) = found
    return dataclasses.replace(
        cause,
        words=f"{cause.words}: the number is {path} ({value}), a NumPy scalar set on the module, which Dynamo traces "
        "as a tensor, so torch reads it back here",
        fix=f"set it as a Python number where your code sets it (module.{attr} = float(value): np.linspace and its "
        "like return NumPy scalars); a Python number is then fixed into the graph, one graph per value",
    )
