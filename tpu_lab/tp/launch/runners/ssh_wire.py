"""What the kernel and a host runner (``tp.launch.runners.ssh_host``) say to each other over ssh's stdin and
stdout, and the facts a host reports about its Python, checked against the kernel's.

Kernel -> host, one JSON object a line: the job, then ``{"kind": "go", ...}`` or ``{"kind": "stop"}``
(the end of stdin means stop too). Host -> kernel: control lines (``CONTROL`` + JSON: ``hi``, ``hello``,
``error``, ``started`` (its argv), ``rank`` (a rank's new state), ``compiles`` (a rank's live compiles,
``tp.results.live_compiles``), ``beat`` (every second: not frozen),
``result``) and output lines ``<global rank>\\t<text as a JSON string>`` (``-`` for torchrun's own lines).
Anything else (ssh's own messages, a traceback before the runner started) is passed on as is.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
from collections.abc import Mapping
from typing import Any

CONTROL = "\x1etpu_lab "


def control(kind: str, **data: Any) -> str:
    """One control line (no newline)."""
    return CONTROL + json.dumps({"kind": kind, **data})


def output_line(rank: int | None, text: str) -> str:
    """One labelled output line (no newline). The text travels JSON-escaped: a rank's ``\r``, ``\n`` or
    control prefix cannot start a line of its own on the wire, so it can never speak for another rank
    or for the runner."""
    return f"{'-' if rank is None else rank}\t{json.dumps(text)}"


def parse(line: str) -> tuple[str, Any]:
    """``("control", dict)``, ``("line", (rank or None, text))`` or ``("raw", text)`` for one line."""
    if line.startswith(CONTROL):
        try:
            message = json.loads(line[len(CONTROL) :])
            if isinstance(message, dict) and "kind" in message:
                return "control", message
        except ValueError:
            pass
        return "raw", line
    head, tab, text = line.partition("\t")
    if tab and (head == "-" or head.isdigit()):
        try:
            text = json.loads(text)
        except ValueError:
            return "raw", line
        if isinstance(text, str):
            return "line", (None if head == "-" else int(head), text)
    return "raw", line


def python_facts() -> dict[str, Any]:
    """This interpreter's Python, tpu_lab, torch and transformers versions (torch is not imported)."""
    import tpu_lab

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    torch = version("torch") if importlib.util.find_spec("torch") is not None else None
    return {
        "python": platform.python_version(),
        "tpu_lab": tpu_lab.__version__,
        "torch": torch,
        "transformers": version("transformers"),
    }


def facts_problem(host: str, python: str, theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> str | None:
    """Why ``host`` cannot run this kernel's launch with its Python, or None. Pure."""
    if theirs.get("torch") is None:
        return f"Python {python} on host {host} has no torch (this kernel has torch {ours['torch']})."
    mismatched = []
    if str(theirs.get("python", "")).split(".")[:2] != str(ours["python"]).split(".")[:2]:
        mismatched.append(f"Python {theirs.get('python')} (here {ours['python']})")
    for name in ("tpu_lab", "torch", "transformers"):
        if theirs.get(name) != ours.get(name):
            mismatched.append(f"{name} {theirs.get(name)} (here {ours.get(name)})")
    if mismatched:
        return f"Host {host} runs {python} with " + ", ".join(mismatched) + ": every host must run the same Python."
    return None
