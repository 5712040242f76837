"""A graph break at an RNN (``nn.GRU``, ``nn.LSTM``): Dynamo's own hint, ``allow_rnn=True``, said with what
it costs (the RNN is unrolled over time steps: each sequence length a graph), and where packing surrounds
the RNN, the packing's fix in its place (allow_rnn cannot trace a PackedSequence). Text in, a Cause out."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from tpu_lab.compile.causes.cause import Cause

RNN_COST = "each new sequence length compiles a graph of its own, so pad sequences to a few lengths"
PACKED_RNN_FIX = (
    "the RNN here takes a PackedSequence, which Dynamo cannot trace even with allow_rnn=True: keep "
    "pack_padded_sequence, the RNN and pad_packed_sequence together outside the compiled function, and compile "
    "the layers before and after them"
)


def with_rnn_cost(cause: Cause, code: str = "") -> Cause:
    """``cause`` with allow_rnn's cost said beside it, where its fix offers that setting; a value read from an RNN
    module on the user's line ``code`` (``self.lstm.input_size``), which Dynamo cannot pass on, in words."""
    read = re.search(r"(\w+(?:\.\w+)*\.(?:lstm|gru|rnn)\w*)\.(\w+)", code, re.I)
    if "Missing `as_proxy()`" in cause.words and read:  # Dynamo does not trace the RNN module: its attributes neither
        words = (
            f"{read[0]} is read from an RNN module, which Dynamo does not trace (allow_rnn is off), so it cannot pass "
            "that value on into the graph"
        )
        fix = (
            f"set torch._dynamo.config.allow_rnn = True before the first call (the RNN is then unrolled over time "
            f"steps: {RNN_COST}), or keep {read[2]} as a plain int on your own module and read that"
        )
        return dataclasses.replace(cause, words=words, fix=fix)
    if "allow_rnn=True" not in cause.fix:
        return cause
    return dataclasses.replace(cause, fix=f"{cause.fix} (the RNN is then unrolled over time steps: {RNN_COST})")


def packed_rnn(causes: list[Any], breaks: list[Cause]) -> list[Any]:
    """``causes`` (breaks, or a frame Dynamo gave up on) of an RNN where ``breaks`` show packing around it
    (``pack_padded_sequence``): Dynamo's own hint, allow_rnn, only moves that break into the RNN's code
    (``_local_scalar_dense`` on the batch sizes), so the fix is the packing's."""
    if not any(re.search(r"`(?:pack_padded_sequence|pad_packed_sequence|pack_sequence)`", b.words) for b in breaks):
        return causes
    return [dataclasses.replace(c, fix=PACKED_RNN_FIX) if "RNN, GRU, or LSTM" in c.words else c for c in causes]
