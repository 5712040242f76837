"""Installed package versions and the version ranges packages declare, from metadata (nothing imported);
the one rule for whether Hub kernels can work with what is installed."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass

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


@dataclass(frozen=True)
class KernelsStatus:
    """Whether ``use_kernels=True`` can work with the installed kernels, jax and transformers."""

    missing: tuple[str, ...]
    """Packages it needs that are not installed (kernels; jax too on TPU: TPU kernels are Pallas/JAX)."""
    kernels: str | None
    """The installed kernels version."""
    required: str
    """The kernels range the installed transformers declares ("" when it declares none)."""
    transformers: str | None

    @property
    def mismatch(self) -> bool:
        """kernels is installed but outside the range transformers requires."""
        return bool(self.kernels and self.required and outside_range(self.kernels, self.required))

    @property
    def install_command(self) -> str:
        return f'pip install "kernels{self.required}"' + (" jax" if "jax" in self.missing else "")


def kernels_status(versions: Mapping[str, str | None] | None = None, *, need_jax: bool = False) -> KernelsStatus:
    """``versions`` entries override the installed ones (None meaning "not installed")."""
    v = {**installed_versions(), **(versions or {})}
    needed = ["kernels"] + (["jax"] if need_jax else [])
    return KernelsStatus(
        missing=tuple(p for p in needed if not v.get(p)),
        kernels=v.get("kernels"),
        required=required_range("transformers", "kernels", extra="kernels") or "",
        transformers=v.get("transformers"),
    )
