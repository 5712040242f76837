"""Which package a source file belongs to (and which package called a compiled function), from the packages' real locations on this machine (never from a
substring of the path): a clone in a folder named ``tpu_lab`` or ``torch``, any venv and any notebook
folder give the same answer. Read per compile or per graph break, never per call; cached per file."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import site
import sys
import sysconfig
from typing import Any

USER = ""
"""``package_of``'s answer for the user's own code."""


@functools.cache
def torch_folder() -> str:
    """Where the installed torch lives, found without importing it (reading a copied log needs no torch)."""
    spec = importlib.util.find_spec("torch")
    origin = spec.origin if spec is not None else None
    return os.path.dirname(os.path.realpath(origin)) if origin else ""


@functools.cache
def _roots() -> tuple[tuple[str, str], ...]:
    """(folder, package) pairs, longest folder first: tpu_lab and torch by their own ``__file__``, every
    installed distribution by its site-packages folder, the standard library by sysconfig."""
    import tpu_lab

    found: list[tuple[str, str]] = [(os.path.dirname(os.path.realpath(tpu_lab.__file__)), "tpu_lab")]
    if folder := torch_folder():
        found.append((folder, "torch"))
    folders = {*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"]}
    folders |= {sysconfig.get_paths()["platlib"], *(p for p in sys.path if p.endswith(("-packages", "-packages/")))}
    found += [(os.path.realpath(f), "site-packages") for f in folders if f and os.path.isdir(f)]
    stdlib = sysconfig.get_paths()["stdlib"]
    found.append((os.path.realpath(stdlib), "stdlib"))
    return tuple(sorted(found, key=lambda p: -len(p[0])))


@functools.lru_cache(maxsize=4096)
def package_of(filename: str) -> str:
    """``"torch"``, ``"tpu_lab"``, ``"stdlib"``, an installed package's top-level name (``"transformers"``),
    ``"<frozen>"``-style names for code with no file, or ``USER`` for the user's own code."""
    if not filename:
        return USER
    if filename.startswith("<"):  # <frozen importlib...>, <string>; IPython cells have real-looking names
        return USER if _is_cell(filename) else "<builtin>"
    path = os.path.realpath(filename)
    for root, package in _roots():
        if path == root or path.startswith(root + os.sep):
            if package != "site-packages":
                return package
            top = path[len(root) + 1 :].split(os.sep, 1)[0]
            return top.removesuffix(".py")
    return _installed_elsewhere(filename)


_INSTALLED = re.compile(r"[\\/](?:site|dist)-packages[\\/]([^\\/]+)")
_STDLIB = re.compile(r"[\\/]lib[\\/]python3\.\d+[\\/](?!(?:site|dist)-packages[\\/])")


def _installed_elsewhere(filename: str) -> str:
    """A file of another machine (a TORCH_TRACE log copied here): by its install folder, the one layout
    every Python shares (``.../site-packages/<package>/``, ``.../lib/python3.N/``), else the user's."""
    if m := _INSTALLED.search(filename):
        return m[1].removesuffix(".py")
    return "stdlib" if _STDLIB.search(filename) else USER


def unshortened(short: str) -> str:
    """A file as Dynamo's guard comments name it (``nn/modules/conv.py``: torch's ``shorten_filename``, the
    path less its common prefix with torch's folder) back to the file on this machine; '' where none is."""
    if os.path.isabs(short):
        return short if os.path.isfile(short) else ""
    folder = torch_folder()
    while folder and not os.path.isfile(os.path.join(folder, short)):
        folder = "" if os.path.dirname(folder) == folder else os.path.dirname(folder)
    if folder and folder != os.sep:
        return os.path.join(folder, short)
    import glob  # only "/" in common: torch cuts one character of the path's own with it

    found = glob.glob(os.sep + "?" + glob.escape(short))
    return found[0] if len(found) == 1 else ""


def is_library(filename: str) -> bool:
    """Code the user did not write: torch, tpu_lab, the standard library or an installed package."""
    return package_of(filename) != USER


def _is_cell(filename: str) -> bool:
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    compiler = getattr(shell, "compile", None)
    try:
        return bool(compiler is not None and compiler.format_code_name(filename))
    except Exception:  # an older IPython or a foreign compiler
        return False


def short_path(filename: str) -> str:
    """A file as a user reads it: ``transformers/models/llama/modeling_llama.py`` for an installed
    package's file (never an absolute site-packages path), the base name for the user's own."""
    package = package_of(filename)
    if package in (USER, "<builtin>"):
        return filename.rsplit("/", 1)[-1]
    path = os.path.realpath(filename)
    for root, _ in _roots():
        if path.startswith(root + os.sep):
            rel = path[len(root) + 1 :]
            if package == "stdlib":
                return rel.rsplit("/", 1)[-1]
            return f"{package}/{rel}" if package in ("torch", "tpu_lab") else rel
    if m := _INSTALLED.search(filename):  # another machine's install: from the package on
        return filename[m.start(1) :].replace("\\", "/")
    return filename.rsplit("/", 1)[-1]


def library_caller(stack: Any) -> str:
    """The package whose code called the compiled function ('' for the user's code), from the stack of
    Dynamo's compile callback (torch's and tpu_lab's frames skipped): a pipeline or generate() builds
    the inputs, so advice must not ask the user to mark them."""
    f = stack
    while f is not None and passes_through(f.f_code.co_filename):
        f = f.f_back
    return package_of(f.f_code.co_filename) if f is not None else USER


def is_pipeline(filename: str) -> bool:
    """A file of transformers' pipelines."""
    return "/pipelines/" in filename.replace("\\", "/") and package_of(filename) == "transformers"


def in_pipeline(stack: Any) -> bool:
    """A transformers pipeline up the stack (it batches the user's inputs, so its batch_size shapes the calls)."""
    f, depth = stack, 0
    while f is not None and depth < 256:
        name = f.f_code.co_filename
        if is_pipeline(name):
            return True
        f, depth = f.f_back, depth + 1
    return False


# torch's, tpu_lab's and the standard library's frames (contextlib, functools) between a call and Dynamo
_PASSED_THROUGH = ("torch", "tpu_lab", "stdlib", "<builtin>")
_MODEL_CODE = ("/transformers/models/", "/transformers/modeling_", "/transformers/utils/generic.py")
"""transformers' model code hands the caller's tensors on (an LM head's forward calling the base model's):
who built the inputs is whoever called it, the user or generate() and the pipelines."""


def passes_through(filename: str) -> bool:
    """Code that only hands the caller's values on: torch, tpu_lab, the standard library, transformers' model code."""
    package = package_of(filename)  # by the installed package's location, never by a folder's name alone
    return package in _PASSED_THROUGH or (
        package == "transformers" and any(p in filename.replace("\\", "/") for p in _MODEL_CODE)
    )
