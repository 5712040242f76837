"""tl.watch() checked blind, fourteenth round (and the open part of the thirteenth): open_clip's ClipLoss caches
its labels on the module between calls (a last batch of 5 after 8), and the same function compiled again with
torch.compile options of its own. What the reviewers found wrong is asserted right here; every run is also
checked against Dynamo's own records and the watch's invariants (each compile counted once)."""

import re

import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


class ClipLoss(torch.nn.Module):  # open_clip's contrastive loss, its label cache as written there
    def __init__(self):
        super().__init__()
        self.prev_num_logits = 0
        self.labels = {}

    def get_ground_truth(self, device, num_logits):
        if self.prev_num_logits != num_logits or device not in self.labels:
            labels = torch.arange(num_logits, device=device, dtype=torch.long)
            self.labels[device] = labels
            self.prev_num_logits = num_logits
        else:
            labels = self.labels[device]
        return labels

    def forward(self, image_features, text_features, logit_scale):
        logits_per_image = logit_scale * image_features @ text_features.T
        logits_per_text = logit_scale * text_features @ image_features.T
        labels = self.get_ground_truth(image_features.device, logits_per_image.shape[0])
        return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2


def test_a_tensor_the_module_keeps_between_calls_is_named_so_and_each_compile_is_counted_once(dynamo):
    loss = torch.compile(ClipLoss(), backend=BACKEND)
    scale = torch.tensor(10.0)
    with tl.watch() as w:
        for b in (8, 8, 8, 5, 8):  # the epoch's last batch is 5, then the next epoch starts at 8
            loss(torch.randn(b, 16), torch.randn(b, 16), scale)
    check_against_dynamo(w, dynamo, also=("self.labels", "self.prev_num_logits", "image_features"))  # co-causes
    kept = [c for r in w.table for c in r.causes if c.guard.startswith("tensor 'self.labels")]
    assert kept and all(
        c.words.startswith("self.labels[device(type='cpu')], a tensor the module keeps between calls, changed size")
        for c in kept
    )
    assert all("the compiled code reads it from self" in c.fix for c in kept)
    forced = "none for this compile, which needs a graph of its own anyway (a new value of self.prev_num_logits)"
    assert all(c.fix.startswith(forced) for c in kept if c.count == 0)  # the module's int forced it: static
    assert not any("batch size changed" in c.words for c in kept)  # it is not an input of this batch
    summary = "\n".join(w.table.summary()).split("causes and fixes:\n", 1)[1]
    total = sum(int(n) for n in re.findall(r"^  [^:]*? \((\d+) compiles?\): ", summary, re.M))
    firsts = sum(1 for r in w.table for c in r.causes if c.kind == "first")
    assert total == w.table.total_compiles - firsts  # the summary's counts add up to the recompiles


def my_backend(gm, example_inputs, **options):  # a backend that takes torch.compile's options
    return gm.forward


def test_another_compile_call_with_options_names_each_option_whole(dynamo):
    def f(x):
        return x.sin() + 1

    with tl.watch() as w:
        torch.compile(f, backend=my_backend)(torch.randn(4))
        torch.compile(f, backend=my_backend, options={"trace": True})(torch.randn(4))
    check_against_dynamo(w, dynamo)
    (again,) = [c for r in w.table for c in r.causes if c.kind == "backend"]
    assert "with other options (options={'trace': True}, where the first call set no options)" in again.words


def test_a_compiled_optimizer_step_through_its_decorator_shows_self_not_the_args_tuple(dynamo):
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
    step = torch.compile(opt.step, backend=BACKEND)
    with tl.watch() as w:
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            step()
    check_against_dynamo(w, dynamo)
    (hooked,) = [r for r in w.table if r.function.startswith("Adam.step via @Optimizer.profile_hook_step")]
    assert hooked.signature == "self: Adam"  # the wrapper's *args, by the step's own parameter name
