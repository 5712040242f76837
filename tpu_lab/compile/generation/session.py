"""``GenerationSession``: generate with TPU-friendly shapes and watch every compilation.

The seed's advice, made concrete: inputs stay on CPU (generate moves what forward consumes), a static
cache with a fixed ``max_cache_len``, prompts left-padded to a bucket with their attention mask. The
session compiles the model's forward itself with ``dynamic=False``, as torch_tpu compiles per shape, so
CPU and GPU show the compile counts a TPU would pay (backend per device: ``aot_eager`` on CPU,
``inductor`` on CUDA, torch_tpu's ``tpu`` on TPU, which is what generate's default TPU config uses).
Each forward is timed and its compiles counted (``sources``) and folded into per-shape rows (``tally``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, overload

from tpu_lab._checks import positive_int
from tpu_lab._report import Report
from tpu_lab.compile.buckets import buckets as bk
from tpu_lab.compile.generation import batching
from tpu_lab.compile.generation import session_checks as checks
from tpu_lab.compile.generation.generation_record import GenerationRecord, call_fields, row_records
from tpu_lab.compile.generation.hooks import keep_attention_masks, private_copy, signature_of
from tpu_lab.compile.generation.shape_reasons import innermost, innermost_message
from tpu_lab.compile.generation.signature import ShapeSignature
from tpu_lab.compile.generation.table import CompileTable
from tpu_lab.compile.generation.tally import ForwardCall, ShapeTally
from tpu_lab.compile.watching.guard import NoRecompiles
from tpu_lab.compile.watching.watch import Watch
from tpu_lab.errors import RecompileError

DEFAULT_BACKEND = {"cpu": "aot_eager", "cuda": "inductor", "tpu": "tpu"}
KEEP: Any = object()  # set_buckets(batch_buckets=KEEP): leave the batch buckets as they are


class GenerationSession(Report):
    """Runs prompts through ``model.generate`` with bounded shapes and counts compilations per shape.

    ``buckets``: strictly increasing prompt lengths to left-pad to (None: every length is its own shape).
    ``batch_buckets``: strictly increasing batch sizes a list of prompts is filled up to with masked
    filler rows (None: a batch of n prompts runs as n rows, so every new n is a new shape).
    ``max_cache_len``: fixed static-cache length; defaults to the largest bucket + 64 with buckets, and to
    transformers' per-call sizing without (which grows, and recompiles). ``backend``: the torch.compile
    backend (default per device). ``compile``: "all" (prefill and decode, as a TPU compiles), "decode"
    (what generate's auto-compile does) or "none". ``recompile_limit`` overrides Dynamo's (8) for this
    session's calls; by default it is raised to the graphs the buckets can need (``graphs_for``). The
    session installs itself as ``model.forward`` until ``close()``.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        buckets: Iterable[int] | None = None,
        batch_buckets: Iterable[int] | None = None,
        max_cache_len: int | None = None,
        backend: str | None = None,
        compile: str = "all",
        recompile_limit: int | None = None,
        max_new_tokens: int = 16,
    ) -> None:
        import torch

        checks.check_session_args(model, tokenizer, compile, backend, recompile_limit)
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device.type
        self._fits: set[int] = set()  # sequence lengths already checked against positions and memory
        self.buckets: tuple[int, ...] | None = None
        self.batch_buckets: tuple[int, ...] | None = None
        self.max_cache_len: int | None = None
        self.set_buckets(buckets, batch_buckets=batch_buckets, max_cache_len=max_cache_len)
        if self.max_cache_len is not None:
            # transformers sizes later static caches to the largest it has seen on this model; forget it so
            # the fixed length really is the one used.
            vars(model).pop("_previous_max_cache_length", None)
        self.max_new_tokens = positive_int(max_new_tokens, "max_new_tokens")
        self.backend = backend or DEFAULT_BACKEND.get(self.device, "aot_eager")
        self.compile_phases = checks.COMPILE_PHASES[compile]
        self.recompile_limit = recompile_limit
        self.records: list[GenerationRecord] = []
        self.observed_batches: list[tuple[int, int]] = []
        """(prompts, longest prompt tokens) per generate call, warm-ups excluded: what 2-D advice fits."""
        self._tally = ShapeTally()  # per-shape rows, updated per forward; no per-call history is kept
        self._current: list[tuple[ForwardCall, str]] = []  # the forwards of the generate call in progress
        self.limit_hit = False
        # The one compile-counting seam: the same watcher tl.watch() uses (on TPU it also reads torch_tpu's counters).
        self._watch = Watch(tpu=self.device == "tpu")
        # torch_tpu counts every executable it builds (graphs and eager ops); Dynamo only its graphs.
        self._primary = "torch_tpu" if self.device == "tpu" else "dynamo"
        self._compiled_signatures: set[ShapeSignature] = set()
        self._next_phase: str | None = None
        self._first_done_at: float | None = None
        self._strict = False
        # A real token for warm-up prompts and filler rows (transformers warns when a row ends in padding).
        self._filler = (tokenizer.encode("bread", add_special_tokens=False) or [tokenizer.pad_token_id])[0]
        current = getattr(model.forward, "__self__", None)
        if isinstance(current, GenerationSession) and current is not self:  # a re-run cell: take over
            current.close()  # else this session would compile the first one's forward, timing and all
            warnings.warn(
                "A GenerationSession was already open on this model (a re-run cell?): it was closed, and "
                "this session took over the model's forward.",
                stacklevel=2,
            )
        self._had_forward = "forward" in vars(model)
        self._original_forward = model.forward
        self._compiled = torch.compile(private_copy(self._original_forward), backend=self.backend, dynamic=False)
        model.forward = self._tracked_forward
        self._restore_masks = keep_attention_masks(model)

    # ---- the forward every generate step goes through -------------------------------------------

    def _tracked_forward(self, *args: Any, **kwargs: Any) -> Any:
        sig = signature_of(kwargs, self._next_phase)
        self._next_phase = "decode" if self._next_phase else None
        compiled = sig.phase in self.compile_phases
        marker = self._watch.begin_call()
        start = time.perf_counter()
        try:
            out = (self._compiled if compiled else self._original_forward)(*args, **kwargs)
        except Exception as e:
            if self._strict:
                if isinstance(inner := innermost(e), RecompileError):
                    raise RecompileError(
                        f"Shape {sig}: {inner.what}",
                        fix="Warm this shape up first (session.warmup([...])) or pad it to a warmed bucket.",
                    ) from None
                raise RecompileError(
                    f"{sig} would compile inside no_recompiles(): {innermost_message(e)}",
                    cause="a prompt length, bucket or cache size that was not warmed up",
                    fix="Warm this shape up first (session.warmup([...])) or pad it to a warmed bucket.",
                ) from None
            raise
        if self.device != "cpu":
            import torch

            torch.accelerator.synchronize()  # time the work, not its launch
        seconds = time.perf_counter() - start
        if self._first_done_at is None:
            self._first_done_at = time.perf_counter()
        events = [e for e in self._watch.end_call(marker) if e.source == self._primary or e.limit_hit]
        if any(e.limit_hit for e in events):
            self.limit_hit = True
        ran_compiled = compiled and (sig in self._compiled_signatures or any(not e.limit_hit for e in events))
        if ran_compiled:
            self._compiled_signatures.add(sig)
        call = ForwardCall(sig, seconds, tuple(events), compiled=ran_compiled or not compiled)
        self._current.append((call, self._tally.add(call)))
        return out

    # ---- public API --------------------------------------------------------------------------------

    def set_buckets(
        self,
        buckets: Iterable[int] | None,
        *,
        batch_buckets: Iterable[int] | None = KEEP,
        max_cache_len: int | None = None,
    ) -> None:
        """Change the length buckets (None: none) and, when given, the batch buckets (None: no batch
        padding). ``max_cache_len`` defaults to the largest bucket + 64, or stays as it was when it still
        fits. New shapes compile on their first call."""
        new = checks.bucket_list(buckets, "buckets")
        if batch_buckets is not KEEP:
            batch_buckets = checks.bucket_list(batch_buckets, "batch_buckets")
        max_cache_len = bk.cache_len_for(new, max_cache_len, self.max_cache_len)
        if max_cache_len is not None:  # the cache holds the largest bucket, so this covers the buckets too
            checks.check_fits(self.model, max_cache_len, f"max_cache_len={max_cache_len}", self.device)
        self.buckets, self.max_cache_len = new, max_cache_len
        if batch_buckets is not KEEP:
            self.batch_buckets = batch_buckets

    @property
    def prompt_lengths(self) -> list[int]:
        """Token counts of the prompts generated so far (warm-ups excluded): what buckets are fitted to."""
        return [r.prompt_tokens for r in self.records if not r.warmup]

    @overload
    def generate(self, prompt: str | Sequence[int], **generate_kwargs: Any) -> GenerationRecord: ...
    @overload
    def generate(
        self, prompt: Sequence[str] | Sequence[Sequence[int]], **generate_kwargs: Any
    ) -> list[GenerationRecord]: ...
    def generate(self, prompt: Any, **generate_kwargs: Any) -> GenerationRecord | list[GenerationRecord]:
        """Generate for one prompt (text or token ids) or a list of them in one batch (greedy unless you
        pass do_sample=True), and record what compiled. A list gives one record per prompt, in order.
        ``generate_kwargs`` go to ``model.generate`` (max_new_tokens, do_sample, temperature, ...)."""
        checks.check_open(self.model, self)
        checks.check_generate_options(generate_kwargs, self.max_new_tokens)
        prompts, single = batching.as_prompts(prompt, self.tokenizer, getattr(self.model.config, "vocab_size", None))
        records = self._run([t for t, _ in prompts], [ids for _, ids in prompts], generate_kwargs)
        return records[0] if single else records

    def warmup(
        self,
        lengths: Iterable[int] | None = None,
        *,
        batches: Iterable[int] | None = None,
        max_new_tokens: int = 2,
    ) -> list[GenerationRecord]:
        """Compile every (batch, length) shape these prompt lengths and batch sizes need, before real
        traffic: each length bucket with each batch bucket. Without ``lengths``: every bucket, or without
        buckets every length seen so far; without ``batches``: every batch bucket, or without batch buckets
        every batch size seen so far (1 before any). One record per shape, its first row's."""
        checks.check_open(self.model, self)
        shapes = bk.warmup_shapes(lengths, batches, self.buckets, self.batch_buckets, self.observed_batches)
        return [
            self._run(
                [f"<warmup {b}x{n}>"] * b, [[self._filler] * n] * b, {"max_new_tokens": max_new_tokens}, warmup=True
            )[0]
            for b, n in shapes
        ]

    @contextmanager
    def no_recompiles(self) -> Iterator[GenerationSession]:
        """Inside, any compilation raises RecompileError naming the shape (tl.no_recompiles; on TPU also
        torch_tpu's cache-only mode, which turns a compile-cache miss into an error)."""
        import torch

        on_tpu = self.device == "tpu"
        self._strict = True
        if on_tpu:
            torch.tpu._set_cache_only(True)  # type: ignore[attr-defined]  # registered by torch_tpu
        try:
            with NoRecompiles():
                yield self
        finally:
            self._strict = False
            if on_tpu:
                torch.tpu._set_cache_only(False)  # type: ignore[attr-defined]

    @property
    def compile_table(self) -> CompileTable:
        """Per input-shape signature: calls, compiles, compile seconds, first and last call, why."""
        return CompileTable(tuple(self._tally.rows()), limit_hit=self.limit_hit)

    @property
    def closed(self) -> bool:
        """True once ``close()`` ran (or another session took the model over): generate then refuses."""
        return getattr(self.model.forward, "__self__", None) is not self

    @property
    def total_compiles(self) -> int:
        return sum(r.compiles for r in self.compile_table)

    def close(self) -> None:
        """Give the model its own forward and mask building back (unless another session took it over)."""
        if self.closed:
            return
        self._restore_masks()
        if self._had_forward:
            self.model.forward = self._original_forward
        else:
            vars(self.model).pop("forward", None)

    def __enter__(self) -> GenerationSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def to_text(self) -> str:
        return self.compile_table.to_text()

    def to_html(self) -> str:
        return self.compile_table.to_html()

    # ---- internals ----------------------------------------------------------------------------------

    def _recompile_limit(self) -> Any:
        """Dynamo's recompile limit for one call: the session's, else raised (never lowered) to the graphs
        the buckets can need, so a bucket past the 8th graph does not silently run uncompiled."""
        import torch

        limit = torch._dynamo.config.recompile_limit
        wanted = self.recompile_limit or max(bk.graphs_for(self.buckets, self.batch_buckets) or 0, limit)
        return nullcontext() if wanted == limit else torch._dynamo.config.patch(recompile_limit=wanted)

    def _run(
        self, texts: list[str], rows: list[list[int]], kwargs: dict[str, Any], *, warmup: bool = False
    ) -> list[GenerationRecord]:

        kwargs = dict(kwargs)
        max_new = positive_int(kwargs.pop("max_new_tokens", self.max_new_tokens), "max_new_tokens")
        batch = bk.batch_bucket_for(len(rows), self.batch_buckets) if self.batch_buckets else len(rows)
        longest = max(len(r) for r in rows)
        bucket = bk.bucket_for(longest, self.buckets) if self.buckets else None
        padded = bucket or longest
        batching.check_cache_fits(len(rows), longest, padded, max_new, self.max_cache_len)
        if padded + max_new not in self._fits:  # reads the memory limit: once per length, not per call
            checks.check_fits(
                self.model, padded + max_new, f"The prompt ({padded} tokens) + max_new_tokens={max_new}", self.device
            )
            self._fits.add(padded + max_new)
        # Inputs stay on CPU: generate moves only what forward consumes (the seed's advice).
        input_ids, attention_mask = batching.padded_inputs(
            rows, padded, batch, self.tokenizer.pad_token_id, self._filler
        )
        gen = batching.generate_options(
            self.tokenizer.pad_token_id, max_new, self.max_cache_len, kwargs, len(rows), batch
        )
        self._current = []
        self._next_phase, self._first_done_at = "prefill", None
        start = time.perf_counter()
        limit = self._recompile_limit()
        with limit, self._watch, checks.options_refused(kwargs):
            out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **gen)
        wall = time.perf_counter() - start
        self._next_phase = None
        shared = call_fields(self._current, wall, (self._first_done_at or start + wall) - start)
        self._current = []
        shared.update(padded_length=padded, bucket=bucket, warmup=warmup, batch_size=len(rows), padded_batch=batch)
        shared["batch_bucket"] = batch if self.batch_buckets else None
        eos = batching.eos_ids(gen.get("eos_token_id", self.model.generation_config.eos_token_id))
        news = [batching.new_tokens(out[i, padded:].tolist(), eos) for i in range(len(rows))]
        records = row_records(texts, rows, news, self.tokenizer, shared)
        self.records.extend(records)
        if not warmup:
            self.observed_batches.append((len(rows), longest))
        return records
