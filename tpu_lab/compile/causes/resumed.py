"""Causes of a compile of the part of a function after a graph break (Dynamo's resumed frame): its
inputs are the function's own locals, which the caller cannot ``mark_dynamic`` (marking inside compiled
code is refused), and the value carried over the break is named as the user's code names it."""

from __future__ import annotations

import ast
import dataclasses
import linecache
import re
from collections.abc import Sequence

from tpu_lab.compile.causes.cause import CARRIED, Cause, local_name
from tpu_lab.compile.causes.guard_values import DRAW, held_fix
from tpu_lab.compile.causes.source_file import statement_at
from tpu_lab.compile.sources.frames import FunctionKey
from tpu_lab.compile.sources.resume_code import RESUME, short_call

_CARRIED_ITEM = re.compile(rf"(?:{re.escape(CARRIED)}|the carried value)((?:\[\d+\])+)")
_CARRIED_NAMED = re.compile(r"\bthe carried value(?!\w| \d)")  # whole, or an item of it: lam[0]
# a method left on the break's line that may change the value's shape (.permute(...)): what the line assigns is
# another value, so the carried one is named by its call; .astype(...) or .float() keep it, and the name with it
_RESHAPING = re.compile(
    r"at \.(?!(?:astype|to|float|double|half|bfloat16|int|long|bool|type|contiguous|clone|detach|cpu|cuda|numpy)\()"
)
_AT_PART = re.compile(r"at (?![.\[])")  # at sigma[zero_index]: the next argument, not a method or item of the value
_TYPED = r"(?::[^=]+)?"  # an annotation between the name and the = (out: ModelOutput = self.model(...))
_SLOT = re.compile(
    r"\bthe carried value(?: (\d+))?(?!\w)"
)  # one of several: ``the carried value 2``, slot 1, or [0] of it


def drawn_outside(fix: str) -> str:
    """``fix`` (held_fix's, or a few values') where the number it names is a random draw named after it was made."""
    m = re.match(rf"(?:compute what depends on|keep) ({DRAW}.*?\)) (?:outside the compiled|to a few values)", fix)
    return held_fix(m[1]) if m else fix


def carried_call(words: str, code: str) -> str:
    """A break's ``words`` with Dynamo's ```___stack0``` (a function the line was about to call when an earlier
    break on it stopped the trace: ``self.rnn`` of ``h = self.rnn(self.stats(x))``) named by the line's
    outermost call; by what it is where the line has none."""
    if "`___stack" not in words:
        return words
    try:
        calls = [n for n in ast.walk(ast.parse(code.strip())) if isinstance(n, ast.Call)]
    except SyntaxError:
        calls = []
    name = f"`{ast.unparse(calls[0].func)}`" if calls else "the function carried over the graph break before it"
    return re.sub(r"`___stack\d+`", lambda _: name, words)


def inside_names(sources: Sequence[str]) -> dict[str, str]:
    """Tensors a graph's guards check (Dynamo's sources) named as rows name them, a carried value as
    ``the carried value`` (``the carried value 2`` for ``___stack1``), as ``carried_named`` then renames it."""
    slot = lambda m: "the carried value" + (f" {int(m[1]) + 1}" if int(m[1]) else "")  # noqa: E731
    return {source: local_name(re.sub(r"___stack(\d+)", slot, source)) for source in sources}


def _break_line(function: FunctionKey, names: Sequence[tuple[str, str]] = ()) -> tuple[str, str, str, dict[str, str]]:
    """The break's line of a resumed frame: (its number, its code, the one name it assigns or '', the names a
    tuple assignment unpacks into: ``a, b = f()``, where the carried value is f()'s). Where the frame resumes
    with work left on the line (``logq = torch.tensor([... for i in ids.tolist()])``), the carried value is
    the call that broke (``ids.tolist()``, the last carried slot in ``names``), not what the line assigns."""
    line = function.label.rpartition(" ")[-1]
    code = linecache.getline(function.filename, int(line)).strip() if line.isdigit() else ""
    code = statement_at(code, f"{function.filename}:{line}", 2000) or code  # a call over several lines, whole
    slots = sorted((int(m[1]), user) for raw, user in names if (m := re.fullmatch(r"___stack(\d+)", raw)))
    # resumed at another part of the line (Normal(mu[m], sigma[m]) resumes at sigma[m]): the carried value is an
    # argument still to be used there, never what the line assigns (torch.where(c)[0] resumes at the value itself)
    elsewhere = (
        bool(slots) and _AT_PART.match(function.resumes_in) and not function.resumes_in[3:].startswith(slots[-1][1])
    )
    if (function.resumes_in == "inside line" or _RESHAPING.match(function.resumes_in) or elsewhere) and slots:
        return line, code, slots[-1][1], {}
    target = re.match(rf"^([A-Za-z_]\w*)\s*{_TYPED}=(?!=)", code)
    items = _unpacked(code)
    if target and (picked := re.search(r"\)\[(\d+)\]\s*(?:#.*)?$", code)):  # inds = torch.where(m)[0]: the
        return line, code, "", {f"[{picked[1]}]": target[1]}  # carried value is the call's tuple, its item the name
    loop = re.match(r"^for\s+.+?\s+in\s+(.+?):\s*(?:#.*)?$", code)  # a break in a loop's header: the list it walks
    return line, code, target[1] if target else (loop[1] if loop and len(loop[1]) <= 60 else ""), items


def _unpacked(code: str) -> dict[str, str]:
    """The names a tuple assignment unpacks into, by their index in the value (``out, (h, c) = lstm(x)``:
    ``[0]`` out, ``[1]`` (h, c), ``[1][0]`` h); empty for any other line."""
    try:
        body = ast.parse(code.split("#")[0].strip()).body
    except SyntaxError:
        return {}
    if not (body and isinstance(body[0], ast.Assign) and isinstance(body[0].targets[0], (ast.Tuple, ast.List))):
        return {}
    out: dict[str, str] = {}

    def walk(node: ast.Tuple | ast.List, path: str) -> None:
        for i, item in enumerate(node.elts):
            if isinstance(item, ast.Starred):  # later items' indexes depend on the value's length
                return
            if isinstance(item, ast.Name):
                out[f"{path}[{i}]"] = item.id
            elif isinstance(item, (ast.Tuple, ast.List)):
                out[f"{path}[{i}]"] = f"({ast.unparse(item).strip('()[]')})"
                walk(item, f"{path}[{i}]")

    walk(body[0].targets[0], "")
    return out


def _items_named(text: str, items: dict[str, str]) -> str:
    """The carried value's items by the names the break line unpacks them into, the longest path first
    (``the carried value[1][0]`` is h where the line reads ``out, (h, c) = ...``)."""

    def named(m: re.Match) -> str:
        path = m[1]
        for cut in sorted({p.end() for p in re.finditer(r"\]", path)}, reverse=True):
            if path[:cut] in items:
                return items[path[:cut]] + path[cut:]
        return m[0]

    return _CARRIED_ITEM.sub(named, text)


def _slots(names: Sequence[tuple[str, str]]) -> dict[int, str]:
    """The carried values the line names, by their slot (``___stack1``: 1)."""
    return {int(m[1]): user for raw, user in names if (m := re.fullmatch(r"___stack(\d+)", raw))}


def slots_named(guard: str, names: Sequence[tuple[str, str]]) -> str:
    """Dynamo's ``guard`` with each of several carried values (``L['___stack1']``) by what the line calls
    it, before a reader's names make them all one carried value; unchanged where one value is carried."""
    slots = _slots(names)
    if len(slots) < 2:
        return guard
    return re.sub(r"(?:L\[')?\b___stack(\d+)\b(?:'\])?", lambda m: slots.get(int(m[1]), m[0]), guard)


def carried_named(text: str, function: FunctionKey, names: Sequence[tuple[str, str]] = ()) -> str:
    """``text`` (what Dynamo made dynamic: ``the carried value[3] dim 0``) with the carried value named as the
    break line assigns it (``lam``), as the causes name it; unchanged where the line assigns no name."""
    _, _, target, items = _break_line(function, names)
    text = _items_named(text, items)
    slots = _slots(names)
    if len(slots) > 1:  # several values carried (``h + gn(h)`` broke in gn): each by what the line calls it
        text = _SLOT.sub(lambda m: slots.get(int(m[1] or 1) - 1, m[0]), text)
    elif slots:  # one named, beside a function the line was about to call (self.dec(self.lr(x, d))): by number
        text = re.sub(r"\bthe carried value (\d+)(?!\w)", lambda m: slots.get(int(m[1]) - 1, m[0]), text)
    target = target or next(iter(slots.values())) if len(slots) == 1 else target  # else by what the line calls it
    return _CARRIED_NAMED.sub(target, text) if target else _CARRIED_NAMED.sub(CARRIED, text)


UNTIL_MARKED = "none needed once Dynamo makes the size dynamic; to mark it, "
"""How a resumed frame's size fix begins: what follows it is how to skip even the first recompile."""


_UNBACKED = re.compile(r"torch\._dynamo\.decorators\.mark_unbacked\([^()]*\)")


def in_resumed_frame(causes: list[Cause], function: FunctionKey, names: Sequence[tuple[str, str]] = ()) -> list[Cause]:
    """``causes`` of a resumed frame of ``function``: the break is what to change, and the carried value is
    the variable the break line assigns (``sizes = lengths.tolist()``: ``sizes[0] changed``), else that
    line quoted."""
    line, code, target, items = _break_line(function, names)
    instead = (
        f"{UNTIL_MARKED}remove the graph break at line {line} (see its fix) so the function is one graph, and mark "
        "the function's own input"
    )
    unbacked = (
        f"removing the graph break at line {line} (see its fix) and marking the function's own input with "
        "torch._dynamo.decorators.mark_unbacked"
    )
    slots = _slots(names)
    out = []
    for c in causes:
        words, fix = c.words, instead if "mark_dynamic(" in c.fix else c.fix
        fix = _UNBACKED.sub(unbacked, fix)  # a value made after the break is marked nowhere before a call
        words, fix = (_items_named(t, items) for t in (words, fix))
        own = sorted({int(n) for n in re.findall(r"___stack(\d+)", c.guard)})
        if len(slots) > 1 and own and all(n in slots for n in own):  # several carried: by the guards' own
            who = " and ".join(slots[n] for n in own)
            words, fix = words.replace(CARRIED, who), fix.replace(CARRIED, who)
        elif set(own) - set(slots) and slots:  # a guard on a slot the line's names miss: never another's name
            unnamed = next(n for n in own if n not in slots)
            words = words.replace(CARRIED, f"{CARRIED} {unnamed + 1} (from line {line})", 1)
        elif target or (target := next(iter(slots.values())) if len(slots) == 1 else ""):  # one carried: its name
            words, fix = words.replace(CARRIED, target), fix.replace(CARRIED, target)
        elif code:
            quoted = code if len(code) <= 80 else f"{code[:77].rsplit(' ', 1)[0]} ..."
            words = words.replace(CARRIED, f"{CARRIED} (from line {line}: {quoted})", 1)
        words, fix = (re.sub(r"\.\w+\.__self__\b", "", t) for t in (words, fix))  # losses.update.__self__: losses
        out.append(dataclasses.replace(c, words=words, fix=drawn_outside(fix)))
    return out


def named_inputs(signature: Sequence[tuple[str, str]], function: FunctionKey) -> tuple[tuple[str, str], ...]:
    """A resumed frame's inputs with the carried value named as the break line assigns it (``out``, ``h`` for
    ``out, (h, c) = self.lstm(packed)``), as its causes name it, where the line assigns names; any other
    function's inputs unchanged."""
    if not function.name.startswith(RESUME):
        return tuple(signature)
    _, code, _, _ = _break_line(function)
    call = code.split("=", 1)[1].strip() if re.match(rf"^[\w\s,()\[\]]+{_TYPED}=(?!=)", code) else ""
    out = []
    for name, said in signature:
        carried = f"the carried value{name[len(call) :]}" if call and name.startswith(call) else name
        named = carried_named(carried, function)
        if named == CARRIED and call:  # the whole value a tuple assignment unpacks (x1, x2 = box(...)): its call
            named = short_call(call) or named
        out.append((named if named != carried else name, said))
    return tuple(out)
