"""ProbePanel: the device probe report with a Refresh button."""

from __future__ import annotations

import time
from collections.abc import Callable

import ipywidgets as w

from tpu_lab._checks import optional_callable
from tpu_lab.host.probe import DeviceReport, probe
from tpu_lab.widgets._common import error_html


class ProbePanel(w.VBox):
    """Shows ``tpu_lab.probe()``; Refresh takes a new snapshot. ``.report`` is the latest DeviceReport.

    ``probe_fn`` replaces the probe (e.g. ``functools.partial(tl.probe, sysfs_root=...)`` to show a
    simulated TPU host).
    """

    def __init__(self, probe_fn: Callable[[], DeviceReport] | None = None) -> None:
        optional_callable(probe_fn, "probe_fn", example="functools.partial(tl.probe, sysfs_root=...)")
        self._probe = probe_fn or probe
        self.report: DeviceReport | None = None
        self.refresh_button = w.Button(description="Refresh", icon="refresh", tooltip="Take a new snapshot")
        self.status = w.HTML()
        self.body = w.HTML()
        self.refresh_button.on_click(lambda _: self.refresh())
        super().__init__([w.HBox([self.refresh_button, self.status]), self.body])
        self.add_class("tpu-lab-probe-panel")
        self.refresh()

    def refresh(self) -> None:
        """Probe again and redraw; an error is shown in the panel, never raised into the cell."""
        self.status.value = "probing..."
        try:
            self.report = self._probe()
        except Exception as e:  # the panel must survive anything the probe meets
            self.body.value = error_html(e)
            self.status.value = "probe failed"
            return
        counts = {s: sum(f.severity == s for f in self.report.findings) for s in ("error", "warning", "info")}
        summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n) or "no findings"
        self.status.value = (
            f"device <b>{self.report.device}</b> &middot; {summary} &middot; taken {time.strftime('%H:%M:%S')}"
        )
        self.body.value = self.report.to_html()
