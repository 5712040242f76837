"""What a value read back from a tensor (``.item()``, ``.tolist()``) is used for, read from the user's code:
Python control flow (a branch, a loop, a comprehension that tests it), where capturing it only moves the break,
or bookkeeping (a log line, a list it grows), which can move out of the compiled function. Pure."""

from __future__ import annotations

import ast
import linecache
import re

from tpu_lab.compile.causes.branch_origin import enclosing_loop
from tpu_lab.compile.causes.cause import LOOP_RANGE
from tpu_lab.compile.causes.source_file import enclosing_def, parsed_file

BOTH_SIDES = (  # DKT's loss: torch.where(p > 0, log(p), 0) runs log(0) too, and its gradient turns the weights NaN
    "torch.where computes both sides, so give the side not taken a safe input (log(p.clamp_min(1e-12))) or its "
    "NaN reaches the gradient"
)
CONTROL_FIX = (
    "the value decides Python control flow (a loop or branch): capture_scalar_outputs only moves the break "
    f"there; keep it in tensors (masks, torch.where, torch.cond / torch.while_loop; {BOTH_SIDES}), or compile "
    "only the tensor work and run the Python bookkeeping outside the compiled function"
)
_ON_VALUES = re.compile(r"^(?:(?:el)?if|while)\b|^for\b.*\bin\b.*\.(?:tolist|item|nonzero|unique)\(")


def controls_python(code: str, file: str = "", line: int = 0) -> bool:
    """The user's line is Python control flow on a tensor's values (an if/while on one, a for over
    ``.tolist()``), or sits inside a loop over a tensor's values: a number Dynamo would capture
    (capture_scalar_outputs) still decides the Python control, so the break only moves on."""
    if _ON_VALUES.match(code):
        return not _SIZED.match(code) or _branches_on_items(file, line)
    if _tests_items(code):
        return True
    at, header = enclosing_loop(file, line)
    if _ON_VALUES.match(header) and (not _SIZED.match(header) or _branches_on_items(file, at)):
        return True
    return bool(_SCALAR.search(code)) and _feeds_branch(code, file, line)  # a number read back, then tested


def _feeds_branch(code: str, file: str, line: int) -> bool:
    """The name ``code`` assigns reaches a later if/while of the same block (or of a loop in it) through later
    assignments (torchvision's ``target_area = ... .item()``, then ``w = ...target_area...``, then ``if 0 < w
    <= width:``, a retry loop): the number decides Python control flow, as a branch on it would."""
    return later_branch(code, file, line, follow=True)[0] > 0


_CHOOSES = re.compile(r"\bif\s+(.+?)\s+else\b")  # a conditional expression's test: a seq2seq's teacher forcing


def later_branch(code: str, file: str, line: int, follow: bool) -> tuple[int, str]:
    """(line, code) of the first later if/while of ``code``'s block that tests the name ``code`` assigns, or
    (``follow``) a name later assigned from it; (0, '') where there is none."""
    # what the line assigns, or the list it grows (``res.append(x.item())``, then ``if res[-1] < tol:``)
    target = re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)|\s*([A-Za-z_]\w*)\.(?:append|extend|insert)\(", code)
    if not (target and file and line):
        return 0, ""
    tracked, indent = {target[1] or target[2]}, len(code) - len(code.lstrip())
    if follow and (home := enclosing_def(file, line)):  # followed, it may leave the block: the rest of the function
        indent = len(linecache.getline(file, home)) - len(linecache.getline(file, home).lstrip()) + 1
    for n in range(line + 1, line + 30):
        text = linecache.getline(file, n)
        if text.strip() and len(text) - len(text.lstrip()) < indent:
            break
        used = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", text)) & tracked
        tested = any(set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", t[1])) & tracked for t in _CHOOSES.finditer(text))
        # a loop count (Neural ODE's n_steps = math.ceil(....item()), then for i in range(n_steps)): control too
        looped = LOOP_RANGE.match(text.split("#", 1)[0])
        bound = (
            re.sub(r"\blen\([^()]*\)", "", looped["args"]) if looped else ""
        )  # a list's length is its size, no value
        counts = bool(set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", bound)) & tracked)
        if used and (
            re.match(r"\s*(?:if|elif|while)\b", text) or tested or counts or (follow and _ORDERS.search(text))
        ):
            return n, text.strip()
        if follow and used and (a := re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)", text)):
            tracked.add(a[1])
        if follow and used and (a := re.match(r"\s*([A-Za-z_]\w*)\.(?:append|extend|insert)\(", text)):
            tracked.add(a[1])  # a beam's candidates, appended to the list it then sorts
    return 0, ""


_ORDERS = re.compile(r"\bsorted\(|\.sort\(|\b(?:min|max)\(|\bheapq\.")  # Python picks by the values: control


def _tests_items(code: str) -> bool:
    """A comprehension over a tensor's values whose element tests them (``[(x not in skip) and (x != 0) for x in
    d] for d in ids.tolist()``: ColBERT's mask): membership and ``and``/``or``/``if`` need each value known."""
    if not re.search(r"\bfor\b.*\bin\b.*\.(?:tolist|item|nonzero|unique)\(", code):
        return False
    tests = re.sub(r"\bfor\s+[A-Za-z_]\w*\s+in\b", "", code)  # the comprehension's own `for x in`: no test
    for item in re.findall(r"\bfor\s+([A-Za-z_]\w*)\s+in\b", code):
        tested = rf"\b{item}\b\s+(?:not\s+)?in\b|\b(?:if|and|or)\s+\(?\s*{item}\b|\b{item}\b[^,\]]*?\)?\s+(?:and|or)\b"
        if re.search(tested, tests):
            return True
    return False


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
            kept = [t for t in targets if isinstance(t, (ast.Attribute, ast.Subscript))]
            if kept and not any(isinstance(t, ast.Attribute) and _computed_with(file, t.attr) for t in kept):
                return True
    return False


def _computed_with(file: str, attr: str) -> bool:
    """The attribute ``attr`` is passed to a torch call taking sizes elsewhere in ``file`` (the MoE dispatcher's
    ``torch.split(inp_exp, self._part_sizes, dim=0)``): the numbers stored there shape the work, not a log."""
    tree = parsed_file(file) if file else None
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        given = [*node.args, *(k.value for k in node.keywords)]
        if _SIZED_OP.fullmatch(name) and any(isinstance(a, ast.Attribute) and a.attr == attr for a in given):
            return True
    return False


# torch calls that take sizes or counts: numbers passed to them shape the work (a split's part sizes)
_SIZED_OP = re.compile(
    r"split|split_with_sizes|chunk|view|reshape|narrow|expand|repeat|repeat_interleave|zeros|ones|empty|"
    r"arange|randn|rand|randint|new_zeros|new_ones|new_empty|topk|pad|index_select"
)


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
    m = re.search(
        r"([\w\[\]'\"]+(?:\.\w+(?:\(\))?)*?)((?:\.(?:cpu|numpy|detach|float|double)\(\))*\.(?:item|tolist)\(\))", code
    )
    tensor, read = (m[1], m[2].lstrip(".")) if m else ("the tensor", "item()")
    return (
        f"keep {tensor} a tensor inside the compiled function (return it, or store {tensor}.detach()) and call "
        f".{read} outside, where the logging runs; capture_scalar_outputs=True would trace the bookkeeping too (a "
        "list it grows is guarded on its length: a recompile at every logged step)"
    )


def branched_again(code: str, file: str, line: int) -> str:
    """What to add to a branch's fix where a later line of the same block branches on the name ``code``
    assigns (``gamma = ... if sigma <= s_tmax else 0.``, then ``if gamma > 0:``): making only the first
    branchless moves the break there. '' where there is none."""
    n, text = later_branch(code, file, line, follow=False)
    return _AGAIN.format(n, text) if n else ""


_AGAIN = (
    "together with line {0} ({1}), which branches on what this line assigns (made branchless alone, the break "
    "moves there); or compile only the tensor work the loop calls (a model, say) and keep the loop eager"
)


def size_made_tensor(code: str, file: str, line: int) -> str:
    """The fix where ``code`` reads back numbers from tensors its function built from sizes a few lines above
    (Pytorch-UNet's ``diffY = torch.tensor([x2.size()[2] - x1.size()[2]])``, then ``F.pad(x1, [diffY // 2, ...])``):
    a Python int there is a size Dynamo keeps symbolic, with no break; '' where no such name is read."""
    for n in range(line + 1, line + 6):  # the statement whole: F.pad(x1, [diffX // 2, ...,\n diffY // 2, ...])
        if code.count("(") + code.count("[") <= code.count(")") + code.count("]"):
            break
        code += linecache.getline(file, n)
    names, made = set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", code)), list[tuple[str, int, str]]()
    for n in range(line - 1, max(line - 30, 0), -1):
        text = linecache.getline(file, n).strip()
        if text.startswith(("def ", "async def ")):
            break
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*=\s*torch\.(?:tensor|as_tensor)\(\[?(.+?)\]?\)", text)
        if m and m[1] in names and re.search(r"\.(?:size\(|shape\b)", m[2]) and m[1] not in (x for x, _, _ in made):
            made.insert(0, (m[1], n, m[2]))
    if not made:
        return ""
    them = " and ".join(x for x, _, _ in made)
    lines = ", ".join(str(n) for _, n, _ in made)
    return (
        f"{them} {'is a tensor' if len(made) == 1 else 'are tensors'} your code builds from sizes (line"
        f"{'s' if len(made) > 1 else ''} {lines}: torch.tensor([...])), read back here as numbers: keep "
        f"{'it a Python int' if len(made) == 1 else 'them Python ints'} ({'; '.join(f'{x} = {e}' for x, _, e in made)}), "
        "which Dynamo keeps as symbolic sizes, with no break"
    )
