"""tl.watch() checked blind, thirty-ninth round: real-code scenarios a reviewer wrote without reading the
watcher (transformers' Adafactor with a compiled step, CleanRL's GAE loop, SASRec's NumPy inputs, ...), each
checked against Dynamo's records, with the fix as printed applied where it is one."""

import pytest
import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


def adafactor_steps(opt, model, steps):
    step = torch.compile(opt.step, backend="eager")
    for _ in range(steps):
        model(torch.randn(4, 8)).pow(2).mean().backward()
        step()
        opt.zero_grad()


def test_a_python_int_step_count_in_a_librarys_optimizer_is_named_with_the_fix_that_works(dynamo):
    optimization = pytest.importorskip("transformers.optimization")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = optimization.Adafactor(model.parameters(), lr=None, relative_step=True, warmup_init=True)
    with tl.watch() as w:
        adafactor_steps(opt, model, 5)
    check_against_dynamo(w, dynamo, also=("['step'] ==",))
    kinds = [c.kind for r in w.table for c in r.causes if c.count]
    assert kinds.count("optimizer_step") == 3 and "length" not in kinds, w.table.to_text()
    said = next(c for r in w.table for c in r.causes if c.kind == "optimizer_step")
    assert "self.state[p]['step']" in said.words and "leave this optimizer's step() uncompiled" in said.fix
    torch._dynamo.reset()
    adam = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tl.watch() as fixed:  # the fix as printed: an optimizer that keeps its step count in a tensor
        adafactor_steps(adam, model, 5)
    assert fixed.table.total_compiles < w.table.total_compiles, (fixed.table.to_text(), w.table.to_text())


def test_the_step_count_is_the_cause_said_at_the_recompile_limit_too(dynamo):
    optimization = pytest.importorskip("transformers.optimization")
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 2)
    opt = optimization.Adafactor(model.parameters(), lr=None, relative_step=True, warmup_init=True)
    with torch._dynamo.config.patch(recompile_limit=3), tl.watch() as w:
        adafactor_steps(opt, model, 6)
    check_against_dynamo(w, dynamo, also=("['step'] ==",))
    refused = [c for r in w.table for c in r.causes if c.kind == "limit"]
    assert refused and "step count" in refused[0].words and "holds items" not in refused[0].words, w.table.to_text()
