"""tl.watch() checked blind, thirty-second round: a number a torch function takes as a Python int
(torch.linspace's steps) is never told to become a tensor; a value read back into a list local to the
function is not "bookkeeping" (capture_scalar_outputs compiles it whole, and is said so at every such break);
a data-dependent operator's fixed-size stand-in is never the operator itself, and len() of a Python list is
no read-back; a new einsum equation (a string, never made dynamic) counts its compile, not a size that
changed with it. Checked against Dynamo's records."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl

BACKEND = "aot_eager"


def sample_pdf(bins, n_samples, det):  # nerf-pytorch's hierarchical sampling, deterministic at render time
    cdf = torch.cumsum(bins.softmax(-1), -1)
    if det:
        u = torch.linspace(0.0, 1.0, steps=n_samples).expand(bins.shape[0], n_samples)
    else:
        u = torch.rand(bins.shape[0], n_samples)
    return torch.searchsorted(cdf, u.contiguous(), right=True)


def test_a_number_torch_takes_as_an_int_is_never_told_to_become_a_tensor(dynamo):
    f = torch.compile(sample_pdf, backend=BACKEND)
    with tl.watch() as w:
        f(torch.rand(4, 8), 16, True)
        f(torch.rand(4, 8), 32, True)
        f(torch.rand(4, 8), 24, True)
    check_against_dynamo(w, dynamo)
    held = [c for r in w.table for c in r.causes if "n_samples" in c.words and "torch.linspace" in c.words]
    assert held, [c.words for r in w.table for c in r.causes]
    assert all("a tensor in its place would not do: torch.linspace takes a Python number" in c.fix for c in held)
    assert not any("torch.exp" in c.fix or "as a tensor" in c.fix.split(";")[0] for c in held)


class Viterbi(torch.nn.Module):  # pytorch-crf's _viterbi_decode: backtracking with .item() into a local list
    def __init__(self, tags=4):
        super().__init__()
        self.transitions = torch.nn.Parameter(torch.randn(tags, tags))

    def forward(self, emissions):
        score, history = emissions[0], []
        for i in range(1, emissions.shape[0]):
            score, idx = (score.unsqueeze(1) + self.transitions + emissions[i].unsqueeze(0)).max(dim=0)
            history.append(idx)
        best_tags = [score.argmax().item()]
        for hist in reversed(history):
            best_tags.append(hist[best_tags[-1]].item())
        return best_tags


def decode(model, lengths):
    torch.manual_seed(0)
    with torch.no_grad():
        return [model(torch.randn(n, 4)) for n in lengths]


def test_a_value_read_back_into_a_local_list_gets_dynamos_capture_hint_which_compiles_it_whole(dynamo):
    model = Viterbi()
    with tl.watch() as w:
        decode(torch.compile(model, backend=BACKEND), (5, 7))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    item = [b for b in w.table.breaks if "Tensor.item()" in b.words]
    assert item and all("capture_scalar_outputs = True" in b.fix and "bookkeeping" not in b.fix for b in item), item
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=True), tl.watch() as fixed:
        decode(torch.compile(model, backend=BACKEND), (5, 7))
    assert not fixed.table.breaks, fixed.table.to_text()


def confusion(pred, target, bins, n=3):  # torchvision's segmentation ConfusionMatrix, depth bins from a config
    conf = torch.bincount(n * target + pred, minlength=n**2).reshape(n, n)
    return conf, torch.bincount(torch.bucketize(pred.float(), torch.tensor(bins)), minlength=len(bins) + 1)


def test_a_shape_ops_stand_in_is_never_itself_and_len_of_a_list_is_no_read_back(dynamo):
    f = torch.compile(confusion, backend=BACKEND)
    torch.manual_seed(0)
    with tl.watch() as w:
        f(torch.randint(0, 3, (16,)), torch.randint(0, 3, (16,)), [0.5, 1.5])
    check_against_dynamo(w, dynamo)
    counts = [b for b in w.table.breaks if "torch.bincount" in b.words]
    assert counts and all("F.one_hot(x, num_classes).sum(0) in place of bincount" in b.fix for b in counts), counts
    assert not any("torch.bincount(x, minlength" in b.fix or "reads the result back" in b.fix for b in counts)


def contract(eq, a, b, scale=1.0):  # one einsum helper for every contraction (lucidrains-style)
    return torch.einsum(eq, a, b) * scale


def test_a_new_einsum_equation_counts_its_compile_not_the_size_that_changed_with_it(dynamo):
    f = torch.compile(contract, backend=BACKEND)
    q, k = torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    with tl.watch() as w:
        s = f("bhid,bhjd->bhij", q, k, 8**-0.5).softmax(-1)
        f("bhij,bhjd->bhid", s, k)
    check_against_dynamo(w, dynamo, also=("eq == ", "scale == "))  # Dynamo logs the size first
    counted = [c for r in w.table for c in r.causes if c.count]
    assert [c.kind for c in counted if c.kind != "first"] == ["string"], [(c.kind, c.words) for c in counted]
    sizes = [c for r in w.table for c in r.causes if c.kind == "size"]
    assert all(c.fix.startswith("none for this compile, which needs a graph of its own anyway") for c in sizes)


def test_a_capture_hint_for_library_code_comes_after_calling_it_outside_with_what_it_cannot_promise(dynamo):
    from torch.optim.swa_utils import AveragedModel

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    swa = AveragedModel(model)
    update = torch.compile(lambda: swa.update_parameters(model), backend=BACKEND)  # the SWA recipe, compiled
    with tl.watch() as w:
        for _ in range(3):
            update()
    check_against_dynamo(w, dynamo, also=("averaged_param", "current_param"))  # a loop over each parameter
    item = [b for b in w.table.breaks if "Tensor.item()" in b.words and "library code" in b.words]
    assert item, [b.words for b in w.table.breaks]
    for b in item:
        assert b.fix.startswith("it is in library code: call it outside the compiled function"), b.fix
        assert "capture_scalar_outputs = True traces this one call, and helps only where" in b.fix
