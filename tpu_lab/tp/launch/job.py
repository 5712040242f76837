"""What a launch runs, checked before anything starts: the code (syntax, a readable file), the rank count,
the script's arguments and the extra environment. ``make_job()`` returns a ``Job`` every runner takes;
``watch_env`` arms the compile watcher in its ranks (a flag in ``job.env``, which every runner passes to
every rank), ``watched`` tells whether a rank environment has it."""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tpu_lab._checks import environment, positive_int, string_args
from tpu_lab.errors import InvalidArgument
from tpu_lab.tp.launch.rank_worker import WATCH_ENV
from tpu_lab.tp.launch.torchrun_command import STALE_ENV

# A one-line string that is only a file name (no spaces, quotes, brackets or operators) is a path;
# anything else ending in ".py" is code (e.g. `run("train.py")` ends in ")", `x = a.py` has " = ").
_FILE_NAME = re.compile(r"[\w.~/\\-]+\.py")
# Ranks beyond this per host are almost surely a typo (each rank is a Python process importing torch).
MAX_RANKS = 256


@dataclass(frozen=True)
class Job:
    """A checked launch request: the same for every runner."""

    source: bytes
    """The worker code, as bytes (a file's own encoding is honoured as Python honours it)."""
    path: Path | None
    """The worker file, when the code came from one (None: cell code)."""
    nproc: int
    """Ranks per host."""
    args: tuple[str, ...] = ()
    """Arguments for the worker script, passed byte for byte to every rank."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the ranks."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Marks every process of the run (in its environment) so all of them can be found and stopped."""


def make_job(
    code_or_path: str | os.PathLike, *, nproc: int, args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> Job:
    """Check everything about what to run; raises InvalidArgument (nothing started) on a bad value."""
    positive_int(nproc, "nproc", example=2)
    if nproc > MAX_RANKS:
        raise InvalidArgument(
            f"nproc={nproc} processes per host is more than tpu_lab starts (at most {MAX_RANKS}).",
            cause="each rank is a Python process that imports torch (hundreds of MB each)",
            fix="Use one rank per chip (TPU) or a few on CPU, e.g. nproc=2.",
        )
    checked_env, checked_args = environment(env), string_args(args)
    owned = sorted(k for k in checked_env if k in STALE_ENV or k.startswith("TORCHELASTIC_"))
    if owned:
        raise InvalidArgument(
            f"env sets {', '.join(owned)}, which the launch sets itself for each rank.",
            cause="torchrun and tpu_lab give every rank its rank, world size, rendezvous and run marker; "
            "a value from env= cannot apply (and the run marker is how every process gets stopped)",
            fix="Drop those keys; read them in the worker from os.environ (e.g. int(os.environ['RANK'])).",
        )
    source, path = worker_source(code_or_path)
    return Job(source, path, nproc, checked_args, checked_env)


def worker_source(code_or_path: str | os.PathLike) -> tuple[bytes, Path | None]:
    """(source bytes, path): a .py file as it is (path), or the code itself (path None), checked to
    compile. Bytes, so a file's coding declaration is honoured as Python honours it."""
    if isinstance(code_or_path, str):
        text = code_or_path.strip()
        is_path = "\n" not in text and text.endswith(".py") and (_FILE_NAME.fullmatch(text) or Path(text).is_file())
    elif isinstance(code_or_path, os.PathLike):
        is_path = True
    else:
        raise InvalidArgument(
            f"code_or_path must be Python source (str) or a .py path, got {type(code_or_path).__name__}.",
            fix='Pass the code as a string, e.g. "print(1)", or a pathlib.Path to a .py file.',
        )
    if is_path:
        path = Path(os.fspath(code_or_path)).expanduser().resolve()
        if not path.is_file():
            raise InvalidArgument(f"No worker script at {path}.", fix="Pass an existing .py file, or the code itself.")
        try:
            source, name = path.read_bytes(), str(path)
        except OSError as e:
            raise InvalidArgument(f"Cannot read {path}: {e.strerror or e}.", fix="Check its permissions.") from e
    else:
        assert isinstance(code_or_path, str)
        if not code_or_path.strip():
            raise InvalidArgument("Nothing to run: the code is empty.", fix="Pass Python source or a .py file.")
        try:
            source, name = code_or_path.encode("utf-8"), "<tp_run cell>"
        except UnicodeEncodeError as e:
            raise InvalidArgument(
                f"The code holds a character UTF-8 cannot encode ({e.reason} at {e.start}).",
                cause="a lone surrogate, e.g. from decoding bytes with errors='surrogateescape'",
                fix="Remove or replace that character.",
            ) from e
    try:
        compile(source, name, "exec")
    except (SyntaxError, ValueError) as e:
        where = (
            f" at line {e.lineno}: {e.msg}\n    {(e.text or '').rstrip()}" if isinstance(e, SyntaxError) else f": {e}"
        )
        hint = (
            " (if you meant a file, it does not exist)"
            if not is_path and str(code_or_path).strip().endswith(".py")
            else ""
        )
        raise InvalidArgument(
            f"The worker code has a syntax error{where}{hint}", fix="Fix the code; nothing was started."
        ) from e
    return source, path if is_path else None


def watch_env(job: Job, watch: bool) -> Job:
    """``job`` with the compile watcher switched on in its ranks' environment when ``watch`` (every runner
    passes ``job.env`` to every rank, so this one place arms all of them)."""
    env = {k: v for k, v in job.env.items() if k != WATCH_ENV}
    if watch:
        env[WATCH_ENV] = "1"
    return dataclasses.replace(job, env=env)


def watched(env: Mapping[str, str]) -> bool:
    """Whether the ranks' environment arms the compile watcher."""
    return env.get(WATCH_ENV) == "1"
