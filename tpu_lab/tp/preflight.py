"""``tp_preflight()``: predict tensor-parallel sharding failures from the config alone, before any process
starts, and propose a plan that fixes what can be fixed.

transformers shards at load time and fails in the *first forward* when a rank's share of the query or
key/value projections is not a whole number of heads (e.g. 2 KV heads at tp_size=4:
``shape '[1, 9, -1, 16]' is invalid``), minutes after loading began. Everything here reads the config
and a model skeleton built on the meta device (no weights, no memory).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from tpu_lab._checks import boolean, positive_int
from tpu_lab._report import Finding, Report, has_error, most_severe_first, report_html, report_text
from tpu_lab.errors import InvalidArgument
from tpu_lab.host.chips import TpuChips, rank_count_problem, scan_tpu_chips
from tpu_lab.tp.preflight_hosts import check_hosts
from tpu_lab.tp.skeleton import load_config, meta_model

REPLICATE = "replicated_with_grad_allreduce"
# Styles that split a projection's output features (its heads) across ranks, and those that split input.
SPLITS_OUTPUT = {"colwise", "colwise_gather_output", "colwise_rep", "packed_colwise"}
SPLITS_INPUT = {"rowwise", "rowwise_split_input", "rowwise_rep", "packed_rowwise"}
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_RANK_CODES = ("more-ranks-than-chips", "rank-count-not-allowed", "ranks-not-split-evenly")


@dataclass(frozen=True)
class PreflightReport(Report):
    """What would happen if this model were sharded ``tp_size`` ways, and how to fix it."""

    model: str
    """The model class (e.g. ``Qwen3ForCausalLM``)."""
    tp_size: int
    heads: int
    kv_heads: int
    intermediate_size: int | None
    vocab_size: int | None
    tied_embeddings: bool
    plan: dict[str, str]
    """The effective plan: the model's default, with full module paths, updated with ``tp_plan``."""
    problems: tuple[Finding, ...]
    """Errors (will fail), warnings and notes, most severe first."""
    suggested_tp_plan: dict[str, str] | None = None
    """A ``tp_plan`` override that fixes what can be fixed (None when nothing needs fixing)."""
    suggestion_fixes_all: bool = False
    """Whether the preflight finds no error left once ``suggested_tp_plan`` is applied."""

    @property
    def ok(self) -> bool:
        """True when no problem is an error: the shards have whole heads and the rank count is allowed."""
        return not has_error(self.problems)

    @property
    def snippet(self) -> str:
        """``DistributedConfig(...)`` with the suggested plan, ready to paste."""
        plan = self.suggested_tp_plan
        if plan is None:
            return f"DistributedConfig(tp_size={self.tp_size})"
        body = "".join(f"\n        {k!r}: {v!r}," for k, v in plan.items())
        return f"DistributedConfig(\n    tp_size={self.tp_size},\n    tp_plan={{{body}\n    }},\n)"

    def _rows(self) -> list[tuple[str, str]]:
        verdict = "OK: every shard holds whole heads" if self.ok else "WILL FAIL"
        return [
            ("verdict", verdict),
            ("model", f"{self.model}, tp_size={self.tp_size}"),
            ("heads / kv heads", f"{self.heads} / {self.kv_heads}"),
            ("intermediate / vocab", f"{self.intermediate_size or 'unknown'} / {self.vocab_size or 'unknown'}"),
            ("tied embeddings", "yes" if self.tied_embeddings else "no"),
        ]

    def to_text(self) -> str:
        text = report_text("tpu_lab tp preflight", self._rows(), self.problems, width=22)
        if self.suggested_tp_plan is not None:
            state = "fixes every error" if self.suggestion_fixes_all else "fixes part of it"
            text += f"\nsuggested ({state}):\n{self.snippet}"
        return text

    def to_html(self) -> str:
        html = report_html("Tensor-parallel preflight", self._rows(), self.problems)
        if self.suggested_tp_plan is not None:
            html += f"<div class='tpu-lab-suggestion'><b>Suggested</b><pre>{escape(self.snippet)}</pre></div>"
        return html


def tp_preflight(
    name_or_config: Any,
    tp_size: int,
    *,
    tp_plan: dict[str, str] | None = None,
    chips: TpuChips | None = None,
    hosts: int | Sequence[str] | None = None,
    trust_remote_code: bool = False,
) -> PreflightReport:
    """Predict whether sharding ``name_or_config`` ``tp_size`` ways works, from its config alone.

    ``name_or_config``: a transformers config, a checkpoint folder, a hub id (only config.json is
    fetched) or ``tiny:<arch>[-kvN][-tied]``. ``tp_plan``: the override you would pass to
    ``DistributedConfig``. ``chips``: the TPU chips to check the rank count against (default: this host's).
    ``hosts``: a count or list of hosts; ``tp_size`` ranks are then spread over them (``chips`` per host).
    ``trust_remote_code``: run a checkpoint's own model code (refused up front otherwise, as in load_model).
    """
    positive_int(tp_size, "tp_size", example=4)
    boolean(trust_remote_code, "trust_remote_code")
    if chips is not None and not isinstance(chips, TpuChips):
        raise InvalidArgument(
            f"chips must be a TpuChips (or None for this host's), got {type(chips).__name__}.",
            fix="Leave chips=None, or pass tpu_lab.host.chips.scan_tpu_chips(sysfs_root=...) for another host.",
        )
    config = load_config(name_or_config, trust_remote_code)
    skeleton = meta_model(config, trust_remote_code)
    if not getattr(skeleton, "tp_plan", None):
        raise InvalidArgument(
            f"{type(skeleton).__name__} has no tensor-parallel plan in this transformers release.",
            fix="Pass a full tp_plan to DistributedConfig yourself, or pick a model transformers can shard.",
        )
    default_plan = dict(skeleton.tp_plan)
    names = _module_names(skeleton)
    problems: list[Finding] = []
    user_plan = _check_user_plan(tp_plan or {}, names, default_plan, problems)
    plan = {**default_plan, **user_plan}
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if not isinstance(getattr(text, "num_attention_heads", None), int):
        raise InvalidArgument(f"{type(config).__name__} has no num_attention_heads: not a transformer LM config.")
    shape = _Shape(
        heads=text.num_attention_heads,
        kv_heads=getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
        intermediate=getattr(text, "intermediate_size", None),
        vocab=getattr(text, "vocab_size", None),
    )
    problems += _check_shards(plan, shape, tp_size)
    chips = scan_tpu_chips() if chips is None else chips
    problems += _check_ranks(tp_size, chips) if hosts is None else check_hosts(tp_size, hosts, chips)
    tied = bool(getattr(text, "tie_word_embeddings", False))
    if tied and tp_size > 1:
        problems.append(
            Finding(
                "tied-embeddings",
                "warning",
                "The LM head is tied to the input embeddings. The Transformers TPU guide says such models (e.g. "
                "Qwen3-0.6B) fail to load with tp_size > 1; on transformers 5.24 with gloo on CPU they load and match "
                "one process.",
                "Try it; if loading fails on TPU, run this model on one chip or untie the weights.",
            )
        )
    suggestion, fixes_all = _suggest(problems, user_plan, default_plan, shape, tp_size)
    return PreflightReport(
        model=type(skeleton).__name__,
        tp_size=tp_size,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        intermediate_size=shape.intermediate,
        vocab_size=shape.vocab,
        tied_embeddings=tied,
        plan=plan,
        problems=most_severe_first(problems),
        suggested_tp_plan=suggestion,
        suggestion_fixes_all=fixes_all,
    )


@dataclass(frozen=True)
class _Shape:
    heads: int
    kv_heads: int
    intermediate: int | None
    vocab: int | None


def _module_names(model: Any) -> set[str]:
    from transformers.distributed.parallel_utils import replace_layer_number_by_wildcard

    return {replace_layer_number_by_wildcard(n) for n, _ in (*model.named_modules(), *model.named_parameters())}


def _styles() -> set[str]:
    import transformers.integrations.tensor_parallel  # noqa: F401  (registers the TP styles)
    from transformers.distributed.parallel_utils import ALL_PARALLEL_STYLES

    return set(ALL_PARALLEL_STYLES.keys())


def _check_user_plan(
    tp_plan: dict[str, str], names: set[str], default_plan: dict[str, str], problems: list[Finding]
) -> dict[str, str]:
    """Keys that match nothing (with the corrected key) and unknown styles; returns the usable plan,
    with keys corrected where the correction is unambiguous."""
    if not isinstance(tp_plan, dict):
        raise InvalidArgument(
            f"tp_plan must be a dict of module pattern -> style, got {type(tp_plan).__name__}.",
            fix='Use e.g. tp_plan={"model.layers.*.self_attn.q_proj": "replicated_with_grad_allreduce"}.',
        )
    styles = _styles()
    usable: dict[str, str] = {}
    for key, style in tp_plan.items():
        if not isinstance(key, str) or not isinstance(style, str):
            raise InvalidArgument(
                f"tp_plan entry {key!r}: {style!r} is not a module pattern (str) -> style (str).",
                fix='Use e.g. {"model.layers.*.self_attn.q_proj": "colwise"}.',
            )
        if style not in styles:
            close = [s for s in sorted(styles) if s.startswith(str(style)[:4])]
            raise InvalidArgument(
                f"tp_plan style {style!r} (for {key!r}) is not a parallel style transformers knows.",
                fix="Use one of: " + ", ".join(close or sorted(styles)) + ".",
            )
        if key in names or key in default_plan:
            usable[key] = style
            continue
        candidates = sorted(n for n in names if n.endswith("." + key) or fnmatch.fnmatch(n, "*." + key))
        if len(candidates) == 1:
            problems.append(
                Finding(
                    "tp-plan-key",
                    "error",
                    f"tp_plan key {key!r} matches no module: transformers 5.x wants the full path, and raises "
                    f"`tp_plan keys ['{key}'] match nothing` before loading.",
                    f"Use {candidates[0]!r} instead.",
                )
            )
            usable[candidates[0]] = style
        else:
            problems.append(
                Finding(
                    "tp-plan-key",
                    "error",
                    f"tp_plan key {key!r} matches no module of this model.",
                    "Use a full module path from the model's plan, e.g. " + ", ".join(list(default_plan)[:3]) + ".",
                )
            )
    return usable


def _check_shards(plan: dict[str, str], shape: _Shape, tp: int) -> list[Finding]:
    """Whole heads per rank for every attention projection the plan splits; even MLP and vocab shards."""
    if tp == 1:
        return []
    split: dict[str, list[str]] = {"attention heads": [], "key/value heads": []}
    for key, style in plan.items():
        leaf = key.rsplit(".", 1)[-1]
        if leaf in ("q_proj", "o_proj") and style in SPLITS_OUTPUT | SPLITS_INPUT:
            split["attention heads"].append(key)
        elif leaf in ("k_proj", "v_proj") and style in SPLITS_OUTPUT:
            split["key/value heads"].append(key)
    out = []
    for what, n in (("attention heads", shape.heads), ("key/value heads", shape.kv_heads)):
        if split[what] and n % tp:
            out.append(
                Finding(
                    "heads-not-divisible",
                    "error",
                    f"{', '.join(split[what])} split {n} {what} over {tp} ranks: {n / tp:g} per rank is not a whole "
                    f"head. Loading works; the first forward then fails on every rank with \"shape '[..., -1, "
                    f"head_dim]' is invalid\".",
                    f"Replicate the attention projections ({REPLICATE}) in tp_plan (suggested)" + _or_tp_sizes(n) + ".",
                )
            )
    for leaf, size, label in (
        ("gate_proj", shape.intermediate, "intermediate size"),
        ("lm_head", shape.vocab, "vocabulary"),
    ):
        if size and size % tp and any(k.endswith(leaf) and style in SPLITS_OUTPUT for k, style in plan.items()):
            out.append(
                Finding(
                    "uneven-shards",
                    "warning",
                    f"The {label} ({size}) does not divide by {tp}: ranks get unequal shards.",
                    "Nothing breaks" + _or_tp_sizes(size, "for equal shards, use") + ".",
                )
            )
    return out


def _or_tp_sizes(n: int, lead: str = "or use") -> str:
    """``, or use tp_size 2 or 4`` (the sizes above 1 that divide ``n``, up to 8), or "" when none does."""
    sizes = [str(d) for d in range(2, min(n, 8) + 1) if n % d == 0]
    if not sizes:
        return ""
    return f", {lead} tp_size " + (", ".join(sizes[:-1]) + " or " if len(sizes) > 1 else "") + sizes[-1]


def _check_ranks(tp: int, chips: TpuChips) -> list[Finding]:
    if not chips.count:
        return (
            [
                Finding(
                    "no-tpu-here",
                    "info",
                    f"No TPU on this host: tl.launch runs {tp} CPU processes with gloo, which shards for real but slowly.",
                    "Nothing to fix for lessons; on a TPU VM each rank gets one chip.",
                )
            ]
            if tp > 1
            else []
        )
    problem = rank_count_problem(tp, chips)
    if problem is None:
        return []
    return [Finding(problem.code, problem.severity, f"tp_size={tp}: {problem.message}", problem.fix)]


def _suggest(
    problems: list[Finding], user_plan: dict[str, str], default_plan: dict[str, str], shape: _Shape, tp: int
) -> tuple[dict[str, str] | None, bool]:
    fixable = {"heads-not-divisible", "tp-plan-key"}
    if not any(p.code in fixable for p in problems):
        return None, False
    suggestion = dict(user_plan)  # corrected keys
    if any(p.code == "heads-not-divisible" for p in problems):
        for key in default_plan:
            if key.rsplit(".", 1)[-1] in ATTENTION:
                suggestion[key] = REPLICATE
    remaining = _check_shards({**default_plan, **suggestion}, shape, tp)
    rank_errors = any(p.code in _RANK_CODES for p in problems)
    return suggestion, not remaining and not rank_errors
