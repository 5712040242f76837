import tempfile
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from tpu_lab.compile.chart import demo_chart
from tpu_lab.demo import check_chart, check_options, run_demo
from tpu_lab.demo_report import DemoResult, PassTotals, PolicyRun, saved_sentence, short_reason
from tpu_lab.errors import InvalidArgument


def test_demo_chart_is_readable_at_its_saved_size():
    fig = demo_chart(
        {"naive": [2, 3, 5, 6, 6, 7], "bucketed": [2, 3, 3, 3, 3, 3]},
        {"naive": (50, 50), "bucketed": (50, 64)},
        pass_length=3,
    )
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    ax, ax_pad = fig.axes
    renderer = canvas.get_renderer()
    for axes in (ax, ax_pad):
        legend = axes.get_legend().get_window_extent(renderer)
        plot = axes.get_window_extent(renderer)
        assert legend.y1 <= plot.y0  # below the plot area: it can never cover data
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["naive: 7 compiles", "bucketed: 3 compiles"]
    assert [t.get_text().strip() for t in ax_pad.texts] == ["0 padding (0%)", "14 padding (22%)"]
    assert fig.get_size_inches()[0] * 100 >= 1000  # saved at dpi 100: about 1100 px wide


def test_short_reason_keeps_the_first_clause():
    assert short_reason("new prompt length 4 (compiled so far: 17); buckets bound these") == (
        "new prompt length 4 (compiled so far: 17)"
    )
    assert short_reason("static cache length changed to 103 (was 24): the cache is sized") == (
        "static cache length changed to 103 (was 24)"
    )
    assert short_reason("first prefill compile") == "first prefill compile"


def _run(name, passes, real, padded):
    from tpu_lab.compile.generation.table import CompileTable

    totals = tuple(PassTotals(c, s, w) for c, s, w in passes)
    return PolicyRun(name, name, "aot_eager", CompileTable(()), totals, (), real, padded)


def test_saved_sentence_names_compiles_seconds_and_padding():
    result = DemoResult(
        (
            _run("naive", [(13, 9.0, 14.0), (3, 2.0, 3.0)], 494, 494),
            _run("bucketed", [(4, 3.0, 6.0), (0, 0, 1.0)], 494, 624),
        ),
        (17, 43, 96),
        None,
    )
    assert saved_sentence(result) == (
        "Buckets saved 12 of 16 compiles and 8.0 s of compiling (11.0 s -> 3.0 s; pass 1: 14.0 s -> 6.0 s; pass 2 compiled 0 times "
        "instead of 3), for 130 padding tokens per pass (21% of the tokens prefilled)."
    )
    text = str(result)
    assert "naive     13 + 3 = 16" in text and "bucketed  4 + 0 = 4" in text and "Next: try" in text
    same = DemoResult(
        (_run("naive", [(2, 1, 1), (0, 0, 1)], 5, 5), _run("bucketed", [(2, 1, 1), (0, 0, 1)], 5, 5)), (5,), None
    )
    assert saved_sentence(same).startswith("Buckets saved no compiles here")


def test_totals_add_up_to_the_parts_shown_and_timing_noise_is_said():
    from tpu_lab.demo_report import run_text

    # 33.44 + 33.44 = 66.88: shown parts 33.4 + 33.4, so the total shown is 66.8, never 66.9
    run = _run("naive", [(5, 33.44, 40.0), (5, 33.44, 40.0)], 10, 10)
    assert "33.4 + 33.4 = 66.8" in run_text(run)
    noisy = PolicyRun(
        "naive", "naive", "aot_eager", run.table, run.passes, (), 10, 10,
        cached_seconds={"short": (0.002, 12, 0.0018, 0.009), "long": (0.040, 12, 0.038, 0.041)},
    )  # fmt: skip
    text = run_text(noisy)
    assert "cached calls differ 20x between shapes: a longer prompt or cache does more work per call" in text
    assert "1 of 2 shapes' cached calls vary 3x or more from fastest to slowest" in text
    assert "timing:" not in run_text(run)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"prompts": 0}, "prompts got 0; it must be a whole number from 1 to 200"),
        ({"distinct": 0}, "distinct got 0"),
        ({"prompts": True}, "prompts got True"),
        ({"prompts": 2, "distinct": 3}, "distinct 3 asks for more distinct lengths than there are prompts (2)"),
        ({"max_new_tokens": 0}, "max_new_tokens got 0"),
        ({"chart": "/missing/dir/x.png"}, "chart: the folder /missing/dir does not exist"),
        ({"backend": "nosuch"}, "backend 'nosuch' is not a torch.compile backend here"),
        ({"model": ""}, "model got ''"),
    ],
)
def test_run_demo_refuses_bad_options_before_running(kwargs, says):
    printed = []
    with pytest.raises(InvalidArgument) as e:
        run_demo(**kwargs, say=printed.append)
    assert says in e.value.what and e.value.fix
    assert printed == []


def test_chart_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_chart("x.png") == tmp_path / "x.png"
    assert check_chart(None) is None and check_chart(False) is None
    default = check_chart(True)  # the default: a new temporary folder, never the current one
    assert default.parent.parent == Path(tempfile.gettempdir()) and default.name == "tpu_lab_demo.png"
    assert not default.parent.exists()  # made only when there is a chart to save
    assert check_chart(True) != default
    (tmp_path / "d.png").mkdir()
    with pytest.raises(InvalidArgument, match="is a folder"):
        check_chart("d.png")
    assert (
        check_options(
            model="tiny:qwen3",
            prompts=3,
            distinct=3,
            max_new_tokens=2,
            max_buckets=2,
            chart=Path("c.png"),
            backend="eager",
        )
        == tmp_path / "c.png"
    )
