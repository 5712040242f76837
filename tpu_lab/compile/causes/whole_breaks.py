"""Graph breaks told whole, where Dynamo's own words name its internals: a compile Dynamo gave up on because
the code it traced raised ("Observed exception", the exception in its debug context), said as that exception
with the way back to a compiled function once it is fixed (Dynamo skips a function it gave up on); a call of
a TorchScript module (``_CachedForward.__get__``), which Dynamo does not trace; torch.autograd.grad (a gradient
penalty, whose own setting would make the compile fail; a gradient only read, which torch.func.grad traces); a float made dynamic that a
higher-order op cannot capture; a NumPy function that returns a number (``np.size``), which Dynamo traces as
torch's and cannot put in the graph; a class Dynamo cannot instantiate. Pure."""

from __future__ import annotations

import ast
import re

from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.causes.source_file import parsed_file, statement_at

_HOP_FLOAT = re.compile(r"can only be of \((?:[^()]|\([^()]*\))*?SymInt'?>?\) but got \((?:[^()]|\([^()]*\))*?SymFloat")
_HOP_FLOAT_WORDS = (
    "a Python float that changed, which Dynamo then made dynamic (a SymFloat), reaches a higher-order op "
    "(torch.while_loop, torch.cond) as a value its functions capture, and such an op takes only tensors and ints"
)
_HOP_FLOAT_FIX = (
    "pass that float as a 0-d tensor (torch.tensor(value)) and use it as a tensor inside the loop's or branch's "
    "functions, so they capture a tensor; or keep the float one value (each value is then a graph of its own)"
)
_GRAD_WORDS = (
    "torch.autograd.grad inside the compiled function (a gradient penalty: R1, WGAN-GP, path length): Dynamo "
    "does not trace it, so the graph breaks there"
)
_GRAD_FIX = (
    "run the penalty (the model's forward, torch.autograd.grad and the backward through them) with the uncompiled "
    "model, outside the compiled code, and the compiled one for the main loss: a graph compiled with aot_autograd "
    "cannot be differentiated twice (create_graph=True, then .backward(), raises); not "
    "torch._dynamo.config.trace_autograd_ops = True, with which such a compile fails"
)
_READ_GRAD_WORDS = (
    "torch.autograd.grad inside the compiled function, its gradient only read (no create_graph: an inner-loop "
    "step, such as MAML's adaptation at test time): Dynamo does not trace it, so the graph breaks there"
)
_READ_GRAD_FIX = (
    "compute that gradient with torch.func.grad on a function of the parameters (torch.func.functional_call(net, "
    "params, x) for a module), which Dynamo traces into the graph; else run this step uncompiled"
)
_NUMPY_NUMBER = re.compile(r"\b(?:np|numpy)\.(?P<fn>size|shape|ndim)\((?P<args>[^()]*)\)")  # an array's size
_RAISED = re.compile(r"raised exception (?P<type>[A-Za-z_][\w.]*)\((?P<args>.*)\)\s*$", re.M)


def told_whole(reason: str, library: str, code: str, at: tuple[str, int] = ("", 0)) -> Cause | None:
    """The break in words where it is one of these (``library``: file:line where it broke, when that is library
    code; ``code``: the user's line, at ``at``, its file and line); None for any other."""
    if "_CachedForward.__get__" in reason:  # torch.jit's ScriptModule forward, looked up on the call
        return _scripted(reason, code)
    if "torch.autograd.grad" in reason and "trace_autograd_ops" in reason:  # R1, WGAN-GP: a gradient penalty
        code = statement_at(code, f"{at[0]}:{at[1]}", 2000) if at[0] else code  # create_graph=True on a later line
        if re.search(r"\bgrad\(", code) and not re.search(r"create_graph\s*=\s*(?!False)", code):  # read only
            return Cause("graph_break", _READ_GRAD_WORDS, reason, _READ_GRAD_FIX)
        return Cause("graph_break", _GRAD_WORDS, reason, _GRAD_FIX)
    if _SET_INPUT in reason:  # spectral norm's hook style: u.data = ... on a parameter inside the compiled forward
        return _data_assigned(reason, at)
    if _HOP_FLOAT.search(reason):  # tol made dynamic, then captured by torch.while_loop's cond_fn
        return Cause("graph_break", _HOP_FLOAT_WORDS, reason, _HOP_FLOAT_FIX)
    if "Observed exception" not in reason or (m := _RAISED.search(reason)) is None:
        return None
    message = m["args"].strip()
    message = message if len(message) <= 200 else f"{message[:200]}..."
    inside = f" (inside {library}, library code)" if library else ""
    words = f"the code raised {m['type']}({message}) while Dynamo traced it{inside}: it raises uncompiled too"
    fix = (
        f"fix what raises {m['type']} (its message says what; torch.compiler.set_stance('force_eager') runs the code "
        "uncompiled to check), then call torch._dynamo.reset(): Dynamo gave up on the function when it raised and "
        "runs it eagerly from then on, even for calls that would not raise"
    )
    return Cause("graph_break", words, reason, fix)


_SET_INPUT = "Encountered a set_ on a graph input"


def _data_assigned(reason: str, at: tuple[str, int]) -> Cause:
    """A ``t.data = value`` (a set_) on a tensor the compiled code takes in, beside other changes to it, which
    AOTAutograd cannot keep in a graph; with the lines of the compiled function's file that assign ``.data``."""
    tree = parsed_file(at[0]) if at[0] else None
    lines = sorted(
        {
            n.lineno
            for n in ast.walk(tree or ast.Module(body=[], type_ignores=[]))
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "data" for t in n.targets)
        }
    )
    name = at[0].rsplit("/", 1)[-1]
    where = f" (in {name}: line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines[:4]))})" if lines else ""
    words = (
        f"the backend cannot compile an assignment to .data{where} of a tensor the compiled code takes in (a "
        "parameter, a buffer): `t.data = value` is a set_, which it cannot keep in a graph beside other changes to t"
    )
    fix = (
        "update that tensor in place under torch.no_grad() (with torch.no_grad(): t.copy_(value)) instead of assigning "
        "its .data, or do that update outside the compiled function"
    )
    return Cause("graph_break", words, reason, fix)


def numpy_number(reason: str, code: str) -> tuple[str, str] | None:
    """(words, fix) where the user's line calls a NumPy function that returns a number (``np.size(colorwheel,
    0)``) and Dynamo, which traces NumPy as torch, met that op's number; None for any other break."""
    if "op returned non-Tensor" not in reason or not (call := _NUMPY_NUMBER.search(code)):
        return None
    args = [a.strip() for a in call["args"].split(",")]
    words = (
        f"{call[0]} returns a Python number, not an array: Dynamo traces NumPy code as torch, and a number such a "
        "call returns cannot be put in the graph"
    )
    if call["fn"] in ("size", "shape") and len(args) == 2 and args[1].lstrip("-").isdigit():
        return words, f"use {args[0]}.shape[{args[1]}] in place of {call[0]} (a size Dynamo reads without a break)"
    if len(args) == 1 and args[0].isidentifier():
        return words, f"use {args[0]}.{call['fn']} in place of {call[0]} (read without a break)"
    return words, f"compute {call[0]} outside the compiled function and pass the number in"


def _scripted(reason: str, code: str) -> Cause:
    called = re.search(r"([A-Za-z_][\w.]*)\(", code.split("=", 1)[-1]) if code else None
    module = called[1] if called else "the module"
    words = (
        f"{module} is a TorchScript module (torch.jit.trace or torch.jit.script, or torch.jit.load), which Dynamo "
        "does not trace: each call of it breaks the graph and runs as TorchScript"
    )
    fix = (
        f"use the plain nn.Module in place of the TorchScript one for {module} inside compiled code (the module "
        "before torch.jit.trace or script; for a loaded one, its Python class with the same weights): Dynamo "
        "compiles it with the rest, gradients included; keep the TorchScript one for export"
    )
    return Cause("graph_break", words, reason, fix)


def constructor_words(qualname: str, code: str) -> tuple[str, str]:
    """A class Dynamo cannot instantiate (one written in C, numpy's ``RandomState``): words and fix, naming
    the class as the user's line writes it (``np.random.RandomState``, not ``numpy.random.mtrand...``)."""
    short = qualname.rsplit(".", 1)[-1]
    written = re.search(rf"[\w.]*\b{re.escape(short)}\b", code)
    words = f"Dynamo cannot trace creating a {written[0] if written else qualname}: its constructor is not Python code"
    fix = f"create the {short} outside the compiled function and pass it (or what you make with it) in"
    if qualname.startswith("numpy.random"):
        fix += "; for random numbers inside the graph use torch (torch.rand, with a torch.Generator for a seed)"
    return words, fix
