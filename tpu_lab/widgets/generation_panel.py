"""GenerationPanel: run prompts through a GenerationSession and watch compilations per input shape."""

from __future__ import annotations

from html import escape

import ipywidgets as w

from tpu_lab._checks import of_type, positive_int
from tpu_lab.compile.buckets.buckets import compare_policies
from tpu_lab.compile.buckets.policies import POLICIES, buckets_for_policy
from tpu_lab.compile.chart import png_bytes
from tpu_lab.compile.generation.generation_record import GenerationRecord
from tpu_lab.compile.generation.session import GenerationSession
from tpu_lab.compile.generation.session_checks import check_open
from tpu_lab.compile.table_base import TEXT_STYLE
from tpu_lab.widgets._common import error_html


def count(n: int, noun: str) -> str:
    """``1 compile``, ``3 compiles``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


class GenerationPanel(w.VBox):
    """Prompt box (one prompt per line: several lines run as one batch), max_new_tokens, do_sample, bucket
    policy (length and batch buckets), Run and Warm up, the output text, a live per-shape table (batch x
    length) and a chart, updated after each run; a banner when the recompile limit was hit."""

    def __init__(self, session: GenerationSession, *, max_buckets: int = 4) -> None:
        fix = "Pass a session: GenerationPanel(tl.GenerationSession(*tl.load_model(...)))."
        self.session = of_type(session, "session", GenerationSession, "a tl.GenerationSession", fix)
        check_open(session.model, session, "session")
        self.max_buckets = positive_int(max_buckets, "max_buckets", example=4)
        self._created = (session.buckets, session.batch_buckets)
        self.prompt = w.Textarea(
            value="The French Bread Law states",
            description="prompts",
            placeholder="one prompt per line; several lines run as one batch",
            layout=w.Layout(width="560px", height="80px"),
        )
        label = {"description_width": "initial"}  # sized to the text, never clipped
        self.max_new_tokens = w.BoundedIntText(
            value=session.max_new_tokens,
            min=1,
            max=max(4096, session.max_new_tokens),
            description="new tokens",
            style=label,
        )
        self.do_sample = w.Checkbox(value=False, description="do_sample")
        self.policy = w.Dropdown(
            options=[(label, key) for key, label in POLICIES.items()],
            value="session",
            description="buckets",
            layout=w.Layout(width="340px"),
            style=label,
        )
        # the buttons keep their width; the status line takes what is left and wraps (never squeezes them)
        keep = {"flex": "0 0 auto", "width": "auto"}
        self.run_button = w.Button(description="Run", button_style="primary", icon="play", layout=w.Layout(**keep))
        self.warmup_button = w.Button(
            description="Warm up", icon="fire", tooltip="compile every bucket now", layout=w.Layout(**keep)
        )
        self.status = w.HTML(layout=w.Layout(flex="1 1 auto", min_width="0"))
        self.output = w.HTML()
        self.table = w.HTML()
        self.chart = w.Image(format="png")
        self.run_button.on_click(lambda _: self.run())
        self.warmup_button.on_click(lambda _: self.warm_up())
        self.policy.observe(lambda _: self.apply_policy(), names="value")
        super().__init__(
            [
                self.prompt,
                w.HBox([self.max_new_tokens, self.do_sample, self.policy]),
                w.HBox([self.run_button, self.warmup_button, self.status]),
                self.output,
                self.table,
                self.chart,
            ]
        )
        self.add_class("tpu-lab-generation-panel")
        for widget, name in (
            (self.status, "status"),
            (self.output, "output"),
            (self.table, "shape-table"),
            (self.chart, "chart"),
            (self.policy, "policy"),
        ):
            widget.add_class(f"tpu-lab-{name}")
        self.refresh()

    def prompts(self) -> str | list[str]:
        """The prompt box as one prompt, or a list of them when it has several non-blank lines."""
        lines = [line for line in self.prompt.value.splitlines() if line.strip()]
        return lines if len(lines) > 1 else self.prompt.value

    def run(self) -> GenerationRecord | list[GenerationRecord] | None:
        """Generate for the prompt box (one batch for several lines); errors are shown, never raised."""
        try:
            result = self.session.generate(
                self.prompts(), max_new_tokens=self.max_new_tokens.value, do_sample=self.do_sample.value
            )
        except Exception as e:
            self.status.value = "<span style='color:#c62828'>failed</span>"
            self.output.value = error_html(e)
            return None
        records = result if isinstance(result, list) else [result]
        self.output.value = "".join(
            f"<div class='tpu-lab-generated'><b>{escape(r.prompt)}</b>{escape(r.text)}</div>" for r in records
        )
        self.refresh()
        # the status line last: when it changes, the output, table and chart are already updated
        r = records[0]  # why it compiled is in the table's row: said once, there
        shape = (
            f"{r.prompt_tokens} tokens -> {r.padded_length}"
            if r.batch_size == 1 and r.padded_batch == 1
            else f"{r.batch_size} prompts -> batch {r.padded_batch} x {r.padded_length}"
        )
        self.status.value = f"{shape} &middot; <b>{count(r.compiles, 'compile')}</b> &middot; {r.wall_seconds:.2f} s"
        return result

    def warm_up(self) -> None:
        """Compile every bucket (or every length seen, without buckets)."""
        try:
            records = self.session.warmup()
        except Exception as e:
            self.output.value = error_html(e)
            return
        compiles = sum(r.compiles for r in records)
        self.status.value = f"warmed up {count(len(records), 'shape')}: {count(compiles, 'compile')}"
        self.refresh()

    def apply_policy(self) -> None:
        """Set the session's length and batch buckets from the selected policy and the traffic seen."""
        try:
            buckets, batches = buckets_for_policy(
                self.policy.value, self.session.observed_batches, created=self._created, max_buckets=self.max_buckets
            )
            self.session.set_buckets(buckets, batch_buckets=batches)
        except Exception as e:
            self.output.value = error_html(e)
            return
        self.status.value = f"buckets: {', '.join(map(str, buckets)) if buckets else 'none'}" + (
            f" &middot; batch buckets: {', '.join(map(str, batches))}" if batches else ""
        )
        self.refresh()

    def refresh(self) -> None:
        """Redraw the table, the policy comparison (both axes once a batch was run) and the chart."""
        table = self.session.compile_table
        plans, seen = "", self.session.observed_batches
        if seen:
            batched = any(b > 1 for b, _ in seen)
            comparison = (
                compare_policies(batches=seen, max_buckets=self.max_buckets)
                if batched
                else compare_policies(self.session.prompt_lengths, max_buckets=self.max_buckets)
            )
            plans = (
                f"<details style='{TEXT_STYLE}'><summary>bucket policies for the prompts seen</summary>"
                f"{comparison.to_html()}</details>"
            )
        self.table.value = table.to_html() + plans
        if len(table):
            self.chart.value = png_bytes(table.chart())
