"""``GenerationSession``: generate with TPU-friendly shapes and watch every compilation.

The seed's advice, made concrete: inputs stay on CPU (generate moves what forward consumes), a static
cache with a fixed ``max_cache_len``, prompts left-padded to a bucket with their attention mask. The
session compiles the model's forward itself with ``dynamic=False``, as torch_tpu compiles per shape, so
CPU and GPU show the compile counts a TPU would pay (backend per device: ``aot_eager`` on CPU,
``inductor`` on CUDA, torch_tpu's ``tpu`` on TPU, which is what generate's default TPU config uses).
Each forward is timed and snapshotted; ``tpu_lab.compile_log`` attributes compiles to shapes.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from html import escape
from typing import Any

from tpu_lab import _render
from tpu_lab.buckets import bucket_for, validate_buckets
from tpu_lab.compile_log import (
    CompileEvent,
    CompileSource,
    DynamoSource,
    ForwardCall,
    ShapeRow,
    ShapeSignature,
    ShapeTally,
    TpuCacheSource,
)
from tpu_lab.errors import InvalidArgument, TpuLabError

DEFAULT_BACKEND = {"cpu": "aot_eager", "cuda": "inductor", "tpu": "tpu"}
COMPILE_PHASES = {"all": ("prefill", "decode"), "decode": ("decode",), "none": ()}
# Room for new tokens above the largest bucket when max_cache_len is not given.
NEW_TOKEN_ROOM = 64
_session_ids = itertools.count(1)


class RecompileError(TpuLabError):
    """A compilation happened inside ``GenerationSession.no_recompiles()``."""


@dataclass(frozen=True)
class GenerationRecord:
    """One ``generate`` call: shapes, compiles by phase and why, and what it cost."""

    prompt: str
    """The prompt text (``"<N token ids>"`` for a prompt given as token ids)."""
    prompt_tokens: int
    """Tokens in the prompt before padding."""
    padded_length: int
    """Tokens after left-padding to the bucket (= prompt_tokens without buckets)."""
    bucket: int | None
    """The bucket used, None without buckets."""
    prefill: ShapeSignature
    """The prefill forward's shape signature."""
    decode: ShapeSignature | None
    """The decode forwards' signature (None when no token was decoded after the first)."""
    compiles_prefill: int
    compiles_decode: int
    reasons: tuple[str, ...]
    """Why each compile in this call happened, in words."""
    compile_seconds: float
    wall_seconds: float
    ttft_seconds: float
    """Time to first token: the prefill forward, compiles included."""
    new_tokens: int
    tokens_per_second: float
    """New tokens per wall second."""
    text: str
    """The generated text (prompt excluded)."""
    token_ids: tuple[int, ...]
    """The generated token ids."""
    limit_hit: bool = False
    """Dynamo's recompile limit was hit: some forwards ran uncompiled."""
    warmup: bool = False

    @property
    def compiles(self) -> int:
        return self.compiles_prefill + self.compiles_decode


class GenerationSession:
    """Runs prompts through ``model.generate`` with bounded shapes and counts compilations per shape.

    ``buckets``: strictly increasing prompt lengths to left-pad to (None: every length is its own shape).
    ``max_cache_len``: fixed static-cache length; defaults to the largest bucket + 64 with buckets, and to
    transformers' per-call sizing without (which grows, and recompiles). ``backend``: the torch.compile
    backend (default per device). ``compile``: "all" (prefill and decode, as a TPU compiles), "decode"
    (what generate's auto-compile does) or "none". ``recompile_limit`` overrides Dynamo's (8) for this
    session's calls. The session installs itself as ``model.forward`` until ``close()``.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        buckets: Iterable[int] | None = None,
        max_cache_len: int | None = None,
        backend: str | None = None,
        compile: str = "all",
        recompile_limit: int | None = None,
        max_new_tokens: int = 16,
    ) -> None:
        import torch

        if getattr(tokenizer, "pad_token_id", None) is None:
            raise InvalidArgument(
                "The tokenizer has no pad token, so prompts cannot be padded to a bucket.",
                fix="Set one before creating the session: tokenizer.pad_token = tokenizer.eos_token.",
            )
        if compile not in COMPILE_PHASES:
            raise InvalidArgument(
                f"compile={compile!r} is not a mode.", fix=f"Use one of: {', '.join(COMPILE_PHASES)}."
            )
        self.buckets: tuple[int, ...] | None = None
        self.max_cache_len: int | None = None
        self.set_buckets(buckets, max_cache_len=max_cache_len)
        self.model, self.tokenizer = model, tokenizer
        if self.max_cache_len is not None:
            # transformers sizes later static caches to the largest it has seen on this model; forget it so
            # the fixed length really is the one used.
            vars(model).pop("_previous_max_cache_length", None)
        self.max_new_tokens = _positive_int(max_new_tokens, "max_new_tokens")
        self.device = next(model.parameters()).device.type
        self.backend = backend or DEFAULT_BACKEND.get(self.device, "aot_eager")
        self.compile_phases = COMPILE_PHASES[compile]
        self.recompile_limit = recompile_limit
        self.records: list[GenerationRecord] = []
        self._tally = ShapeTally()  # per-shape rows, updated per forward; no per-call history is kept
        self._current: list[tuple[ForwardCall, str]] = []  # the forwards of the generate call in progress
        self.limit_hit = False
        self._sources: list[CompileSource] = [DynamoSource()]
        if self.device == "tpu":
            self._sources.append(TpuCacheSource())
        # torch_tpu counts every executable it builds (graphs and eager ops); Dynamo only its graphs.
        self._primary = "torch_tpu" if self.device == "tpu" else "dynamo"
        self._compiled_signatures: set[ShapeSignature] = set()
        self._next_phase: str | None = None
        self._first_done_at: float | None = None
        self._strict = False
        self._had_forward = "forward" in vars(model)
        self._original_forward = model.forward
        self._compiled = torch.compile(_private_copy(self._original_forward), backend=self.backend, dynamic=False)
        model.forward = self._tracked_forward
        self._restore_masks = _keep_attention_masks(model)

    # ---- the forward every generate step goes through -------------------------------------------

    def _tracked_forward(self, *args: Any, **kwargs: Any) -> Any:
        sig = signature_of(kwargs, self._next_phase)
        self._next_phase = "decode" if self._next_phase else None
        compiled = sig.phase in self.compile_phases
        before = [s.snapshot() for s in self._sources]
        start = time.perf_counter()
        try:
            out = (self._compiled if compiled else self._original_forward)(*args, **kwargs)
        except Exception as e:
            if self._strict:
                raise RecompileError(
                    f"{sig} would compile inside no_recompiles(): {str(e).splitlines()[0].split(' filename:')[0]}",
                    cause="a prompt length, bucket or cache size that was not warmed up",
                    fix="Warm this shape up first (session.warmup([...])) or pad it to a warmed bucket.",
                ) from e
            raise
        if self.device != "cpu":
            import torch

            torch.accelerator.synchronize()  # time the work, not its launch
        seconds = time.perf_counter() - start
        if self._first_done_at is None:
            self._first_done_at = time.perf_counter()
        events: list[CompileEvent] = []
        for source, snap in zip(self._sources, before, strict=True):
            for event in source.events_between(snap, source.snapshot()):
                if event.source == self._primary or event.limit_hit:
                    events.append(event)
        if any(e.limit_hit for e in events):
            self.limit_hit = True
        ran_compiled = compiled and (sig in self._compiled_signatures or any(not e.limit_hit for e in events))
        if ran_compiled:
            self._compiled_signatures.add(sig)
        call = ForwardCall(sig, seconds, tuple(events), compiled=ran_compiled or not compiled)
        self._current.append((call, self._tally.add(call)))
        return out

    # ---- public API --------------------------------------------------------------------------------

    def set_buckets(self, buckets: Iterable[int] | None, *, max_cache_len: int | None = None) -> None:
        """Change the buckets (None: no buckets). ``max_cache_len`` defaults to the largest bucket + 64, or
        stays as it was when it still fits. New shapes compile on their first call."""
        new = validate_buckets(buckets) if buckets is not None else None
        if max_cache_len is None:
            max_cache_len = self.max_cache_len
            if new and (max_cache_len is None or max_cache_len <= new[-1]):
                max_cache_len = new[-1] + NEW_TOKEN_ROOM
        if max_cache_len is not None and (
            isinstance(max_cache_len, bool) or not isinstance(max_cache_len, int) or max_cache_len < 2
        ):
            raise InvalidArgument(
                f"max_cache_len={max_cache_len!r} must be an integer >= 2.",
                fix="Use the longest prompt plus max_new_tokens, e.g. max_cache_len=256.",
            )
        if new and max_cache_len is not None and max_cache_len <= new[-1]:
            raise InvalidArgument(
                f"max_cache_len={max_cache_len} leaves no room to generate after the largest bucket ({new[-1]}).",
                fix=f"Use max_cache_len >= {new[-1]} + max_new_tokens.",
            )
        self.buckets, self.max_cache_len = new, max_cache_len

    @property
    def prompt_lengths(self) -> list[int]:
        """Token counts of the prompts generated so far (warm-ups excluded): what buckets are fitted to."""
        return [r.prompt_tokens for r in self.records if not r.warmup]

    def generate(self, prompt: str | Sequence[int], **generate_kwargs: Any) -> GenerationRecord:
        """Generate for one prompt, text or token ids (greedy unless you pass do_sample=True), and record
        what compiled. ``generate_kwargs`` go to ``model.generate`` (max_new_tokens, do_sample, ...)."""
        if isinstance(prompt, str):
            if not prompt.strip():
                raise InvalidArgument("The prompt is empty.", fix="Pass some text, e.g. 'The French Bread Law states'.")
            ids = self.tokenizer(prompt, return_tensors="pt")["input_ids"][0].tolist()
            text = prompt
        else:
            ids = list(prompt)
            if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
                raise InvalidArgument(
                    "A prompt must be text or a list of token ids.", fix="Pass a str or a list of ints."
                )
            text = f"<{len(ids)} token ids>"  # not decoded: callers with ids have the text
        if not ids:
            raise InvalidArgument(f"The prompt {prompt!r} has no tokens.", fix="Pass some text.")
        return self._run(text, ids, generate_kwargs)

    def warmup(self, lengths: Iterable[int], *, max_new_tokens: int = 2) -> list[GenerationRecord]:
        """Compile every shape these prompt lengths need (one per bucket with buckets), before real traffic."""
        targets = sorted({bucket_for(n, self.buckets) if self.buckets else n for n in _lengths(lengths)})
        filler = self.tokenizer.encode("bread", add_special_tokens=False)[:1] or [self.tokenizer.pad_token_id]
        return [
            self._run(f"<warmup {n} tokens>", filler * n, {"max_new_tokens": max_new_tokens}, warmup=True)
            for n in targets
        ]

    @contextmanager
    def no_recompiles(self) -> Iterator[GenerationSession]:
        """Inside, any compilation raises RecompileError naming the shape (Dynamo's fail_on_recompile
        stance; on TPU also torch_tpu's cache-only mode, which turns a compile-cache miss into an error)."""
        import torch

        on_tpu = self.device == "tpu"
        self._strict = True
        if on_tpu:
            torch.tpu._set_cache_only(True)  # type: ignore[attr-defined]  # registered by torch_tpu
        try:
            with torch.compiler.set_stance("fail_on_recompile"):
                yield self
        finally:
            self._strict = False
            if on_tpu:
                torch.tpu._set_cache_only(False)  # type: ignore[attr-defined]

    @property
    def compile_table(self) -> list[ShapeRow]:
        """Per input-shape signature: calls, compiles, compile seconds, first and last call, why."""
        return self._tally.rows()

    @property
    def total_compiles(self) -> int:
        return sum(r.compiles for r in self.compile_table)

    def close(self) -> None:
        """Give the model its own forward and mask building back."""
        self._restore_masks()
        if self._had_forward:
            self.model.forward = self._original_forward
        else:
            vars(self.model).pop("forward", None)

    def __enter__(self) -> GenerationSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __str__(self) -> str:
        return table_text(self.compile_table, limit_hit=self.limit_hit)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/plain": str(self), "text/html": table_html(self.compile_table, limit_hit=self.limit_hit)}

    # ---- internals ----------------------------------------------------------------------------------

    def _run(self, prompt: str, ids: list[int], kwargs: dict[str, Any], *, warmup: bool = False) -> GenerationRecord:
        import torch

        kwargs = dict(kwargs)
        max_new = _positive_int(kwargs.pop("max_new_tokens", self.max_new_tokens), "max_new_tokens")
        n = len(ids)
        bucket = bucket_for(n, self.buckets) if self.buckets else None
        padded = bucket or n
        if self.max_cache_len is not None and padded + max_new > self.max_cache_len:
            raise InvalidArgument(
                f"The prompt ({n} tokens, padded to {padded}) plus max_new_tokens={max_new} does not fit "
                f"max_cache_len={self.max_cache_len}.",
                fix=f"Shorten the prompt or max_new_tokens, or create the session with max_cache_len >= {padded + max_new}.",
            )
        pad = padded - n
        # Inputs stay on CPU: generate moves only what forward consumes (the seed's advice).
        input_ids = torch.tensor([[self.tokenizer.pad_token_id] * pad + ids])
        attention_mask = torch.tensor([[0] * pad + [1] * n])
        gen = {
            "max_new_tokens": max_new,
            "do_sample": False,
            "cache_implementation": "static",
            "pad_token_id": self.tokenizer.pad_token_id,
            "disable_compile": True,
        }
        if self.max_cache_len is not None:
            gen["max_cache_len"] = self.max_cache_len
        gen.update(kwargs)
        self._current = []
        self._next_phase, self._first_done_at = "prefill", None
        start = time.perf_counter()
        limit = (
            torch._dynamo.config.patch(recompile_limit=self.recompile_limit) if self.recompile_limit else nullcontext()
        )
        with limit:
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **gen)
        wall = time.perf_counter() - start
        self._next_phase = None
        calls = [call for call, _ in self._current]
        reasons = [reason for _, reason in self._current]
        self._current = []
        new = out[0, padded:].tolist()
        record = GenerationRecord(
            prompt=prompt,
            prompt_tokens=n,
            padded_length=padded,
            bucket=bucket,
            prefill=calls[0].signature,
            decode=calls[1].signature if len(calls) > 1 else None,
            compiles_prefill=sum(_count(c) for c in calls if c.signature.phase == "prefill"),
            compiles_decode=sum(_count(c) for c in calls if c.signature.phase == "decode"),
            reasons=tuple(r for r, c in zip(reasons, calls, strict=True) if r and _count(c)),
            compile_seconds=sum(e.seconds for c in calls for e in c.events if not e.limit_hit),
            wall_seconds=wall,
            ttft_seconds=(self._first_done_at or start + wall) - start,
            new_tokens=len(new),
            tokens_per_second=len(new) / wall if wall > 0 else 0.0,
            text=self.tokenizer.decode(new, skip_special_tokens=True),
            token_ids=tuple(new),
            limit_hit=any(e.limit_hit for c in calls for e in c.events),
            warmup=warmup,
        )
        self.records.append(record)
        return record


def signature_of(kwargs: dict[str, Any], phase: str | None) -> ShapeSignature:
    """The shape signature of one forward call's keyword arguments."""
    ids = kwargs.get("input_ids")
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    batch, length = (int(ids.shape[0]), int(ids.shape[1])) if ids is not None else (0, 0)
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    layers = getattr(cache, "layers", None)
    cache_len = getattr(layers[0], "max_cache_len", None) if layers else getattr(cache, "max_cache_len", None)
    mask = kwargs.get("attention_mask")
    has_mask = all(v is not None for v in mask.values()) if isinstance(mask, dict) else mask is not None
    return ShapeSignature(phase or ("prefill" if length > 1 else "decode"), batch, length, cache_len, has_mask)


def _keep_attention_masks(model: Any) -> Any:
    """Make generate always pass a mask tensor, so a prompt that fills its bucket exactly (no padding)
    gets the same graph as a padded one instead of a second, mask-less graph. Returns the undo.

    transformers drops the prefill mask when nothing is padded (SDPA's is_causal is then enough). Only
    in that case the mask is rebuilt with ``allow_is_causal_skip=False``; every other call is untouched."""
    if getattr(type(model), "create_masks_for_generate", None) is not None or "create_masks_for_generate" in vars(
        model
    ):
        return lambda: None  # the model builds its own masks: leave it alone
    from transformers import masking_utils as mu

    rebuild = {"full_attention": mu.create_causal_mask, "sliding_attention": mu.create_sliding_window_causal_mask}

    def masks_never_dropped(
        config: Any, inputs_embeds: Any, attention_mask: Any, cache: Any, position_ids: Any = None, **kwargs: Any
    ) -> Any:
        masks = mu.create_masks_for_generate(config, inputs_embeds, attention_mask, cache, position_ids, **kwargs)
        if attention_mask is None or not isinstance(masks, dict) or all(v is not None for v in masks.values()):
            return masks
        text_config = config.get_text_config()
        return {
            kind: rebuild[kind](
                text_config, inputs_embeds, attention_mask, cache, position_ids, allow_is_causal_skip=False
            )
            if mask is None and kind in rebuild
            else mask
            for kind, mask in masks.items()
        }

    model.create_masks_for_generate = masks_never_dropped
    return lambda: vars(model).pop("create_masks_for_generate", None)


def _private_copy(fn: Any) -> Any:
    # Dynamo caches graphs, and counts its recompile limit, per code object. A code object of our own
    # keeps each session's counts its own, even for two models of the same class.
    def forward(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    forward.__code__ = forward.__code__.replace(co_name=f"tpu_lab_forward_{next(_session_ids)}")
    return forward


def _count(call: ForwardCall) -> int:
    return sum(not e.limit_hit for e in call.events)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgument(f"{name}={value!r} must be a positive integer.", fix=f"Use e.g. {name}=16.")
    return value


def _lengths(lengths: Iterable[int]) -> list[int]:
    out = list(lengths)
    if not out:
        raise InvalidArgument("warmup() needs at least one length.", fix="Pass prompt lengths or bucket sizes.")
    return [_positive_int(n, "length") for n in out]


_LIMIT_BANNER = (
    "Dynamo's recompile limit was hit: later new shapes ran UNCOMPILED, with only a log line. "
    "Bound the shapes with buckets and a fixed max_cache_len."
)


def _table_rows(rows: list[ShapeRow]) -> list[tuple[str, ...]]:
    return [
        (
            str(r.signature),
            str(r.calls),
            str(r.compiles) + (f" (+{r.uncompiled_calls} uncompiled)" if r.uncompiled_calls else ""),
            f"{r.compile_seconds:.2f}",
            f"{r.first_call_seconds * 1000:.1f}",
            f"{r.last_call_seconds * 1000:.1f}",
            r.reason,
        )
        for r in rows
    ]


TABLE_HEADER = ("shape", "calls", "compiles", "compile s", "first call ms", "last call ms", "why it compiled")


def table_text(rows: list[ShapeRow], *, limit_hit: bool = False) -> str:
    width = max([8] + [len(c[2]) for c in _table_rows(rows)])
    lines = [f"{'shape':<30} {'calls':>5} {'compiles':>{width}} {'compile s':>9} {'last ms':>8}  why"]
    for r, cells in zip(rows, _table_rows(rows), strict=True):
        lines.append(f"{cells[0]:<30} {cells[1]:>5} {cells[2]:>{width}} {cells[3]:>9} {cells[5]:>8}  {r.reason}")
    total = sum(r.compiles for r in rows)
    lines.append(f"total: {total} compiles, {sum(r.compile_seconds for r in rows):.2f} s compiling")
    if limit_hit:
        lines.append("WARNING: " + _LIMIT_BANNER)
    return "\n".join(lines)


def table_html(rows: list[ShapeRow], *, limit_hit: bool = False) -> str:
    banner = (
        f"<div class='tpu-lab-limit-banner' style='background:#ffebee;border-left:4px solid #c62828;"
        f"padding:4px 8px'><b>Recompile limit hit.</b> {escape(_LIMIT_BANNER)}</div>"
        if limit_hit
        else ""
    )
    total = sum(r.compiles for r in rows)
    return (
        f"{banner}{_render.table(_table_rows(rows), TABLE_HEADER)}"
        f"<div class='tpu-lab-total'>total: {total} compiles, {sum(r.compile_seconds for r in rows):.2f} s compiling</div>"
    )
