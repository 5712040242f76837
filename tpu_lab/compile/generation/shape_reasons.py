"""Why the generation session's call needed a compile, judged from the shape signatures compiled before it
(prompt length, batch size, cache size, mask), and the innermost error behind a wrapped one. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from tpu_lab.compile.generation.signature import ShapeSignature


def explain_new_shape(sig: ShapeSignature, compiled: Sequence[ShapeSignature]) -> str | None:
    """Why ``sig`` needed a compile, from the signatures compiled before it. None when it can't tell
    (then Dynamo's own guard text is the explanation)."""
    if sig in compiled:
        return None  # compiled before: something else changed (dtype, a reset, another guard)
    same = [c for c in compiled if c.phase == sig.phase]
    if not same:
        return f"first {sig.phase} compile" + (": one graph serves every decode step" if sig.phase == "decode" else "")
    if any((c.length, c.cache, c.batch) == (sig.length, sig.cache, sig.batch) and c.mask != sig.mask for c in same):
        return (
            "attention mask is None instead of a tensor: the prompt filled its bucket exactly, so transformers "
            "dropped the mask, and that is a second graph for the same shape"
        )
    batches = sorted({c.batch for c in same})
    new_batch = (
        f"new batch size {sig.batch} (compiled so far: {', '.join(map(str, batches))}); batch buckets bound these"
    )
    if sig.phase == "prefill" and all(c.length != sig.length for c in same):
        seen = ", ".join(str(n) for n in sorted({c.length for c in same})) or "none"
        also = f"; {new_batch}" if sig.batch not in batches else ""
        return f"new prompt length {sig.length} (compiled so far: {seen}); buckets bound these{also}"
    same_shape = [c for c in same if (c.length, c.batch) == (sig.length, sig.batch)]
    if sig.cache is not None and same_shape and all(c.cache != sig.cache for c in same_shape):
        return (
            f"static cache length changed to {sig.cache} (was {same_shape[-1].cache}): the cache is sized "
            "per prompt and only grows; a fixed max_cache_len gives every call one size"
        )
    if sig.batch not in batches:
        return new_batch
    if not same_shape:
        pairs = ", ".join(sorted({f"{c.batch}x{c.length}" for c in same}))
        return (
            f"new (batch, length) pair {sig.batch}x{sig.length}: each pair is its own graph (compiled so far: {pairs})"
        )
    return None


def innermost(e: BaseException) -> BaseException:
    """The innermost exception: Dynamo wraps what a compile callback raised."""
    while (e.__cause__ or e.__context__) is not None:
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return e


def innermost_message(e: BaseException) -> str:
    """The first line of the innermost exception."""
    e = innermost(e)
    return str(e).splitlines()[0] if str(e) else type(e).__name__
