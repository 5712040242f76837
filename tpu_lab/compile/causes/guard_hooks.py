"""A guard on a submodule's hooks in words: Dynamo guards a hook dict it traced non-empty, so adding or
removing a hook there recompiles (a pruning round swaps its pre-hook)."""

from __future__ import annotations

import re

from tpu_lab.compile.causes.cause import Cause, local_name


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
