"""tl.watch() checked blind, twenty-first round: an int a loop runs over (SuperGlue's Sinkhorn iterations)
is told that Dynamo unrolls the loop, never to become a tensor (that breaks the graph at range()), and a
one-token step of code with no KV cache is not told about a static cache. Checked against Dynamo's records."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "eager"


def sinkhorn(scores, log_mu, log_nu, iters: int):  # SuperGlue's log_sinkhorn_iterations
    u, v = torch.zeros_like(log_mu), torch.zeros_like(log_nu)
    for _ in range(iters):
        u = log_mu - torch.logsumexp(scores + v.unsqueeze(1), dim=2)
        v = log_nu - torch.logsumexp(scores + u.unsqueeze(2), dim=1)
    return scores + u.unsqueeze(2) + v.unsqueeze(1)


def test_an_int_a_loop_runs_over_is_told_the_loop_unrolls_not_to_become_a_tensor(dynamo):
    f = torch.compile(sinkhorn, backend=BACKEND)
    scores, log_mu, log_nu = torch.randn(1, 3, 4), torch.full((1, 3), -1.1), torch.full((1, 4), -1.4)
    with tl.watch() as w:
        for iters in (2, 3, 4):
            f(scores, log_mu, log_nu, iters)
    check_against_dynamo(w, dynamo)
    counts = [c for r in w.table for c in r.causes if c.kind == "loop_count"]
    line = sinkhorn.__code__.co_firstlineno + 2
    assert len(counts) == 2 and all(f"sets how many times the loop at line {line} runs" in c.words for c in counts)
    assert all("torch.tensor" not in c.fix and "break the graph at range()" in c.fix for c in counts)
    assert "a Python int a loop runs over changed (the loop is unrolled) (2 compiles)" in str(w.table)


class Embeddings(torch.nn.Module):  # GPT-2's position ids from a past length: a prompt, then one token
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(20, 4), torch.nn.Embedding(32, 4)

    def forward(self, input_ids, past_length):
        positions = torch.arange(past_length, past_length + input_ids.shape[-1])
        return self.wte(input_ids) + self.wpe(positions)[None]


def test_a_one_token_step_without_a_kv_cache_is_not_told_about_a_static_cache(dynamo):
    f = torch.compile(Embeddings(), backend=BACKEND)
    with tl.watch() as w:
        f(torch.randint(0, 20, (1, 5)), 0)
        for past in (5, 6, 7):
            f(torch.randint(0, 20, (1, 1)), past)
    check_against_dynamo(w, dynamo, also=("past_length == 0",))  # Dynamo logs the size first
    text = str(w.table)
    assert "static cache" not in text and "a 1-token call and longer ones are separate graphs" in text
