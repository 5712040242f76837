"""tl.watch() checked blind, rounds 69 to 71: loralib's MergedLinear, whose boolean-mask assignment the
backend cannot compile, and more. Each is checked against Dynamo's own account, with the printed fix
applied where it is an action."""

from pathlib import Path

import pytest
import torch
from _dynamo_oracle import watched_clean
from torch import nn

from tpu_lab.testing.dynamo_account import DynamoAccount, counting_backend


def watched(run):
    return watched_clean(run)[0]


class MergedLinear(nn.Linear):  # microsoft/LoRA loralib/layers.py: q and v adapted in a fused qkv projection
    def __init__(self, width=8, r=2):
        super().__init__(width, width * 3)
        self.lora_A = nn.Parameter(torch.randn(r * 2, width) * 0.1)
        self.lora_B = nn.Parameter(torch.randn(width * 2, r) * 0.1)
        self.lora_ind = torch.zeros(width * 3, dtype=torch.bool).view(3, -1)
        self.lora_ind[[True, False, True], :] = True
        self.lora_ind = self.lora_ind.view(-1)

    def zero_pad(self, x):
        result = x.new_zeros((*x.shape[:-1], self.out_features)).view(-1, self.out_features)
        result[:, self.lora_ind] = x.reshape(-1, self.out_features // 3 * 2)
        return result.view((*x.shape[:-1], self.out_features))

    def forward(self, x):
        after_a = x @ self.lora_A.t()
        after_b = nn.functional.conv1d(after_a.transpose(-2, -1), self.lora_B.unsqueeze(-1), groups=2)
        return super().forward(x) + self.zero_pad(after_b.transpose(-2, -1))


def _lora(steps, capture=False):
    torch.manual_seed(0)
    layer = MergedLinear()
    compiled = torch.compile(layer, backend=counting_backend)
    losses = []
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=capture):
        for _ in range(steps):
            loss = compiled(torch.randn(2, 5, 8)).square().mean()
            loss.backward()
            losses.append(loss.item())
    return losses


def test_a_backend_failure_names_the_boolean_mask_line_and_its_break_is_no_break_gone_past():
    line = next(
        i for i, t in enumerate(Path(__file__).read_text().splitlines(), 1) if "result[:, self.lora_ind] =" in t
    )
    table = watched(lambda: _lora(2))
    failed = [c for r in table.rows for c in r.causes if c.kind == "failed"]
    placed = f"a boolean-mask assignment at test_watch_blind70.py:{line}"
    assert failed and all(placed in c.words for c in failed), f"torch {torch.__version__}: no gm in Dynamo's frames?"
    assert all("capture_dynamic_output_shape_ops = True" in c.fix for c in failed), failed
    assert table.breaks and all("none needed" not in b.fix for b in table.breaks), table.breaks
    assert all(f"test_watch_blind70.py:{line}" in b.words for b in table.breaks), table.breaks
    torch._dynamo.reset()
    with DynamoAccount() as account:  # the fix applied: every graph compiles, no failure, the same losses
        fixed = _lora(2, capture=True)
    assert not account.failed() and account.graphs["forward"] == 1 and account.graphs["backward"] == 1, account.graphs
    assert fixed == pytest.approx(_lora_eager(2))


def _lora_eager(steps):
    torch.manual_seed(0)
    layer = MergedLinear()
    out = []
    for _ in range(steps):
        loss = layer(torch.randn(2, 5, 8)).square().mean()
        loss.backward()
        out.append(loss.item())
    return out
