"""tl.watch() on what round 32 left: a tokenizer called inside a compiled function (sentence-transformers'
mean pooling, compiled whole). A tensor inside a carried input is named as the guards name it
(``enc.data['input_ids']``, not a flattened ``data_input_ids``), and the functions the tokenizer's eager
call reaches, which Dynamo compiles on their own (transformers' ``as_tensor``), are never given a fix about
their own arguments. Checked against Dynamo's records."""

import torch
from _dynamo_oracle import check_against_dynamo
from _tiny_bert import tiny_bert

import tpu_lab as tl


def test_a_tokenizer_inside_a_compiled_function_names_its_tensors_and_gives_library_frames_no_fix_of_theirs(dynamo):
    model, tokenizer = tiny_bert()

    @torch.compile(backend="aot_eager")
    def encode(texts):
        enc = tokenizer(texts, padding=True, return_tensors="pt")
        out = model(**enc)
        mask = enc["attention_mask"].unsqueeze(-1).float()
        return (out.last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    with tl.watch() as w, torch.no_grad():
        for batch in [["the cat sat", "a dog runs in the park"], ["graphs compile once", "tensors flow"], ["the mat"]]:
            encode(batch)
    # Dynamo logs only the first failed guard per graph: the lists' other items and the mask are named too
    check_against_dynamo(w, dynamo, also=("value[", "data['attention_mask']"))  # d_names: a name its guard differs from
    dynamic = {d for r in w.table for d in (r.dynamic or "").split(", ") if d}
    assert "enc.data['input_ids'] dim 1" in dynamic, dynamic
    library = [r for r in w.table if r.function.startswith("as_tensor ")]
    assert library, [r.function for r in w.table]
    asked = [c for r in library for c in r.causes if c.guard and not c.fix.startswith("none needed")]
    assert asked, [c for r in library for c in r.causes]  # its lists' lengths changed: a recompile there
    for c in asked:
        assert c.fix.startswith("nothing of yours to change here: as_tensor is transformers code that encode"), c.fix
        assert "value" not in c.fix and "list" not in c.fix, c.fix  # never its own argument, never its lists


def test_a_row_under_inference_mode_says_so_apart_from_no_grad(dynamo):
    model = torch.nn.Linear(4, 4)
    f = torch.compile(lambda x: model(x).relu(), backend="aot_eager")
    with tl.watch() as w:
        with torch.no_grad():
            f(torch.randn(2, 4))
        with torch.inference_mode():  # an inference tensor: a graph of its own, on a row of its own
            f(torch.randn(2, 4))
    check_against_dynamo(w, dynamo, also=("model.",))
    assert [r.signature for r in w.table] == [
        "x: f32[2, 4], grad mode: off",
        "x: f32[2, 4], grad mode: off (inference_mode)",
    ]
    assert "inference tensor" in w.table.rows[1].cause, w.table.rows[1].cause


class MoE(torch.nn.Module):  # transformers' MixtralSparseMoeBlock (older versions): a loop over experts
    def __init__(self, d=8, experts=4, check=True):
        super().__init__()
        self.gate = torch.nn.Linear(d, experts, bias=False)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(experts))
        self.check = check

    def forward(self, h):
        weights, selected = torch.topk(self.gate(h).softmax(-1), 2, dim=-1)
        out = torch.zeros_like(h)
        expert_mask = torch.nn.functional.one_hot(selected, num_classes=len(self.experts)).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            idx, top_x = torch.where(expert_mask[e])
            if self.check and top_x.shape[0] == 0:
                continue
            out.index_add_(0, top_x, expert(h[top_x]) * weights[top_x, idx, None])
        return out


def test_a_check_on_a_shape_ops_size_later_in_the_loop_is_pointed_at_and_removing_it_with_the_setting_compiles_whole(
    dynamo,
):
    with tl.watch() as w, torch.no_grad():
        torch.compile(MoE(), backend="aot_eager")(torch.randn(6, 8))
    check_against_dynamo(w, dynamo)
    (fix,) = {b.fix for b in w.table.breaks}
    assert "capture_dynamic_output_shape_ops = True before the first call and remove the check at line" in fix, fix
    assert "(if self.check and top_x.shape[0] == 0:)" in fix, fix
    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), tl.watch() as w, torch.no_grad():
        torch.compile(MoE(check=False), backend="aot_eager")(torch.randn(6, 8))  # the fix as printed
    assert w.table.total_compiles == 1 and not w.table.breaks and not any(r.failed for r in w.table), w.table.to_text()


def valid_only(logits, target, ignore_index=-100):  # focal-loss style: drop ignored targets by a mask
    valid = target != ignore_index
    logits, target = logits[valid], target[valid]
    return torch.nn.functional.cross_entropy(logits, target)


def test_two_parts_that_resume_on_one_line_are_told_apart_by_what_is_left_to_run(dynamo):
    f = torch.compile(valid_only, backend="aot_eager")
    with tl.watch() as w:
        f(torch.randn(6, 3), torch.tensor([0, 1, -100, 2, -100, 1]))
    check_against_dynamo(w, dynamo)
    labels = sorted(r.function.split(" (")[0] for r in w.table if "after the graph break" in r.function)
    line = valid_only.__code__.co_firstlineno + 2
    assert labels == [
        f"valid_only after the graph break at line {line}, resuming at line {line + 1}",
        f"valid_only after the graph break at line {line}, resuming at target[valid] in line {line}",
    ], labels


def test_more_compiles_in_one_watch_than_dynamo_keeps_records_of_are_all_counted(dynamo):
    f = torch.compile(lambda x, n: x * n, backend="eager", dynamic=False)  # each value of n: a graph of its own
    torch._dynamo.utils.set_compilation_metrics_limit(64)  # Dynamo's own (the oracle holds more): its newest 64
    with torch._dynamo.config.patch(recompile_limit=100), tl.watch() as w:
        for n in range(70):
            f(torch.ones(2), n)
    assert len(dynamo.recompile_reasons()) == 69 and not dynamo.graph_breaks()  # Dynamo's logs: 1 + 69 graphs
    assert w.table.total_compiles == 70 and sum(r.compiles for r in w.table) == 70, w.table.to_text()
