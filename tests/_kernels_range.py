"""The kernels range the installed transformers declares, read here with packaging (not through tpu_lab), and
a version inside it and one outside it: transformers moves this range with each release (5.24 wanted
>=0.18.2,<0.19; 5.25 requires >=0.19.1,<0.20 even without the extra), so tests must not hard-code it."""

import importlib.metadata

from packaging.requirements import Requirement
from packaging.version import Version


def declared_kernels_range() -> tuple[str, str, str] | None:
    """(specifier, a version inside it, a version outside it), or None when transformers declares none."""
    for line in importlib.metadata.requires("transformers") or []:
        req = Requirement(line)
        if (
            req.name == "kernels"
            and req.specifier
            and (req.marker is None or req.marker.evaluate({"extra": "kernels"}))
        ):
            spec = req.specifier
            floors = [Version(s.version) for s in spec if s.operator in (">=", "==", "~=")]
            inside = next((str(v) for v in floors if v in spec), None)
            outside = "0.0.1"
            assert inside and Version(outside) not in spec, f"pick other versions for kernels{spec}"
            return str(spec), inside, outside
    return None
