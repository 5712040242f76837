"""tl.watch() on real-code scenarios, written from PyTorch's and transformers' public tutorials and docs
(a DataLoader with a smaller last batch, a compiled optimizer step under an LR scheduler, train/eval,
evaluation under no_grad, mark_dynamic, list and dict inputs, globals and closures, graph breaks on
data-dependent branching, the recompile limit, torch._dynamo.reset(), a benchmark Timer's thread count).
Each is checked against Dynamo's own compilation records AND its TORCH_LOGS output (the
recompiles/graph_breaks log records) for the same run: the count equals Dynamo's, every recompile's
words name the guard Dynamo logged, and the fix fits."""

import pytest
import torch
from _dynamo_oracle import check_against_dynamo, only_causes

import tpu_lab as tl

BACKEND = "eager"


def test_dataloader_last_batch_is_smaller(dynamo):
    data = torch.utils.data.TensorDataset(torch.randn(10, 3), torch.randn(10, 1))
    model = torch.nn.Linear(3, 1)
    step = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        for x, _ in torch.utils.data.DataLoader(data, batch_size=4):  # 4, 4, then 2
            step(x)
    check_against_dynamo(w, dynamo)
    (cause,) = [c for c in only_causes(w, "Linear.forward") if c.kind == "size"]
    assert "dimension 0 changed 4 -> 2" in cause.words and "drop_last=True" in cause.fix
    assert "mark_dynamic" in cause.fix and "; on a TPU: pad to buckets" in cause.fix  # TPU advice labelled so


def test_mark_dynamic_batch_never_recompiles(dynamo):
    f = torch.compile(lambda x: x.relu() * 2, backend=BACKEND)
    with tl.watch() as w:
        for n in (4, 6, 9):
            x = torch.randn(n, 3)
            torch._dynamo.mark_dynamic(x, 0)
            f(x)
    check_against_dynamo(w, dynamo)
    assert w.table.total_compiles == 1 and "mark_dynamic[0]" in w.table.rows[0].signature


def test_dynamic_false_recompiles_per_size(dynamo):
    f = torch.compile(lambda x: x + 1, backend=BACKEND, dynamic=False)
    with tl.watch() as w:
        for n in (2, 3, 5):
            f(torch.ones(n))
    check_against_dynamo(w, dynamo)
    causes = only_causes(w, "<lambda>")
    static = (
        " (automatic dynamic shapes off, by torch.compile(dynamic=False) or "
        "torch._dynamo.config.automatic_dynamic_shapes = False: every size is its own graph)"
    )
    assert [c.words for c in causes] == [
        f"x dimension 0 changed 2 -> 3{static}",
        f"x dimension 0 changed 3 -> 5{static}",
    ]
    assert (
        "honoured with automatic dynamic off too" in causes[0].fix
    )  # against the nearest graph, advice for dynamic=False


@pytest.mark.slow
def test_compiled_optimizer_under_lr_scheduler(dynamo):
    # PyTorch's tutorial "(beta) Running the compiled optimizer with an LR Scheduler"
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=4)
    step = torch.compile(opt.step, backend=BACKEND)
    with tl.watch() as w:
        for _ in range(3):
            model(torch.ones(2, 3)).sum().backward()
            step()
            sched.step()
    check_against_dynamo(w, dynamo)
    lr = [c for r in w.table for c in r.causes if c.kind == "lr"]
    assert lr and "learning rate" in lr[0].words and "lr=torch.tensor" in lr[0].fix
    assert "param_groups" in lr[0].guard


def test_eval_under_no_grad_is_a_grad_mode_change(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU())
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 3))
        model.eval()
        with torch.no_grad():
            f(torch.ones(2, 3))
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "Sequential.forward")
    assert cause.kind == "global_state" and cause.words.startswith("grad mode changed")  # not train/eval


def test_train_eval_with_dropout(dynamo):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2, 3))
        model.eval()
        f(torch.ones(2, 3))
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "Sequential.forward")
    assert cause.kind == "training" and "train/eval switched" in cause.words


def total(xs, y):
    return y * sum(xs)


def test_a_shorter_list_is_a_length_change(dynamo):
    f = torch.compile(total, backend=BACKEND)
    with tl.watch() as w:
        f([1, 2, 3], torch.ones(2))
        f([4, 5], torch.ones(2))
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "total")
    assert cause.kind == "length" and cause.words == "xs has a different length (was 3, now 2)"


def first_value(d):
    return list(d.values())[0] * 2  # noqa: RUF015  (this form guards on the key order)


def test_reordered_dict_keys(dynamo):
    f = torch.compile(first_value, backend=BACKEND)
    with tl.watch() as w:
        f({"a": torch.ones(2), "b": torch.ones(1)})
        f({"b": torch.ones(1), "a": torch.ones(2)})
    check_against_dynamo(w, dynamo, also=["list(dict.keys(d))[1] == 'b'"])  # both positions moved: one cause
    (cause,) = only_causes(w, "first_value")
    assert cause.kind == "dict_keys" and cause.words.startswith("the keys of dict d changed")


SCALE = 1


def scaled(x):
    return x * SCALE


def test_global_and_closure_values(dynamo):
    global SCALE
    f = torch.compile(scaled, backend=BACKEND)
    factor = 2

    def closed(x):
        return x * factor

    g = torch.compile(closed, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2))
        SCALE = 5
        f(torch.ones(2))
        g(torch.ones(2))
        factor = 3
        g(torch.ones(2))
    SCALE = 1
    check_against_dynamo(w, dynamo)
    assert [c.kind for c in only_causes(w, "scaled")] == ["global"]
    (closure,) = only_causes(w, "closed")
    # a closure int changed once: Dynamo makes it dynamic (checked: 4 values give 2 graphs)
    assert closure.kind == "value_dynamic" and "factor" in closure.words and "was 2" in closure.words


def branchy(x):
    y = x * 2
    if y.sum() > 0:  # data-dependent: Dynamo breaks the graph here
        y = y + 1
    return y - 1


def test_graph_breaks_on_data_dependent_branching_are_counted(dynamo):
    f = torch.compile(branchy, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(3))
        f(-torch.ones(3))
    check_against_dynamo(w, dynamo)
    (b,) = w.table.breaks
    assert b.words.startswith("data-dependent branching") and "torch.cond" in b.fix
    assert b.where.startswith("test_watch_real_code.py:")
    assert "torch.cond" in str(w.table)
    # each branch resumes in its own function: one row per resume location, never merged
    resumed = [r.function for r in w.table if "after the graph break" in r.function]
    assert len(resumed) == 2 and len({f.split("resuming at line ")[1] for f in resumed}) == 2, resumed
    assert all(c.words == "first compile" for r in w.table for c in r.causes)  # no invented cause


def test_recompile_limit_names_the_function_and_counts_uncompiled_calls(dynamo, capsys):
    w = tl.watch()
    run = w(torch.compile(lambda x: x - 1, backend=BACKEND, dynamic=False))  # wrapped: its calls are counted

    with torch._dynamo.config.patch(recompile_limit=2):
        for n in (1, 2, 3, 4, 3):
            run(torch.ones(n))
    check_against_dynamo(w, dynamo)
    table = w.table
    limited = [r for r in table if r.limit_hit]
    assert limited and all("<lambda>" in r.function for r in limited)
    assert sum(r.uncompiled for r in table) == 3  # sizes 3, 4 and 3 again ran uncompiled
    text = str(table)
    assert "recompile limit: <lambda>" in text and "3 call(s) ran uncompiled" in text
    assert "x dimension 0 changed 2 -> 3" in text and "mark_dynamic" in text  # advice by cause, not buckets
    assert "hit config.recompile_limit" not in capsys.readouterr().err  # it became a row


def test_reset_inside_a_watch_keeps_counting(dynamo):
    f = torch.compile(lambda x: x * 3, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2))
        torch._dynamo.reset()
        f(torch.ones(2))
        f(torch.ones(2, 2))
    assert w.table.total_compiles == 3 and w.table.resets == 1
    assert [c.words for r in w.table for c in r.causes][:2] == [
        "first compile",
        "first compile after torch._dynamo.reset()",
    ]
    assert "torch._dynamo.reset() ran 1 time" in str(w)


def test_benchmark_timer_thread_count(dynamo):
    f = torch.compile(lambda x: x.sin(), backend=BACKEND)
    threads = torch.get_num_threads()
    with tl.watch() as w:
        f(torch.ones(2))
        try:
            torch.set_num_threads(max(1, threads - 1) if threads > 1 else 2)
            f(torch.ones(2))
        finally:
            torch.set_num_threads(threads)
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "<lambda>")
    assert "thread count" in cause.words and "Timer" in cause.fix


@pytest.mark.parametrize(
    ("second", "kind", "words"),
    [
        (lambda: torch.ones(4, 4).t(), "stride", "memory layout changed"),
        (lambda: torch.ones(4, 4, dtype=torch.float64), "dtype", "dtype changed Float -> Double"),
        (lambda: torch.ones(4, 4, requires_grad=True), "requires_grad", "requires_grad changed False -> True"),
        (lambda: torch.nn.Parameter(torch.ones(4, 4)), "tensor_type", "is now a Parameter"),
        (lambda: torch.ones(4, 4, 1), "rank", "has 3 dimensions, was 2"),
        (lambda: torch.ones(4, 4, device="meta"), "device", "moved device: CPU -> Meta"),
    ],
)
def test_tensor_guard_families(dynamo, second, kind, words):
    f = torch.compile(lambda x: x * 2, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(4, 4))
        f(second())
    # a transposed tensor moves both strides; Dynamo logs the first
    check_against_dynamo(w, dynamo, also=["stride mismatch at index 1"] if kind == "stride" else [])
    (cause,) = only_causes(w, "<lambda>")
    assert cause.kind == kind and words in cause.words and cause.fix


def test_recompile_error_is_one_clean_sentence(dynamo):
    f = torch.compile(lambda x, n: x * n, backend=BACKEND)
    f(torch.ones(2), 2.0)
    with pytest.raises(tl.RecompileError) as e, tl.no_recompiles():
        f(torch.ones(2), 3.0)
    what = e.value.what
    assert what.count("no_recompiles") == 1 and what.endswith(").") and "\n" not in what
    assert "Python float n changed (was 2.0" in what and "tuple" not in what and "torch.tensor" in e.value.fix


def test_notebook_cell_functions_are_named_by_cell():
    from IPython.core.interactiveshell import InteractiveShell

    shared = InteractiveShell.initialized()  # the session's shell (the ipython_shell fixture): keep it for later tests
    shell = InteractiveShell.instance()
    try:
        shell.run_cell("import torch, tpu_lab as tl\nw = tl.watch()", store_history=True)
        shell.run_cell("def cellfn(x):\n    return x + 1", store_history=True)
        shell.run_cell("with w:\n    torch.compile(cellfn, backend='eager')(torch.ones(2))", store_history=True)
        name = shell.user_ns["w"].table.rows[0].function
    finally:
        if not shared:
            InteractiveShell.clear_instance()
    assert name.startswith("cellfn (cell In[") and ", line 1)" in name, name


def sized(x):
    if x.size(0) > 30:  # a branch on a size: the dynamic graph guards on its bound
        return x * 2
    return x + 1


def test_a_branch_on_a_size_names_the_users_line(dynamo):
    f = torch.compile(sized, backend=BACKEND)
    with tl.watch() as w:
        for n in (4, 8, 40):
            f(torch.ones(n))
    check_against_dynamo(w, dynamo)
    kinds = [c.kind for c in only_causes(w, "sized")]
    assert kinds == ["size", "specialised"]
    (cause,) = [c for c in only_causes(w, "sized") if c.kind == "specialised"]
    assert "test_watch_real_code.py:" in cause.words and "if x.size(0) > 30" in cause.words


def test_forward_hooks_added_and_removed(dynamo):
    model = torch.nn.Linear(2, 2)
    f = torch.compile(model, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2))
        handle = model.register_forward_hook(lambda *a: None)
        f(torch.ones(2))
        handle.remove()
        f(torch.ones(2))
    check_against_dynamo(w, dynamo)  # whether Dynamo recompiles here depends on torch: the count follows it
    for cause in only_causes(w, "Linear.forward"):
        assert cause.kind == "hooks" and "hook was added to or removed" in cause.words, cause


@pytest.mark.parametrize(
    ("switch", "words"),
    [
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16), "autocast on cpu was switched on or off"),
        (lambda: torch._dynamo.config.patch(), None),  # nothing changes: no recompile, no cause
    ],
)
def test_global_state_families(dynamo, switch, words):
    f = torch.compile(lambda x: x * 2, backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2))
        with switch():
            f(torch.ones(2))
    check_against_dynamo(w, dynamo)
    got = [c.words for c in only_causes(w, "<lambda>")]
    if words is None:
        assert got == [] and w.table.total_compiles == 1
    else:
        assert len(got) == 1 and words in got[0]


@pytest.mark.parametrize(
    ("set_state", "words"),
    [
        (torch.use_deterministic_algorithms, "use_deterministic_algorithms() was switched"),
        (lambda on: torch.set_default_dtype(torch.float64 if on else torch.float32), "default dtype changed"),
    ],
)
def test_process_wide_state(dynamo, set_state, words):
    f = torch.compile(lambda x: x * 2 + torch.ones(2), backend=BACKEND)
    with tl.watch() as w:
        f(torch.ones(2))
        set_state(True)
        try:
            f(torch.ones(2))
        finally:
            set_state(False)
    # under float64 as the default dtype, torch.ones(2) is a float64 input too
    dtype = ["tensor 'x' dtype mismatch. expected Float, actual Double"] if "dtype" in words else []
    check_against_dynamo(w, dynamo, also=dtype)
    state, *rest = only_causes(w, "<lambda>")
    assert state.kind == "global_state" and words in state.words and "once" in state.fix
    assert [c.kind for c in rest] == (["dtype"] if dtype else [])


def test_an_optimizer_recreated_per_step_is_a_freed_object(dynamo):
    model = torch.nn.Linear(2, 2)
    with tl.watch() as w:
        for _ in range(2):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)  # a new optimizer each step: the old one is freed
            model(torch.ones(2)).sum().backward()
            torch.compile(opt.step, backend=BACKEND)()
            del opt
    check_against_dynamo(w, dynamo)
    freed = [c for r in w.table for c in r.causes if c.kind == "deallocated"]
    assert freed and "was freed and a new object made" in freed[0].words and "reuse" in freed[0].fix


def test_html_folds_long_tables_and_keeps_whole_text_on_hover(dynamo):
    f = torch.compile(lambda x: x + 1, backend=BACKEND, dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=64), tl.watch() as w:
        for n in range(1, 16):
            f(torch.ones(n))
    html = w.table.to_html()
    head = html[html.index("<thead>") : html.index("</thead>")]
    assert head.count("white-space:nowrap") == head.count("<th ") == 6  # headers never wrap
    assert "3 more rows (fewer compiles)</summary>" in html  # 15 rows: 12 shown, worst first
    assert html.count("<details class='tpu-lab-more'") == 1
    # a cut cell keeps its whole text on hover, and the row's guard and fix are one click away
    assert " title='x dimension 0 changed 1 -&gt; 2 (automatic dynamic shapes off" in html and "…</summary>" in html
    assert "<b>fix</b><div style='padding-left:1em'>pad to a few sizes, or mark the dimension dynamic" in html
    assert "<b>Dynamo&#x27;s guard</b><code><div style='padding-left:1em'>tensor &#x27;x&#x27; size mismatch" in html
    full = w.to_dict()["rows"]
    assert all("\u2026" not in c["guard"] for r in full for c in r["causes"])  # the whole text in to_dict


def attend(x, mask=None, mode="sum"):
    y = x if mask is None else x * mask
    return y.sum() if mode == "sum" else y.mean()


def test_optional_mask_aliasing_and_string_mode(dynamo):
    # transformers-style optional arguments: a mask that is sometimes None, a mode string, the same
    # tensor passed twice
    f = torch.compile(attend, backend=BACKEND)
    x = torch.ones(3)
    with tl.watch() as w:
        f(x)
        f(x, mask=torch.ones(3))
        f(x, mode="mean")
        f(x, mask=x)
    check_against_dynamo(w, dynamo)
    kinds = {c.kind: c for c in only_causes(w, "attend")}
    assert "mask is now a tensor (f32[3]), was None" in kinds["none"].words
    assert kinds["string"].words.startswith("Python string mode changed (was 'sum'")
    assert "x and mask are now the same tensor" in kinds["aliasing"].words
    assert "verbatim" not in kinds


def embed(input_ids, attention_mask=None):
    return input_ids * 2 if attention_mask is None else input_ids * attention_mask


def forward(**kwargs):  # a wrapper forwarding **kwargs, as transformers' generic wrappers do
    return embed(**kwargs)


def test_a_dropped_keyword_argument(dynamo):
    f = torch.compile(forward, backend=BACKEND)
    with tl.watch() as w:
        f(input_ids=torch.ones(2), attention_mask=torch.ones(2))
        f(input_ids=torch.ones(2))
    check_against_dynamo(w, dynamo)
    (cause,) = only_causes(w, "forward")
    assert cause.kind == "kwargs" and "keyword argument was added or dropped" in cause.words
