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
from tpu_lab.compile.causes.random_draws import random_origin
from tpu_lab.compile.causes.source_file import parsed_file

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


CONTROL_FIX = (
    "the value decides Python control flow (a loop or branch): capture_scalar_outputs only moves the break "
    "there; keep it in tensors (masks, torch.where, torch.cond / torch.while_loop), or compile only the "
    "tensor work and run the Python bookkeeping outside the compiled function"
)
_ON_VALUES = re.compile(r"^(?:(?:el)?if|while)\b|^for\b.*\bin\b.*\.(?:tolist|item|nonzero|unique)\(")


def controls_python(code: str, file: str = "", line: int = 0) -> bool:
    """The user's line is Python control flow on a tensor's values (an if/while on one, a for over
    ``.tolist()``), or sits inside a loop over a tensor's values: a number Dynamo would capture
    (capture_scalar_outputs) still decides the Python control, so the break only moves on."""
    if _ON_VALUES.match(code):
        return not _SIZED.match(code) or _branches_on_items(file, line)
    at, header = enclosing_loop(file, line)
    if _ON_VALUES.match(header) and (not _SIZED.match(header) or _branches_on_items(file, at)):
        return True
    return bool(at) and bool(_SCALAR.search(code)) and _feeds_branch(code, file, line)  # a number read back


def _feeds_branch(code: str, file: str, line: int) -> bool:
    """Inside a loop, the name ``code`` assigns reaches an if/while of the same block through later
    assignments (torchvision's ``target_area = ... .item()``, then ``w = ...target_area...``, then ``if 0 < w
    <= width:``, a retry loop): the number decides Python control flow, as a branch on it would."""
    return _later_branch(code, file, line, follow=True)[0] > 0


def _later_branch(code: str, file: str, line: int, follow: bool) -> tuple[int, str]:
    """(line, code) of the first later if/while of ``code``'s block that tests the name ``code`` assigns, or
    (``follow``) a name later assigned from it; (0, '') where there is none."""
    # what the line assigns, or the list it grows (``res.append(x.item())``, then ``if res[-1] < tol:``)
    target = re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)|\s*([A-Za-z_]\w*)\.(?:append|extend|insert)\(", code)
    if not (target and file and line):
        return 0, ""
    tracked, indent = {target[1] or target[2]}, len(code) - len(code.lstrip())
    for n in range(line + 1, line + 30):
        text = linecache.getline(file, n)
        if text.strip() and len(text) - len(text.lstrip()) < indent:
            break
        used = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", text)) & tracked
        if used and re.match(r"\s*(?:if|elif|while)\b", text):
            return n, text.strip()
        if follow and used and (a := re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)", text)):
            tracked.add(a[1])
    return 0, ""


# a loop over .tolist() runs a fixed number of times (the tensor's size): captured, its items break nothing
# unless the body branches on them (unlike .nonzero() or .unique(), whose lengths are the data's)
_SIZED = re.compile(r"^for\b.*\bin\b.*\.tolist\(\)")


def _branches_on_items(file: str, line: int) -> bool:
    """The for loop at ``file:line`` tests one of its own targets in an if/while/assert of its body (a beam
    search's ``if t == EOS``); True where the file cannot be read (no claim either way)."""
    if (tree := parsed_file(file)) is None:
        return True
    loop = next((n for n in ast.walk(tree) if isinstance(n, ast.For) and n.lineno == line), None)
    if loop is None:
        return True
    items = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    tests = [
        n.test
        for part in loop.body
        for n in ast.walk(part)
        if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert))
    ]
    return any(isinstance(n, ast.Name) and n.id in items for t in tests for n in ast.walk(t))


_SCALAR = re.compile(r"\.(?:item|tolist)\(\)")
# calls that keep a number for the user (a logger, a list, a writer, a progress bar), never for tensors
_KEEPS = re.compile(r"(?:^|_)(?:log\w*|print|append|extend|add\w*|write|update|record|info|debug|warn\w*|set_postfix)$")


def feeds_bookkeeping(code: str, file: str = "", line: int = 0) -> bool:
    """The user's line hands a tensor's number (``.item()``, ``.tolist()``) straight to Python bookkeeping
    kept between calls: an argument of a logging or list call (``self.log("loss", loss.item())``,
    ``history.append(...)``, unless ``history`` is a local of the function at ``file:line``, made anew each
    call), or stored on an attribute or in a container (``self.total += x.item()``, ``stats["loss"] = ...``).
    Captured as a graph value (capture_scalar_outputs) that bookkeeping is traced too: a list it grows is
    guarded on its length, a graph per step."""
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            given = [*node.args, *(k.value for k in node.keywords)]
            held = getattr(node.func, "value", None)  # best_tags of best_tags.append(...)
            if isinstance(held, ast.Name) and _local(file, line, held.id):
                continue
            if _KEEPS.search(name) and any(_SCALAR.search(ast.unparse(a)) for a in given):
                return True
        if isinstance(node, (ast.Assign, ast.AugAssign)) and _SCALAR.search(ast.unparse(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in targets):
                return True
    return False


def _local(file: str, line: int, name: str) -> bool:
    """``name`` is assigned in the function around ``file:line``: a list made anew at each call."""
    tree = parsed_file(file) if file and line else None
    if tree is None:
        return False
    around = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= line <= (n.end_lineno or 0)
    ]
    inner = max(around, key=lambda n: n.lineno, default=None)
    return inner is not None and any(
        isinstance(t, ast.Name) and t.id == name
        for n in ast.walk(inner)
        if isinstance(n, ast.Assign)
        for t in n.targets
    )


def bookkeeping_fix(code: str) -> str:
    """The fix for a number handed to Python bookkeeping, naming the tensor the line reads it from."""
    m = re.search(r"([\w.\[\]'\"]+)\.(?:item|tolist)\(\)", code)
    tensor = m[1] if m else "the tensor"
    return (
        f"keep {tensor} a tensor inside the compiled function (return it, or store {tensor}.detach()) and call "
        ".item() outside, where the logging runs; capture_scalar_outputs=True would trace the bookkeeping too (a "
        "list it grows is guarded on its length: a recompile at every logged step)"
    )


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


def only_raises(file: str, line: int) -> bool:
    """The ``if`` at ``file:line`` has no else and its body only raises (a NaN check, ``if torch.isnan(loss):
    raise``): a check, not a branch, so the fix is an assertion or a check outside, never torch.cond."""
    if (tree := parsed_file(file)) is None:
        return False
    branch = next((n for n in ast.walk(tree) if isinstance(n, ast.If) and n.lineno == line), None)
    return branch is not None and not branch.orelse and all(isinstance(s, ast.Raise) for s in branch.body)


CHECK_FIX = (
    "the branch only raises: check the returned value outside the compiled function (if torch.isnan(loss): "
    "raise ...), or assert inside without branching: torch._assert_async(~torch.isnan(loss)), which raises on the "
    "device with no graph break"
)


def calls_vmap(file: str, line: int) -> bool:
    """The function defined at ``file:line`` calls ``vmap`` (``torch.func.vmap``, ``torch.vmap``): it, not a
    Python number in the user's code, fixes the size of the dimension it maps over."""
    if (tree := parsed_file(file)) is None:
        return False
    fn = next(
        (
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.FunctionDef) and line in (n.lineno, *(d.lineno for d in n.decorator_list[:1]))
        ),
        None,
    )
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


def branched_again(code: str, file: str, line: int) -> str:
    """What to add to a branch's fix where a later line of the same block branches on the name ``code``
    assigns (``gamma = ... if sigma <= s_tmax else 0.``, then ``if gamma > 0:``): making only the first
    branchless moves the break there. '' where there is none."""
    n, text = _later_branch(code, file, line, follow=False)
    return _AGAIN.format(n, text) if n else ""


_AGAIN = (
    "together with line {0} ({1}), which branches on what this line assigns (made branchless alone, the break "
    "moves there); or compile only the tensor work the loop calls (a model, say) and keep the loop eager"
)
