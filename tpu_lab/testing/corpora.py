"""Corpora of real code nobody here wrote, shipped in installed packages, for the watch's invariants
(``watch_invariants``): torch's own ``module_db`` (every ``nn.Module`` with its sample inputs) and
``optim_db`` (every optimizer with its configurations, from ``torch.testing._internal``, which needs the
``expecttest`` package), and transformers' architectures as tiny random models built from their configs.
Each case compiles real code and calls it with its inputs varied (shape, dtype, train/eval, grad mode,
requires_grad, a learning rate); nothing is copied into tpu_lab."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

BACKEND = "eager"  # compile counts and guards are the backend's same; eager compiles fastest


class Case(NamedTuple):
    corpus: str
    name: str
    run: Callable[[], None]
    """Compiles and calls the code; exceptions from the code itself are the code's, caught per call."""


def _quiet(call: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):  # the corpus's own failures in eager are not the watch's business
        call()


def module_cases(limit: int | None = None) -> Iterator[Case]:
    """One case per ``module_db`` entry: the module compiled and called with each of its samples that share
    the first sample's constructor (different shapes), then in eval mode, under no_grad, and in float64."""
    import torch
    from torch.testing._internal.common_modules import module_db

    for info in module_db[:limit]:
        yield Case("module_db", info.name, functools.partial(_run_module, info, torch))


def _run_module(info: Any, torch: Any) -> None:
    samples = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=False, training=True)
    if not samples:
        return
    first = samples[0].constructor_input
    same = [s for s in samples if repr(s.constructor_input.args) == repr(first.args)][:4]
    try:
        module = info.module_cls(*first.args, **first.kwargs)
    except Exception:
        return
    compiled = torch.compile(module, backend=BACKEND)
    for s in same:
        _quiet(functools.partial(compiled, *s.forward_input.args, **s.forward_input.kwargs))
    call = same[0].forward_input
    module.eval()
    _quiet(lambda: compiled(*call.args, **call.kwargs))
    with torch.no_grad():
        _quiet(lambda: compiled(*call.args, **call.kwargs))
    module.double()
    doubled = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in call.args]
    _quiet(lambda: compiled(*doubled, **call.kwargs))


def optimizer_cases(limit: int | None = None) -> Iterator[Case]:
    """One case per ``optim_db`` entry: a compiled ``step`` on a small model for each of its configurations
    (up to three), with the learning rate changed between steps as a scheduler would."""
    import torch
    from torch.testing._internal.common_optimizers import optim_db

    for info in optim_db[:limit]:
        yield Case("optim_db", info.name, functools.partial(_run_optimizer, info, torch))


def _run_optimizer(info: Any, torch: Any) -> None:
    for config in info.optim_inputs_func(device="cpu")[:3]:
        model = torch.nn.Linear(4, 2)
        try:
            opt = info.optim_cls(model.parameters(), **config.kwargs)
        except Exception:
            continue

        @torch.compile(backend=BACKEND)
        def step(opt: Any = opt) -> None:
            opt.step()

        for _ in range(3):
            model(torch.randn(3, 4)).sum().backward()
            _quiet(step)
            for group in opt.param_groups:
                if isinstance(group.get("lr"), float):
                    group["lr"] *= 0.5


_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 128,
    "max_position_embeddings": 128,
    "attention_type": "original_full",  # BigBird's block-sparse attention traces to tens of GB here
}


_MAX_PARAMETERS = 2_000_000  # an architecture whose own size keys _TINY misses stays large: skipped


def transformers_cases(limit: int | None = None, names: tuple[str, ...] = ()) -> Iterator[Case]:
    """One case per causal-LM architecture transformers can build offline from its config, shrunk to a
    tiny size with random weights: its forward compiled and called at several lengths and batch sizes,
    then ``generate`` on the compiled forward."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    chosen = names or tuple(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    count = 0
    for model_type in chosen:
        try:
            config = AutoConfig.for_model(model_type)
        except Exception:
            continue
        if limit is not None and count >= limit:
            return
        count += 1
        yield Case("transformers", model_type, functools.partial(_run_causal_lm, config))


def _run_causal_lm(config: Any) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    for key, value in _TINY.items():
        if hasattr(config, key):
            setattr(config, key, value)
    try:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
    except Exception:
        return
    if sum(p.numel() for p in model.parameters()) > _MAX_PARAMETERS:  # a size _TINY did not reach: not tiny
        return
    compiled = torch.compile(model, backend=BACKEND)
    vocab = int(getattr(config, "vocab_size", 128) or 128)
    with torch.no_grad():
        for batch, length in ((1, 5), (1, 9), (2, 9), (2, 13)):
            ids = torch.randint(0, min(vocab, 128), (batch, length))
            _quiet(functools.partial(compiled, input_ids=ids, attention_mask=torch.ones_like(ids)))
        model.forward = torch.compile(model.forward, backend=BACKEND)  # what generate() calls per step
        ids = torch.randint(0, min(vocab, 128), (1, 6))
        _quiet(lambda: model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0))


CORPORA: dict[str, Callable[..., Iterator[Case]]] = {
    "module_db": module_cases,
    "optim_db": optimizer_cases,
    "transformers": transformers_cases,
}
