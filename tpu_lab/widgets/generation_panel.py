"""GenerationPanel: run prompts through a GenerationSession and watch compilations per input shape."""

from __future__ import annotations

from html import escape

import ipywidgets as w

from tpu_lab.compile.buckets import POLICIES, buckets_for_policy, compare_policies
from tpu_lab.compile.chart import png_bytes
from tpu_lab.compile.record import GenerationRecord
from tpu_lab.compile.session import GenerationSession
from tpu_lab.widgets._common import error_html


class GenerationPanel(w.VBox):
    """Prompt box, max_new_tokens, do_sample, bucket policy, Run and Warm up, the output text, a live
    per-shape table and a chart, updated after each run; a banner when the recompile limit was hit."""

    def __init__(self, session: GenerationSession, *, max_buckets: int = 4) -> None:
        self.session = session
        self.max_buckets = max_buckets
        self._created_buckets = session.buckets
        self.prompt = w.Textarea(
            value="The French Bread Law states", description="prompt", layout=w.Layout(width="560px", height="60px")
        )
        label = {"description_width": "initial"}  # sized to the text, never clipped
        self.max_new_tokens = w.BoundedIntText(
            value=session.max_new_tokens, min=1, max=4096, description="new tokens", style=label
        )
        self.do_sample = w.Checkbox(value=False, description="do_sample")
        self.policy = w.Dropdown(
            options=[(label, key) for key, label in POLICIES.items()],
            value="session",
            description="buckets",
            layout=w.Layout(width="340px"),
            style=label,
        )
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.warmup_button = w.Button(description="Warm up", icon="fire", tooltip="compile every bucket now")
        self.status = w.HTML()
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

    def run(self) -> GenerationRecord | None:
        """Generate for the prompt box; errors are shown, never raised into the cell."""
        try:
            record = self.session.generate(
                self.prompt.value, max_new_tokens=self.max_new_tokens.value, do_sample=self.do_sample.value
            )
        except Exception as e:
            self.status.value = "<span style='color:#c62828'>failed</span>"
            self.output.value = error_html(e)
            return None
        self.output.value = f"<div class='tpu-lab-generated'><b>{escape(record.prompt)}</b>{escape(record.text)}</div>"
        self.refresh()
        # the status line last: when it changes, the output, table and chart are already updated
        why = f" &middot; {escape('; '.join(record.reasons))}" if record.reasons else ""
        self.status.value = (
            f"{record.prompt_tokens} tokens -> {record.padded_length} &middot; "
            f"<b>{record.compiles} compile(s)</b> &middot; {record.wall_seconds:.2f} s{why}"
        )
        return record

    def warm_up(self) -> None:
        """Compile every bucket (or every length seen, without buckets)."""
        try:
            records = self.session.warmup()
        except Exception as e:
            self.output.value = error_html(e)
            return
        self.status.value = f"warmed up {len(records)} shape(s): {sum(r.compiles for r in records)} compile(s)"
        self.refresh()

    def apply_policy(self) -> None:
        """Set the session's buckets from the selected policy and the prompt lengths seen so far."""
        try:
            buckets = buckets_for_policy(
                self.policy.value,
                self.session.prompt_lengths,
                created=self._created_buckets,
                max_buckets=self.max_buckets,
            )
            self.session.set_buckets(buckets)
        except Exception as e:
            self.output.value = error_html(e)
            return
        self.status.value = f"buckets: {', '.join(map(str, buckets)) if buckets else 'none'}"
        self.refresh()

    def refresh(self) -> None:
        """Redraw the table, the policy comparison and the chart from the session."""
        table = self.session.compile_table
        plans = ""
        if self.session.prompt_lengths:
            comparison = compare_policies(self.session.prompt_lengths, max_buckets=self.max_buckets)
            plans = f"<details><summary>bucket policies for the prompts seen</summary>{comparison.to_html()}</details>"
        self.table.value = table.to_html() + plans
        if len(table):
            self.chart.value = png_bytes(table.chart())
