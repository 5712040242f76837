"""The files a worker and the launcher exchange in the run directory: each rank's value and status.

Workers call ``tl.report(value)``; the worker runner writes each rank's status (exit code, traceback).
Every file is written to a temporary name and renamed, so the launcher never reads half a file.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from tpu_lab.errors import InvalidArgument, TpuLabWarning

RESULT_DIR_ENV = "TPU_LAB_RESULT_DIR"


def report(value: Any) -> None:
    """Hand ``value`` (anything JSON can encode) back to ``tl.launch`` from this rank; the last call wins."""
    folder = os.environ.get(RESULT_DIR_ENV)
    if not folder:
        warnings.warn(
            "tpu_lab: tl.report() was called outside a tl.launch worker, so the value goes nowhere. "
            "Run this code with tl.launch(...) or %%tp_run.",
            TpuLabWarning,
            stacklevel=2,
        )
        return
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(
            f"tl.report() got a value JSON cannot encode: {e}.",
            cause="tensors, arrays and custom objects are not JSON",
            fix="Report plain data: e.g. tensor.tolist(), float(x), str(obj).",
        ) from e
    write_atomic(Path(folder) / f"rank{os.environ.get('RANK', '0')}.value.json", text)


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
