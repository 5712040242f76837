"""A resume function's bytecode (the part of a function Dynamo runs after a graph break), read for what the
user's code says: where it really continues, and what the values carried over the break are (the call that
broke, a function it was about to call). Python's own ``dis``, and one private Dynamo read: the original code
object Dynamo keeps for each resume function (``_original_code``, with a contract test)."""

from __future__ import annotations

import ast
import dis
import inspect
import linecache
import re
import sys
from typing import Any

from tpu_lab.compile.causes.source_file import statement_at

RESUME = "torch_dynamo_resume_in_"  # Dynamo's name for the part of a function after a graph break

_STACK = re.compile(r"___stack(\d+)")
_BREAKING_OPS = ("CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_EX", "CALL_KW", "BINARY_SUBSCR")  # or x[mask]


def resume_point(code: Any) -> tuple[int, str]:
    """Where a resume function really continues: its prologue jumps to the instruction after the break.
    Work still to do on the break's own line (a chained call, a loop's header) is said as such: (that line,
    ``at .rand(...) in line`` or ``in the for loop's header at line``). Else, following unconditional jumps (the end of an
    if-branch jumps over its else), the first instruction on another line: (that line, ""). 0 where it
    cannot be read."""
    try:
        instructions = list(dis.get_instructions(code))
    except Exception:  # another Python's bytecode: no claim
        return 0, ""
    at = {ins.offset: i for i, ins in enumerate(instructions)}
    jump = next((ins for ins in instructions if ins.opname.startswith("JUMP")), None)
    i = at.get(jump.argval) if jump is not None and isinstance(jump.argval, int) else None
    if i is not None and (rest := _rest_of_line(instructions[i:], code.co_filename, code.co_firstlineno)):
        return code.co_firstlineno, rest
    seen, back = set(), False
    while i is not None and i < len(instructions) and i not in seen:
        seen.add(i)
        ins = instructions[i]
        line = ins.positions.lineno if ins.positions else None
        # a line above the break is where the code continues only through a loop's jump back; else it is a
        # `with` the break was inside, which the resume function enters again before it goes on
        if line and line != code.co_firstlineno and (line > code.co_firstlineno or back):
            return line, ""
        if ins.opname in ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_ABSOLUTE") and isinstance(ins.argval, int):
            back = back or ins.opname == "JUMP_BACKWARD" or ins.argval < ins.offset
            i = at.get(ins.argval)
        elif ins.opname.startswith("RETURN"):
            return 0, ""
        else:
            i += 1
    return 0, ""


def _rest_of_line(instructions: list[Any], file: str, line: int) -> str:
    """The work left on the break's line after the break: the next method or function it calls, or the
    for loop whose header it is ("" when only a store or a jump is left)."""
    rest = []
    for ins in instructions:
        if ins.positions is not None and ins.positions.lineno not in (None, line):
            break
        rest.append(ins)
    if any(ins.opname == "FOR_ITER" for ins in rest):
        return "in the for loop's header at line"
    if not any(
        ins.opname.startswith("CALL") or ins.opname in ("BINARY_SUBSCR", "BINARY_OP", "COMPARE_OP") for ins in rest
    ):
        return ""
    loads = ("LOAD_ATTR", "LOAD_METHOD", "LOAD_GLOBAL", "LOAD_NAME")
    work = (*loads, "BINARY_OP", "BINARY_SUBSCR", "COMPARE_OP")  # an operator first: "at .clamp" would skip it
    name = next((ins for ins in rest if ins.opname in work or ins.opname.startswith("CALL")), None)
    # only a method loaded to be called (3.11's LOAD_METHOD, 3.12's LOAD_ATTR with NULL|self) names the call:
    # an attribute read first is an argument (torch.where(c, a, self.b)), a global may be a module (torch.where)
    method = name is not None and (
        name.opname == "LOAD_METHOD" or (name.opname == "LOAD_ATTR" and "NULL" in name.argrepr)
    )
    if name is not None and name.opname == "BINARY_SUBSCR" and (text := _source_of(name, file, line)):
        return f"at {text} in line"  # target[valid] still to run (logits, target = logits[valid], target[valid])
    return f"at .{name.argval}(...) in line" if method and name is not None else "inside line"


def _source_of(ins: Any, file: str, line: int) -> str:
    """The code an instruction on ``line`` runs, as the line writes it (``target[valid]``); "" where it cannot be
    read."""
    text = _span(ins, file) if ins.positions is not None and ins.positions.lineno == line else ""
    return text if 0 < len(text) <= 30 and text.isprintable() else ""  # a short one: target[valid]


def _span(ins: Any, file: str) -> str:
    """The code ``ins`` runs, as ``file``'s source writes it (a call over several lines joined into one); else ''."""
    where = ins.positions
    if where is None or not where.lineno or not where.end_lineno or where.col_offset is None:
        return ""
    lines = [linecache.getline(file, n).encode() for n in range(where.lineno, where.end_lineno + 1)]
    if len(lines) > 30 or where.end_col_offset is None:
        return ""
    lines[-1] = lines[-1][: where.end_col_offset]
    lines[0] = lines[0][where.col_offset :]  # after the end's cut: on one line both offsets count from its start
    return " ".join(part.decode(errors="replace").strip() for part in lines).strip()


def carried_slots(code: Any, values: dict[str, Any]) -> dict[str, str]:
    """The carried values (``___stack0``, ...) by what the user's code calls them: the last one is the result
    of the call that broke (``token.tolist()``), read from the line's source; one holding a function or class
    the line was about to call is that function's name (``enumerate``)."""
    slots = sorted((int(m[1]), n) for n in code.co_varnames[: code.co_argcount] if (m := _STACK.fullmatch(n)))
    out = {}
    before, original = _before_resume(code) if slots else (None, None)  # the instruction the break stopped at
    file, first = code.co_filename, code.co_firstlineno  # a call over several lines, read whole (DINO's cumsum)
    line = statement_at(linecache.getline(file, first), f"{file}:{first}", 2000) or linecache.getline(file, first)
    call = _breaking_call(before, original)
    pending = _pending(line, call)
    for i, (_, name) in enumerate(slots[:-1]):
        value = values.get(name)
        if inspect.ismethod(value) and len(pending) == len(slots) - 1:  # losses.update: its object is guarded too
            out[name] = short_call(pending[i])
        elif isinstance(value, type) or inspect.isroutine(value):  # torch.where's qualname is _VariableFunctions...
            out[name] = getattr(value, "__qualname__" if isinstance(value, type) else "__name__", "")
        elif len(pending) == len(slots) - 1:  # what the line had evaluated when the call broke, in order
            out[name] = short_call(pending[i])
    if call and not _assigned(call, line):
        out[slots[-1][1]] = short_call(call)
    elif (branch := _at_branch(before, original)) is not None:  # a chained comparison's operands
        out.update(
            {n: short_call(b) for (_, n), b in zip(slots[-len(branch) :], branch, strict=False)} if branch else {}
        )
    elif (call or len(slots) == 1) and (one := re.match(r"\s*([A-Za-z_][\w.]*)\s*(?::[^=]+)?=(?!=)", line)):
        out[slots[-1][1]] = one[1]  # ptr = int(self.queue_ptr), self.rng = get_rng_state(): by the name it is given
    return {k: v for k, v in out.items() if v and v.isprintable()}


def short_call(code: str) -> str:
    """``code`` as an input's name: whole where short, a long call by what it calls (``torch.bincount(...)``)."""
    if len(code) <= 60:
        return code
    try:
        node = ast.parse(code, mode="eval").body
    except SyntaxError:
        return ""
    return f"{ast.unparse(node.func)}(...)" if isinstance(node, ast.Call) and len(ast.unparse(node.func)) <= 50 else ""


def carried_names(frame: Any) -> tuple[tuple[str, str], ...]:
    """A resumed frame's carried values (``___stack2``) by what its line calls them (``ids.tolist()``), for
    its causes; the functions the line was about to call are left out (nothing a cause is about)."""
    if not frame.f_code.co_name.startswith(RESUME):
        return ()
    slots = carried_slots(frame.f_code, frame.f_locals)
    kept = lambda v: not callable(v) or inspect.ismethod(v)  # noqa: E731  (a bound method's object: its state)
    return tuple((raw, user) for raw, user in slots.items() if kept(frame.f_locals.get(raw)))


def _pending(line: str, call: str) -> list[str]:
    """What the line had evaluated and left on Python's stack when ``call`` (a call inside it) broke, in
    stack order, each as the code writes it: ``torch.where(t > 0, self.table[t.item() - 1], x)`` breaking at
    ``t.item()`` holds ``torch.where``, ``t > 0``, ``self.table``. A constant is named as the argument it is
    (``log's argument 1``). Empty where the line holds an expression whose stack this does not follow."""
    try:
        tree, wanted = ast.parse(line.strip()), ast.unparse(ast.parse(call, mode="eval").body)
    except (SyntaxError, ValueError):
        return []
    path = next((p for p in _paths(tree) if ast.unparse(p[-1]) == wanted), None)
    out: list[str] = []
    for parent, child in zip(path or [], (path or [])[1:], strict=False):
        if isinstance(parent, ast.AugAssign):  # x.a += f(): x, then x.a's old value (x[m] += v breaks at x[m])
            target = parent.target
            if isinstance(target, ast.Attribute):
                out.append(ast.unparse(target.value))
            elif isinstance(target, ast.Subscript):
                out += [ast.unparse(target.value), ast.unparse(target.slice)]
            if child is parent.value:
                out.append(ast.unparse(target))
        elif isinstance(parent, ast.Assign) and child is not parent.value:  # x[i] = v: v first, then x, then i
            if len(parent.targets) > 1 or not isinstance(child, (ast.Subscript, ast.Attribute)):
                return []
            stored = parent.value
            out.append(
                f"the value stored in {ast.unparse(child.value)}"
                if isinstance(stored, ast.Constant)
                else ast.unparse(stored)
            )
        elif isinstance(parent, ast.Call) and child is not parent.func:
            given = [*parent.args, *parent.keywords]
            if any(isinstance(a, ast.Starred) or getattr(a, "arg", "") is None for a in given):
                return []  # *args, **kwargs: Python builds a tuple or dict first
            callee = ast.unparse(parent.func).rpartition(".")[2]
            out.append(ast.unparse(parent.func))
            for i, a in enumerate(given[: given.index(child)]):
                value, which = (a.value, a.arg) if isinstance(a, ast.keyword) else (a, i + 1)
                out.append(f"{callee}'s argument {which}" if isinstance(value, ast.Constant) else ast.unparse(value))
        elif isinstance(parent, ast.BinOp) and child is parent.right:
            out.append(ast.unparse(parent.left))
        elif isinstance(parent, ast.Subscript) and child is parent.slice:
            out.append(ast.unparse(parent.value))
        elif isinstance(parent, ast.Slice):  # x[:, :n]: a bound left out is a None on the stack all the same
            bounds = [parent.lower, parent.upper, parent.step]
            out += [ast.unparse(b) if b else "None" for b in bounds[: [id(b) for b in bounds].index(id(child))]]
        elif isinstance(parent, ast.Dict) and any(child is v for v in parent.values) and None not in parent.keys:
            i = [id(v) for v in parent.values].index(id(child))
            keys = list(parent.keys)
            if len(keys) > 1 and all(isinstance(k, ast.Constant) for k in keys):  # the keys come as one constant
                out += [ast.unparse(v) for v in parent.values[:i]]
            else:  # key, value, key, value: a constant key is no input (left unnamed, as a message's piece)
                said = lambda k: "" if isinstance(k, ast.Constant) else ast.unparse(k)  # noqa: E731
                out += [t for k, v in zip(keys[:i], parent.values[:i], strict=True) for t in (said(k), ast.unparse(v))]
                out.append(said(keys[i]))
        elif isinstance(parent, _COMPREHENSIONS) and child is parent.generators[0] and sys.version_info < (3, 12):
            out.append(f"<{type(parent).__name__.lower()}>")  # 3.11 calls a comprehension's own function on it
        elif isinstance(parent, ast.comprehension) and child is parent.iter:
            pass  # what it walks is evaluated first
        elif isinstance(parent, (ast.Tuple, ast.List)):
            out += [ast.unparse(e) for e in parent.elts[: [id(e) for e in parent.elts].index(id(child))]]
        elif not isinstance(parent, _NOTHING_PENDING):
            return []  # a comparison chain, a ** in a dict, a comprehension, an f-string: not followed here
    return out


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# nothing is left on the stack on the way to these nodes' first (or only) child
_NOTHING_PENDING: tuple[type[ast.AST], ...] = (ast.Module, ast.Expr, ast.Assign, ast.Return, ast.Attribute)
_NOTHING_PENDING += (ast.keyword, ast.UnaryOp, ast.Call, ast.BinOp, ast.Subscript, ast.Tuple, ast.List)


def _paths(node: ast.AST, above: tuple[ast.AST, ...] = ()) -> list[tuple[ast.AST, ...]]:
    """Every node of ``node``'s tree with the nodes above it, outermost first."""
    here = (*above, node)
    return [here] + [p for child in ast.iter_child_nodes(node) for p in _paths(child, here)]


_ASSIGNMENT = re.compile(r"^\s*\(?\s*[\w.]+(?:\s*,\s*[\w.]+)*\s*,?\s*\)?\s*=(?!=)\s*(?P<value>.+?)\s*(?:#.*)?$")


def _assigned(call: str, line: str) -> bool:
    """The line assigns the call's whole result to names: the carried value is named by them
    (``lam`` of ``mixed, y_a, y_b, lam = mixup(...)``, see ``causes/resumed.py``), not by the call."""
    m = _ASSIGNMENT.match(line)
    return m is not None and m["value"] == call  # x = f()[0]: the carried value is f()'s whole result, not x


def _breaking_call(before: Any, original: Any) -> str:
    """The source of the call the break stopped at (``before``, in ``original``); none where it stopped at
    something else."""
    text = _span(before, original.co_filename) if before is not None and before.opname in _BREAKING_OPS else ""
    return text if 0 < len(text) <= 300 and text.isprintable() else ""  # a long one named short (_short)


def _at_branch(before: Any, original: Any) -> list[str] | None:
    """Where the break stopped at a jump on a tensor's value (``if s_tmin <= sigmas[i] <= s_tmax``), what the
    line still holds there: a chained comparison's middle operands (``sigmas[i]``), never what the line
    assigns; None where it stopped at no jump."""
    if before is None or "JUMP" not in before.opname or "IF_" not in before.opname:  # 3.11: POP_JUMP_FORWARD_IF_
        return None
    try:
        node = ast.parse(_span(before, original.co_filename), mode="eval").body
    except SyntaxError:
        return []
    return [ast.unparse(c) for c in node.comparators[:-1]] if isinstance(node, ast.Compare) else []


def _before_resume(code: Any) -> tuple[Any, Any]:
    """(The original code's instruction just before the resume point, that code): the one the break stopped at.
    Dynamo's copy of the code before the resume point has lost its columns, so it is read in the original
    function's code, matched from the end (the code after the break is copied unchanged); (None, None) where
    the two do not match."""
    original = _original_code(code)
    try:
        instructions, before_break = list(dis.get_instructions(code)), list(dis.get_instructions(original))
    except Exception:  # no original (another torch), or another Python's bytecode
        return None, None
    jump = next((i for i, ins in enumerate(instructions) if ins.opname.startswith("JUMP")), None)
    target = next(
        (i for i, ins in enumerate(instructions) if jump is not None and ins.offset == instructions[jump].argval), 0
    )
    at = len(before_break) - (len(instructions) - target)  # the same instruction, counted from the end
    if not 0 < at < len(before_break) or before_break[at].opname != instructions[target].opname:
        at = _same_place(before_break, instructions[target:])  # else where the code after it matches longest
    return (before_break[at - 1], original) if at else (None, None)


def _same_place(original: list[Any], after: list[Any]) -> int:
    """Where in the original code the resume function's code after its jump (``after``) starts, where
    counting from the end misses (Dynamo's copy may differ by an instruction near its end): the place whose
    instructions match it for longest; 0 where none matches its first few."""
    key = lambda ins: (ins.opname, ins.argrepr)  # noqa: E731

    def matched(at: int) -> int:
        return next(
            (n for n, (a, b) in enumerate(zip(original[at:], after, strict=False)) if key(a) != key(b)), len(after)
        )

    scores = {at: matched(at) for at in range(1, len(original)) if key(original[at]) == key(after[0])} if after else {}
    best = max(scores, key=lambda at: (scores[at], -at), default=0)
    return best if best and scores[best] >= min(4, len(after)) else 0


def _original_code(code: Any) -> Any:
    """The function a resume function was made from (private to Dynamo: ContinueExecutionCache's metadata;
    ``tests/test_watch_blind15.py`` checks its shape)."""
    try:
        from torch._dynamo.resume_execution import ContinueExecutionCache

        meta = ContinueExecutionCache.generated_code_metadata.get(code)
    except Exception:
        return None
    return getattr(meta, "code", None)
