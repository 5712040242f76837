"""After loading: where every parameter and buffer ended up, their dtypes, and whether tied weights are
still one tensor (``LoadReport``), with how to call generate() on that device."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tpu_lab._report import Finding, Report, has_error, report_html, report_text

GENERATE_KWARGS = {"tpu": {"cache_implementation": "static"}, "cuda": {"cache_implementation": "static"}, "cpu": {}}
GENERATION_ADVICE = {
    "tpu": 'pass cache_implementation="static" and keep the inputs on CPU (no .to(model.device)): generate '
    "moves only what forward consumes and auto-compiles the decode steps with the tpu backend. SDPA is the default.",
    "cuda": 'pass cache_implementation="static": with a static cache generate() auto-compiles the decode steps.',
    "cpu": "as usual, no extra arguments: nothing is compiled by default on CPU (tl.GenerationSession compiles "
    "to show what a TPU pays).",
}


@dataclass(frozen=True)
class LoadReport(Report):
    """Where a loaded model ended up, proven by looking at every tensor."""

    name_or_path: str
    """What was asked for (a folder, a hub id, or ``tiny:<arch>``)."""
    source: str
    """``"local"``, ``"tiny"``, ``"hub"`` or ``"hub cache"`` (offline, loaded from the local hub cache)."""
    resolved_path: str
    """The folder or hub id actually passed to ``from_pretrained``."""
    device: str
    """The device everything should be on (``"tpu"``, ``"cuda:0"``, ``"cpu"``)."""
    device_map: str
    """The ``device_map`` passed to ``from_pretrained`` (never ``"auto"``)."""
    dtype: str
    """The dtype asked for."""
    placement: dict[str, int]
    """Parameters and buffers per device, e.g. ``{"tpu:0": 25}``."""
    dtypes: dict[str, int]
    """Parameters and buffers per dtype."""
    parameters: int
    """Number of parameter elements (tied weights counted once)."""
    bytes: int
    """Bytes held by parameters and buffers."""
    tied_embeddings: bool
    """Whether the config ties the LM head to the input embeddings."""
    tied_shared: bool | None
    """Whether they are still one tensor after loading (None when not tied)."""
    misplaced: tuple[str, ...]
    """Tensors not on ``device`` (including meta tensors that were never loaded)."""
    attn_implementation: str | None
    """The attention implementation the model uses."""
    load_seconds: float
    """Wall time of the tokenizer and weight loading."""
    generate_kwargs: dict[str, str]
    """Keyword arguments generate() wants on this device (a static cache on TPU)."""
    generation_advice: str
    """How to call generate() on this device."""
    findings: tuple[Finding, ...] = field(default=())
    """Problems found after loading (misplaced or meta weights, split tied weights, an "auto" request)."""

    @property
    def ok(self) -> bool:
        """True when no finding is an error."""
        return not has_error(self.findings)

    def _rows(self) -> list[tuple[str, str]]:
        placement = ", ".join(f"{d}: {n}" for d, n in self.placement.items())
        tied = "no" if not self.tied_embeddings else ("yes, one tensor" if self.tied_shared else "SPLIT")
        return [
            ("model", f"{self.name_or_path} ({self.source})"),
            ("device", f'{self.device} (loaded with device_map="{self.device_map}")'),
            ("placement", placement + ("" if not self.misplaced else f"  <- {len(self.misplaced)} MISPLACED")),
            ("dtypes", ", ".join(f"{d}: {n}" for d, n in self.dtypes.items())),
            ("parameters", f"{self.parameters:,} ({self.bytes / 2**20:.1f} MiB with buffers)"),
            ("tied embeddings", tied),
            ("attention", self.attn_implementation or "the model's default"),
            ("load time", f"{self.load_seconds:.2f} s"),
            ("generate", self.generation_advice),
        ]

    def to_text(self) -> str:
        return report_text("tpu_lab load report", self._rows(), self.findings, width=16)

    def to_html(self) -> str:
        return report_html("Model loaded", self._rows(), self.findings)


def inspect_placement(
    model: Any,
    *,
    name: str,
    source: str,
    path: str,
    device: str,
    device_map: str,
    dtype: str,
    seconds: float,
    findings: list[Finding] | None = None,
) -> LoadReport:
    """Look at every parameter and buffer: where it is, its dtype, and whether tied weights are shared."""
    findings = list(findings or [])
    target = device.partition(":")[0]
    placement: Counter[str] = Counter()
    dtypes: Counter[str] = Counter()
    misplaced, on_meta = [], []
    numel = nbytes = 0
    params = list(model.named_parameters())  # tied weights once (named_parameters de-duplicates)
    for i, (tname, t) in enumerate([*params, *model.named_buffers()]):
        device_ = t.device
        placement[str(device_)] += 1
        dtypes[str(t.dtype).removeprefix("torch.")] += 1
        n = t.numel()
        nbytes += n * t.element_size()
        numel += n if i < len(params) else 0
        if device_.type == "meta":
            on_meta.append(tname)
        elif device_.type != target:
            misplaced.append(tname)
    text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    tied = bool(getattr(text_config, "tie_word_embeddings", False))
    shared = None
    if tied:
        out_emb, in_emb = model.get_output_embeddings(), model.get_input_embeddings()
        shared = out_emb is not None and out_emb.weight.data_ptr() == in_emb.weight.data_ptr()
    if misplaced:
        findings.append(
            Finding(
                "weights-misplaced",
                "error",
                f"{len(misplaced)} tensor(s) are not on {device}: {', '.join(misplaced[:4])}"
                + (" ..." if len(misplaced) > 4 else "")
                + ". Every step would copy them across devices.",
                f"Load with an explicit device (device='{device}'), never device_map='auto'; check for CPU offload.",
            )
        )
    if on_meta:
        findings.append(
            Finding(
                "weights-on-meta",
                "error",
                f"{len(on_meta)} tensor(s) were never loaded (still on meta): {', '.join(on_meta[:4])}.",
                "The checkpoint lacks these weights: check it matches the model class and was saved completely.",
            )
        )
    if tied and not shared:
        findings.append(
            Finding(
                "tied-weights-split",
                "error",
                "The config ties lm_head to the input embeddings, but after loading they are two tensors: "
                "memory doubles and updates to one no longer reach the other.",
                "Call model.tie_weights(), or load without sharding the embeddings.",
            )
        )
    return LoadReport(
        name_or_path=name,
        source=source,
        resolved_path=path,
        device=device,
        device_map=device_map,
        dtype=dtype,
        placement=dict(placement),
        dtypes=dict(dtypes),
        parameters=numel,
        bytes=nbytes,
        tied_embeddings=tied,
        tied_shared=shared,
        misplaced=tuple(misplaced + on_meta),
        attn_implementation=getattr(model.config, "_attn_implementation", None),
        load_seconds=seconds,
        generate_kwargs=dict(GENERATE_KWARGS[target]),
        generation_advice=GENERATION_ADVICE[target],
        findings=tuple(findings),
    )
