"""A guard on a submodule's hooks in words: Dynamo guards a hook dict it traced non-empty, so adding or
removing a hook there recompiles (a pruning round swaps its pre-hook)."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import Cause, local_name
from tpu_lab.compile.causes.guard_objects import held_as


def hook_words(g: str) -> Cause | None:
    """A guard on a submodule's hooks (Dynamo guards a hook dict it traced non-empty) in words; None for others."""
    if not any(h in g for h in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")):
        return None
    held = re.search(r"([\w\[\]'.]+?)\._(?:forward|backward)(?:_pre)?_hooks", g)  # the module that holds them
    name = local_name(held[1] if held else g.split("._", 1)[0].split("(")[-1])
    if "torch.nn.utils.prune." in g:  # each pruning round replaces the module's pre-hook with another kind
        return Cause(
            "hooks",
            f"{name}'s pruning hook was replaced (torch.nn.utils.prune adds or swaps one at each pruning round)",
            g,
            "expected once per pruning round; prune.remove(module, 'weight') after the last round makes the "
            "pruning permanent, and the graph compiled before pruning serves the calls again",
        )
    return Cause(
        "hooks",
        f"a hook was added to or removed from {name}",
        g,
        "register hooks once, before the first compiled call",
    )


def forward_replaced(g: str, name: str, key: str, owner: str = "") -> Cause | None:
    """A module's instance dict gained ``forward`` (``not ___dict_contains('forward', self.fc2.__dict__)``): a
    hook library set a forward of its own on the instance (accelerate's ``add_hook_to_module``), or left one
    behind when the hook was removed (a bound method), and the graph was compiled with none there. ``owner``:
    how the inputs show ``self`` (``MLP (eval)``), so the fix names a module the user holds. None for others."""
    if key != "'forward'" or not name.endswith(".__dict__") or "not " not in g:
        return None
    module = name.removesuffix(".__dict__")
    mine = bool(owner) and module.startswith("self.")  # self stands for the user's instance: named after its class
    held = module.replace("self", held_as(owner), 1) if mine else module
    being = f", {held_as(owner)} being your {owner.split()[0]} module" if mine else ""
    return Cause(
        "hooks",
        f"{module}.forward was set on the instance (absent when this graph was compiled): a hook library replaced "
        "the module's forward (accelerate's add_hook_to_module does so), or left a copy of it on the instance "
        "when the hook was removed",
        g,
        "expected once per change; add such hooks before the first compiled call, and after removing one, drop "
        f"the instance's own forward ({held}.__dict__.pop('forward', None){being}): the module then runs its class's "
        "forward, and the graph compiled before the hook serves its calls again",
    )
