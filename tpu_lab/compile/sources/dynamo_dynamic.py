"""What Dynamo's automatic dynamic shapes decided for a compiled graph: the Python numbers it marked
dynamic in its per-code state (``torch._dynamo.pgo``), less those the new graph's own guards still pin to
one value (a float tensorified then specialised again, an nn.Module's int attribute, a list of ints), and
the tensor dimensions the graph's guards pin to one size (a dict lookup on a size, ``mark_static``).
Part of the Dynamo source seam: what cannot be read gives no claim, never a guess."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from tpu_lab.compile.sources import dynamo_kept_guards
from tpu_lab.compile.sources.frames import Signature

_EQUALS = re.compile(
    r"^(?P<source>[^=<>!]+?) == (?:\(?[-\d.e+]+\)?|True|False)$"
)  # sympy brackets a negative: (-0.001)
_SIZE = re.compile(r"^(?P<source>.+?)\.size\(\)\[(?P<dim>\d+)\] == \d+$")
_CHECK = re.compile(
    r"^check_tensor\((?P<source>.+?), \w+, DispatchKeySet.*?\bsize=\[(?P<sizes>[^\]]*)\]"
)  # None: dynamic


def guard_parts(code: Any, compile_id: str) -> list[str] | None:
    """Every guard of the graph ``compile_id`` of ``code``, each with Dynamo's comment (None where it cannot
    be read: another torch, the graph not installed yet, or its guards deleted: Dynamo deletes a graph's
    guards once an object they hold by weak reference is freed, a model or optimizer local to a function
    that has returned, so a watch reads them as soon as the graph is installed, and keeps those Dynamo deletes
    while it is open: ``dynamo_kept_guards``)."""
    if (entry := cache_entry(code, compile_id)) is None:
        return None
    manager: Any = getattr(entry, "guard_manager", None)
    if "Deleted" in type(manager).__name__:  # DeletedGuardManagerWrapper: what was read before, if anything
        return dynamo_kept_guards.kept(manager)
    try:
        return tree_parts(manager.root)
    except Exception:  # another torch's guard tree: no claim
        return None


def cache_entry(code: Any, compile_id: str) -> Any:
    """Dynamo's cache entry for graph ``compile_id`` of ``code``: its guards, its transformed code (None where
    it cannot be read: another torch, no code, the graph not installed yet)."""
    try:
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        entries = _debug_get_cache_entry_list(code)
    except Exception:  # another torch, or no code: no claim
        return None
    return next((e for e in entries if str(getattr(e, "compile_id", "")) == compile_id), None)


def graph_guards(parts: list[str] | None) -> list[str] | None:
    """The guard code of a graph, from its ``guard_parts`` (None where they could not be read)."""
    return None if parts is None else [p.split("  # ")[0].strip() for p in parts]


def guard_places(parts: list[str] | None) -> dict[str, str]:
    """Dynamo's comment on each guard of a graph that has one (``if alpha > 0:  # train.py:14 in mix``:
    the code that set it, and where), by the guard's code, from its ``guard_parts``."""
    found = ((p.split("  # ")[0].strip(), p.partition("  # ")[2].strip()) for p in parts or ())
    return {g: comment for g, comment in found if comment}


_MAX_PARTS = 50_000  # a large model's graph has tens of thousands of guards at most


def tree_parts(root: Any) -> list[str]:
    """Every guard of the tree with Dynamo's comment (``L['n'] == 4  # x = f(n)  # train.py:7 in step``):
    Dynamo's own ``code_parts`` skips a dict's entries (a submodule's int attribute, a tensor in a batch
    dict), and the shape environment's guards come after the tree's, as Dynamo checks them."""
    from tpu_lab.compile.sources.dynamo_guards import guard_children

    parts: dict[str, None] = {}  # a guard relating several nodes sits on each: said once
    todo = [root]
    while todo and len(parts) < _MAX_PARTS:
        node = todo.pop()
        parts.update((str(p), None) for leaf in node.get_leaf_guards() for p in leaf.verbose_code_parts())
        todo += reversed(guard_children(node))
    parts.update((str(p), None) for g in root.get_epilogue_lambda_guards() for p in g.verbose_code_parts())
    return list(parts)


def pinned(guards: list[str]) -> tuple[frozenset[str], frozenset[tuple[str, int]]]:
    """(numbers the graph checks for one value, (tensor, dim) it checks for one size), by Dynamo's sources."""
    values = frozenset(m["source"].strip() for g in guards if (m := _EQUALS.match(g.strip())))
    sizes = {(m["source"].strip(), int(m["dim"])) for g in guards if (m := _SIZE.match(g.strip()))}
    for m in filter(None, (_CHECK.match(g.strip()) for g in guards)):
        sizes |= {(m["source"].strip(), d) for d, n in enumerate(m["sizes"].split(",")) if n.strip().isdigit()}
    return values, frozenset(sizes)


def dynamic_scalars(record: Any, guards: list[str] | None, reasons: tuple[str, ...] = ()) -> frozenset[str]:
    """The Python numbers (Dynamo's sources, ``L['n']``) that automatic dynamic shapes made symbolic in
    this record's graph: marked auto-dynamic in Dynamo's per-code state, and not pinned by the graph's own
    ``guards``, neither themselves nor a value computed from them (None: they cannot be read, so no number
    is claimed dynamic); and the numbers a failed guard in ``reasons`` held to one value that the new graph
    guards no more (DPO's logged rewards, carried over a break: later values reuse it)."""
    made, computed, _ = _made_dynamic(record, guards)
    failed = [
        re.sub(r"^\d+/\d+: ", "", r.strip().splitlines()[0]).split("  #")[0].strip() for r in reasons if r.strip()
    ]
    held = {m["source"].strip() for r in failed if (m := _EQUALS.match(r)) and not r.endswith(("True", "False"))}
    named = [re.sub(r"\bL\['(\w+)'\]", r"\1", g) for g in guards or ()]  # as the reasons spell them: ___stack0[1]
    dropped = {_as_guarded(s) for s in held if guards and not any(s in g for g in named)}
    return (made - computed) | frozenset(dropped)


def _as_guarded(source: str) -> str:
    """A failed guard's source as the graph's guards spell it: ``___stack0[1]`` -> ``L['___stack0'][1]``."""
    m = re.match(r"([A-Za-z_]\w*)(.*)", source)
    return f"L['{m[1]}']{m[2]}" if m else source


def baked_scalars(record: Any, guards: list[str] | None) -> dict[str, str]:
    """The Python numbers automatic dynamic made symbolic that the graph's own ``guards`` still pin, each with
    the guard that pins it: the number itself (``L['groups'] == 4``: the code needs one fixed value there,
    an nn.Module's int attribute is kept static) or a value computed from it (``round(L['lo'] / ...) ==
    143``). Later values of them still compile graphs."""
    _, computed, itself = _made_dynamic(record, guards)
    pins = {m["source"].strip(): g.strip() for g in guards or () if (m := _EQUALS.match(g.strip()))}
    found = {n: next((p for p in pins.values() if "(" in p and n in p), "") for n in computed}
    return found | {n: pins[n] for n in itself}


def _made_dynamic(record: Any, guards: list[str] | None) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(the numbers made dynamic and not pinned themselves, those of them a pinned expression computes on,
    the numbers marked dynamic that the graph pins themselves to one value)."""
    if guards is None:
        return frozenset(), frozenset(), frozenset()
    try:
        from torch._dynamo import pgo

        states, dynamic = pgo.get_code_state(), pgo.auto_dynamic
    except (ImportError, AttributeError):  # another torch: none known, the words stay the general ones
        return frozenset(), frozenset(), frozenset()
    where = (
        getattr(record, "co_filename", None),
        getattr(record, "co_firstlineno", None),
        getattr(record, "co_name", None),
    )
    out = set()
    for key, state in list(states.items()):
        if (getattr(key, "filename", None), getattr(key, "firstlineno", None), getattr(key, "name", None)) != where:
            continue
        for source, entry in getattr(state, "automatic_dynamic", {}).items():
            # a number made dynamic; an input that was a tensor before also keeps that tensor's sizes here
            if getattr(entry, "scalar", None) is dynamic:
                out.add(source)
    values, _ = pinned(guards)
    made = frozenset(out - values)
    derived = [v for v in values if "(" in v]  # an expression over numbers, pinned to one value
    computed = frozenset(n for n in made if any(n in v for v in derived) and not _reusable(n, guards))
    return made, computed, frozenset(out & values)


def _reusable(source: str, guards: list[str]) -> bool:
    """Whether the graph's ``guards`` on ``source`` alone (plain arithmetic, no calls) pass for two or more
    ints: a pinned expression that several values satisfy (``3*ws*ws*(8 // ws)*(8 // ws) == 192`` holds for
    2 and 4) pins no one value, and later values reuse the graph."""
    own = [t for g in guards if source in g and (t := _arithmetic(g, source)) is not None]
    if not own:
        return False
    passing = 0
    for n in _CANDIDATES:
        try:
            passing += all(_value(t, n) for t in own)
        except (ArithmeticError, ValueError):  # a division by zero: that value fails the graph's guards
            continue
    return passing >= 2


_CANDIDATES = (*range(65), *(m << k for k in range(6, 13) for m in (2, 3)))  # small ints, and sizes up to 12288

_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}


def _arithmetic(guard: str, source: str) -> ast.expr | None:
    """``guard`` parsed, where it is plain integer arithmetic and comparison on ``source`` and constants."""
    try:
        tree = ast.parse(guard, mode="eval").body
    except SyntaxError:
        return None
    allowed = (ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.BinOp, ast.UnaryOp, ast.USub, ast.Not, ast.Constant)

    def plain(node: ast.AST) -> bool:  # the source whole (L['seq'][1], not looked into), else arithmetic
        if isinstance(node, ast.Subscript):
            return ast.unparse(node) == source.replace('"', "'")
        if not isinstance(node, (*allowed, *tuple(_OPS))):
            return False
        return all(plain(child) for child in ast.iter_child_nodes(node))

    return tree if plain(tree) else None


def _value(node: ast.expr, n: int) -> Any:
    """``node`` (from ``_arithmetic``) evaluated with its one source standing for ``n``."""
    if isinstance(node, ast.Subscript):
        return n
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp):
        v = _value(node.operand, n)
        return -v if isinstance(node.op, ast.USub) else not v
    if isinstance(node, ast.BinOp):
        return _OPS[type(node.op)](_value(node.left, n), _value(node.right, n))
    if isinstance(node, ast.BoolOp):
        values = (_value(v, n) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    assert isinstance(node, ast.Compare)
    left = _value(node.left, n)
    for op, right in zip(node.ops, node.comparators, strict=True):
        r = _value(right, n)
        if not _OPS[type(op)](left, r):
            return False
        left = r
    return True


def dynamic_inputs(record: Any, signature: Signature, sources: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Inputs whose sizes Dynamo made symbolic (automatic dynamic shapes), from the graph's placeholder shapes,
    and those with the ones it traced symbolic and then specialised again to one size (``range(x.shape[1])``);
    ``sources``: the graph's guarded sources by their shown names, for a placeholder inside an input
    (``l_stack0_data_input_ids_`` is ``enc.data['input_ids']``, not a field ``data_input_ids``)."""
    text = getattr(record, "graph_node_shapes", None)
    if not text:
        return "", ""
    try:
        shapes = ast.literal_eval(text) if isinstance(text, str) else dict(text)
    except (ValueError, SyntaxError):
        return "", ""
    names = {n.replace("[", "_").replace("]", "").replace("'", "").replace(".", "_"): n for n, _ in signature}
    # Dynamo's node names are snake case too: lS_i[0] -> l_s_i_0
    names |= {re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", k).lower(): n for k, n in names.items()}
    inside = {_flat(source): shown for source, shown in (sources or {}).items()}
    out, tried = [], []
    for node, shape in shapes.items():
        if not node.lower().startswith("l_"):  # the graph's inputs come first: after them, a node named after
            break  # a variable of the code (l, l_1 of `for l in ...`) is not an input
        if "_parameters_" in node or "_buffers_" in node:
            continue
        name = names.get(node[2:].rstrip("_")) or inside.get(_flat(node)) or _indexed(node[2:].rstrip("_"), names)
        name = "the KV cache" if "cache_layers_" in node else name  # one per layer's keys and values
        # a resumed frame's input, an item of it, or an item's field (stack0_0_data: the value's [0].data)
        carried = re.fullmatch(r"_*stack(\d+)((?:_\d+)*)(?:_([A-Za-z]\w*))?", name)
        if carried:
            name = "the carried value" + (f" {int(carried[1]) + 1}" if int(carried[1]) else "")
            name += "".join(f"[{i}]" for i in carried[2].split("_")[1:]) + (f".{carried[3]}" if carried[3] else "")
        # a symbol (s0, s0 + 1); a symbol Dynamo specialised again reads as its number ("5"): static
        dims = [str(i) for i, d in enumerate(shape or []) if isinstance(d, str) and not d.isdigit()]
        again = [f"{name} dim {i}" for i, d in enumerate(shape or []) if isinstance(d, str) and d.isdigit()]
        scalar = shape == [] and any(n == name and d.startswith(("int ", "float ", "np.")) for n, d in signature)
        if dims:  # one item per dimension: a later graph may add one dimension of the same input
            out += [f"{name} dim {d}" for d in dims]
        elif scalar:
            out.append(name)
        tried += again
    return ", ".join(dict.fromkeys(out)), ", ".join(dict.fromkeys([*out, *tried]))


def _flat(name: str) -> str:
    """A source as Dynamo names the graph input it becomes: ``L['___stack0'].data['input_ids']`` and
    ``l_stack0_data_input_ids_`` both read ``l_stack0_data_input_ids``."""
    return re.sub(r"[^a-z0-9]+", "_", re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()).strip("_")


def tensor_sources(guards: list[str] | None) -> list[str]:
    """The tensors a graph's guards check, by Dynamo's source (``L['x']``, ``L['___stack0'].data['ids']``)."""
    return [m["source"].strip() for m in filter(None, (_CHECK.match(g.strip()) for g in guards or ()))]


def _indexed(flat: str, names: dict[str, str]) -> str:
    """A placeholder inside an input the row shows whole (``args_0_1`` of ``args: tuple len=1``,
    ``kwargs_position_embeddings_0`` of ``position_embeddings: tuple len=2``) by the input's name and
    indices, ``args[0][1]``; else the placeholder's name as it is. ``names``: flattened -> shown."""
    roots = {k.split("_", 1)[1] if k.startswith(("kwargs_", "args_")) else k: v for k, v in names.items()}
    for known, shown in sorted({**names, **roots}.items(), key=lambda kv: -len(kv[0])):
        if m := re.fullmatch(rf"(?:(?:kwargs|args)_)?{re.escape(known)}((?:_\d+)+)", flat):
            return shown + "".join(f"[{i}]" for i in m[1].split("_")[1:])
    if m := re.fullmatch(r"(kwargs|args)((?:_\d+)+)", flat):  # an item of *args the row shows no part of
        return m[1] + "".join(f"[{i}]" for i in m[2].split("_")[1:])
    for known, shown in sorted({**names, **roots}.items(), key=lambda kv: -len(kv[0])):
        if re.fullmatch(rf"(?:(?:kwargs|args)_)?{re.escape(known)}_\w+", flat):  # an attribute path: ambiguous
            return f"a tensor inside {shown}"  # (linear_cache_1: linear_cache[1] or linear.cache_1), so not guessed
    return flat


def guarded_dynamic(guards: list[str] | None) -> str:
    """The tensor dimensions a graph's own tensor guards leave free (``size=[2, None]``: dim 1 dynamic), by
    the input's name: what the graph holds dynamic even where it has no
    placeholder shape to read (a graph of few or no ops). Whole inputs only (``edge_index dim 1``)."""
    out = []
    for m in filter(None, (_CHECK.match(g.strip()) for g in guards or ())):
        name = re.fullmatch(r"L\['((?!___)\w+)'\]", m["source"].strip())  # a whole input, by its own name
        if name:
            out += [f"{name[1]} dim {d}" for d, n in enumerate(m["sizes"].split(",")) if n.strip() == "None"]
    return ", ".join(out)


def automatic_dynamic_off() -> bool:
    """Read while a frame compiles: torch.compile(dynamic=False) patches Dynamo's config around it."""
    import torch._dynamo.config as config

    return not getattr(config, "automatic_dynamic_shapes", True)


def dynamic_from_the_start() -> bool:
    """Read while a frame compiles: torch.compile(dynamic=True) makes every size dynamic in a new graph."""
    import torch._dynamo.config as config

    return not getattr(config, "assume_static_by_default", True)
