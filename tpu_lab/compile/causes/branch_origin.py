"""Where the value of a data-dependent branch comes from: the lines Dynamo's own break text names ("The
branch condition involves a tensor computed as follows: ... code: <line>"), or, where the record holds only
Dynamo's short reason, the line of the user's function that assigns the condition's name from a Python
random draw (Dynamo turns ``random.random()`` into a graph input). The same search names the random
draw behind a data-dependent operator (a drawn number used as a size). Text and source lines in, words out."""

from __future__ import annotations

import ast
import dataclasses
import linecache
import re

from tpu_lab.compile.causes.cause import Cause
from tpu_lab.compile.causes.random_draws import fixed_by_call, random_origin
from tpu_lab.compile.causes.source_file import function_at, parsed_file

_TRACE = "The branch condition involves a tensor computed as follows:"
_CODE = re.compile(r'# File "(?P<file>[^"]+)", line (?P<line>\d+), in [^,]+, code: (?P<code>.+)$', re.M)
_COND = re.compile(r"^\s*(?:el)?if\s+(?P<cond>.+):|^\s*while\s+(?P<loop>.+):")


def branch_origin(reason: str, code: str, file: str = "", line: int = 0) -> tuple[int, str]:
    """(line, code) of the user's line that computes the branch condition's value; (0, '') where unknown."""
    _, _, trace = reason.partition(_TRACE)
    found = [(int(m["line"]), m["code"].strip()) for m in _CODE.finditer(trace)]
    found = [(n, c) for n, c in found if c != code.strip()]  # the branch's own line is not where it comes from
    m = _COND.match(code)
    if found:  # Dynamo lists the chain from the inputs on: the line assigning the condition's name, else its last
        names = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", (m["cond"] or m["loop"] or "") if m else ""))
        assigns = [(n, c) for n, c in found if (a := re.match(r"([A-Za-z_]\w*)\s*=(?!=)", c)) and a[1] in names]
        last = (assigns or found)[-1]  # a loop's or branch's header assigns no value: the tested one is an input
        return (0, "") if re.match(r"(?:for|while|if|elif)\b", last[1]) else last
    return random_origin(m["cond"] or m["loop"] or "", file, line) if m else (0, "")


def enclosing_loop(file: str, line: int) -> tuple[int, str]:
    """(line, code) of the innermost for/while of the user's file around ``line`` (its header excluded);
    (0, '') where there is none or the file cannot be read."""
    if not (file and line):
        return 0, ""
    if (tree := parsed_file(file)) is None:
        return 0, ""
    loops = [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, (ast.For, ast.While, ast.AsyncFor)) and n.lineno < line <= (n.end_lineno or 0)
    ]
    return (max(loops), linecache.getline(file, max(loops)).strip()) if loops else (0, "")


RANDOM_BRANCH_FIX = (  # a float draw passed in is specialised, then guarded by the comparison: no fewer graphs
    "make it branchless with a tensor draw (x = torch.where(torch.rand(()) < p, f(x), x): one graph, "
    "both sides computed), or make the choice outside the compiled function and pass it in as a bool (flip="
    "random.random() < p: a graph per side, not the float draw, which each value recompiles); torch.cond does "
    "not fit a branch on a random draw"
)


def tensor_drawn(cause: Cause, code: str) -> Cause:
    """A data-dependent branch whose condition draws a random tensor itself (``if torch.rand(1) < self.p:``,
    torchvision's random transforms): said so, with the branchless fix; any other comes back as it is."""
    m = _COND.match(code)
    drawn = re.search(r"\btorch\.rand\w*\(", (m["cond"] or m["loop"] or "") if m else "")
    if drawn is None:
        return cause
    return dataclasses.replace(cause, words=f"{cause.words}: a random tensor drawn on the line", fix=RANDOM_BRANCH_FIX)


NUMPY_SAID = "data-dependent branching on a NumPy value"
_GRAPH_INPUT = re.compile(r"graph input \(L_(?P<name>\w+)\)")


def numpy_branch(cause: Cause, reason: str, code: str) -> Cause:
    """A data-dependent branch on a NumPy value (``if self.drop_prob == 0.:`` where ``drop_prob`` is an
    ``np.float64`` from ``np.linspace``): Dynamo traces NumPy arrays and scalars as tensors, so the branch is on
    tensor data though the code holds no tensor there; named by the condition's own name for it, with the fix
    at its source. Any other cause comes back as it is."""
    if "NumpyNdarrayVariable" not in reason:
        return cause
    m = _COND.match(code)
    flat = [n["name"].lower() for n in _GRAPH_INPUT.finditer(reason)]  # L_self_modules_block_drop_prob
    names = re.findall(r"(?<![\w.])[A-Za-z_][\w.]*", (m["cond"] or m["loop"] or "") if m else "")
    held = [
        n
        for n in names
        if any(f == n.lower().replace(".", "_") or f.endswith("_" + n.split(".")[-1].lower()) for f in flat)
    ]
    held = held or _compared((m["cond"] or m["loop"] or "") if m else "")  # the short reason names no input
    who = held[0] if held else "a value in the condition"
    words = (
        f"{NUMPY_SAID}: {who} is NumPy data (an array, or a NumPy scalar such as an "
        "np.float64 item of an array), which Dynamo traces as a tensor, so this if/while branches on tensor data"
    )
    fix = (
        f"make {held[0] if held else 'it'} a Python number where it is set (float(...) of a NumPy scalar, .item() of "
        f"a one-element array): Dynamo then reads a number, not tensor data, and the break goes; or {cause.fix}"
    )
    return dataclasses.replace(cause, words=words, fix=fix)


def _compared(condition: str) -> list[str]:
    """The one name ``condition`` compares with a constant (``self.drop_prob == 0.0``), where there is one."""
    try:
        tree = ast.parse(condition.strip(), mode="eval")
    except SyntaxError:
        return []
    found = [
        ast.unparse(n.left)
        for n in ast.walk(tree)
        if isinstance(n, ast.Compare)
        and isinstance(n.left, ast.Name | ast.Attribute)
        and all(isinstance(c, ast.Constant) for c in n.comparators)
    ]
    return found if len(found) == 1 else []


RANDOM_LOOP_FIX = (
    "make the branch branchless (keep = torch.rand(()) >= p, then torch.where(keep, a, b) with both sides "
    "computed: LayerDrop's h = torch.where(keep, layer(h), h), teacher forcing's torch.where(keep, target[t], "
    "predicted)): one graph; or compile the loop's body and keep the loop and its draws eager; "
    "passing the draws in as arguments makes each combination of sides over the loop a graph of its own, soon "
    "past the recompile limit"
)
RANDOM_VALUE_FIX = (
    "draw the random number outside the compiled function and pass it in as an argument (a Python int "
    "argument is a plain number to Dynamo, not a tensor)"
)
RANDOM_MASK_FIX = (  # SpecAugment's mask bounds: a tensor draw keeps the whole mask in one graph
    "; or draw with torch (torch.randint for the bounds) and build the mask by comparing them with torch.arange: "
    "one graph, no Python numbers"
)

DRAWN_FILL_FIX = (
    "keep the draw a tensor and apply it with tensor ops inside the compiled function: draw with torch (std = "
    "torch.empty(n, 1, 1, 1).uniform_(lo, hi), one per item) and scale a standard draw by it (torch.randn_like(x) * "
    "std; torch.rand_like(x) < p for bernoulli_), one op over the batch in place of a loop over its items: one graph "
    "for every draw. {call} takes the number as one fixed value, so each value passed in (as a Python float "
    "argument too) is a graph of its own"
)


def drawn_value_fix(code: str, drawn: str, unspecialized: bool) -> str:
    """The fix for a number of the random draw ``drawn`` read back on ``code``: the branch's, the fixed-value
    call's (``.normal_(std=...)``), else the value's (a mask's bounds: their tensor draw too)."""
    if re.match(r"\s*(?:el)?if\b|\s*while\b", code):
        return RANDOM_BRANCH_FIX
    if called := fixed_by_call(code, drawn):
        return DRAWN_FILL_FIX.format(call=called)
    return RANDOM_VALUE_FIX + (RANDOM_MASK_FIX if unspecialized else "")


def drawn_fixes(fix: str) -> bool:
    """``fix`` is one of a random draw's own fixes (which no read-back rule should replace)."""
    own = (RANDOM_BRANCH_FIX, RANDOM_LOOP_FIX, RANDOM_VALUE_FIX, RANDOM_VALUE_FIX + RANDOM_MASK_FIX)  # the mask too
    return fix in own or fix.startswith(DRAWN_FILL_FIX[:40])


def only_raises(file: str, line: int) -> bool:
    """The ``if`` at ``file:line`` has no else and its body only raises (a NaN check, ``if torch.isnan(loss):
    raise``), or the line is an ``assert``: a check, not a branch, so the fix is an assertion on the device or a
    check outside, never torch.cond."""
    if (tree := parsed_file(file)) is None:
        return False
    if any(isinstance(n, ast.Assert) and n.lineno == line for n in ast.walk(tree)):  # pyGAT's NaN asserts
        return True
    branch = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and n.lineno == line), None)
    return branch is not None and not branch.orelse and all(isinstance(s, ast.Raise) for s in branch.body)


CHECK_FIX = (
    "it only checks (an assert, or a branch that only raises): check the returned value outside the compiled "
    "function (if torch.isnan(loss): "
    "raise ...), or assert inside without branching: torch._assert_async(~torch.isnan(loss)), which raises on the "
    "device with no graph break"
)


def calls_vmap(file: str, line: int) -> bool:
    """The function defined at ``file:line`` calls ``vmap`` (``torch.func.vmap``, ``torch.vmap``): it, not a
    Python number in the user's code, fixes the size of the dimension it maps over."""
    fn = function_at(file, line)
    called = (c.func for c in ast.walk(fn) if isinstance(c, ast.Call)) if fn else ()
    return any((f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")) == "vmap" for f in called)


_BY_NUMBER = re.compile(
    r"\(it uses (?P<x>\S+)\.shape\[\d+\] as a plain Python number, as int\(\S+\) or a loop over range\(\S+\) does\)"
)


def by_vmap(words: str) -> str:
    """A size the code fixes, told for a function that calls vmap: vmap traces the dimension it maps over at
    one size, which the user's own code never reads as a number."""
    return _BY_NUMBER.sub(
        "(torch.func.vmap, which this function calls, traces the dimension it maps over at one size)", words
    )
