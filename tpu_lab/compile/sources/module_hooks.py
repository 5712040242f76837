"""The hooks of the submodules a compiled frame runs, counted at its compile: Dynamo does not guard a
submodule's empty hook dicts, so a hook added there later is silently not run (``watching/hooks_changed``
tells it). Part of the Dynamo source seam: read per compile, never per call."""

from __future__ import annotations

import itertools
import weakref
from typing import Any

from tpu_lab.compile.sources.wrappers import method_owner

HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def module_hooks(code: Any, values: dict[str, Any]) -> tuple[tuple[str, Any, tuple[int, ...]], ...]:
    """Each submodule of the module a frame compiles (``self``, or the module torch.compile's wrapper calls),
    with its hook count per dict now: Dynamo does not guard a submodule's empty hook dicts
    (``skip_nnmodule_hook_guards``), so a hook added there after the compile is silently not run. The
    module's own hooks run outside its graph, so it is left out."""
    import torch

    fn = values.get("fn")
    root = method_owner(code, values)
    root = root if isinstance(root, torch.nn.Module) else getattr(fn, "__self__", fn)
    if not isinstance(root, torch.nn.Module):
        return ()
    return tuple((name, weakref.ref(m), hook_count(m)) for name, m in itertools.islice(root.named_modules(), 1, 1025))


def hook_count(module: Any) -> tuple[int, ...]:
    """How many hooks each of ``module``'s hook dicts holds (``HOOK_DICTS``' order)."""
    return tuple(len(getattr(module, a, None) or ()) for a in HOOK_DICTS)
