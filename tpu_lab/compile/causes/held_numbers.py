"""A Python number automatic dynamic shapes marked dynamic that the new graph still pins to one value: the
number itself (the code hands it to torch where one fixed value is needed, such as group_norm's group
count; an nn.Module's int attribute, which Dynamo keeps static), or a value computed from it (math.exp on
it). Each new value still compiles a graph, and the fix is not "make it dynamic" nor, where torch needs a
Python number, "pass a tensor". And the fix for a number Dynamo keeps static. Pure, but for
``module_int_fix``, which asks the installed Dynamo whether the config it names exists."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re

from tpu_lab.compile.causes.cause import LOOP_COUNT_FIX, Cause, Failure, local_name
from tpu_lab.compile.causes.guard_places import condition_place, owner, slocs
from tpu_lab.compile.causes.guard_values import held_fix
from tpu_lab.compile.sources.packages import USER

_MODULE_HINT = "integer attributes of the nn.Module"  # Dynamo's own hint on such a guard
_MODULE_INDEX = re.compile(r"nn/modules/container\.py:\d+ in (?:_get_abs_string_index|_get_item_by_idx)")  # layers[i]
_MODULE_SLICE = re.compile(
    r"_modules\.values\(\)\)\[idx\]\)?\s+#\s+nn/modules/container\.py:\d+ in __getitem__"
)  # [:n]
_INNERMOST = re.compile(r"\((?P<file>[^()\s]+\.py):(?P<line>\d+) in (?P<fn>\w+)\)\s*$")  # the library's frame


def held_cause(cause: Cause, name: str, pin: tuple[str, str], at_most: str, *, baked: str, now: str) -> Cause | None:
    """``cause`` (a changed number, ``baked``: the end of its words saying it is baked in) said with what
    pins it: ``pin`` is (the new graph's guard that pins it, Dynamo's comment on that guard); None where the
    number itself is pinned at 0 or 1 (``now``: its new value), which Dynamo compiles apart always."""
    guard, comment = pin
    start = cause.words.removesuffix(baked)
    itself = local_name(guard.split(" == ", 1)[0].strip()) == name
    if itself and re.fullmatch(r"int [01]", now):
        return None
    if itself and _MODULE_HINT in comment:
        words = f"): {module_static(name)}{at_most}"
        return dataclasses.replace(cause, words=start + words, fix=module_int_fix(name))
    if itself and _MODULE_INDEX.search(comment):  # the submodule an index picks is fixed into the graph
        words = (
            f"): Dynamo made {name} dynamic, but it indexes a ModuleList (or Sequential): the submodule each index "
            f"picks is fixed into the graph, so each new value compiles a graph of its own{at_most}"
        )
        fix = (
            f"pass the submodule in from the caller in place of indexing by {name} (f(x, ..., layer=layers[{name}])): "
            "a module passed in is an input, so one graph serves every layer of the same structure; or raise "
            "torch._dynamo.config.recompile_limit to at least the number of layers"
        )
        return dataclasses.replace(cause, words=start + words, fix=fix)
    if itself and _MODULE_SLICE.search(comment):  # layers[:n]: how many layers run is the graph's own
        words = (
            f"): Dynamo made {name} dynamic, but it slices a ModuleList (layers[:{name}]): which layers run is fixed "
            f"into the graph, so each new value compiles a graph of its own{at_most}"
        )
        fix = (
            f"expected once per value of {name}: keep it to a few values, or run every layer and weigh the ones "
            f"past {name} by zero (a mask tensor), so one graph serves all"
        )
        return dataclasses.replace(cause, words=start + words, fix=fix)
    if itself:
        who = _needs_it(comment)
        place = condition_place(guard, {guard: comment})
        torch_call = (
            r"\b((?:torch|F)\.[\w.]+)\((?:[^()]|\([^()]*\))*?"  # torch.linspace(, F.scaled_dot_product_attention(
        )
        called = re.search(rf"{torch_call}(?<![\w.]){re.escape(name)}\b", place)
        who = called[1] if who == "your line" and called else who  # torch.linspace(steps=n): an int there
        if who == "your line":  # Dynamo's own frame: the line uses it as a Python value (betas[t], math.sqrt(t))
            indexed = ", ".join(dict.fromkeys(re.findall(rf"[\w.]+\[{re.escape(name)}\]", place)))
            keyed = re.search(rf"(?<![\w.]){re.escape(name)} (?:not )?in ([\w.]+)", place)  # a cache looked up by it
            use = f"it indexes a Python list or tuple ({indexed})" if indexed else "it is used as a plain Python number"
            use = f"it is a key of the dict {keyed[1]}" if keyed else use
            cast = re.search(rf"\b(float|int)\({re.escape(name)}\)", place)  # ctx.gamma = float(gamma)
            use = f"it is turned into a Python number by {cast[0]}" if cast and not (indexed or keyed) else use
            int_of = r"(?:int|round|math\.floor|math\.ceil)"  # len_keep = int(L * (1 - mask_ratio)): a size made of it
            made = re.search(rf"(\w+)\s*=\s*({int_of})\((.*)", place)
            kept = "." in name and not name.startswith("self.") and not place  # meter.sum: an object's own number
            stored = re.search(r": self\.[\w.]+\s*[-+*/]?=(?!=)", place) or kept  # self.sum += val * n
            spelled = re.escape(re.sub(r"^kwargs\['(\w+)'\]$", r"\1", name))  # a keyword passed: by its name
            looped = re.search(
                rf"line (\d+): (for .+ in (?:reversed\()?range\((?:[^()]|\([^()]*\))*?(?<![\w.]){spelled}\b.*)\)$",
                place,
            )
            if looped and not (indexed or keyed or cast):  # for _ in range(max_new_tokens): the loop unrolled
                words = (
                    f"): it sets how many times the loop at line {looped[1]} runs ({looped[2]}), which Dynamo unrolls "
                    f"into the graph, so each value is a graph of its own{at_most}"
                )
                return dataclasses.replace(cause, words=start + words, fix=LOOP_COUNT_FIX.format(name))
            made = made if made and re.search(rf"(?<![\w.]){re.escape(name)}\b", made[3]) else None
            inted = None if made else _int_call(place, int_of, name)  # [max(int(r * (1 - overlap)), 1) ...]
            words = (
                f"): Dynamo made {name} dynamic, but {use}{place}, which needs one fixed value, so each new value "
                f"still compiles a graph of its own{at_most}"
            )
            fix = (
                f"hold what the line indexes in tensors (a schedule list as torch.tensor(...)) and pass {name} as a "
                f"one-element tensor (torch.tensor([{name}]): torch 2.13 reads a 0-d one back as an int), "
                "branching on it with torch.where, not if, so one graph serves every value; else raise "
                "torch._dynamo.config.recompile_limit to the number of values you use"
                if indexed
                else f"a lookup by a key needs its value, so each {name} is a graph of its own: build one entry at "
                f"the largest {name} before the first call and slice it to {name} inside (mask[:{name}, :{name}]), or keep "
                f"{name} to a few values"
                if keyed
                else f"keep {name} to a few values (each is a graph of its own); a tensor in its place would not do "
                f"as the line is: {cast[0]} reads a tensor back (a graph break), so pass a tensor only where that line "
                f"keeps it one (drop {cast[1]}(); a custom autograd.Function saves it with ctx.save_for_backward)"
                if cast
                else f"compute {made[1]} outside the compiled function and pass it in as a Python int: Dynamo makes an "
                "int argument dynamic, so one graph serves its values (0 and 1 apart); a tensor in place of "
                f"{name} would not do, as {made[2]}() reads it back (a graph break)"
                if made
                else f"expected once per value of {name}: the line makes a Python int of it ({inted}), a size or a "
                "count there, so each value is a graph of its own; keep it to a few values (a tensor in its place "
                f"would not do: {inted.split('(')[0]}() reads it back, a graph break)"
                if inted
                else f"keep {name} out of the compiled function's Python state: a number kept on an object the "
                "compiled code updates (an average meter's self.sum) is fixed into the graph, each value a graph; update that object outside the "
                f"compiled function, or keep {name.removesuffix('.item()')} a tensor (no .item())"
                if stored
                else held_fix(name)
            )
            return dataclasses.replace(cause, words=start + words, fix=fix)
        words = (
            f"): Dynamo made {name} dynamic, but {who} needs it as one fixed value{place}, so each new value "
            f"still compiles a graph of its own{at_most}"
        )
        fix = (
            f"keep {name} to a few values (each is a graph of its own), or raise torch._dynamo.config."
            f"recompile_limit to the number of values you use; a tensor in its place would not do: {who} takes "
            "a Python number there"
        )
        if tensor_taken(who, name, place):  # torch.quantile(err, 1 - c): q has a Tensor overload too
            words = words.replace(f"but {who} needs it as one fixed value", f"but {who} took it as a Python number")
            fix = (
                f"pass it as a 0-d tensor (torch.tensor(value)): {who} takes a tensor there too, which the graph "
                f"reads at run time, so one graph serves every value of {name}"
            )
        return dataclasses.replace(cause, words=start + words, fix=fix)
    words = (
        f"): Dynamo made {name} dynamic, but a value computed from it is baked into this graph, so each new "
        f"value still compiles a graph of its own{at_most}"
    )
    return dataclasses.replace(cause, words=start + words, fix=held_fix(name))


def _int_call(place: str, int_of: str, name: str) -> str:
    """The call on ``place`` (``int(r * (1 - overlap))``) that makes a Python int of an expression holding
    ``name``, brackets balanced; "" where none does."""
    for m in re.finditer(rf"\b{int_of}\(", place):
        depth, end = 0, m.end() - 1
        for end in range(m.end() - 1, len(place)):
            depth += {"(": 1, ")": -1}.get(place[end], 0)
            if depth == 0:
                break
        if re.search(rf"(?<![\w.]){re.escape(name)}\b", place[m.end() : end]):
            return place[m.start() : end + 1]
    return ""


def placed(pin: tuple[str, str] | None, f: Failure) -> tuple[str, str] | None:
    """``pin`` (the new graph's guard on a number, Dynamo's comment on it) with the user's line the failed guard
    names, where the comment names only Dynamo's own place (a float made a tensor, then fixed again there)."""
    if pin is None or slocs(pin[1]) or not (f.code and f.where):
        return pin
    return pin[0], f"{f.code}  # {f.where} in _ ({f.where} in _)"  # Dynamo's comment form: the line, its frame


def _needs_it(comment: str) -> str:
    """Who needs the number fixed, from the innermost frame Dynamo's comment names: ``torch's group_norm``, ``a
    check inside torch`` for a private module's; ``your line`` where that frame is Dynamo's own (the line used
    it as a Python value) or the user's;
    ``the code`` where the comment names none."""
    m = _INNERMOST.search(comment)
    package = owner(f"{m['file']}:{m['line']}") if m else None
    if m is None or package is None:
        return "the code"
    own = package == USER or re.search(
        r"(?:^|/)(?:_dynamo/|fx/experimental/|_subclasses/|fx/passes/_tensorify)", m["file"]
    )
    private = re.search(r"(?:^|/)_(?!_init__\.py)", m["file"]) or m["fn"].startswith("_")  # _prims_common, _refs
    return "your line" if own else f"a check inside {package}" if private else f"{package}'s {m['fn']}"


def static_number_fix(name: str, module: bool = True) -> str:
    """The fix for a Python int Dynamo keeps static after it changed (each value a graph); ``module``: whether
    ``self`` is an nn.Module (an optimizer's param group is no module: no module setting reaches it)."""
    if name.startswith("self.") and module:  # an nn.Module's int attribute: Dynamo keeps those static unless told
        return module_int_fix(name)
    if name.startswith("self."):  # Lookahead's step_counter kept in the param group the compiled step reads
        return f"keep {name} to a few values, or keep a number that only counts off what the compiled code reads"
    return "pass it as a tensor (torch.tensor(value)) so the graph reads it at run time, or keep it to a few values"


def module_int_fix(name: str) -> str:
    """An nn.Module's int attribute that changed: Dynamo's setting to make it dynamic (where the installed
    Dynamo has it), else a few values; a tensor only where the number scales tensors (a Python number may be
    needed: a triu diagonal, a group count)."""
    if ".config." in name:  # a model config's int (n_layer): another configuration, no module's own int
        return f"expected once per configuration: each model whose {name} differs is a graph of its own"
    import torch._dynamo.config as config

    few = f"keep {name} to a few values, or raise torch._dynamo.config.recompile_limit to the number you use"
    if not hasattr(config, "allow_unspec_int_on_nn_module"):
        return few
    return (
        "set torch._dynamo.config.allow_unspec_int_on_nn_module = True before the first compiled call, so Dynamo "
        f"makes {name} dynamic after one recompile (where torch needs one fixed value there, each value stays a "
        f"graph: then {few})"
    )


_TUPLE = re.compile(r"^(?P<name>[\w.\[\]'\"]+) == (?P<value>\((?:[-\w.'\" ]+, )*[-\w.'\" ]*,?\))$")  # (8,) too


def tuple_words(g: str) -> Cause | None:
    """A tuple of Python constants that changed (``self.pad.padding == (0, 8)``: a layer's padding, a kernel
    size): Dynamo keeps it as a constant, so each value is a graph of its own; None for other guards."""
    if (m := _TUPLE.match(g.strip())) is None:
        return _set_words(g)
    name = local_name(m["name"])
    words = f"tuple {name} changed (was {m['value']}): Dynamo keeps a tuple of constants in the graph, so each new value compiles a graph of its own"
    fix = (
        f"expected once per value of {name}, a setting of the module (a layer's padding, a kernel size): a sweep "
        "compiles a graph per configuration (torch._dynamo.reset() between configurations frees the old ones)"
        if name.startswith("self.")
        else f"keep {name} to a few values; where its numbers change every call, pass them in a tensor"
    )
    return Cause("value", words, g, fix)


# to_neighs[17] == {0, 1, 37}; set(), frozenset({1, 2}), {(0, 1), (2, 3)}: never a dict's {'a': 1}
_SET = re.compile(r"^(?P<name>[\w.\[\]'\"]+) == (?P<value>set\(\)|frozenset\(\{[^{}]*\}\)|\{(?![^{}]*: )[^{}]+\})$")


def _set_words(g: str) -> Cause | None:
    """A Python set's items that changed (GraphSAGE's sampled neighbours per node): Dynamo guards a set by its
    items, so each new set is a graph of its own; None for other guards."""
    if (m := _SET.match(g.strip())) is None:
        return None
    name = local_name(m["name"])
    words = (
        f"set {name} holds other items now (was {m['value']}): Dynamo keeps a Python set's items in the graph, so "
        "each new set compiles a graph of its own"
    )
    held = re.sub(r"\[\d+\]$", "", name)  # an item of a list of sets: the fix is the list's
    what = f"the sets in {held}" if held != name else name
    fix = (
        f"build what the code makes of {what} (an index tensor, a mask) outside the compiled function and pass "
        "that in, or compile only the tensor work that follows; sets that change every call otherwise compile "
        "every call, up to the recompile limit"
    )
    return Cause("set_items", words, g, fix)


def tensor_taken(who: str, name: str, place: str) -> bool:
    """``who`` (``torch.quantile``), called on the line quoted in ``place`` with ``name`` in one argument, has
    an overload that takes a Tensor in that argument's place (``quantile(Tensor self, Tensor q)`` beside
    ``quantile.scalar(..., float q)``): a tensor works there. False where that cannot be read."""
    import torch

    op = getattr(torch.ops.aten, who.rsplit(".", 1)[-1], None) if who.startswith(("torch.", "F.")) else None
    code = place.split(": ", 1)[-1].strip().removesuffix(")")  # the place's own closing bracket
    try:
        calls = [n for n in ast.walk(ast.parse(code.strip())) if isinstance(n, ast.Call) and ast.unparse(n.func) == who]
        schemas = [getattr(op, o)._schema for o in op.overloads()] if op is not None else []
    except (SyntaxError, AttributeError, RuntimeError):
        return False
    uses = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
    for call in calls:
        spots = [(i, "") for i, a in enumerate(call.args) if uses.search(ast.unparse(a))]
        spots += [(-1, k.arg or "") for k in call.keywords if uses.search(ast.unparse(k.value))]
        for i, key in spots:
            if op is None and _annotated_tensor(who, i, key):  # a Python API: torch.distributions.Beta's floats
                return True
            kinds = {
                str(a.type) for sc in schemas for j, a in enumerate(sc.arguments) if (a.name == key if key else j == i)
            }
            if "Tensor" in kinds and kinds - {"Tensor"}:
                return True
    return False


def _annotated_tensor(who: str, i: int, key: str) -> bool:
    """Whether the torch Python API ``who`` (``torch.distributions.Beta``, a class or function, not an aten op)
    annotates its argument at position ``i`` (or keyword ``key``) as taking a Tensor beside a number
    (``concentration1: Union[Tensor, float]``)."""
    import torch

    obj: object = torch
    for part in who.replace("F.", "torch.nn.functional.", 1).split(".")[1:]:
        obj = getattr(obj, part, None)
    try:
        params = list(inspect.signature(obj).parameters.values()) if callable(obj) else []  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    param = next((p for p in params if p.name == key), None) if key else params[i] if i < len(params) else None
    told = str(param.annotation) if param is not None else ""
    return "Tensor" in told and bool(re.search(r"float|int|Number", told))


def number_use(name: str, code: str) -> str:
    """How the line ``code`` makes ``name`` (or its attribute, ``self.k`` for ``pool.k``) a plain Python int that
    a torch op takes: ``int(self.k * g.shape[0])`` in torch.topk's k; '' where it does not (``math.exp(-steps /
    1000)`` goes on as a Python number, which a tensor could hold)."""
    attr = re.escape(name.rsplit(".", 1)[-1])
    cast = re.search(rf"\b(int|round)\((?:[^()]|\([^()]*\))*?(?<![\w])(?:[\w.]+\.)?{attr}\b", code)
    if not cast:
        return ""
    before = code[: cast.start()]
    calls = [c[1] for c in re.finditer(r"\b((?:torch|F)\.[\w.]+)\(", before) if _open(before[c.end() :])]
    return f"your line turns it into a Python number ({cast[1]}(...)) that {calls[-1]} takes" if calls else ""


def _open(text: str) -> bool:
    """Whether a call whose arguments begin ``text`` is still open at its end."""
    return text.count("(") >= text.count(")")


def module_static(name: str) -> str:
    """Why each value of an nn.Module's int ``name`` (an attribute, or an item of a list attribute) is a graph."""
    held = "the ints in an nn.Module's lists" if re.search(r"\[\d+\]$", name) else "an nn.Module's int attribute"
    return f"Dynamo keeps {held} static, so each new value compiles a graph of its own"
