"""``tp_preflight()``: predict tensor-parallel sharding failures from the config alone, before any process
starts, and propose a plan that fixes what can be fixed.

transformers shards at load time and fails in the *first forward* when a rank's share of the query or
key/value projections is not a whole number of heads (e.g. 2 KV heads at tp_size=4:
``shape '[1, 9, -1, 16]' is invalid``), minutes after loading began. Everything here reads the config
and a model skeleton built on the meta device (no weights, no memory): ``meta_model`` builds it, ``plan``
checks the ``tp_plan`` against it, ``ranks`` checks ``tp_size`` against the chips (one host or several).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from tpu_lab._checks import boolean, positive_int
from tpu_lab._report import Finding, Report, has_error, most_severe_first, report_html, report_text
from tpu_lab.errors import InvalidArgument
from tpu_lab.host.chips import TpuChips, scan_tpu_chips
from tpu_lab.tp.preflight.meta_model import load_config, meta_model
from tpu_lab.tp.preflight.plan import ATTENTION, REPLICATE, Shape, check_shards, check_user_plan, module_names
from tpu_lab.tp.preflight.ranks import RANK_CODES, check_hosts, check_ranks


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
    names = module_names(skeleton)
    problems: list[Finding] = []
    user_plan = check_user_plan(tp_plan or {}, names, default_plan, problems)
    plan = {**default_plan, **user_plan}
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if not isinstance(getattr(text, "num_attention_heads", None), int):
        raise InvalidArgument(f"{type(config).__name__} has no num_attention_heads: not a transformer LM config.")
    shape = Shape(
        heads=text.num_attention_heads,
        kv_heads=getattr(text, "num_key_value_heads", None) or text.num_attention_heads,
        intermediate=getattr(text, "intermediate_size", None),
        vocab=getattr(text, "vocab_size", None),
    )
    problems += check_shards(plan, shape, tp_size)
    chips = scan_tpu_chips() if chips is None else chips
    problems += check_ranks(tp_size, chips) if hosts is None else check_hosts(tp_size, hosts, chips)
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


def _suggest(
    problems: list[Finding], user_plan: dict[str, str], default_plan: dict[str, str], shape: Shape, tp: int
) -> tuple[dict[str, str] | None, bool]:
    fixable = {"heads-not-divisible", "tp-plan-key"}
    if not any(p.code in fixable for p in problems):
        return None, False
    suggestion = dict(user_plan)  # corrected keys
    if any(p.code == "heads-not-divisible" for p in problems):
        for key in default_plan:
            if key.rsplit(".", 1)[-1] in ATTENTION:
                suggestion[key] = REPLICATE
    remaining = check_shards({**default_plan, **suggestion}, shape, tp)
    rank_errors = any(p.code in RANK_CODES for p in problems)
    return suggestion, not remaining and not rank_errors
