"""``tpu-lab demo``: the main job, headless. Every option is checked first (nothing runs on a bad one);
then probe, run one mixed-length workload twice without buckets and twice with them, print what
compiled, why and what buckets saved, and save a chart where the user asked."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from itertools import accumulate
from pathlib import Path
from typing import Any

from tpu_lab.demo_report import INTRO, TIMING_ROUNDS, DemoResult, PassTotals, PolicyRun, run_text, summary_text
from tpu_lab.errors import InvalidArgument, TpuLabError

LOW, HIGH = 4, 96
"""Prompt lengths of the workload, in tokens."""
DEFAULTS = {"prompts": 12, "distinct": 8, "max_new_tokens": 8, "max_buckets": 3}
LIMITS = {"prompts": (1, 200), "distinct": (1, HIGH - LOW + 1), "max_new_tokens": (1, 256), "max_buckets": (1, 16)}
DEFAULT_CHART = "tpu_lab_demo.png"
"""The chart's file name; by default it goes into a new temporary folder (never the current one)."""
PASSES = 2
# Backends that need a package or a device of their own: listed only where it is there.
NEEDS = {"openxla": "torch_xla", "openxla_eval": "torch_xla", "tvm": "tvm", "tpu": "torch_tpu"}

Spell = Callable[..., str]


def kwarg(name: str, value: Any = None) -> str:
    """How the Python API spells an option (``prompts`` / ``prompts=12``); the CLI passes its own."""
    return name if value is None else f"{name}={value!r}"


def check_options(
    *,
    model: str,
    prompts: int,
    distinct: int,
    max_new_tokens: int,
    max_buckets: int,
    chart: str | os.PathLike | bool | None,
    backend: str | None,
    spell: Spell = kwarg,
) -> Path | None:
    """Check every option before anything runs (cheapest first); return the chart's absolute path.
    Errors name the option as ``spell`` writes it and the values allowed."""
    numbers = {"prompts": prompts, "distinct": distinct, "max_new_tokens": max_new_tokens, "max_buckets": max_buckets}
    for name, value in numbers.items():
        lo, hi = LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise InvalidArgument(
                f"{spell(name)} got {value!r}; it must be a whole number from {lo} to {hi}.",
                fix=f"Use e.g. {spell(name, DEFAULTS[name])} (the default).",
            )
    if distinct > prompts:
        raise InvalidArgument(
            f"{spell('distinct')} {distinct} asks for more distinct lengths than there are prompts ({prompts}).",
            fix=f"Use {spell('distinct', prompts)} or fewer, or more prompts: {spell('prompts', distinct)}.",
        )
    path = check_chart(chart, spell)
    check_backend(backend, spell)
    check_model(model, spell)
    return path


def check_chart(chart: str | os.PathLike | bool | None, spell: Spell = kwarg) -> Path | None:
    """The chart's absolute path, once it is sure it can be written (so a bad one fails before the run).
    ``True``: a new temporary folder (made when the chart is saved); ``None``/``False``: no chart."""
    if chart is None or chart is False:
        return None
    if chart is True:
        return Path(tempfile.gettempdir()) / f"tpu_lab_demo_{uuid.uuid4().hex[:8]}" / DEFAULT_CHART
    path = Path(chart).expanduser().absolute()
    if path.suffix.lower() != ".png":
        raise InvalidArgument(
            f"{spell('chart')} {str(chart)!r} is not a .png file name.",
            fix=f"Use e.g. {spell('chart', DEFAULT_CHART)}.",
        )
    if path.is_dir():
        raise InvalidArgument(
            f"{spell('chart')} {str(chart)!r} is a folder.", fix=f"Name a file: {path / DEFAULT_CHART}."
        )
    folder = path.parent
    if not folder.is_dir():
        raise InvalidArgument(
            f"{spell('chart')}: the folder {folder} does not exist, so the chart could not be saved there.",
            fix=f"Create it first (mkdir -p {folder}) or pick an existing folder.",
        )
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InvalidArgument(
            f"{spell('chart')}: {path} is not writable.", fix="Pick a folder you can write to, e.g. your home folder."
        )
    return path


def check_backend(backend: str | None, spell: Spell = kwarg) -> None:
    """None (the device's default) or a torch.compile backend registered here."""
    if backend is None:
        return
    from torch._dynamo import list_backends

    usable = usable_backends()
    if backend not in usable and (backend in NEEDS or backend not in list_backends(exclude_tags=())):
        # Dynamo's debug and test-only backends are accepted but not advertised.
        missing = NEEDS.get(backend)
        raise InvalidArgument(
            f"{spell('backend')} {backend!r} "
            + (
                f"needs {missing}, which is not installed here (or no chip is visible)."
                if missing
                else "is not a torch.compile backend here."
            )
            + f" Those that work here: {', '.join(usable)}.",
            fix="Leave it out for the device's default (aot_eager on CPU: quick to compile, the same counts).",
        )


def usable_backends() -> list[str]:
    """The torch.compile backends worth offering here: Dynamo's registered ones, less those whose package
    or device is missing (openxla without torch_xla, tvm without tvm, cudagraphs without a GPU, tpu
    without a chip)."""
    import importlib.util

    import torch
    from torch._dynamo import list_backends

    names = {"eager", "aot_eager", *list_backends()}
    if not torch.cuda.is_available():
        names.discard("cudagraphs")
    for name, package in NEEDS.items():
        if name in names and importlib.util.find_spec(package) is None:
            names.discard(name)
    if "tpu" in names:
        from tpu_lab.host.chips import scan_tpu_chips

        if not scan_tpu_chips().count:
            names.discard("tpu")
    return sorted(names)


def check_model(model: str, spell: Spell = kwarg) -> None:
    """The model resolves to a checkpoint (a tiny one is built here, offline) before any weights load."""
    from tpu_lab.models.checkpoint import resolve_source

    if not isinstance(model, str) or not model.strip():
        raise InvalidArgument(f"{spell('model')} got {model!r}.", fix=f"Use e.g. {spell('model', 'tiny:qwen3')}.")
    try:
        resolve_source(model)
    except TpuLabError as e:
        raise InvalidArgument(f"{spell('model')} {model!r}: {e.what}", cause=e.cause, fix=e.fix) from e


def run_demo(
    *,
    model: str = "tiny:qwen3",
    prompts: int = DEFAULTS["prompts"],
    distinct: int = DEFAULTS["distinct"],
    max_new_tokens: int = DEFAULTS["max_new_tokens"],
    max_buckets: int = DEFAULTS["max_buckets"],
    chart: str | os.PathLike | bool | None = True,
    backend: str | None = None,
    say: Callable[[str], Any] = print,
    spell: Spell = kwarg,
) -> DemoResult:
    """Run the demo, printing through ``say``; return its ``DemoResult``. ``chart``: a .png path, True
    (the default: a new temporary folder, named in the output) or None (no chart)."""
    from tpu_lab.compile.buckets.buckets import recommend_buckets
    from tpu_lab.host.probe import probe
    from tpu_lab.models.workload import mixed_lengths

    chart_path = check_options(
        model=model,
        prompts=prompts,
        distinct=distinct,
        max_new_tokens=max_new_tokens,
        max_buckets=max_buckets,
        chart=chart,
        backend=backend,
        spell=spell,
    )
    say("\n".join(INTRO))
    report = probe()
    notes = "; ".join(f.summary for f in report.findings)
    say(
        f'\ndevice: {report.device} (models load with device_map="{report.device_map}")'
        + (f"; the probe notes: {notes} (tpu-lab probe says why, and the fixes)." if notes else "; nothing to fix.")
    )
    lengths = mixed_lengths(prompts=prompts, distinct=distinct, low=LOW, high=HIGH)
    buckets = recommend_buckets(lengths, max_buckets=max_buckets)
    plans: tuple[tuple[str, str, dict[str, Any]], ...] = (
        ("naive", "no buckets, static cache sized per prompt (transformers' default)", {}),
        (
            "bucketed",
            f"buckets {', '.join(map(str, buckets))} (fitted to these prompts), cache fixed at "
            f"{buckets[-1] + max_new_tokens}",
            {"buckets": buckets, "max_cache_len": buckets[-1] + max_new_tokens},
        ),
    )
    from tpu_lab.compile.generation.session import DEFAULT_BACKEND

    say(
        f"workload: {prompts} prompts, {len(set(lengths))} distinct lengths ({min(lengths)}-{max(lengths)} tokens), "
        f"{max_new_tokens} new tokens each, run {PASSES} times (pass 1, then the same prompts again); "
        f"{backend or DEFAULT_BACKEND.get(report.device, 'aot_eager')} backend, every forward compiled with "
        "dynamic=False, as on a TPU."
    )
    say(
        "compiles below = graphs torch.compile built, one per new input shape, counted by Dynamo; "
        "the same count in every table."
    )
    runs: list[PolicyRun] = []
    for name, title, options in plans:
        runs.append(_run_policy(name, title, model, lengths, options, backend=backend, max_new_tokens=max_new_tokens))
        say(run_text(runs[-1]))
    result = DemoResult(tuple(runs), tuple(buckets), chart_path)
    say(summary_text(result))
    if chart_path is not None:
        from tpu_lab.compile.chart import demo_chart

        demo_chart(
            {r.name: r.cumulative for r in runs},
            {r.name: (r.real_tokens, r.padded_tokens) for r in runs},
            pass_length=prompts,
        ).savefig(_writable(chart_path), dpi=100)
        where = f" (a new temporary folder; {spell('chart', 'PATH')} saves it elsewhere)" if chart is True else ""
        say(f"chart saved to {chart_path}{where}: compiles over requests, and padding, per policy")
    return result


def _run_policy(
    name: str, title: str, model: str, lengths: list[int], options: dict, *, backend: str | None, max_new_tokens: int
) -> PolicyRun:
    from tpu_lab.compile.generation.session import GenerationSession
    from tpu_lab.models.loading import load_model
    from tpu_lab.models.workload import mixed_workload

    # A fresh model per policy (transformers remembers cache sizes per model); no progress bar: it would
    # print between the tables.
    loaded = load_model(model, progress=lambda *_: None)
    workload = mixed_workload(loaded.tokenizer, lengths)
    passes = []
    samples: dict[Any, list[float]] = {}
    with GenerationSession(
        loaded.model, loaded.tokenizer, backend=backend, max_new_tokens=max_new_tokens, recompile_limit=512, **options
    ) as session:

        def generate(ids: Any) -> Any:
            before = {r.signature: (r.calls, r.compiles) for r in session.compile_table}
            record = session.generate(ids)
            for row in session.compile_table:  # a call of a shape that compiled nothing: a cached call
                calls, compiles = before.get(row.signature, (0, 0))
                if row.calls > calls and row.compiles == compiles:
                    samples.setdefault(row.signature, []).append(row.last_call_seconds)
            return record

        for _ in range(PASSES):
            start = time.perf_counter()
            records = [generate(ids) for ids in workload]
            wall = time.perf_counter() - start
            passes.append(PassTotals(sum(r.compiles for r in records), sum(r.compile_seconds for r in records), wall))
        distinct = list({len(ids): ids for ids in workload}.values())
        timing = [generate(ids) for _ in range(TIMING_ROUNDS) for ids in distinct]
        return PolicyRun(
            name=name,
            title=title,
            backend=session.backend,
            table=session.compile_table,
            passes=tuple(passes),
            cumulative=tuple(accumulate(r.compiles for r in session.records[: PASSES * len(workload)])),
            real_tokens=sum(lengths),
            padded_tokens=sum(r.padded_length for r in session.records[: len(workload)]),
            cached_seconds={sig: (statistics.median(t), len(t), min(t), max(t)) for sig, t in samples.items()},
            timing_compiles=sum(r.compiles for r in timing),
        )


def _writable(path: Path) -> Path:
    path.parent.mkdir(exist_ok=True)  # the temporary folder, made only now that there is a chart for it
    return path
