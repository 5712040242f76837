"""``tpu-lab demo``: the main job, headless. Probe, load a model (offline tiny by default), run a
mixed-length workload without and with buckets, print the per-shape tables and totals, save a chart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tpu_lab.compile.buckets import compare_policies, recommend_buckets
from tpu_lab.compile.chart import compile_chart
from tpu_lab.compile.session import GenerationSession
from tpu_lab.host.probe import probe
from tpu_lab.models.loading import load_model
from tpu_lab.models.workload import mixed_lengths, mixed_workload


def run_demo(
    *,
    model: str = "tiny:qwen3",
    prompts: int = 12,
    distinct: int = 8,
    max_new_tokens: int = 8,
    max_buckets: int = 3,
    chart: str | None = "tpu_lab_demo.png",
    backend: str | None = None,
    say=print,
) -> dict:
    """Run the demo and return its totals (``{"naive": {...}, "bucketed": {...}, "buckets": [...]}``)."""
    report = probe()
    say(
        f"device: {report.device} (device_map={report.device_map!r}); "
        f"{len(report.findings)} finding(s): {', '.join(f.code for f in report.findings) or 'none'}"
    )
    lengths = mixed_lengths(prompts=prompts, distinct=distinct, low=4, high=96)
    buckets = recommend_buckets(lengths, max_buckets=max_buckets)
    say(
        f"workload: {prompts} prompts, {len(set(lengths))} distinct lengths ({min(lengths)}-{max(lengths)} tokens), "
        f"{max_new_tokens} new tokens each"
    )
    say(str(compare_policies(lengths, max_buckets=max_buckets)))
    totals: dict[str, dict[str, Any]] = {}
    tables = {}
    plans: tuple[tuple[str, dict[str, Any]], ...] = (
        ("naive", {}),
        ("bucketed", {"buckets": buckets, "max_cache_len": buckets[-1] + max_new_tokens}),
    )
    for name, options in plans:
        loaded = load_model(model)  # a fresh model each: transformers remembers cache sizes per model
        workload = mixed_workload(loaded.tokenizer, lengths)
        with GenerationSession(
            loaded.model,
            loaded.tokenizer,
            backend=backend,
            max_new_tokens=max_new_tokens,
            recompile_limit=64,
            **options,
        ) as session:
            start = time.perf_counter()
            for ids in workload:
                session.generate(ids)
            seconds = time.perf_counter() - start
            second_pass = sum(session.generate(ids).compiles for ids in workload)
            tables[name] = session.compile_table
            totals[name] = {
                "compiles": session.total_compiles - second_pass,
                "seconds": seconds,
                "second_pass_compiles": second_pass,
            }
        title = name if name == "naive" else f"bucketed ({', '.join(map(str, buckets))}), fixed cache"
        say(f"\n== {title}: {session.backend} backend, every forward compiled with dynamic=False")
        say(tables[name].to_text())
    n, b = totals["naive"], totals["bucketed"]
    say(
        f"\nnaive:    {n['compiles']:3d} compiles, {n['seconds']:6.1f} s   (second pass: {n['second_pass_compiles']} compiles)"
    )
    say(
        f"bucketed: {b['compiles']:3d} compiles, {b['seconds']:6.1f} s   (second pass: {b['second_pass_compiles']} compiles)"
    )
    say(f"naive / bucketed wall time: {n['seconds'] / b['seconds']:.1f}x")
    if chart:
        compile_chart({k: t.rows for k, t in tables.items()}).savefig(chart, dpi=90)
        say(f"chart saved to {Path(chart).resolve()}")
    return {**totals, "buckets": buckets}
