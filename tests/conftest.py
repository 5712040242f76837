import builtins
import importlib.util
import os
import uuid

import pytest
import torch
from _dynamo_oracle import dynamo  # noqa: F401  (the fixture, for the watch tests)

HAS_TORCH_TPU = importlib.util.find_spec("torch_tpu") is not None
# Marks every process this session starts, so tests count only their own leftovers (tests/_processes.py); a
# pytest-xdist worker is a session of its own (it inherits the controller's mark, so it takes a new one).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["TPU_LAB_TEST_SESSION"] = uuid.uuid4().hex
    # One torch thread per worker (and per process it starts), so the workers do not fight over the cores.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"] or 1))
else:
    os.environ.setdefault("TPU_LAB_TEST_SESSION", uuid.uuid4().hex)


@pytest.fixture(scope="session", autouse=True)
def _isolated_model_cache(tmp_path_factory):
    # Tests build their tiny models in a fresh cache, never the user's.
    os.environ["TPU_LAB_CACHE"] = str(tmp_path_factory.mktemp("tpu_lab_cache"))


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs the torch-tpu package: pip install -e '.[tpu]'")
    for item in items:
        if "tpu_package" in item.keywords and not HAS_TORCH_TPU:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1-3 (throwaway keys); skips with the reason where it cannot start."""
    from _processes import INFRASTRUCTURE

    from tpu_lab.testing.loopback import start_sshd

    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    if isinstance(server, str):
        pytest.skip(server)
    INFRASTRUCTURE.add(server.proc.pid)  # the listener lives all session; its per-connection children do not
    yield server
    INFRASTRUCTURE.discard(server.proc.pid)
    server.stop()


@pytest.fixture(scope="session")
def ipython_shell():
    """IPython's test shell with ``%load_ext tpu_lab``: one per session (start_ipython returns None after
    its first call, so every test module shares this one)."""
    from IPython.testing.globalipapp import get_ipython, start_ipython

    shell = start_ipython() or get_ipython()
    shell.run_line_magic("load_ext", "tpu_lab")
    return shell


@pytest.fixture(autouse=True)
def _real_print():
    """Ray's driver replaces ``builtins.print`` once a tqdm_ray update reaches it
    (ray/experimental/tqdm_ray.py, ``RAY_TQDM_PATCH_PRINT``), for the rest of the process: a test that
    compiles a ``print`` must meet the real one, whichever Ray test ran before it in this process."""
    saved = builtins.print
    yield
    builtins.print = saved


@pytest.fixture(autouse=True)
def _sigint_handler_unchanged(request):
    """The interrupt tests (``_thread.interrupt_main``) need Python's own SIGINT handler: a test that
    leaves another one behind (SIG_IGN, a library's) would make every later interrupt test hang and
    fail. Such a test fails here, named, and the handler is put back for the tests after it."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after is not before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"{request.node.nodeid} left SIGINT's handler changed: {before!r} -> {after!r}")
