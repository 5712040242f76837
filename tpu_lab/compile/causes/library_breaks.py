"""A graph break inside a library's code that the user's own setting avoids: torch's transformer layers read
a mask's values back (``.item()``) to detect a causal mask unless told it is one (an argument of the call);
a model's random skip per layer (LayerDrop) branches on a tensor draw unless its config's probability is 0.
Where the break is such a one, its fix is that setting, never capture_scalar_outputs (the value decides a
branch there, so the setting only moves the break). Text in, a fix out."""

from __future__ import annotations

import ast
import builtins
import linecache
import re
from typing import Any

from tpu_lab.compile.causes.source_file import parsed_file, statement_at
from tpu_lab.compile.sources.packages import is_library, torch_folder, unshortened

_AVOIDED = {  # torch's function the break is in -> the argument that skips its read of tensor data
    "_detect_is_causal_mask": (
        "pass is_causal=True with the causal mask (nn.TransformerDecoder: tgt_is_causal=True; an encoder or "
        "nn.MultiheadAttention: is_causal=True): torch then skips reading the mask's values back to check it, "
        "and the break goes"
    ),
}


def avoided_by_argument(library: str) -> str:
    """The fix for a break at ``library`` (``torch/nn/modules/transformer.py:1249``, as a break names its
    place) where it is inside a torch function an argument of the user's call skips; '' elsewhere."""
    m = re.fullmatch(r"torch/(?P<path>.+\.py):(?P<line>\d+)", library)
    folder = torch_folder()
    if m is None or not folder:
        return ""
    path = f"{folder}/{m['path']}"
    for n in range(int(m["line"]), max(int(m["line"]) - 200, 0), -1):  # the def the line is in
        if d := re.match(r"\s*def (\w+)\(", linecache.getline(path, n)):
            return _AVOIDED.get(d[1], "")
    return ""


def backend_context(code: str) -> str:
    """The fix for a break at a ``with`` on one of torch's backend settings (``with
    torch.backends.cudnn.flags(enabled=False):``, wav2vec2's CTC loss) inside the compiled code: enter it
    around the call instead; '' for any other line."""
    m = re.match(r"\s*with\s+(torch\.backends\.[\w.]+)\(", code)
    if m is None:
        return ""
    return (
        f"enter `with {m[1]}(...)` around your call of the compiled function, not inside it: Dynamo cannot trace "
        "switching torch's backend settings, so it breaks the graph there"
    )


def ao_fix(library: str) -> str:
    """The fix for a break inside torch's eager-mode quantization (``torch/ao/...``: QAT's fake-quant modules and
    observers, which Dynamo skips on purpose); '' elsewhere."""
    if not re.match(r"torch/ao/(?:nn|quantization)/", library):
        return ""
    return (
        "eager-mode quantization modules (fake-quant, observers) are skipped by Dynamo on purpose, so little of the "
        "model compiles: train QAT uncompiled, or use PT2E quantization (the torchao package's prepare_qat_pt2e on "
        "an exported model), which compiles"
    )


def config_switch(library: str, words: str) -> str:
    """The fix for a data-dependent branch at ``library`` (a file:line as a break names it) whose value
    (``words``: ``computed from line 739: skip = p < self.config.layerdrop``) compares a tensor draw made just
    above with a setting of the model's config: that setting at 0 skips the draw; '' elsewhere."""
    m = re.fullmatch(r"(?P<path>.+\.py):\d+", library)
    origin = re.search(r"computed from line (\d+): .*?\b(\w+)\s*[<>]=?\s*self\.config\.(\w+)", words)
    file = unshortened(m["path"]) if m and origin else ""
    if not (file and origin):
        return ""
    line, drawn, setting = int(origin[1]), origin[2], origin[3]
    above = (linecache.getline(file, n) for n in range(line - 1, max(line - 12, 0), -1))
    if not any(re.match(rf"\s*{drawn}\s*=\s*torch\.rand", text) for text in above):
        return ""
    return (
        f"a random skip per layer (LayerDrop: config.{setting}) draws a tensor and branches on it: set "
        f"model.config.{setting} = 0.0 before the first call ({setting}=0.0 in from_pretrained or the config), so "
        "no draw is made and the layers compile in one graph; keep it above 0 only where that regularisation is "
        "worth the breaks"
    )


def setting_behind(library: str, code: str) -> tuple[str, str]:
    """(words, fix) for a break at ``library`` (a file:line as a break names it) that the library reaches only
    under a setting the user chose: an argument of its function (``error_if_nonfinite``) or an attribute its
    module was built with (``self.momentum is None``) in an ``if`` around the line, or before it in the line's
    own ``and``; where that setting's default avoids the branch, the fix is the default. ``code``: the user's
    line, which may pass it. ("", "") elsewhere."""
    m = re.fullmatch(r"(?P<path>.+\.py):(?P<line>\d+)", library)
    file = unshortened(m["path"]) if m else ""
    tree = parsed_file(file) if file else None
    if tree is None or m is None:
        return "", ""
    line = int(m["line"])
    spans = [n for n in ast.walk(tree) if _spans(n, line)]
    function = next((n for n in reversed(spans) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)), None)
    if function is None:
        return "", ""
    for test, holds in _conditions(function, line):
        for part in _and_parts(test, line) if holds else [test]:
            said = _setting_fix(tree, function, part if holds else ast.UnaryOp(ast.Not(), part), code)
            if said:
                return said
    return "", ""


def _spans(node: ast.AST, line: int) -> bool:
    return getattr(node, "lineno", 0) <= line <= (getattr(node, "end_lineno", 0) or 0)


def _conditions(function: ast.AST, line: int) -> list[tuple[ast.expr, bool]]:
    """The ``if`` tests around ``line`` in ``function``, innermost first: (test, True) where the line runs
    when it holds (its body, or later in the test itself), (test, False) in its ``else``."""
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.If) and _spans(node, line):
            body = node.body[0].lineno <= line <= (node.body[-1].end_lineno or 0)
            orelse = bool(node.orelse) and node.orelse[0].lineno <= line
            if body or _spans(node.test, line) or orelse:
                found.append((node.test, not orelse or body))
    return sorted(found, key=lambda t: -t[0].lineno)


def _and_parts(test: ast.expr, line: int) -> list[ast.expr]:
    """The parts of ``test`` that hold where ``line`` runs, innermost first: all of an ``and``, or, where the
    line is the test's own (it broke there), those before its last call (short-circuit: ``flag and
    torch.isnan(x).any()`` reads the tensor only where ``flag`` holds)."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    calls = [i for i, p in enumerate(parts) if any(isinstance(n, ast.Call) for n in ast.walk(p))]
    if _spans(test, line) and calls:
        parts = parts[: calls[-1]]
    return parts[::-1]


_SIMPLE = (ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.UnaryOp)


def _setting_fix(tree: ast.Module, function: ast.AST, test: ast.expr, code: str) -> tuple[str, str] | None:
    """Where ``test`` reads one setting (an argument of ``function`` or ``self.<name>``) and its default makes
    ``test`` false: (words, fix)."""
    if not all(isinstance(n, (*_SIMPLE, ast.Not, ast.Load, ast.cmpop)) for n in ast.walk(test)):
        return None
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    attributes = {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
    args = function.args  # type: ignore[attr-defined]
    if attributes and names == {"self"} and len(attributes) == 1 and "training" not in attributes:
        (name,) = attributes
        default = _init_default(tree, name)
        where = f"the module's {name}, as it was built"
    elif len(names) == 1 and not attributes and (name := names.pop()) in _defaults(args):
        default, where = _defaults(args)[name], f"the argument {name}"
    else:
        return None
    optional = isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.IsNot)  # an input given or not: data
    flag = isinstance(test, ast.Name | ast.Attribute | ast.UnaryOp) and not isinstance(default, bool)
    if default is _NONE or optional or flag or _holds(test, name, default):
        return None
    shown = ast.unparse(test)
    passed = re.search(rf"\b{name}\s*=\s*([^,()]+)", code)
    yours = f"; your line passes {name}={passed[1].strip()}" if passed else ""
    words = f", reached only where {shown} holds: {where}{yours}"
    fix = (
        f"{name}={default!r} (its default) avoids this branch and its break: "
        + (
            f"pass {name}={default!r}"
            if where.startswith("the argument")
            else f"build it with {name}={default!r}, or set .{name} = {default!r} before compiling"
        )
        + " if you can do without what that setting turns on; else call it outside the compiled function, or accept the break"
    )
    return words, fix


_NONE = object()  # no default known


def _defaults(args: ast.arguments) -> dict[str, Any]:
    """A function's parameters that have a literal default -> that default."""
    positional = [*args.posonlyargs, *args.args]
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    out = {}
    for arg, default in pairs:
        try:
            out[arg.arg] = ast.literal_eval(default)
        except ValueError:
            continue
    return out


def _init_default(tree: ast.Module, name: str) -> Any:
    """The default of the ``__init__`` parameter ``name`` in ``tree`` (the module's own setting), else _NONE."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "__init__" and name in (found := _defaults(node.args)):
            return found[name]
    return _NONE


def _holds(test: ast.expr, name: str, value: Any) -> bool:
    """Whether ``test`` holds with its one setting ``name`` at ``value`` (an unknown form counts as holding)."""

    def value_of(node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name | ast.Attribute):
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not value_of(node.operand)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = value_of(node.left), value_of(node.comparators[0])
            compare = {ast.Is: lambda: left is right, ast.IsNot: lambda: left is not right}
            compare |= {ast.Eq: lambda: left == right, ast.NotEq: lambda: left != right}
            if type(node.ops[0]) in compare:
                return compare[type(node.ops[0])]()
        raise ValueError(name)

    try:
        return bool(value_of(test))
    except ValueError:
        return True


LIBRARY_COMPILED = (  # torch.compile(swa_model.update_parameters): nothing to edit, and nothing gained
    "none that makes it compile: {name} is {package}'s code, which Dynamo gives up on, so it runs eagerly as if "
    "uncompiled; drop the torch.compile around it and compile your own code (the model, your step) instead"
)


def outside_fix(code: str, file: str = "") -> str:
    """The generic fix for a break inside library code, naming the call on the user's line that reached it
    where the line makes one call; a ``with`` line's context manager (``torch.random.fork_rng()``) moves out
    with its block."""
    code = "" if file and is_library(file) else code  # a line of torch's own (QAT's conv_fused): nothing to move
    callees = [c for c in re.findall(r"([A-Za-z_][\w.]*)\s*\(", code.strip()) if not hasattr(builtins, c)]
    if code.strip().startswith(("with ", "async with ")) and callees:
        return (
            f"move the with block ({code.strip()}) out of the compiled function (do its work before the call and "
            "pass in what it makes), or accept the break"
        )
    if len(callees) != 1:  # which of several calls reached the library is not known: none is named
        return "call it outside the compiled function, or accept the break"
    return (
        f"call {callees[0]}(...) outside the compiled function (before the call, passing in what it returns), or "
        "accept the break"
    )


def warned_fix(library: str, code: str, file: str = "") -> str:
    """The fix for a break at a ``warnings.warn`` inside library code (``library``: its file:line): the warning's
    own text names what the call did to reach it (``Support for mismatched key_padding_mask and attn_mask is
    deprecated. Use same type for both instead.``), so changing that on the user's line removes the break;
    '' where that line warns nothing readable, or where Dynamo can move the call past the graph (no keyword, no
    Warning class: reorderable_logging_functions is the fix there)."""
    path, _, line = library.rpartition(":")
    full = unshortened(path)
    text = statement_at(linecache.getline(full, int(line)), f"{full}:{line}", 2000) if full and line.isdigit() else ""
    try:
        call = ast.parse(text).body[0] if "warn(" in text else None
    except SyntaxError:
        return ""
    value = call.value if isinstance(call, ast.Expr) else None
    message = value.args[0] if isinstance(value, ast.Call) and value.args else None
    if isinstance(value, ast.Call) and not value.keywords and len(value.args) < 2:  # Dynamo can move it: its fix
        return ""
    if isinstance(message, ast.JoinedStr):  # an f-string: its fixed text, the values by name
        said = "".join(
            str(p.value) if isinstance(p, ast.Constant) else "{" + _formatted(p) + "}" for p in message.values
        )
    else:
        said = message.value if isinstance(message, ast.Constant) and isinstance(message.value, str) else ""
    if not said:
        return ""
    how = outside_fix(code, file)  # the user's line's call, never one on torch's own line
    return (
        f"the break is a warning the library gives here ({said.strip()!r}): change what it names in your call and "
        f"the library no longer warns, nor breaks the graph; or {how}"
    )


def _formatted(part: ast.expr) -> str:
    """An f-string's value part as the code writes it (``mask_name``)."""
    return ast.unparse(part.value) if isinstance(part, ast.FormattedValue) else ast.unparse(part)
