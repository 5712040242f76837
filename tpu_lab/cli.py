"""The ``tpu-lab`` command line."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from tpu_lab.errors import TpuLabError


def _quiet_torch_tpu() -> None:
    # torch_tpu autoloads with `import torch` and prints a tcmalloc warning and an absl log line;
    # in a terminal tool that noise reads like a failure (FACTS.md).
    warnings.filterwarnings("ignore", message="<TorchTpu")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")


def _probe(args: argparse.Namespace) -> int:
    from tpu_lab.host.probe import probe

    report = probe()
    print(report.to_json() if args.json else report)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from tpu_lab.demo import run_demo

    run_demo(
        model=args.model,
        prompts=args.prompts,
        distinct=args.distinct,
        max_new_tokens=args.max_new_tokens,
        max_buckets=args.max_buckets,
        chart=args.chart,
        backend=args.backend,
    )
    return 0


def _preflight(args: argparse.Namespace) -> int:
    import json

    from tpu_lab.errors import InvalidArgument
    from tpu_lab.tp.preflight import tp_preflight

    try:
        plan = json.loads(args.plan) if args.plan else None
    except ValueError as e:
        raise InvalidArgument(
            f"--plan is not valid JSON: {e}.",
            fix='Pass e.g. --plan \'{"model.layers.*.self_attn.q_proj": "replicated_with_grad_allreduce"}\'',
        ) from e
    report = tp_preflight(args.model, args.tp, tp_plan=plan)
    if args.json:
        out = {
            "ok": report.ok,
            "model": report.model,
            "tp_size": report.tp_size,
            "problems": [vars(p) for p in report.problems],
            "suggested_tp_plan": report.suggested_tp_plan,
        }
        print(json.dumps(out, indent=2))
    else:
        print(report)
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpu-lab", description="Run Hugging Face transformers on Google TPUs, and learn it on CPU."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("probe", help="what this machine sees, and which TPU traps apply here")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=_probe)
    d = sub.add_parser("demo", help="mixed-length prompts without and with buckets: compiles per shape, and why")
    d.add_argument("--model", default="tiny:qwen3", help="folder, hub id or tiny:<arch> (default: tiny:qwen3, offline)")
    d.add_argument("--prompts", type=int, default=12, help="prompts in the workload (default 12)")
    d.add_argument("--distinct", type=int, default=8, help="distinct prompt lengths (default 8)")
    d.add_argument("--max-new-tokens", type=int, default=8)
    d.add_argument("--max-buckets", type=int, default=3)
    d.add_argument("--backend", default=None, help="torch.compile backend (default: per device)")
    d.add_argument("--chart", default="tpu_lab_demo.png", help="where to save the chart (PNG)")
    d.set_defaults(run=_demo)
    f = sub.add_parser("preflight", help="predict tensor-parallel sharding failures from the config, and the fix")
    f.add_argument("model", help="checkpoint folder, hub id (config only) or tiny:<arch>[-kvN][-tied]")
    f.add_argument("--tp", type=int, required=True, help="tp_size (ranks, one per chip)")
    f.add_argument("--plan", help="tp_plan override as JSON")
    f.add_argument("--json", action="store_true")
    f.set_defaults(run=_preflight)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _quiet_torch_tpu()
    try:
        return args.run(args)
    except TpuLabError as e:
        print(f"tpu-lab: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
