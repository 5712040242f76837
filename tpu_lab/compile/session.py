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
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from tpu_lab._checks import positive_int, token_counts
from tpu_lab._report import Report
from tpu_lab.compile.buckets import bucket_for, validate_buckets
from tpu_lab.compile.guard import NoRecompiles
from tpu_lab.compile.hooks import keep_attention_masks, private_copy, signature_of
from tpu_lab.compile.record import GenerationRecord
from tpu_lab.compile.session_checks import COMPILE_PHASES, check_fits, check_session_args, token_ids
from tpu_lab.compile.signature import ShapeSignature
from tpu_lab.compile.table import CompileTable
from tpu_lab.compile.tally import ForwardCall, ShapeTally
from tpu_lab.compile.watch import Watch
from tpu_lab.errors import InvalidArgument, RecompileError

DEFAULT_BACKEND = {"cpu": "aot_eager", "cuda": "inductor", "tpu": "tpu"}
# Room for new tokens above the largest bucket when max_cache_len is not given.
NEW_TOKEN_ROOM = 64


class GenerationSession(Report):
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

        check_session_args(model, tokenizer, compile, backend, recompile_limit)
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device.type
        self.buckets: tuple[int, ...] | None = None
        self.max_cache_len: int | None = None
        self.set_buckets(buckets, max_cache_len=max_cache_len)
        if self.max_cache_len is not None:
            # transformers sizes later static caches to the largest it has seen on this model; forget it so
            # the fixed length really is the one used.
            vars(model).pop("_previous_max_cache_length", None)
        self.max_new_tokens = positive_int(max_new_tokens, "max_new_tokens")
        self.backend = backend or DEFAULT_BACKEND.get(self.device, "aot_eager")
        self.compile_phases = COMPILE_PHASES[compile]
        self.recompile_limit = recompile_limit
        self.records: list[GenerationRecord] = []
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
                raise RecompileError(
                    f"{sig} would compile inside no_recompiles(): {_first_line(e)}",
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
        if max_cache_len is not None:  # the cache holds the largest bucket, so this covers the buckets too
            check_fits(self.model, max_cache_len, f"max_cache_len={max_cache_len}", self.device)
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
            ids = token_ids(prompt, getattr(self.model.config, "vocab_size", None))
            text = f"<{len(ids)} token ids>"  # not decoded: callers with ids have the text
        if not ids:
            raise InvalidArgument(f"The prompt {prompt!r} has no tokens.", fix="Pass some text.")
        return self._run(text, ids, generate_kwargs)

    def warmup(self, lengths: Iterable[int] | None = None, *, max_new_tokens: int = 2) -> list[GenerationRecord]:
        """Compile every shape these prompt lengths need (one per bucket with buckets), before real traffic.
        Without ``lengths``: every bucket, or without buckets every prompt length seen so far."""
        if lengths is None:
            lengths = self.buckets or self.prompt_lengths
            if not lengths:
                raise InvalidArgument(
                    "Nothing to warm up: the session has no buckets and has seen no prompt yet.",
                    fix="Pass the lengths (session.warmup([16, 32])), set buckets, or run a prompt first.",
                )
        targets = sorted({bucket_for(n, self.buckets) if self.buckets else n for n in token_counts(lengths)})
        filler = self.tokenizer.encode("bread", add_special_tokens=False)[:1] or [self.tokenizer.pad_token_id]
        return [
            self._run(f"<warmup {n} tokens>", filler * n, {"max_new_tokens": max_new_tokens}, warmup=True)
            for n in targets
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

    def to_text(self) -> str:
        return self.compile_table.to_text()

    def to_html(self) -> str:
        return self.compile_table.to_html()

    # ---- internals ----------------------------------------------------------------------------------

    def _run(self, prompt: str, ids: list[int], kwargs: dict[str, Any], *, warmup: bool = False) -> GenerationRecord:
        import torch

        kwargs = dict(kwargs)
        max_new = positive_int(kwargs.pop("max_new_tokens", self.max_new_tokens), "max_new_tokens")
        n = len(ids)
        bucket = bucket_for(n, self.buckets) if self.buckets else None
        padded = bucket or n
        if self.max_cache_len is not None and padded + max_new > self.max_cache_len:
            raise InvalidArgument(
                f"The prompt ({n} tokens, padded to {padded}) plus max_new_tokens={max_new} does not fit "
                f"max_cache_len={self.max_cache_len}.",
                fix=f"Shorten the prompt or max_new_tokens, or create the session with max_cache_len >= {padded + max_new}.",
            )
        check_fits(
            self.model, padded + max_new, f"The prompt ({padded} tokens) + max_new_tokens={max_new}", self.device
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
        with limit, self._watch:
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


def _first_line(e: BaseException) -> str:
    # Dynamo wraps what a compile callback raised: show the innermost message.
    while (e.__cause__ or e.__context__) is not None:
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _count(call: ForwardCall) -> int:
    return sum(not e.limit_hit for e in call.events)
