"""LaunchPanel: a tensor-parallel run with a live log and a state per rank, elapsed time, and Stop.

A view: the launch's run state (``tp.results.run_state.RunState``, filled by whichever runner runs it) holds
every line and every rank's state; the panel only redraws it.
"""

from __future__ import annotations

import os
import threading
import time
from html import escape

import ipywidgets as w

from tpu_lab._checks import positive_seconds
from tpu_lab.tp.launch.api import start
from tpu_lab.tp.launch.hosts import Hosts, resolve_hosts
from tpu_lab.tp.launch.runner import Runner
from tpu_lab.tp.launch.runners.ssh_command import Remote
from tpu_lab.tp.results.launch_error import stopped_by_user
from tpu_lab.tp.results.launch_result import LaunchResult
from tpu_lab.tp.results.live_compiles import compile_words
from tpu_lab.tp.results.run_state import RankState
from tpu_lab.widgets._common import error_html

LOG_LINES = 12  # the newest lines of each rank, all in view (the result keeps 200)
REFRESH_SECONDS = 0.25  # redraw at most this often: a chatty rank must not flood the frontend
TICK_SECONDS = 0.5  # and at least this often while the run goes on
STATE_COLOURS = {
    RankState.WAITING: "#555",
    RankState.RUNNING: "#1565c0",
    RankState.OK: "#2e7d32",
    RankState.FAILED: "#c62828",
    RankState.STOPPED: "#555",
}


class LaunchPanel(w.VBox):
    """``LaunchPanel(code, nproc=2).start()`` runs ``code`` under torchrun in the background; ``wait()``
    blocks until it ends. ``.result`` is the LaunchResult, ``.error`` the LaunchError if it failed."""

    def __init__(
        self,
        code: str,
        *,
        nproc: int,
        timeout: float | None = None,
        hosts: Hosts | None = None,
        remote: Remote | None = None,
        cluster: object | None = None,
        watch: bool = True,
    ) -> None:
        self.code, self.nproc, self.timeout, self.hosts, self.remote = code, nproc, timeout, hosts, remote
        self.cluster, self.watch = cluster, watch
        self.run: Runner | None = None
        self.result: LaunchResult | None = None
        self.error: Exception | None = None
        self._thread: threading.Thread | None = None
        self._last_draw = 0.0
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger", disabled=True)
        self.stop_button.on_click(lambda _: self.stop())
        self.header = w.HTML()
        self.host_names = _host_names(hosts)
        hosts_count = max(1, len(self.host_names), getattr(cluster, "hosts", None) or 0)  # a tl.RayCluster's
        count = nproc * hosts_count if isinstance(nproc, int) and 0 < nproc <= 64 else 0
        self.rank_views = [w.HTML(layout=w.Layout(width=f"{max(24, 98 // min(count, 4))}%")) for _ in range(count)]
        self.message = w.HTML()
        self.compiles = w.HTML()  # who compiles, who waits (live); each rank's compiles merged (at the end)
        rows = [w.HBox(self.rank_views[i : i + 4]) for i in range(0, count, 4)]
        super().__init__([w.HBox([self.stop_button, self.header]), self.compiles, *rows, self.message])
        self.add_class("tpu-lab-launch-panel")
        self._draw()

    def start(self) -> LaunchPanel:
        """Start the run in the background (the kernel stays free, so Stop works)."""
        try:
            positive_seconds(self.timeout)  # NaN or infinity would never fire
            self.run = start(
                self.code,
                nproc=self.nproc,
                hosts=self.hosts,
                remote=self.remote,
                cluster=self.cluster,
                watch=self.watch,
            )
        except Exception as e:  # bad input: shown in the panel, nothing started
            self.error = e
            self.message.value = error_html(e)
            return self
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
        """Stop every process of the run (in the background: hosts may take seconds to confirm, and the
        kernel stays free meanwhile)."""
        if self.run is not None:
            threading.Thread(
                target=self.run.stop, args=("Stop button",), name="tpu_lab-launch-stop", daemon=True
            ).start()

    def _wait(self) -> None:
        assert self.run is not None
        ticker = threading.Thread(target=self._tick, name="tpu_lab-launch-panel-tick", daemon=True)
        ticker.start()  # the clock and the logs move even while no rank prints
        try:
            self.result = self.run.wait(self.timeout, on_output=self._on_output)
        except Exception as e:
            self.error = e
            self.result = getattr(e, "result", None)
            stopped = isinstance(self.result, LaunchResult) and stopped_by_user(self.result)
            self.message.value = _stopped_html(self.result) if stopped else error_html(e)
        self.stop_button.disabled = True
        self._draw()

    def _tick(self) -> None:
        while self.run is not None and self.run.state.finished is None:
            time.sleep(TICK_SECONDS)
            self._draw()

    def _on_output(self, rank: int | None, line: str) -> None:
        if time.monotonic() - self._last_draw > REFRESH_SECONDS:
            self._draw()

    def _draw(self) -> None:
        self._last_draw = time.monotonic()
        state = self.run.state if self.run else None
        ranks = state.ranks if state else []
        counts = state.counts() if state else {}
        summary = " &middot; ".join(f"{n} {s.value}" for s, n in counts.items() if n and s is not RankState.WAITING)
        elapsed = f"{state.elapsed:.1f} s" if state else "not started"
        self.header.value = f"<b>{len(self.rank_views)} rank(s)</b> &middot; {summary or 'waiting'} &middot; {elapsed}"
        self._draw_compiles()
        for rank, view in enumerate(self.rank_views):
            status = ranks[rank] if rank < len(ranks) else None
            label, colour = (status.label, STATE_COLOURS[status.state]) if status else ("waiting", "#555")
            compiles = status.compiles.label() if status is not None and status.compiles is not None else ""
            lines = state.lines(rank)[-LOG_LINES:] if state and status else []
            view.value = (
                f"<div class='tpu-lab-rank' data-rank='{rank}'><b>rank {rank}{self._on(rank)}</b> "
                f"<span class='tpu-lab-rank-state' style='color:{colour}'>{escape(label)}</span>"
                + (f" &middot; <span class='tpu-lab-rank-compiles'>{escape(compiles)}</span>" if compiles else "")
                + f"<pre style='font-size:11px;margin:2px 0;overflow-x:auto'>{escape(chr(10).join(lines))}</pre></div>"
            )

    def _draw_compiles(self) -> None:
        if self.result is not None and self.result.compiles is not None:
            self.compiles.value = self.result.compiles.to_html()
        elif self.run is not None:
            words = compile_words(self.run.state)
            self.compiles.value = f"<div class='tpu-lab-compiling'>{escape(words)}</div>" if words else ""

    def _on(self, rank: int) -> str:
        return f" on {escape(self.host_names[rank // self.nproc])}" if self.host_names else ""


def _stopped_html(result: LaunchResult | None) -> str:
    """A run you stopped: a calm note, not an error box (each rank's last lines stay in its view)."""
    seconds = f" after {result.seconds:.1f} s" if result is not None else ""
    return (
        f"<div class='tpu-lab-stopped' style='border-left:4px solid #555;padding:2px 8px;color:#333'>"
        f"<b>Stopped by you{seconds}.</b> Every process of the run was stopped; each rank's last lines are "
        "above. Run the cell again when you are ready.</div>"
    )


def _host_names(hosts: Hosts | None) -> list[str]:
    """The hosts, for labelling the rank views (a bad value shows its error when the run starts)."""
    if hosts is None:
        return []
    try:
        return list(resolve_hosts(hosts, os.environ))
    except Exception:
        return []
