"""WatchPanel: the table of a tl.watch(), redrawn live while the code inside runs.

A background thread polls the watch twice a second and redraws only when it changed, so the watched
loop itself pays nothing; the chart is redrawn when the watch closes.
"""

from __future__ import annotations

import threading
from typing import Any

import ipywidgets as w

from tpu_lab._checks import _short
from tpu_lab.compile.chart import png_bytes
from tpu_lab.compile.watching.watch import Watch
from tpu_lab.errors import InvalidArgument
from tpu_lab.tp.results.trace_report import TraceReport

REFRESH_SECONDS = 0.5


class WatchPanel(w.VBox):
    """``with tl.widgets.WatchPanel() as panel: loop()`` (display it first) or ``WatchPanel(watch)`` over
    an existing watch. ``.watch`` is the Watch; the panel is also a context manager that opens it.
    ``WatchPanel(tl.read_trace(folder))`` shows a job's logs read afterwards: its tables and chart."""

    watch: Watch
    report: TraceReport | None

    def __init__(self, watch: Watch | TraceReport | None = None) -> None:
        if isinstance(watch, TraceReport):  # logs read after the job: nothing to follow, drawn once
            super().__init__([w.HTML(watch.to_html()), w.Image(value=png_bytes(watch.chart()), format="png")])
            self.watch = None  # type: ignore[assignment]  # nothing runs: the report is all there is
            self.report = watch
            self.add_class("tpu-lab-watch-panel")
            return
        if watch is not None and not all(hasattr(watch, a) for a in ("table", "version", "poll")):
            raise InvalidArgument(
                f"watch={_short(watch)} ({type(watch).__name__}) is not a watch made by tl.watch().",
                fix="Pass the object tl.watch() returns, e.g. WatchPanel(tl.watch()), a tl.read_trace() report, "
                "or nothing for a new one.",
            )
        self.watch = Watch() if watch is None else watch
        self.report = None
        self.status = w.HTML()
        self.table = w.HTML()
        self.chart = w.Image(format="png")
        self._stop = threading.Event()
        self._seen = -1
        super().__init__([self.status, self.table, self.chart])
        self.add_class("tpu-lab-watch-panel")
        self.table.add_class("tpu-lab-watch-table")
        self.redraw()

    def __enter__(self) -> WatchPanel:
        if self.report is not None:
            raise InvalidArgument(
                "This panel shows logs read after the job (tl.read_trace): there is nothing to watch in a with-block.",
                fix="Display it instead (WatchPanel(report)); for code running now, use `with WatchPanel() as panel:`.",
            )
        self.watch.__enter__()
        self._stop.clear()
        threading.Thread(target=self._follow, name="tpu_lab-watch-panel", daemon=True).start()
        self.status.value = "watching..."
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self.watch.__exit__(*exc)
        self.redraw(chart=True)
        total = self.watch.table.total_line().removeprefix("total: ")
        self.status.value = "done: " + total

    def _follow(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            self.watch.poll()
            if self.watch.version != self._seen:
                self.redraw()

    def redraw(self, *, chart: bool = False) -> None:
        """Show the watch's table now (and its chart when ``chart``)."""
        self._seen = self.watch.version
        table = self.watch.table
        self.table.value = table.to_html()
        if chart and table.timeline:
            self.chart.value = png_bytes(table.chart())
