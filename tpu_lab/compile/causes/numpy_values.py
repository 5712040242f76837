"""NumPy values where the code meant Python numbers: Dynamo traces a NumPy scalar (``np.maximum``'s
``np.float64``, an ``np.linspace`` schedule's item) as a tensor, so a type change is a graph of its own
even at the same value, and one set on a module (an np.linspace dropout schedule's ``module.p``) is read back
where torch needs a number, a graph break. Pure: strings in, a Cause out."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from tpu_lab.compile.causes.cause import Cause


def numpy_scalar_words(name: str, kind: str, value: str, now: str, g: str) -> Cause:
    """``name``, a Python ``kind`` (int, float) of ``value`` in the graph, is a NumPy scalar in the new call
    (``now``: its description, ``np.float64 1.0``)."""
    became, said = now.split()[0], [*now.split(), ""][1]
    same = "the same value" if said == value else f"now {said}"
    fix = (
        f"pass a Python number: {kind}(...) around the NumPy value where it is made (np.maximum, np.linspace "
        "and their like return NumPy scalars)"
    )
    if said and said != value:  # the value moved too: a Python number would recompile once all the same
        fix = (
            f"expected once: {kind}(...) around the NumPy value keeps one type but saves no compile here, as the "
            f"value changed too (Dynamo makes a changed {kind} dynamic after one recompile); to keep one graph from "
            "the first call, hold it as a 0-d tensor (torch.tensor(value)) where the code only does tensor math with it"
        )
    return Cause(
        "type",
        f"{name} is now a NumPy {became[3:]} ({same}), was the Python {kind} {value}: Dynamo traces a NumPy "
        "scalar as a tensor, so each type is its own graph",
        g,
        fix,
    )


_NO_TORCH_COPY = re.compile(r"Can't find numpy function (\w+) in torch\._numpy")


def numpy_missing(text: str) -> str:
    """Dynamo's "Can't find numpy function load in torch._numpy" as a user reads it."""
    return _NO_TORCH_COPY.sub(
        r"NumPy's \1 is not among the NumPy functions Dynamo can trace (it traces numpy calls as torch ops)", text
    )


READ_BACK = "read back as a Python number"  # how break_words says a tensor value read back


def numpy_read_back(cause: Cause, line: str, settings: dict[str, tuple[str, str]]) -> Cause:
    """``cause``, a break where torch's code (``line``: its source, ``return F.dropout(input, self.p, ...)``) reads
    a tensor's value back as a Python number, said as the NumPy scalar a module attribute it reads holds
    (``settings``: attribute -> (where it is, ``an np.float64``), from the modules the graphs saw): Dynamo
    traces that scalar as a tensor. Any other cause comes back as it is."""
    if READ_BACK not in cause.words:
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


def numpy_inputs_read_back(cause: Cause, inputs: Sequence[tuple[str, str]]) -> Cause:
    """``cause``, a tensor's value read back as a Python number on a line that uses inputs passed as NumPy
    scalars (``inputs``: name, description: ``bbx1: np.int64 8`` from CutMix's np.clip), said as those: Dynamo
    traces them as 0-d tensors, so a slice bound or a size reads them back. Any other cause as it is."""
    if READ_BACK not in cause.words:
        return cause
    named = [
        (n, d.split()[0]) for n, d in inputs if d.startswith("np.") and re.search(rf"\b{re.escape(n)}\b", cause.words)
    ]
    if not named:
        return cause
    kinds = sorted({k for _, k in named})
    python = "int" if all("int" in k for k in kinds) else "float"
    return dataclasses.replace(
        cause,
        words=f"{cause.words}: {', '.join(n for n, _ in named)} {'is a NumPy scalar' if len(named) == 1 else 'are NumPy scalars'} "
        f"({', '.join(kinds)}), which Dynamo traces as 0-d tensors, so this line reads them back as Python numbers",
        fix=f"pass Python numbers: {python}(...) around each where it is made (np.clip, np.random.randint and their "
        "like return NumPy scalars), before the call",
    )


def global_array_read_back(cause: Cause, arrays: Sequence[str]) -> Cause:
    """``cause``, a value read back on a line that calls a method of module-level NumPy arrays (``arrays``:
    ``NVEC.tolist()``), said as those: Dynamo traces a NumPy array as a tensor, so that call reads it back."""
    names = ", ".join(arrays)
    return dataclasses.replace(
        cause,
        words=f"{names} is a NumPy array, which Dynamo traces as a tensor, so this line reads its values back as "
        "Python numbers (a graph break)",
        fix=f"make what the line needs from {names} once, outside the compiled code ({arrays[0].lower()}_list = "
        f"{arrays[0]}.tolist() at module level, or in __init__), and use that here: a Python list of numbers is a "
        "constant in the graph",
    )


NUMPY_FIX = (  # NumPy code in the compiled function: Dynamo traces it through torch._numpy
    "compute it outside the compiled function and pass the result in, or use the torch equivalent "
    "(torch ops on tensors{random})"
)


def numpy_emulated(cause: Cause, reason: str, source: Sequence[str]) -> Cause:
    """``cause`` of a failed compile whose function (``source``: its lines, up to the failing one) calls NumPy
    and fails making a tensor of another dtype (the numpy extension tutorial's ``input.new(rfft2(...))``):
    Dynamo traces NumPy with torch ops, whose float64 NumPy would have kept float32, so only the compile fails."""
    numpy = any(re.search(r"\.numpy\(\)|\bnp\.|\bnumpy\.", s) for s in source)
    made = bool(source) and re.search(r"\.new\(|torch\.(?:from_numpy|tensor|as_tensor)\(", source[-1]) is not None
    dtype = "dtype=torch.float64" in reason or "dtype=double" in reason or "Observed exception" in reason
    if not (numpy and made and dtype):
        return cause
    return dataclasses.replace(
        cause,
        words=(
            "the line makes a tensor of a NumPy result: Dynamo traces NumPy calls with torch ops (its NumPy "
            "emulation), which can give another dtype than NumPy (float64 where NumPy keeps float32), so this "
            "fails only under compile, not when run eagerly"
        ),
        fix=(
            "keep the NumPy code out of the graph: decorate the function that calls NumPy with "
            "@torch.compiler.disable (or set torch._dynamo.config.trace_numpy = False before the first call), or "
            "write it with torch ops (torch.fft.rfft2 for numpy.fft.rfft2)"
        ),
    )


CALLS_NUMPY = re.compile(r"\b(?:np|numpy)\.\w+\(")  # a line that calls a NumPy function

NUMPY_ON_NUMBERS = (
    "NumPy on a number here, read back as a Python number (.item(), int()): Dynamo traces NumPy calls as tensors "
    "(its NumPy emulation), and a Python number read back from one cannot stay in the graph"
)
NUMPY_ON_NUMBERS_FIX = (
    "compute it with the math module in place of NumPy (math.ceil(math.log(n)) on a size or an int; "
    "p.numel() or math.prod(p.shape) for np.prod of a shape): plain Python arithmetic on a number stays in the "
    "graph; or compute it outside the compiled function and pass it in"
)


def numpy_on_numbers(cause: Cause, code: str) -> Cause:
    """``cause``, a value read back on the line ``code`` that runs NumPy on Python numbers (TRPO's
    ``int(np.prod(list(param.size())))``), said as that: no tensor of the user's is read back. Any other
    cause comes back as it is."""
    if READ_BACK not in cause.words or not CALLS_NUMPY.search(code) or ".numpy()" in code:
        return cause
    loop = ", inside a for/while loop, where Dynamo cannot resume" if "inside a for/while loop" in cause.words else ""
    return dataclasses.replace(cause, words=NUMPY_ON_NUMBERS + loop, fix=NUMPY_ON_NUMBERS_FIX)
