"""Corpora of real code nobody here wrote, shipped in installed packages, for the watch's invariants
(``tpu_lab.testing.watch_invariants``): torch's own ``module_db`` (every ``nn.Module`` with its sample
inputs), ``optim_db`` (every optimizer with its configurations) and a slice of ``op_db`` (operators with
their sample inputs), all from ``torch.testing._internal``, which needs the ``expecttest`` package; and
transformers' architectures as tiny random models built from their configs, called directly, through
``generate`` and through a text-generation ``pipeline``. Each case compiles real code and calls it with its
inputs varied (shape, dtype, train/eval, grad mode, requires_grad, a learning rate); nothing is copied here.

This file plays the user: the small functions it compiles around an operator or an optimizer's step are
user code to the watch (outside the tpu_lab package, as a user's own script is), so it lives beside the
benchmark, not in tpu_lab. tests/test_watch_complete.py imports it for the CI sample."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from tpu_lab.testing.dynamo_account import counting_backend

BACKEND = "eager"  # compile counts and guards are the backend's same; eager compiles fastest
TRAINING_BACKEND = counting_backend  # where the code runs backward: its backward graphs are counted too


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


def op_cases(limit: int | None = None, every: int = 5) -> Iterator[Case]:
    """One case per ``every``-th ``op_db`` entry (a slice: the whole is some 2,000 operators): the operator
    called from a compiled function with up to four of its float32 samples (shapes, Python arguments and
    keyword options change between them), then its first sample in float64 and with ``requires_grad``."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    for info in op_db[::every][:limit]:
        name = f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name
        yield Case("op_db", name, functools.partial(_run_op, info, torch))


def _run_op(info: Any, torch: Any) -> None:
    def samples(dtype: Any, requires_grad: bool = False) -> list[Any]:
        if dtype not in info.supported_dtypes("cpu"):
            return []
        try:
            return list(info.sample_inputs("cpu", dtype, requires_grad=requires_grad))[:4]
        except Exception:
            return []

    op = info.op

    @torch.compile(backend=BACKEND)
    def call(x: Any, *args: Any, **kwargs: Any) -> Any:
        return op(x, *args, **kwargs)

    first = samples(torch.float32)
    for s in first:
        _quiet(functools.partial(call, s.input, *s.args, **s.kwargs))
    for s in samples(torch.float64)[:1] + (samples(torch.float32, True)[:1] if info.supports_autograd else []):
        _quiet(functools.partial(call, s.input, *s.args, **s.kwargs))


_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "vocab_size": 1024,  # the tokenizer tiny_model trains (1,000 tokens) fits: the pipeline's prompts are text
    "max_position_embeddings": 128,
    "attention_type": "original_full",  # BigBird's block-sparse attention traces to tens of GB here
}


_MAX_PARAMETERS = 2_000_000  # an architecture whose own size keys _TINY misses stays large: skipped


def transformers_cases(limit: int | None = None, names: tuple[str, ...] = ()) -> Iterator[Case]:
    """One case per causal-LM architecture transformers can build offline from its config, shrunk to a
    tiny size with random weights: its forward compiled and called at several lengths and batch sizes,
    then ``generate`` on the compiled forward, then a text-generation ``pipeline`` over prompts of several
    lengths in batches of two (left-padded)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    yield from _architectures("transformers", names or tuple(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), limit, _run_causal_lm)


def masked_lm_cases(limit: int | None = None, names: tuple[str, ...] = ()) -> Iterator[Case]:
    """One case per masked-LM (encoder) architecture, tiny and random as above: a training step (train
    mode, labels, backward) at two lengths and batch sizes, then eval under no_grad at a third."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    yield from _architectures("masked_lm", names or tuple(MODEL_FOR_MASKED_LM_MAPPING_NAMES), limit, _run_masked_lm)


def _architectures(
    corpus: str, chosen: tuple[str, ...], limit: int | None, run: Callable[[Any], None]
) -> Iterator[Case]:
    from transformers import AutoConfig

    count = 0
    for model_type in chosen:
        try:
            config = AutoConfig.for_model(model_type)
        except Exception:
            continue
        if limit is not None and count >= limit:
            return
        count += 1
        yield Case(corpus, model_type, functools.partial(run, config))


def _tiny(config: Any, auto: Any) -> Any:
    """The architecture at a tiny size with random weights, or None where it cannot be built that small."""
    import torch

    try:  # a heterogeneous config (per-layer sizes) refuses even the reading of a global size
        for key, value in _TINY.items():
            if hasattr(config, key):
                setattr(config, key, value)
        torch.manual_seed(0)
        model = auto.from_config(config)
    except Exception:
        return None
    if sum(p.numel() for p in model.parameters()) > _MAX_PARAMETERS:  # a size _TINY did not reach: not tiny
        return None
    return model


def _run_masked_lm(config: Any) -> None:
    import torch
    from transformers import AutoModelForMaskedLM

    if (model := _tiny(config, AutoModelForMaskedLM)) is None:
        return
    compiled = torch.compile(model, backend=TRAINING_BACKEND)
    vocab = min(int(getattr(config, "vocab_size", 128) or 128), 128)
    model.train()
    for batch, length in ((2, 7), (4, 11)):
        ids = torch.randint(0, vocab, (batch, length))

        def step(ids: Any = ids) -> None:
            compiled(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss.backward()

        _quiet(step)
    model.eval()
    with torch.no_grad():
        ids = torch.randint(0, vocab, (2, 15))
        _quiet(lambda: compiled(input_ids=ids, attention_mask=torch.ones_like(ids)))


def _run_causal_lm(config: Any) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    if (model := _tiny(config, AutoModelForCausalLM)) is None:
        return
    model.eval()
    compiled = torch.compile(model, backend=BACKEND)
    vocab = int(getattr(config, "vocab_size", 128) or 128)
    with torch.no_grad():
        for batch, length in ((1, 5), (1, 9), (2, 9), (2, 13)):
            ids = torch.randint(0, min(vocab, 128), (batch, length))
            _quiet(functools.partial(compiled, input_ids=ids, attention_mask=torch.ones_like(ids)))
        model.forward = torch.compile(model.forward, backend=BACKEND)  # what generate() calls per step
        ids = torch.randint(0, min(vocab, 128), (1, 6))
        _quiet(lambda: model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0))
    if vocab >= len(tokenizer := _tokenizer()):
        _quiet(lambda: _pipeline(model, tokenizer))


@functools.cache
def _tokenizer() -> Any:
    from tpu_lab.models.tiny import train_tokenizer

    return train_tokenizer()


def _pipeline(model: Any, tokenizer: Any) -> None:
    from transformers import pipeline

    generate = pipeline("text-generation", model=model, tokenizer=tokenizer, device="cpu")
    prompts = ["The cat", "A small model on a chip", "Compile once, run", "Tensor parallel runs on every host"]
    generate(prompts, batch_size=2, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)


CORPORA: dict[str, Callable[..., Iterator[Case]]] = {
    "module_db": module_cases,
    "optim_db": optimizer_cases,
    "op_db": op_cases,
    "transformers": transformers_cases,
    "masked_lm": masked_lm_cases,
}
