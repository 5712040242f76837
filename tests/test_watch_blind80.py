"""tl.watch() checked blind, what round 79 left and rounds 80 and 81 found. Each is checked against
Dynamo's own account, with the printed fix applied and measured where it is an action."""

import torch
from _dynamo_oracle import watched_clean
from torch import nn


def test_two_modules_compiled_apart_keep_the_guard_dynamo_logged_on_the_shared_wrapper_row():
    # meijieru/crnn.pytorch's CNN and its recurrent head, each compiled on its own: both run through
    # torch.compile's one shared wrapper, and Dynamo logs the second compile by the first graph's input guard
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten())
    head = nn.Linear(4 * 6 * 6, 3)
    compiled_cnn, compiled_head = torch.compile(cnn, backend="eager"), torch.compile(head, backend="eager")
    x = torch.randn(2, 1, 8, 8)
    table, _ = watched_clean(lambda: [compiled_head(compiled_cnn(x)) for _ in range(2)])
    (row,) = [r for r in table if r.function.startswith("Linear.forward")]
    (cause,) = [c for c in row.causes if c.count]
    assert cause.kind == "shared_wrapper", cause
    assert "requires_grad mismatch" in cause.guard, cause.guard  # the guard Dynamo logged, shown on the row
    assert "(it last held Sequential.forward" in cause.words, cause.words
