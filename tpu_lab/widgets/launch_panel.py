"""LaunchPanel: a tensor-parallel run with a live log and a status per rank, elapsed time, and Stop."""

from __future__ import annotations

import threading
import time
from collections import deque
from html import escape

import ipywidgets as w

from tpu_lab.tp.launch import LaunchResult, RunningLaunch, start
from tpu_lab.widgets._common import error_html

LOG_LINES = 40
REFRESH_SECONDS = 0.25  # redraw at most this often: a chatty rank must not flood the frontend
STATE_COLOURS = {"running": "#1565c0", "ok": "#2e7d32"}


class LaunchPanel(w.VBox):
    """``LaunchPanel(code, nproc=2).start()`` runs ``code`` under torchrun in the background; ``wait()``
    blocks until it ends. ``.result`` is the LaunchResult, ``.error`` the LaunchError if it failed."""

    def __init__(self, code: str, *, nproc: int, timeout: float | None = None) -> None:
        self.code, self.nproc, self.timeout = code, nproc, timeout
        self.run: RunningLaunch | None = None
        self.result: LaunchResult | None = None
        self.error: Exception | None = None
        self._logs: dict[int, deque[str]] = {rank: deque(maxlen=LOG_LINES) for rank in range(nproc)}
        self._states = {rank: "waiting" for rank in range(nproc)}
        self._thread: threading.Thread | None = None
        self._last_draw = 0.0
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.stop_button.on_click(lambda _: self.stop())
        self.header = w.HTML()
        self.rank_views = [w.HTML(layout=w.Layout(width=f"{max(24, 98 // min(nproc, 4))}%")) for _ in range(nproc)]
        self.message = w.HTML()
        rows = [w.HBox(self.rank_views[i : i + 4]) for i in range(0, nproc, 4)]
        super().__init__([w.HBox([self.stop_button, self.header]), *rows, self.message])
        self.add_class("tpu-lab-launch-panel")
        self._draw()

    def start(self) -> LaunchPanel:
        """Start the run in the background (the kernel stays free, so Stop works)."""
        try:
            self.run = start(self.code, nproc=self.nproc)
        except Exception as e:  # bad input: shown in the panel, nothing started
            self.error = e
            self.message.value = error_html(e)
            return self
        self._states = {rank: "running" for rank in range(self.nproc)}
        self.stop_button.disabled = False
        self._thread = threading.Thread(target=self._wait, name="tpu_lab-launch-panel", daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> LaunchResult | None:
        """Block until the run ends; returns the result (None when it failed: see ``.error``)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.result

    def stop(self) -> None:
        """Stop every process of the run."""
        if self.run is not None:
            self.run.stop("was stopped from the panel")

    def _wait(self) -> None:
        assert self.run is not None
        try:
            self.result = self.run.wait(self.timeout, on_output=self._on_output)
        except Exception as e:
            self.error = e
            self.result = getattr(e, "result", None)
            self.message.value = error_html(e)
        if self.result is not None:
            self._states = {r.rank: r.state for r in self.result.ranks}
        self.stop_button.disabled = True
        self._draw()

    def _on_output(self, rank: int | None, line: str) -> None:
        if rank is None or rank not in self._logs:
            return
        self._logs[rank].append(line)
        if time.monotonic() - self._last_draw > REFRESH_SECONDS:
            self._draw()

    def _draw(self) -> None:
        self._last_draw = time.monotonic()
        elapsed = f"{self.run.elapsed:.1f} s" if self.run else "not started"
        done = sum(s != "running" and s != "waiting" for s in self._states.values())
        self.header.value = f"<b>{self.nproc} rank(s)</b> &middot; {done} finished &middot; {elapsed}"
        for rank, view in enumerate(self.rank_views):
            state = self._states[rank]
            colour = STATE_COLOURS.get(state.split(" ")[0], "#c62828" if state != "waiting" else "#555")
            log = escape("\n".join(self._logs[rank]))
            view.value = (
                f"<div class='tpu-lab-rank' data-rank='{rank}'><b>rank {rank}</b> "
                f"<span class='tpu-lab-rank-state' style='color:{colour}'>{escape(state)}</span>"
                f"<pre style='max-height:14em;overflow:auto;font-size:11px;margin:2px 0'>{log}</pre></div>"
            )
