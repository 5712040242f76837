"""The ``tpu-lab`` command line."""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

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


def _trace(args: argparse.Namespace) -> int:
    import json

    from tpu_lab.tp.results.trace_report import read_trace

    report = read_trace(args.path, rank=args.rank)
    print(json.dumps(report.to_dict(), indent=1, default=str) if args.json else report)
    return 1 if any(len(r.tables) > 1 and r.compiles.diverged for r in report.runs) else 0  # ranks differ


def _flag(name: str, value: object = None) -> str:
    """How the CLI spells an option in its messages: ``--max-new-tokens`` / ``--max-new-tokens 8``."""
    flag = "--" + name.replace("_", "-")
    return flag if value is None else f"{flag} {value}"


def _demo(args: argparse.Namespace) -> int:
    from tpu_lab.demo import run_demo

    run_demo(
        model=args.model,
        prompts=args.prompts,
        distinct=args.distinct,
        max_new_tokens=args.max_new_tokens,
        max_buckets=args.max_buckets,
        chart=None if args.no_chart else (args.chart or True),
        backend=args.backend,
        spell=_flag,
    )
    return 0


def _preflight(args: argparse.Namespace) -> int:
    import json

    from tpu_lab.tp.preflight.preflight import tp_preflight

    try:
        plan = json.loads(args.plan) if args.plan else None
    except ValueError as e:
        raise UsageError(
            f"argument --plan: not valid JSON ({e}).",
            'Pass e.g. --plan \'{"model.layers.*.self_attn.q_proj": "replicated_with_grad_allreduce"}\'',
        ) from e
    if plan is not None and (
        not isinstance(plan, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in plan.items())
    ):
        raise UsageError(
            "argument --plan: must be a JSON object of module path -> style.",
            'Pass e.g. --plan \'{"model.layers.*.self_attn.q_proj": "replicated_with_grad_allreduce"}\'',
        )
    report = tp_preflight(_preflight_model(args.model), args.tp, tp_plan=plan)
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


def _preflight_model(name: str) -> str:
    """A config.json file stands for its folder; any other file, or a folder that is not there, is refused
    in the CLI's words before torch or transformers is imported."""
    from tpu_lab.models.checkpoint import looks_like_folder

    path = Path(name).expanduser()
    if not name.startswith("tiny:") and not path.exists() and looks_like_folder(name):
        raise UsageError(
            f"argument MODEL: there is no folder {name} (looked in {Path.cwd()}).",
            "Check the path; pass a checkpoint folder, its config.json, a hub id as owner/name (e.g. "
            "Qwen/Qwen3-8B) or tiny:<arch>[-kvN][-tied] (e.g. tiny:qwen3-kv2, offline).",
        )
    if path.is_file():
        if path.name == "config.json":
            return str(path.parent)
        raise UsageError(
            f"argument MODEL: {name} is a file; MODEL is a checkpoint folder (the one holding config.json), "
            "a config.json file, a hub id or tiny:<arch>[-kvN][-tied].",
            f"Pass {path.parent} if its config.json is there, or e.g. tiny:qwen3.",
        )
    return name


class UsageError(Exception):
    """A wrong command line: printed as ``tpu-lab CMD: error: ...`` with its fix, exit code 2."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


def _count(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number in [low, high]; argparse names the flag in its error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed; use a whole number from {low} to {high}")
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse's "the following arguments are required: COMMAND" for `tpu-lab --bogus` hides the
        # real problem: say which option is unknown and what the commands are.
        if "unrecognized arguments" in message:
            message = message.replace("unrecognized arguments", "unknown option(s)")
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\nRun '{self.prog} --help' for the options.\n")


def _refuse_unknown(parser: argparse.ArgumentParser, command: str | None, unknown: Sequence[str]) -> NoReturn:
    """Exit with the unknown options named, each with the nearest option the command has."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    owner: argparse.ArgumentParser = subparsers[0].choices.get(command, parser) if subparsers and command else parser
    options = [flag for action in owner._actions for flag in action.option_strings]
    named = []
    for arg in unknown:
        near = difflib.get_close_matches(arg.split("=", 1)[0], options, n=1, cutoff=0.6) if arg.startswith("-") else []
        named.append(f"{arg} (did you mean {near[0]}?)" if near else arg)
    owner.error("unknown option(s): " + ", ".join(named))


def build_parser() -> argparse.ArgumentParser:
    from tpu_lab.demo import DEFAULT_CHART, DEFAULTS, LIMITS

    parser = _Parser(prog="tpu-lab", description="Run Hugging Face transformers on Google TPUs, and learn it on CPU.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=f"{summary[0].upper()}{summary[1:]}. {description}")

    p = command(
        "probe",
        "what this machine sees, and which TPU traps apply here",
        "Versions, TPU chips on the PCI bus, what torch.accelerator reports, the device to use, and each trap "
        "with its fix. Never initialises a device.",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON (the fields of DeviceReport)")
    p.set_defaults(run=_probe)
    d = command(
        "demo",
        "mixed-length prompts without and with buckets: compiles per shape, and why",
        "Runs one workload twice without buckets and twice with them on a tiny offline model, prints what "
        "compiled and why, and what buckets saved, and saves a chart.",
    )
    d.add_argument("--model", default="tiny:qwen3", help="folder, hub id or tiny:<arch> (default: tiny:qwen3, offline)")
    for name, help_text in (
        ("prompts", "prompts in the workload"),
        ("distinct", "distinct prompt lengths (at most --prompts)"),
        ("max_new_tokens", "tokens to generate per prompt"),
        ("max_buckets", "at most this many buckets"),
    ):
        low, high = LIMITS[name]
        d.add_argument(
            _flag(name),
            type=_count(low, high),
            default=DEFAULTS[name],
            metavar="N",
            help=f"{help_text}, {low}-{high} (default {DEFAULTS[name]})",
        )
    d.add_argument(
        "--backend",
        default=None,
        metavar="NAME",
        help="torch.compile backend: eager, aot_eager or inductor; cudagraphs with a GPU, tpu on a TPU VM "
        "(default: per device, aot_eager on CPU; a wrong one is refused with the list that works here)",
    )
    d.add_argument(
        "--chart",
        default=None,
        metavar="PATH",
        help=f"where to save the chart, a .png (default: {DEFAULT_CHART} in a new temporary folder, named in the output)",
    )
    d.add_argument("--no-chart", action="store_true", help="save no chart")
    d.set_defaults(run=_demo)
    f = command(
        "preflight",
        "predict tensor-parallel sharding failures from the config, and the fix",
        "Reads only the config (no weights): heads and KV heads against the tp_size, tp_plan keys, tied "
        "embeddings and the rank counts this host's TPU allows. Exits with 1 when sharding would fail.",
    )
    f.add_argument(
        "model",
        metavar="MODEL",
        help="checkpoint folder or its config.json, hub id (config only) or tiny:<arch>[-kvN][-tied]",
    )
    f.add_argument("--tp", type=_count(1, 4096), required=True, metavar="N", help="tp_size (ranks, one per chip)")
    f.add_argument(
        "--plan",
        metavar="JSON",
        help='tp_plan override, a JSON object of module path -> style, e.g. \'{"model.layers.*.self_attn.q_proj": '
        '"replicated_with_grad_allreduce"}\'',
    )
    f.add_argument("--json", action="store_true", help="print the verdict, problems and suggested plan as JSON")
    f.set_defaults(run=_preflight)
    t = command(
        "trace",
        "the compiles of a job that ran elsewhere, from its TORCH_TRACE logs",
        "Reads the folder TORCH_TRACE pointed at on every rank (or one log, .gz too): per rank, each function "
        "x inputs with its compiles and why, failed compiles, graph breaks, and where ranks diverge. Exits with "
        "1 when ranks compiled different graphs.",
    )
    t.add_argument("path", metavar="PATH", help="the TORCH_TRACE folder (copied from the hosts) or one log file")
    t.add_argument("--rank", type=_count(0, 1 << 20), metavar="N", help="only this rank's log, its whole table")
    t.add_argument("--json", action="store_true", help="print the report as JSON (TraceReport.to_dict())")
    t.set_defaults(run=_trace)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args.command, unknown)
    if args.command is None:  # bare `tpu-lab`: show what it can do
        parser.print_help()
        return 0
    _quiet_torch_tpu()
    prog = f"tpu-lab {args.command}"
    try:
        return args.run(args)
    except UsageError as e:
        print(f"{prog}: error: {e}" + (f"\nFix: {e.fix}" if e.fix else ""), file=sys.stderr)
    except TpuLabError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{prog}: stopped by you (Ctrl-C).", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
