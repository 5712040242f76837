"""The ``tp_plan`` against the model, from its config alone: keys that match no module (with the corrected
full path), styles transformers does not know, and whether every rank's share of each projection the
plan splits holds whole heads (and even MLP and vocabulary shards). Pure but for reading transformers'
own tables of module names and parallel styles."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from tpu_lab._report import Finding
from tpu_lab.errors import InvalidArgument

REPLICATE = "replicated_with_grad_allreduce"
# Styles that split a projection's output features (its heads) across ranks, and those that split input.
SPLITS_OUTPUT = {"colwise", "colwise_gather_output", "colwise_rep", "packed_colwise"}
SPLITS_INPUT = {"rowwise", "rowwise_split_input", "rowwise_rep", "packed_rowwise"}
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class Shape:
    """The sizes a plan splits: attention and key/value heads, the MLP's and the vocabulary's."""

    heads: int
    kv_heads: int
    intermediate: int | None
    vocab: int | None


def module_names(model: Any) -> set[str]:
    from transformers.distributed.parallel_utils import replace_layer_number_by_wildcard

    return {replace_layer_number_by_wildcard(n) for n, _ in (*model.named_modules(), *model.named_parameters())}


def styles() -> set[str]:
    import transformers.integrations.tensor_parallel  # noqa: F401  (registers the TP styles)
    from transformers.distributed.parallel_utils import ALL_PARALLEL_STYLES

    return set(ALL_PARALLEL_STYLES.keys())


def check_user_plan(
    tp_plan: dict[str, str], names: set[str], default_plan: dict[str, str], problems: list[Finding]
) -> dict[str, str]:
    """Keys that match nothing (with the corrected key) and unknown styles; returns the usable plan,
    with keys corrected where the correction is unambiguous."""
    if not isinstance(tp_plan, dict):
        raise InvalidArgument(
            f"tp_plan must be a dict of module pattern -> style, got {type(tp_plan).__name__}.",
            fix='Use e.g. tp_plan={"model.layers.*.self_attn.q_proj": "replicated_with_grad_allreduce"}.',
        )
    known = styles()
    usable: dict[str, str] = {}
    for key, style in tp_plan.items():
        if not isinstance(key, str) or not isinstance(style, str):
            raise InvalidArgument(
                f"tp_plan entry {key!r}: {style!r} is not a module pattern (str) -> style (str).",
                fix='Use e.g. {"model.layers.*.self_attn.q_proj": "colwise"}.',
            )
        if style not in known:
            close = [s for s in sorted(known) if s.startswith(str(style)[:4])]
            raise InvalidArgument(
                f"tp_plan style {style!r} (for {key!r}) is not a parallel style transformers knows.",
                fix="Use one of: " + ", ".join(close or sorted(known)) + ".",
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


def check_shards(plan: dict[str, str], shape: Shape, tp: int) -> list[Finding]:
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
