"""What ``load_model`` checks around ``from_pretrained``: options that can apply to where the model comes
from, weights that fit the device's memory (from the safetensors headers, before anything loads), and
weights that are all finite (one reduction per parameter, on the device, after loading); and what a
failure inside ``from_pretrained`` means (``explain_load_failure``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpu_lab._checks import optional_callable
from tpu_lab.errors import InvalidArgument, ModelLoadError

# safetensors dtypes a load converts to the dtype asked for (others, e.g. int8 or fp8, stay as stored)
CONVERTED = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def check_options(name: str, revision: Any, attn_implementation: Any, progress: Any) -> None:
    """Types of the options, and none that cannot apply here: a revision picks a version of a hub model,
    so a local folder or a tiny model (one set of files) cannot honour it."""
    if attn_implementation is not None and (not isinstance(attn_implementation, str) or not attn_implementation):
        raise InvalidArgument(
            f"attn_implementation={attn_implementation!r} is not an attention implementation's name.",
            fix='Pass e.g. attn_implementation="sdpa" (or "eager"), or leave it out for the model\'s default.',
        )
    optional_callable(progress, "progress", example="lambda desc, n, total: print(desc, n, total)")
    if revision is None:
        return
    if not isinstance(revision, str) or not revision.strip():
        raise InvalidArgument(
            f"revision={revision!r} is not a branch, tag or commit.", fix='Pass e.g. revision="main", or leave it out.'
        )
    if name.startswith("tiny:") or Path(name).expanduser().exists():
        what = "a tiny model is built here" if name.startswith("tiny:") else "a local folder holds one version"
        raise InvalidArgument(
            f"revision={revision!r} cannot apply to {name!r}: a revision picks a version of a Hugging Face Hub "
            f"model, and {what}.",
            cause="a revision passed along with a folder path (it would be ignored, silently)",
            fix="Leave revision out for a folder; to load that revision, pass the hub id instead, e.g. "
            "load_model('Qwen/Qwen3-0.6B', revision=...).",
        )


def weight_bytes(folder: Path, dtype: str) -> int:
    """Bytes the weights of a checkpoint folder take once loaded as ``dtype`` (from the safetensors
    headers; the file sizes of ``*.bin`` weights when there are no safetensors)."""
    files = _weight_files(folder)
    if not files:
        return sum(f.stat().st_size for f in folder.glob("*.bin"))
    total = 0
    for file in files:
        with open(file, "rb") as fh:
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            start, end = entry["data_offsets"]
            numel = 1
            for n in entry["shape"]:
                numel *= n
            size = CONVERTED.get(entry["dtype"])
            total += numel * ITEMSIZE[dtype] if size else end - start
    return total


def _weight_files(folder: Path) -> list[Path]:
    """The safetensors files transformers reads: those the index names, else model.safetensors, else all."""
    try:
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        return [folder / n for n in sorted(set(index["weight_map"].values())) if (folder / n).is_file()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    single = folder / "model.safetensors"
    return [single] if single.is_file() else sorted(folder.glob("*.safetensors"))


def check_memory(folder: Path, dtype: str, device: str) -> None:
    """Refuse a checkpoint whose weights alone exceed the device's memory: loading would fail after
    minutes, or (on CPU) the kernel would be killed with no message at all."""
    need = weight_bytes(folder, dtype)
    have = device_memory(device)
    if have is None or need <= have:
        return
    raise ModelLoadError(
        f"The weights of {folder} take {need / 2**30:.1f} GiB as {dtype}, more than this {device} has "
        f"({have / 2**30:.1f} GiB).",
        cause="a model too large for one device here (on CPU the kernel would be killed while loading)",
        fix="Pick a smaller model, load it in bfloat16 (dtype='bfloat16') if it is float32, use a device with "
        "more memory, or split it across chips with tensor parallelism (tl.tp_preflight, then tl.launch).",
    )


def device_memory(device: str) -> int | None:
    """Bytes of memory on ``device`` ("cpu", "cuda:N", "tpu": one chip's HBM), or None when unknown."""
    kind, _, index = device.partition(":")
    if kind == "cuda":
        import torch

        return torch.cuda.mem_get_info(int(index or 0))[1]
    if kind == "tpu":
        from tpu_lab.host.chips import scan_tpu_chips

        hbm = scan_tpu_chips().hbm_gib_per_chip
        return int(hbm * 2**30) if hbm else None
    from tpu_lab.host.memory import memory_gib

    gib = memory_gib()
    return int(gib * 2**30) if gib else None


def check_finite(model: Any, name: str) -> None:
    """Raise ModelLoadError naming the first parameter that holds a NaN or an infinity. One float32 sum
    per parameter on its device and one transfer of those sums (a NaN or infinity anywhere makes its
    sum non-finite); only a parameter whose sum is not finite is looked at element by element."""
    import torch

    params = [(n, p) for n, p in model.named_parameters() if p.is_floating_point() and p.device.type != "meta"]
    params = [(n, p) for n, p in params if p.numel()]
    if not params:
        return
    with torch.no_grad():
        sums = torch.stack([p.sum(dtype=torch.float32) for _, p in params]).cpu()
        suspects = [params[i] for i in (~torch.isfinite(sums)).nonzero().flatten().tolist()]
        # a sum can overflow to infinity with every value finite: count the bad values to be sure
        bad = [(n, p.numel(), int((~torch.isfinite(p)).sum())) for n, p in suspects]
    bad = [b for b in bad if b[2]]
    if not bad:
        return
    first, numel, count = bad[0]
    more = f" ({len(bad) - 1} more of its {len(params)} weight tensors too)" if len(bad) > 1 else ""
    raise ModelLoadError(
        f"{name} loaded, but its weights hold NaN or infinite values: {first} has {count:,} of {numel:,}{more}. "
        "Every output of this model would be garbage.",
        cause="the checkpoint is corrupt, or was saved from a training run that diverged",
        fix="Re-download the checkpoint, or re-save it from a healthy run; to load it anyway (to inspect it), "
        "pass check_finite=False.",
    )


def explain_load_failure(e: Exception, name: str, *, trusted: bool = False) -> ModelLoadError:
    """Turn what from_pretrained raised into an error that says the likely cause and the fix."""
    text = f"{type(e).__name__}: {e}"
    if "trust_remote_code" in text and not trusted:
        return ModelLoadError(
            f"{name} needs its own model code: {e}",
            fix="Read the model's code on its hub page, then pass trust_remote_code=True if you trust it.",
        )
    if "SafetensorError" in text or "incomplete metadata" in text.lower():
        return ModelLoadError(
            f"The weights of {name} could not be read: {e}",
            cause="a truncated or corrupt safetensors file",
            fix="Delete the checkpoint and download or save it again.",
        )
    return ModelLoadError(f"Loading {name} failed: {text}", fix="See the chained error above for the details.")
