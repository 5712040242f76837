"""tl.watch() checked blind, forty-second round: real-code scenarios a reviewer wrote without reading the
watcher (multi-scale inference fixed with the printed maybe_mark_dynamic, an SNGAN discriminator evaluated
inside parametrize.cached(), ...), each checked against Dynamo's records."""

import pytest
import torch
import torch.nn.utils.parametrize as parametrize
from _dynamo_oracle import check_against_dynamo
from torch.nn.utils.parametrizations import spectral_norm

import tpu_lab as tl


def head(x):
    return (x * 2).sum(-1)


@pytest.mark.parametrize("mark", ["maybe_mark_dynamic", "mark_dynamic"])
@pytest.mark.parametrize("dynamic", [False, None])
def test_a_dimension_the_code_marked_is_said_marked_with_the_mark_it_carries(dynamo, mark, dynamic):
    """The fix the watch prints, maybe_mark_dynamic, applied: the next watch says the mark made the size dynamic
    (never "your code did not mark it ... an earlier compile"), with automatic dynamic shapes on or off."""
    f = torch.compile(head, backend="aot_eager", dynamic=dynamic)
    with tl.watch() as w:
        for n in (4, 6):
            x = torch.randn(n, 3)
            getattr(torch._dynamo, mark)(x, 0)
            f(x)
    check_against_dynamo(w, dynamo)
    (row,) = w.table.rows
    assert w.table.total_compiles == 1 and f"{mark}[0]" in row.signature, w.table.to_text()
    said = " ".join(c.words for c in row.causes)
    assert f"x dim 0 dynamic, as your code marked them ({mark})" in said and "did not mark" not in said, said


class Critic(torch.nn.Module):  # an SNGAN discriminator: spectral norm as a parametrization
    def __init__(self):
        super().__init__()
        self.c1 = spectral_norm(torch.nn.Conv2d(3, 4, 3, 2, 1))
        self.fc = spectral_norm(torch.nn.Linear(4 * 4 * 4, 1))

    def forward(self, x):
        return self.fc(torch.nn.functional.leaky_relu(self.c1(x), 0.1).flatten(1))


def test_torchs_own_setting_a_context_manager_switches_is_said_so_never_pass_a_tensor(dynamo):
    torch.manual_seed(0)
    d = Critic()
    cd = torch.compile(d, backend="aot_eager")
    with tl.watch() as w, torch.no_grad():
        cd(torch.randn(2, 3, 8, 8))
        with parametrize.cached():  # the Parametrizations tutorial: each weight computed once per forward
            cd(torch.randn(2, 3, 8, 8))
    check_against_dynamo(w, dynamo)
    said = [c for r in w.table for c in r.causes if "_cache_enabled" in c.words]
    assert said, w.table.to_text()
    for c in said:
        assert "torch's own setting torch.nn.utils.parametrize._cache_enabled changed" in c.words, c.words
        assert "torch.tensor(value)" not in c.fix and "same setting" in c.fix, c.fix


def test_compiled_autograds_graphs_are_named_as_backward_graphs_and_its_break_as_expected(dynamo, monkeypatch):
    """The Compiled Autograd tutorial's train step: the break at loss.backward() hands the backward to compiled
    autograd, whose graphs are its own rows; the sizes it marks dynamic are its marks, not the user's."""
    monkeypatch.setattr(torch._dynamo.config, "compiled_autograd", True)
    torch.manual_seed(0)
    model = torch.nn.Linear(10, 10)

    @torch.compile(backend="aot_eager")
    def train(model, x):
        loss = model(x).sum()
        loss.backward()

    with tl.watch() as w:
        for batch in (10, 10, 16):
            train(model, torch.randn(batch, 10))
    check_against_dynamo(w, dynamo)
    captured = [r for r in w.table if r.function.startswith("CompiledAutograd")]
    assert captured, w.table.to_text()
    for r in captured:
        said = " ".join(c.words for c in r.causes)
        assert "a backward graph compiled autograd captured" in said and "your code" not in said, said
    (backward,) = [b for b in w.table.breaks if "backward()" in b.words]
    assert backward.fix.startswith("expected with compiled autograd on"), backward.fix
