"""What the session's tracking adds to warm generate calls, against the same calls untracked.

    python benchmarks/tracking_overhead.py [--rounds 30]

All sides run the same compiled forward (aot_eager, dynamic=False), the same padded inputs and the same
generate arguments on a warm tiny Qwen3, in rounds of shuffled order, GC paused while timing (medians):
- "untracked": what session.generate does minus tracking: build the padded input tensors, call
  model.generate with the compiled forward directly, decode the new tokens;
- "tracked": session.generate, which adds per-forward shape signatures, the watcher's per-call marker and records;
- "bare generate": model.generate on prebuilt tensors, nothing decoded, for reference.
Target: tracked <= 1.01x untracked.
"""

import argparse

import torch
from _side_by_side import measure, report

import tpu_lab as tl
from tpu_lab.compile.generation.hooks import private_copy as _private_copy
from tpu_lab.models.workload import prompt_ids

NEW_TOKENS = 8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    loaded = tl.load_model("tiny:qwen3")
    model, tok = loaded.model, loaded.tokenizer
    ids = prompt_ids(tok, 20)
    bucket, cache = 32, 64
    session = tl.GenerationSession(model, tok, buckets=(bucket,), max_cache_len=cache, max_new_tokens=NEW_TOKENS)
    tracked_forward = model.forward

    # The untracked twin: its own compiled copy of the same forward, fed exactly what the session feeds.
    untracked_forward = torch.compile(_private_copy(session._original_forward), backend=session.backend, dynamic=False)
    pad = bucket - len(ids)
    input_ids = torch.tensor([[tok.pad_token_id] * pad + ids])
    attention_mask = torch.tensor([[0] * pad + [1] * len(ids)])
    kwargs = {
        "max_new_tokens": NEW_TOKENS,
        "min_new_tokens": NEW_TOKENS,
        "do_sample": False,
        "cache_implementation": "static",
        "max_cache_len": cache,
        "pad_token_id": tok.pad_token_id,
        "disable_compile": True,
    }

    # Both run with the session's mask building (installed for the session's life), so the graphs match.
    def bare():
        model.forward = untracked_forward
        try:
            return model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        finally:
            model.forward = tracked_forward

    def untracked():
        model.forward = untracked_forward
        try:
            x = torch.tensor([[tok.pad_token_id] * pad + ids])
            mask = torch.tensor([[0] * pad + [1] * len(ids)])
            out = model.generate(input_ids=x, attention_mask=mask, **kwargs)
            tok.decode(out[0, bucket:].tolist(), skip_special_tokens=True)
            return out
        finally:
            model.forward = tracked_forward

    def tracked():
        return session.generate(ids, min_new_tokens=NEW_TOKENS)

    assert untracked()[0, bucket:].tolist() == list(tracked().token_ids) == bare()[0, bucket:].tolist()
    cases = {"untracked": untracked, "tracked": tracked, "bare generate": bare}
    times = measure(cases, args.rounds)
    assert session.records[-1].compiles == 0
    report(
        f"warm generate, {NEW_TOKENS} new tokens, prompt 20 -> bucket {bucket}, tiny Qwen3, "
        f"{session.backend}; median of {args.rounds} shuffled rounds",
        times,
    )
    session.close()


if __name__ == "__main__":
    main()
