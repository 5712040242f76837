"""ModelLoader: pick a model, a device the probe allows, a dtype; Load; see where everything went."""

from __future__ import annotations

import os
from collections.abc import Sequence
from html import escape

import ipywidgets as w

from tpu_lab._checks import name_or_path, of_type
from tpu_lab.errors import InvalidArgument
from tpu_lab.host.probe import DeviceReport, device_choices, probe
from tpu_lab.models.checkpoint import needs_network
from tpu_lab.models.loading import MODEL_PRESETS, LoadedModel, load_model
from tpu_lab.widgets._common import error_html

# Labels sized to their text: ipywidgets' fixed 80 px label cut "Loading weights" to "Loading w...".
LABEL = {"description_width": "initial"}
DTYPE_OPTIONS = [("device default", "auto"), ("bfloat16", "bfloat16"), ("float16", "float16"), ("float32", "float32")]


class ModelLoader(w.VBox):
    """A model field with presets, a device dropdown filled from the probe, dtype, Load, status and report.
    ``presets`` replaces the names the model field offers (e.g. a workshop's own models).

    After a load, ``.loaded`` is the LoadedModel and ``.model`` / ``.tokenizer`` its parts. Errors are shown
    in the widget with their fix; nothing is raised into the cell.
    """

    def __init__(
        self,
        model: str | os.PathLike = "tiny:qwen3",
        *,
        device_report: DeviceReport | None = None,
        presets: Sequence[str] = MODEL_PRESETS,
    ) -> None:
        model, presets = _checked(model, device_report, presets)
        report = device_report or probe()
        self.choices = {c.name: c for c in device_choices(report)}
        self.loaded: LoadedModel | None = None
        self.model_name = w.Combobox(
            value=model,
            options=presets,
            ensure_option=False,
            description="model",
            placeholder="folder, hub id or tiny:<arch>",
            layout=w.Layout(width="420px"),
            style=LABEL,
        )
        self.device = w.Dropdown(
            # The reason is long: it goes in the status line when picked, not into a clipped option.
            options=[(c.name if c.available else f"{c.name} (unavailable)", c.name) for c in self.choices.values()],
            value=report.device,
            description="device",
            style=LABEL,
            layout=w.Layout(width="200px"),
        )
        self.dtype = w.Dropdown(
            options=DTYPE_OPTIONS, value="auto", description="dtype", style=LABEL, layout=w.Layout(width="220px")
        )
        self.load_button = w.Button(description="Load", button_style="primary", icon="download")
        self.progress = w.IntProgress(
            value=0, min=0, max=1, description="weights", layout=w.Layout(visibility="hidden"), style=LABEL
        )
        self.hint = w.HTML()
        self.status = w.HTML()
        self.report_view = w.HTML()
        self.load_button.on_click(lambda _: self.load())
        self.device.observe(lambda _: self._check_device(), names="value")
        self.model_name.observe(lambda _: self._check_model(), names="value")
        super().__init__(
            [
                w.HBox([self.model_name, self.device, self.dtype]),
                self.hint,
                w.HBox([self.load_button, self.progress, self.status]),
                self.report_view,
            ]
        )
        self.add_class("tpu-lab-model-loader")
        self.status.add_class("tpu-lab-status")
        self.report_view.add_class("tpu-lab-report-view")
        self.hint.add_class("tpu-lab-model-hint")
        self._check_device()
        self._check_model()

    @property
    def model(self):
        return self.loaded.model if self.loaded else None

    @property
    def tokenizer(self):
        return self.loaded.tokenizer if self.loaded else None

    def _check_device(self) -> None:
        choice = self.choices[self.device.value]
        self.load_button.disabled = not choice.available
        self.status.value = (
            "" if choice.available else f"<b>{choice.name}</b> is unavailable here: {escape(choice.reason)}"
        )

    def _check_model(self) -> None:
        name = self.model_name.value.strip()
        self.hint.value = (
            f"<i>{escape(name)} downloads from the Hugging Face Hub: it needs a network (it is not in this "
            "machine's hub cache). Offline, pick a <code>tiny:</code> preset.</i>"
            if needs_network(name)
            else ""
        )

    def _on_progress(self, desc: str, n: int, total: int | None) -> None:
        self.progress.layout.visibility = "visible"
        self.progress.description = desc or "loading"
        self.progress.max = max(total or 1, 1)
        self.progress.value = min(n, self.progress.max)

    def load(self) -> LoadedModel | None:
        """Load what the fields say; returns the LoadedModel, or None after showing the error."""
        name = self.model_name.value.strip()
        self.status.value = f"loading <code>{escape(name)}</code> ..."
        self.load_button.disabled = True
        try:
            self.loaded = load_model(name, device=self.device.value, dtype=self.dtype.value, progress=self._on_progress)
        except Exception as e:  # shown in the widget: the cell and the kernel keep working
            self.status.value = "<span style='color:#c62828'>load failed</span>"
            self.report_view.value = error_html(e)
            return None
        finally:
            self.load_button.disabled = not self.choices[self.device.value].available
        r = self.loaded.report
        verdict = "ok" if r.ok else "<span style='color:#c62828'>loaded with problems</span>"
        self.report_view.value = r.to_html()
        # the status line last: when it says "ok", everything above it is already shown
        self.status.value = f"{verdict}: {escape(name)} on <b>{r.device}</b> in {r.load_seconds:.2f} s"
        return self.loaded


def _checked(model: object, device_report: object, presets: object) -> tuple[str, list[str]]:
    """The model name and the presets as the fields hold them; a clear error for what they cannot hold."""
    name = name_or_path(model, "model")
    if device_report is not None:
        fix = "Pass what tl.probe() returns (device_report=tl.probe(...)), or leave it out for this machine."
        of_type(device_report, "device_report", DeviceReport, "a DeviceReport", fix)
    items = list(presets) if isinstance(presets, (list, tuple)) else None
    if not items or any(not isinstance(p, str) or not p.strip() for p in items):
        raise InvalidArgument(
            f"presets={presets!r:.60} is not a list of model names.",
            fix='Pass a non-empty list of strs, e.g. presets=["tiny:qwen3", "Qwen/Qwen3-0.6B"].',
        )
    return name, items
