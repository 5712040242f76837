"""The notebooks run under nbmake; this checks, in the same run, that what each one shows reads as prose
(tests/_user_text.py: no Python values, internal codes or self-contradictions in markdown and outputs).
``TPU_LAB_NOTEBOOK_OUTPUTS=DIR`` also saves each executed notebook there, to read what it showed."""

import os
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _user_text import notebook_defects

# The notebooks whose every screen is checked; the others' owners add theirs once they read as prose.
CHECKED = {"01_device_probe.ipynb", "02_load_model.ipynb", "03_recompiles.ipynb", "04_tensor_parallel.ipynb", "05_debug_recompiles.ipynb", "06_multi_host.ipynb"}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not getattr(item, "nbmake", False):
        return (yield)
    from nbmake.nb_run import NotebookRun

    runs = []
    execute = NotebookRun.execute

    def keep(self):
        runs.append(execute(self))
        return runs[-1]

    NotebookRun.execute = keep
    name = Path(item.filename).name
    try:
        result = yield
    finally:
        NotebookRun.execute = execute
        if runs and os.environ.get("TPU_LAB_NOTEBOOK_OUTPUTS"):  # a failed run's outputs too
            folder = Path(os.environ["TPU_LAB_NOTEBOOK_OUTPUTS"])
            folder.mkdir(parents=True, exist_ok=True)
            nbformat.write(runs[-1].nb, str(folder / name))
    if runs and name in CHECKED:
        found = notebook_defects(runs[-1].nb)
        if found:
            from nbmake.nb_result import NotebookError
            from nbmake.pytest_items import NotebookFailedException

            summary = f"{name} shows a reader {len(found)} Python value(s), code(s) or contradiction(s)"
            error = NotebookError(summary=summary, trace="\n".join([summary + ":", *found]), failing_cell_index=-1)
            raise NotebookFailedException(type(runs[-1])(nb=runs[-1].nb, error=error))
    return result
