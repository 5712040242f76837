"""Guards on objects rather than values, in words: a type or identity that changed (a replaced submodule,
another instance, an enum member), and torch.compile's shared wrapper of non-module callables."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tpu_lab.compile.causes.cause import Cause, local_name, shown_as_module
from tpu_lab.compile.causes.raised_guards import raised_guard

_TYPE_ID = re.compile(
    r"___check_type_id\((?P<name>(?:\w+\.__getitem__\([^()]*\)|[^,()])+), \d+\)(?:, type=<class '(?P<cls>[\w.]+)'>)?"
)
_OBJ = re.compile(r"___check_obj_id\((?P<name>[^,]+),|ID_MATCH.*?(?P<name2>L\[.+?\]|G\[.+?\])")
_TORCH_CONSTANT = re.compile(r"^(?P<name>\S+) == torch\.(?P<value>\w+)$")  # a dtype, layout or memory format


def object_words(g: str, at: str, inputs: Mapping[str, str] | None = None) -> Cause | None:
    """A failed type or identity guard in words (``at``: the user's file:line behind it; ``inputs``: what
    the inputs and the guards' other objects are now, by name); None for others."""
    if m := _TORCH_CONSTANT.match(g.strip()):
        kind = "dtype" if _is_dtype(m["value"]) else "torch constant"
        return Cause(
            "dtype" if kind == "dtype" else "value",
            f"{local_name(m['name'])} is another {kind} now, was torch.{m['value']} (each one passed is its own graph)",
            g,
            f"expected once per {kind}; pass one {kind} every call if it changes often",
        )
    if m := re.fullmatch(r"ClosureGuardAccessor: Not a function on (?P<name>.+)\.__closure__", g.strip()):
        return Cause(  # the graph read a closure's values; the new object has no closure to read: another function
            "identity",
            f"{local_name(m['name'])} is now another function, one without the closure the graph read (a lambda "
            "over other variables, or a plain function): each function passed is its own graph",
            g,
            f"{_FN_FIX}, with what changes as tensor arguments rather than closed-over values",
        )
    if m := re.fullmatch(r"CodeGuardAccessor: Not a function on (?P<name>.+)\.__code__", g.strip()):
        return Cause(  # a guard on a Python function's code found no code: another function, a builtin now
            "identity",
            f"{local_name(m['name'])} is now another function, one without Python code (a builtin such as F.gelu): "
            "each function passed is its own graph",
            g,
            _FN_FIX,
        )
    if raised := raised_guard(g):
        return raised
    if (m := _TYPE_ID.search(g) or _OBJ.search(g)) and _shared_wrapper(m, at):
        was = f"a {m['cls'].rsplit('.', 1)[-1]}" if "cls" in m.groupdict() and m["cls"] else "another callable"
        return Cause(
            "shared_wrapper",
            f"the first compile of this callable: torch.compile wraps the callables it compiles (partials, objects "
            f"with __call__, modules passed to torch.compile) in one shared function, so Dynamo counts it as a "
            f"recompile of that wrapper (it last held {was})",
            g,
            "none for this one; but those callables share one recompile limit (torch._dynamo.config.recompile_limit): "
            "for many, compile the function (or the model) that calls them once",
        )
    if m := re.fullmatch(r"TYPE_MISMATCH\((?P<name>[^()]+)\)", g.strip()):  # the C++ guard's own word for it
        name = local_name(m["name"])
        now = kind_of((inputs or {}).get(name, "")) or "of another type"
        return Cause(
            "type",
            f"{name} is now {now} (a check of its type failed)",
            g,
            "expected once per type; pass the same type every call",
        )
    if m := _TYPE_ID.search(g):
        name, was = local_name(m["name"]), (m["cls"] or "?").rsplit(".", 1)[-1]
        module = (
            re.search(r"\._modules\['[^']+'\]$", m["name"]) is not None
            or ".nn.modules." in (m["cls"] or "")
            or (name != "self" and shown_as_module((inputs or {}).get(name, "")))  # a module of the user's class
        )
        now = kind_of((inputs or {}).get(name, ""))
        if "None" in (now, was):  # a value and None: the code's two cases, each its own graph
            was = "None" if was == "NoneType" else _a(was)
            return Cause(
                "type",
                f"{name} is now {now or 'a value'}, was {was} (each case is its own graph)",
                g,
                none_fix(name if now == "None" else ""),
            )
        if (m["cls"] or "").startswith("torch.nn.utils.parametrize.Parametrized"):  # a class per module
            return Cause("type", _PARAMETRIZED.format(name), g, _PARAMETRIZED_FIX)
        if now and now == _a(was) and m["cls"]:  # two classes of one name (yolov5's own SiLU for torch's)
            now, was = f"{now} of another module", re.sub(r"^torch\.nn\.modules\.\w+\.", "torch.nn.", m["cls"])
        # CRNN's data_parallel(model, ...): a helper called with another module (self is an instance, told apart)
        passed = module and re.fullmatch(r"\w+", name) is not None and name != "self"
        return Cause(
            "type",
            f"{name} is now {now or 'of another type'}, was {_a(was)}"
            + (", another module passed in (each case is its own graph)" if passed else "")
            + (" (a submodule was replaced)" if module and not passed else ""),
            g,
            "expected once per module type it is called with; to keep one graph, compile the model that calls this "
            "function (its calls with each module then trace inside that one graph) in place of the function"
            if passed
            else "expected once per type; "
            + ("swap submodules before the first compiled call" if module else "pass the same type every call"),
        )
    if m := _OBJ.search(g):
        name = local_name(m["name"] or m["name2"] or "an input")
        if (cls := _enum_class(g)) is not None:
            return Cause(
                "enum",
                f"{name} is another {cls} member (each enum value is its own graph)",
                g,
                "expected once per value, and nothing to do for a few values: code that picks a path by the "
                "value compiles each path as a graph of its own (an int in its place would too); where values "
                "change often, compute each choice as tensor math and select with a tensor (torch.where)",
            )
        if (inputs or {}).get(name) == "type":  # a class passed (copy's __newobj__(cls)): its graph is the class's
            return Cause("identity", f"{name} is another class now: each class is a graph of its own", g, _CLASS_FIX)
        held = (inputs or {}).get(name.removesuffix(".func"), "") if name.endswith(".func") else ""
        if held.startswith("partial("):  # functools.partial: Dynamo guards the function it wraps
            return Cause(
                "identity",
                f"{name.removesuffix('.func')} wraps another function now ({held}): each function is its own graph",
                g,
                "expected once per function; for many, pass a flag or a name and pick the function inside",
            )
        if name.endswith(".__code__"):  # a function passed in: its code, another function's now
            fn = name.removesuffix(".__code__")
            return Cause("identity", f"{fn} is now another function: each function passed is its own graph", g, _FN_FIX)
        if _optimizer((inputs or {}).get(name, "")):  # SAC's critic, policy and alpha optimizers: one graph each
            return Cause(
                "identity",
                f"{name} is another {(inputs or {})[name]} than the one compiled for: each optimizer's step (its own "
                "parameters and state) is a graph of its own",
                g,
                "expected once per optimizer where each steps its own parameters (an actor's and a critic's); if "
                "your code builds a new optimizer for the same parameters (each epoch or step), build it once and "
                "reuse it",
            )
        return Cause(
            "identity",
            f"{name} is a different object than the one compiled for (another module "
            "instance, function or Python object)",
            g,
            "reuse one instance across calls",
        )
    return None


def _optimizer(kind: str) -> bool:
    """Whether a value described as ``kind`` (``Adam``) is one of torch's optimizers."""
    import torch

    found = getattr(torch.optim, kind, None) if re.fullmatch(r"[A-Z]\w*", kind) else None
    return isinstance(found, type) and issubclass(found, torch.optim.Optimizer)


_CLASS_FIX = "expected once per class; pass one class, or build the objects outside the compiled function"
_FN_FIX = "expected once per function; pass the same one every call where you can"


def none_words(raw: str, now_value: bool, g: str, inputs: Mapping[str, str], caller: str = "") -> Cause:
    """A value that is None now, or was (``mask is None``), with what it is now where that is known;
    ``caller``: the library that called the compiled function, and so chose to pass None or not."""
    name = local_name(raw)
    value = inputs.get(name, "") if now_value else ""
    now = (kind_of(value) if value and value != "None" else "a value") if now_value else "None"
    if re.search(r"param_groups\[\d+\]\['params'\]\[\d+\]\.grad$", name):  # an optimizer step's parameter
        fix = (
            "expected once per parameter group that starts training (its first gradient): nothing to change (a "
            "zero gradient set by hand would make AdamW decay a frozen parameter)"
        )
    elif name.endswith(".grad"):  # None until a first gradient, and after zero_grad() (set_to_none by default)
        fix = (
            "expected once per case: a parameter's .grad is None until its first backward and after each "
            "optimizer.zero_grad(); where some parameters skip steps (a head used every other step), "
            "zero_grad(set_to_none=False) keeps zeros there instead, and one graph"
        )
    elif re.match(r"self[.\[]", name) and not now_value:  # set to None between calls, by code outside the module
        fix = none_fix(name)
    elif name.startswith("self."):
        fix = _set_before(name, inputs.get("self", ""))
    elif caller:  # e.g. a model passes its full-attention layers no mask and its sliding-window layers one
        fix = (
            f"expected once per case: {caller} passes {name} as None on some calls and as a value on others "
            "(a model's layer types, a first step and the rest), and nothing you pass changes that"
        )
    elif m := re.match(r"(\w+)\[\d+\]", name):  # one Optional per item (a DQN batch's next states)
        fix = _PER_ITEM.format(m[1])
    else:
        fix = always_pass(raw)
    return Cause(
        "none", f"{name} is now {now}, was {'None' if now_value else 'a value'} (each case is its own graph)", g, fix
    )


_PER_ITEM = (
    "{0} holds one optional value per item: each pattern of None over its items is a graph of its own (2**n of "
    "them for n items), so the recompile limit comes soon; build the tensors outside the compiled function (a "
    "mask of the items with a value, and zeros where there is none) and compile the work on those tensors"
)


_SET_NONE = (
    "expected once per case: code outside the compiled call set {0} to None between calls; where that is a "
    "one-off pass over the model (torch.optim.swa_utils.update_bn sets each BatchNorm's momentum to None), give "
    "it the uncompiled module (model, not torch.compile(model)): the pass then compiles nothing; else keep "
    "{0} one type"
)


def _set_before(name: str, owner: str = "") -> str:
    """The fix for an attribute the code itself set after the first compile (a transformers model sets
    ``config.problem_type`` on its first call with labels): the user sets it first, not passes it. ``owner``:
    how the inputs show ``self`` (``EarlyStopping``; a module as ``MLP (train)``), so the fix names it."""
    kind = "module" if shown_as_module(owner) else "object"
    held = held_as(owner) if owner else "model"  # the user's own name for it is not known here: one in its class's
    whose = f", {held} being your {owner.split()[0]} {kind}" if owner else ""
    return (
        "expected once; to keep one graph, set it before the first compiled call (e.g. "
        f"{name.replace('self.', held + '.', 1)} = its value now{whose}: the code set it during the first call), and "
        "leave it so"
    )


def held_as(owner: str) -> str:
    """A name for the user's instance of ``owner`` (``TransformerModel (train)``): ``transformer_model``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", owner.split()[0]).lower()


def none_fix(attribute: str = "") -> str:
    """The fix where a value is None in some calls and not in others (``top_k=None`` turning top-k off);
    ``attribute``: a module's own attribute that is None now (set so between calls, not passed)."""
    if re.match(r"self[.\[]", attribute):
        return _SET_NONE.format(attribute)
    return (
        "expected once per case; to keep one graph, pass a value in place of None with the same effect: a tensor "
        "(an all-True mask, zeros) serves every call, but a number saves a compile only where it is the very value "
        "the other calls pass (Dynamo fixes a number into the graph: top_k=16 in place of None is a graph of its "
        "own beside top_k=5); or compile a function of its own for the None case"
    )


def always_pass(name: str) -> str:
    example = (
        " (e.g. an all-False mask: True marks padding there)"
        if "padding_mask" in name
        else " (a mask that masks nothing: e.g. all ones where 1 keeps a position)"
        if "mask" in name
        else ""
    )
    return f"expected once per case (None and a value are a graph each); where a value exists at every call, pass it always to keep one graph{example}"


def kind_of(description: str) -> str:
    """``f32[]`` -> ``a tensor (f32[])``, ``int 2`` -> ``an int (2)``, ``SiLU (train)`` -> ``a SiLU``."""
    if not description:
        return ""
    if "[" in description and description.split("[")[0].isalnum():
        return f"a tensor ({description})"
    kind, _, value = description.partition(" ")
    if kind == "None":
        return "None"
    if kind in ("int", "float", "str") and value:
        return f"{_a(kind)} ({value})"
    return _a(kind)


def _a(kind: str) -> str:
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def _shared_wrapper(m: re.Match, where: str) -> bool:
    """A guard on ``fn`` itself in torch.compile's wrapper (``external_utils.inner``): another callable. Its
    place is torch's own code (the wrapper, or a torch decorator it runs: ``@torch.no_grad``'s), never the user's."""
    from tpu_lab.compile.sources.packages import package_of

    name = next((v for v in m.groups() if v), "")  # fn itself, or the code it runs (a method's, its decorator's)
    return _WRAPPED.fullmatch(name.strip()) is not None and (
        not where or package_of(where.rsplit(":", 1)[0]) == "torch"
    )


_WRAPPED = re.compile(r"fn(?:\.__func__)?(?:\.__code__|(?:\.__closure__\[\d+\]\.cell_contents)+(?:\.__code__)?)?")


def _is_dtype(name: str) -> bool:
    import torch

    return isinstance(getattr(torch, name, None), torch.dtype)


def _enum_class(g: str) -> str | None:
    """The class named in an identity guard (``type=<class 'train.Mode'>``) when it is an Enum."""
    import enum
    import sys

    m = re.search(r"type=<class '(?P<module>[\w.]+)\.(?P<cls>\w+)'>", g)
    cls = getattr(sys.modules.get(m["module"]), m["cls"], None) if m else None
    return m["cls"] if m and isinstance(cls, type) and issubclass(cls, enum.Enum) else None


_PARAMETRIZED = (
    "{0} is another parametrized module: torch.nn.utils.parametrize gives every module it parametrizes a class "
    "of its own (orthogonal, weight_norm, spectral_norm), so each new parametrized model is a graph of its own"
)
_PARAMETRIZED_FIX = (
    "expected once per model built: reuse one model (load other weights into it with load_state_dict), or, "
    "where you build many, raise torch._dynamo.config.recompile_limit to their number"
)
