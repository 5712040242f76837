"""Installed package versions and the version ranges packages declare, from metadata (nothing imported)."""

from __future__ import annotations

import importlib.metadata

# Distribution names on PyPI, keyed by the name reports use.
PACKAGES = {
    "torch": "torch",
    "torch_tpu": "torch-tpu",
    "libtpu": "libtpu",
    "transformers": "transformers",
    "accelerate": "accelerate",
    "kernels": "kernels",
    "jax": "jax",
}


def installed_versions() -> dict[str, str | None]:
    """Versions of the packages tpu_lab cares about, from metadata (nothing is imported)."""
    out: dict[str, str | None] = {}
    for name, dist in PACKAGES.items():
        try:
            out[name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def required_range(dist: str, dep: str, extra: str | None = None) -> str | None:
    """The version specifier ``dist`` declares for ``dep`` (optionally under ``extra``)."""
    from packaging.requirements import Requirement

    try:
        reqs = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in reqs:
        req = Requirement(line)
        if req.name != dep:
            continue
        if extra is None and req.marker is None:
            return str(req.specifier)
        if extra is not None and req.marker is not None and req.marker.evaluate({"extra": extra}):
            return str(req.specifier)
    return None


def outside_range(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        # Local labels (+cpu, +cu128) don't change which release it is.
        return Version(Version(version).base_version) not in SpecifierSet(spec)
    except InvalidVersion:
        return False
