"""``%load_ext tpu_lab`` registers ``%%tp_run -n N [--hosts H,H|TPU_WORKER_HOSTNAMES] [--remote VAR] [--cluster ADDR|VAR] [--timeout S]
[--panel] [--no-watch]`` (run the cell on N ranks, on each host; each rank's compiles are watched unless
``--no-watch``) and
``%%watch [--panel]`` (run the cell and show every compilation in it, per function and input signature)."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from tpu_lab._checks import positive_int, positive_seconds
from tpu_lab.errors import LaunchError, LaunchInterrupted, TpuLabError
from tpu_lab.tp.launch.api import launch


@magics_class
class TpuLabMagics(Magics):
    @magic_arguments()
    @argument("-n", "--nproc", type=int, required=True, help="ranks (one process per chip)")
    @argument("--timeout", type=float, default=None, help="stop every rank after this many seconds")
    @argument("--panel", action="store_true", help="show a LaunchPanel (live logs, Stop button) instead")
    @argument("--hosts", default=None, help="comma-separated hosts (N ranks on each), or TPU_WORKER_HOSTNAMES")
    @argument("--remote", default=None, help="name of a tl.Remote variable: how to reach the hosts")
    @argument(
        "--cluster",
        default=None,
        help="a Ray cluster: its address (ray://HEAD:10001, HEAD:6379, auto) or a tl.RayCluster variable",
    )
    @argument("--no-watch", action="store_true", help="run the ranks without the compile watcher")
    @cell_magic
    def tp_run(self, line: str, cell: str):
        """Run this cell under torchrun on N processes; each rank's output streams here, labelled.
        The LaunchResult is returned and kept in ``_tp_result``; ``tl.report(value)`` hands values back."""
        args = parse_argstring(self.tp_run, line)  # a malformed line raises UsageError itself
        assert self.shell is not None  # set by IPython when the magics are registered
        try:  # checked here too, so the panel refuses them before starting anything
            positive_int(args.nproc, "-n/--nproc", example=2)
            positive_seconds(args.timeout, "--timeout", example=300)
        except TpuLabError as e:
            raise UsageError(str(e)) from None
        if not cell.strip():
            raise UsageError(
                "%%tp_run has nothing to run: the cell is empty.\nFix: put the code for every rank in the cell."
            )
        hosts = _hosts(args.hosts)
        if args.remote is not None and args.remote not in self.shell.user_ns:
            raise UsageError(
                f"--remote {args.remote}: no such variable. Define it first: {args.remote} = tl.Remote(...)"
            )
        remote = None if args.remote is None else self.shell.user_ns[args.remote]
        cluster = self.shell.user_ns.get(args.cluster, args.cluster) if args.cluster else None
        options = {"nproc": args.nproc, "timeout": args.timeout, "hosts": hosts, "remote": remote}
        options |= {"cluster": cluster, "watch": not args.no_watch}  # the same launch, as a panel or here
        if args.panel:
            from tpu_lab.widgets import LaunchPanel

            panel = LaunchPanel(cell, **options)
            panel.start()
            return panel
        try:
            result = launch(cell, **options)
        except LaunchInterrupted as e:  # renders as one sentence and each rank's last line
            self.shell.user_ns["_tp_result"] = e.result
            raise
        except LaunchError as e:
            self.shell.user_ns["_tp_result"] = e.result
            raise UsageError(str(e)) from None  # the message says it all: no traceback into tpu_lab
        except TpuLabError as e:
            raise UsageError(str(e)) from None
        self.shell.user_ns["_tp_result"] = result
        return result

    @magic_arguments()
    @argument("--panel", action="store_true", help="show a live WatchPanel while the cell runs")
    @cell_magic
    def watch(self, line: str, cell: str):
        """Run this cell inside tl.watch(); the table of compiles shows under the cell (``_watch`` keeps it)."""
        args = parse_argstring(self.watch, line)
        assert self.shell is not None
        from tpu_lab.compile.watching.watch import Watch

        if args.panel:
            from tpu_lab.widgets import WatchPanel

            panel = WatchPanel()
            self.shell.user_ns["_watch"] = panel.watch
            from IPython.display import display

            display(panel)
            with panel:
                self.shell.run_cell(cell)
            return None
        w = Watch()
        self.shell.user_ns["_watch"] = w
        with w:
            self.shell.run_cell(cell)
        return w.table


def _hosts(value: str | None) -> str | list[str] | None:
    """--hosts as typed: "a,b", "'a, b'" (IPython keeps the quotes) or TPU_WORKER_HOSTNAMES."""
    if value is None:
        return None
    value = value.strip().strip("'\"").strip()
    if value == "TPU_WORKER_HOSTNAMES":
        return value
    return [h.strip().strip("'\"").strip() for h in value.split(",")]


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(TpuLabMagics)
