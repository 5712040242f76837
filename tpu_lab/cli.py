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
    from tpu_lab.device import probe

    report = probe()
    print(report.to_json() if args.json else report)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpu-lab", description="Run Hugging Face transformers on Google TPUs, and learn it on CPU."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("probe", help="what this machine sees, and which TPU traps apply here")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=_probe)
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
