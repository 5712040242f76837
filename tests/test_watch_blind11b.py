"""tl.watch() checked blind, eleventh round (second part): a PPO agent whose batch size a stored action of
fixed size pins (not a Python use of the size); a conv net whose dynamic graph carries torch's own bound on
the batch size; a mixup step whose float made dynamic is still bounded by the user's branch, with a
closure criterion and a tuple carried over a graph break; a transformers MoE block whose inner inputs'
sizes follow the routing, not a batch of prompts. The words a blind reviewer found wrong are asserted right
here, each run also checked against Dynamo's records."""

import numpy as np
import torch
import torch.nn.functional as F
from _dynamo_oracle import check_against_dynamo
from torch.distributions.categorical import Categorical

import tpu_lab as tl

BACKEND = "eager"


def causes(w, kind=None):
    return [c for r in w.table for c in r.causes if c.kind not in ("first", "dynamic") and kind in (None, c.kind)]


class Agent(torch.nn.Module):
    """CleanRL's PPO agent: an action sampled when none is given, else the stored one scored."""

    def __init__(self):
        super().__init__()
        self.actor, self.critic = torch.nn.Linear(4, 2), torch.nn.Linear(4, 1)

    def get_action_and_value(self, x, action=None):
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def test_a_size_pinned_by_an_input_of_fixed_size_is_not_said_to_be_a_loop(dynamo):
    policy = torch.compile(Agent().get_action_and_value, backend=BACKEND)
    with tl.watch() as w:
        with torch.no_grad():
            policy(torch.randn(4, 4))  # the rollout
        policy(torch.randn(16, 4), torch.zeros(16, dtype=torch.long))  # a minibatch with the stored actions
    check_against_dynamo(w, dynamo, also=["tensor 'x' size mismatch at index 0", "action is None"])
    (pinned,) = causes(w, "size")
    assert pinned.words.startswith("x dimension 0 changed 4 -> 16 (the graph pins x dim 0 to one size: Dynamo fixed")
    assert "where x meets action, kept at that size so far" in pinned.words  # the line Dynamo heard, the input met
    for claim in ("every size is its own graph", "mark_dynamic would raise"):
        assert claim not in pinned.words and claim not in pinned.fix
    assert "vectorise" not in pinned.fix and "the same dimension of each input it is combined with" in pinned.fix
    # the next size makes both dynamic, and the size after reuses that graph: the words above were true
    with tl.watch() as more:
        for n in (8, 12):
            policy(torch.randn(n, 4), torch.zeros(n, dtype=torch.long))
    (later,) = causes(more, "size")
    assert later.words == "x, action dimension 0 changed 16 -> 8" and more.table.total_compiles == 1
    # and marking both works, as the fix says
    torch._dynamo.reset()
    x, action = torch.randn(16, 4), torch.zeros(16, dtype=torch.long)
    torch._dynamo.mark_dynamic(x, 0)
    torch._dynamo.mark_dynamic(action, 0)
    torch.compile(Agent().get_action_and_value, backend=BACKEND)(x, action)


def test_a_bound_inside_torch_is_said_to_be_torchs_and_qualifies_the_reuse_claim(dynamo):
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    f = torch.compile(net, backend=BACKEND)
    with tl.watch() as w:
        f(torch.randn(16, 3, 8, 8))
        f(torch.randn(6, 3, 8, 8))  # a short last batch: made dynamic, for what torch's conv assumed
        with torch.no_grad():
            f(torch.randn(16, 3, 8, 8))
            f(torch.randn(4, 3, 8, 8))
    check_against_dynamo(w, dynamo)
    (bound,) = causes(w, "specialised")
    assert bound.words == (
        "a size crossed a bound the graph assumed (16 <= input.size()[0]), set by a check inside torch "
        "(conv.py:560), not by your code"
    )
    assert "torch.cond" not in bound.fix and "drop_last=True" in bound.fix
    (size,) = causes(w, "size")
    assert "so later sizes reuse this graph while input.size()[0] <= 15 holds (a check inside torch)" in size.fix
    assert "set by your code" not in " ".join(c.words for c in causes(w))
    summary = str(w.table)
    assert "a size crossed a bound the graph assumed (1 compile)" in summary and "set by a branch" not in summary


def mixup_data(x, y, alpha=1.0):
    if alpha > 0:  # noqa: SIM108 (as mixup-cifar10 writes it)
        lam = np.random.beta(alpha, alpha)  # a graph break: numpy's sampler
    else:
        lam = 1
    index = torch.randperm(x.size()[0])
    return lam * x + (1 - lam) * x[index, :], y, y[index], lam


BRANCH = mixup_data.__code__.co_firstlineno + 1


def make_criterion(label_smoothing):
    def criterion(pred, target):
        return F.cross_entropy(pred, target, label_smoothing=label_smoothing)

    return criterion


net = torch.nn.Linear(12, 5)


def compute_loss(inputs, targets, criterion, alpha):
    inputs, targets_a, targets_b, lam = mixup_data(inputs, targets, alpha)
    outputs = net(inputs)
    return lam * criterion(outputs, targets_a) + (1 - lam) * criterion(outputs, targets_b)


def test_mixup_a_bounded_float_a_closure_variable_and_a_carried_tuple_are_named(dynamo):
    np.random.seed(0)
    f = torch.compile(compute_loss, backend=BACKEND)
    x, y = torch.randn(8, 12), torch.randint(0, 5, (8,))
    with tl.watch() as w:
        for alpha, smoothing in ((1.0, 0.1), (1.0, 0.1), (1.0, 0.0), (0.0, 0.0)):
            f(x, y, make_criterion(smoothing), alpha)
    check_against_dynamo(w, dynamo)
    found = {c.words.split(" changed")[0]: c for c in causes(w)}
    alpha = found["Python float alpha"]
    assert alpha.words.endswith(
        "Dynamo made alpha dynamic, so later values reuse this graph while alpha <= 0.0 holds "
        f"(from your line {BRANCH}: if alpha > 0:)"
    )
    assert "while alpha <= 0.0 holds" in alpha.fix
    assert "Python float the closure variable label_smoothing" in found
    assert "Python float lam" in found and not any("carried" in k for k in found)
    # the words are right: a positive alpha needs another graph, a smaller one does not
    before = w.table.total_compiles
    with tl.watch() as after:
        f(x, y, make_criterion(0.0), -1.0)
    assert after.table.total_compiles == 0 and before
    with tl.watch() as after:
        f(x, y, make_criterion(0.0), 0.5)
    assert after.table.total_compiles >= 1


def test_sizes_inside_a_transformers_block_get_no_batch_or_prompt_advice(dynamo):
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    torch.manual_seed(0)
    config = MixtralConfig(
        hidden_size=16, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=1
    )
    moe = torch.compile(MixtralSparseMoeBlock(config).eval(), backend=BACKEND)
    with tl.watch() as w, torch.no_grad():
        for length in (8, 8, 12):  # a longer sequence, the same batch of 2
            moe(torch.randn(2, length, 16))
    assert w.table.total_compiles - sum(r.compiles for r in w.table if "(backward)" in r.function) == dynamo.compiles()
    sizes = causes(w, "size")
    assert sizes
    for c in sizes:
        assert "batch" not in c.words and "prompt" not in c.fix and "batch size" not in c.fix, c
    inner = [c for c in sizes if "transformers code" in c.fix]
    assert inner and all("mark_dynamic is out of reach" in c.fix for c in inner)
    (outer,) = [c for c in sizes if c.words.startswith("hidden_states dimension 1 changed 8 -> 12")]
    assert "mark_dynamic(hidden_states, 1)" in outer.fix
