"""Round 3 of the bad-input attack: the widgets, the probe, the loader, the tiny-model build and the
generation session, fed one class of bad input per test (wrong types, out-of-range numbers, NaN and
infinity, a bool where a count belongs, options that cannot apply together, what this machine lacks).
Each must raise a tpu_lab error naming the argument and the value it got, with a fix; nothing may be
accepted silently or fail later with a raw error. Everything runs on CPU with real objects."""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
from _user_text import defects

import tpu_lab as tl
from tpu_lab.errors import InvalidArgument, ModelBuildError, ModelLoadError, TpuLabError

pytestmark = pytest.mark.timeout(300)
NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def folder():
    return tl.tiny_model(trained=False)


@pytest.fixture(scope="module")
def tiny(folder):
    return tl.load_model(folder, device="cpu")


def session(tiny, **kw):
    return tl.GenerationSession(tiny.model, tiny.tokenizer, compile="none", **kw)


def generate(tiny, **kw):
    with session(tiny) as s:
        return s.generate("hello", **{"max_new_tokens": 2, **kw})


def panel(tiny, **kw):
    with session(tiny) as s:
        return tl.widgets.GenerationPanel(s, **kw)


def refused(call, *named, kind=TpuLabError):
    """Run ``call``; it must raise ``kind`` whose message holds every string in ``named`` (the argument
    and the value it got), with a fix, in prose."""
    try:
        call()
    except TpuLabError as e:
        assert isinstance(e, kind), f"{type(e).__name__}, not {kind.__name__}: {e}"
        for text in named:
            assert text in str(e), f"{text!r} not in the message: {e}"
        assert e.fix, f"no fix: {e}"
        assert not defects(str(e)), defects(str(e))
        return e
    except Exception as e:
        pytest.fail(f"raw {type(e).__name__}: {e}")
    pytest.fail("accepted silently")


# ---- wrong types --------------------------------------------------------------------------------

WRONG_TYPES = {
    "GenerationPanel(42)": (lambda t, f: tl.widgets.GenerationPanel(42), ["session=42"]),
    "GenerationPanel max_buckets str": (lambda t, f: panel(t, max_buckets="x"), ["max_buckets='x'"]),
    "GenerationPanel max_buckets float": (lambda t, f: panel(t, max_buckets=2.0), ["max_buckets=2.0"]),
    "ModelLoader presets int": (lambda t, f: tl.widgets.ModelLoader(presets=5), ["presets=5"]),
    "ModelLoader presets str": (lambda t, f: tl.widgets.ModelLoader(presets="tiny:qwen3"), ["presets='tiny:qwen3'"]),
    "ModelLoader model int": (lambda t, f: tl.widgets.ModelLoader(5), ["model=5"]),
    "ModelLoader device_report int": (lambda t, f: tl.widgets.ModelLoader(device_report=5), ["device_report=5"]),
    "WatchPanel watch int": (lambda t, f: tl.widgets.WatchPanel(watch=3), ["watch=3"]),
    "ProbePanel probe_fn int": (lambda t, f: tl.widgets.ProbePanel(probe_fn=42), ["probe_fn=42"]),
    "probe sysfs_root int": (lambda t, f: tl.probe(sysfs_root=123), ["sysfs_root=123"]),
    "probe dev_root int": (lambda t, f: tl.probe(dev_root=123), ["dev_root=123"]),
    "probe environ int": (lambda t, f: tl.probe(environ=5), ["environ", "int 5"]),
    "probe environ list": (lambda t, f: tl.probe(environ=["TPU_NAME"]), ["environ", "['TPU_NAME']"]),
    "probe versions int": (lambda t, f: tl.probe(versions=5), ["versions", "int 5"]),
    "probe versions value int": (lambda t, f: tl.probe(versions={"torch_tpu": 2}), ["torch_tpu", "2"]),
    "probe accelerator int": (lambda t, f: tl.probe(accelerator=5), ["accelerator=5"]),
    "probe holds_tpu str": (lambda t, f: tl.probe(holds_tpu="no"), ["holds_tpu", "'no'"]),
    "load revision int": (lambda t, f: tl.load_model(f, device="cpu", revision=5), ["revision=5"]),
    "load attn_implementation int": (
        lambda t, f: tl.load_model(f, device="cpu", attn_implementation=5),
        ["attn_implementation=5"],
    ),
    "load progress int": (lambda t, f: tl.load_model(f, device="cpu", progress=5), ["progress=5"]),
    "tiny arch list": (lambda t, f: tl.tiny_model(arch=["qwen3"]), ["arch", "['qwen3']"]),
    "tiny environ int": (lambda t, f: tl.tiny_model(environ=5), ["environ", "int 5"]),
    "tiny environ value int": (lambda t, f: tl.tiny_model(environ={"TPU_LAB_CACHE": 5}), ["TPU_LAB_CACHE", "5"]),
    "session tokenizer int": (lambda t, f: tl.GenerationSession(t.model, 42), ["tokenizer=42"]),
    "session buckets int": (lambda t, f: session(t, buckets=5), ["buckets=5"]),
    "session batch_buckets int": (lambda t, f: session(t, batch_buckets=4), ["batch_buckets=4"]),
    "generate do_sample str": (lambda t, f: generate(t, do_sample="yes"), ["do_sample", "'yes'"]),
    "generate temperature str": (lambda t, f: generate(t, do_sample=True, temperature="hot"), ["temperature='hot'"]),
    "generate top_k float": (lambda t, f: generate(t, do_sample=True, top_k=2.5), ["top_k=2.5"]),
    "generate option misspelt": (lambda t, f: generate(t, temprature=0.7), ["temprature=0.7"]),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_wrong_types_are_refused(case, tiny, folder):
    call, named = WRONG_TYPES[case]
    refused(lambda: call(tiny, folder), *named)


# ---- out-of-range numbers -----------------------------------------------------------------------

OUT_OF_RANGE = {
    "max_buckets 0": (lambda t: panel(t, max_buckets=0), "max_buckets=0"),
    "max_buckets negative": (lambda t: panel(t, max_buckets=-1), "max_buckets=-1"),
    "temperature negative, greedy": (lambda t: generate(t, temperature=-1), "temperature=-1"),
    "temperature negative": (lambda t: generate(t, do_sample=True, temperature=-1), "temperature=-1"),
    "temperature 0": (lambda t: generate(t, do_sample=True, temperature=0.0), "temperature=0.0"),
    "top_p 0": (lambda t: generate(t, do_sample=True, top_p=0), "top_p=0"),
    "top_p above 1": (lambda t: generate(t, do_sample=True, top_p=1.5), "top_p=1.5"),
    "top_k negative": (lambda t: generate(t, do_sample=True, top_k=-1), "top_k=-1"),
    "min_p above 1": (lambda t: generate(t, do_sample=True, min_p=2.0), "min_p=2.0"),
    "num_beams 0": (lambda t: generate(t, num_beams=0), "num_beams=0"),
    "min_new_tokens negative": (lambda t: generate(t, min_new_tokens=-1), "min_new_tokens=-1"),
    "repetition_penalty negative": (lambda t: generate(t, repetition_penalty=-1.0), "repetition_penalty=-1.0"),
}


@pytest.mark.parametrize("case", sorted(OUT_OF_RANGE))
def test_out_of_range_numbers_are_refused(case, tiny):
    call, named = OUT_OF_RANGE[case]
    refused(lambda: call(tiny), named, kind=InvalidArgument)


# ---- NaN and infinity ---------------------------------------------------------------------------

NOT_FINITE = {
    "temperature nan": (dict(do_sample=True, temperature=NAN), "temperature=nan"),
    "temperature inf": (dict(do_sample=True, temperature=INF), "temperature=inf"),
    "top_p nan": (dict(do_sample=True, top_p=NAN), "top_p=nan"),
    "min_p inf": (dict(do_sample=True, min_p=INF), "min_p=inf"),
    "repetition_penalty nan": (dict(repetition_penalty=NAN), "repetition_penalty=nan"),
}


@pytest.mark.parametrize("case", sorted(NOT_FINITE))
def test_nan_and_infinity_are_refused(case, tiny):
    kwargs, named = NOT_FINITE[case]
    refused(lambda: generate(tiny, **kwargs), named, kind=InvalidArgument)


# ---- a bool where a count belongs ---------------------------------------------------------------

BOOLS = {
    "max_buckets True": (lambda t: panel(t, max_buckets=True), "max_buckets=True"),
    "top_k True": (lambda t: generate(t, do_sample=True, top_k=True), "top_k=True"),
    "num_beams True": (lambda t: generate(t, num_beams=True), "num_beams=True"),
    "min_new_tokens True": (lambda t: generate(t, min_new_tokens=True), "min_new_tokens=True"),
}


@pytest.mark.parametrize("case", sorted(BOOLS))
def test_a_bool_is_not_a_count(case, tiny):
    call, named = BOOLS[case]
    refused(lambda: call(tiny), named, kind=InvalidArgument)


# ---- options that cannot apply (together) -------------------------------------------------------

FOLDER = object()  # stands for the tiny model's folder in a message

CANNOT_APPLY = {
    "revision for a folder": (lambda t, f: tl.load_model(f, device="cpu", revision="x"), ["revision='x'", FOLDER]),
    "revision for a tiny model": (
        lambda t, f: tl.load_model("tiny:qwen3", device="cpu", revision="main"),
        ["revision='main'", "tiny:qwen3"],
    ),
    "probe versions of a package it does not read": (
        lambda t, f: tl.probe(versions={"torch-tpu": "0.2.0"}),
        ["versions", "'torch-tpu'"],
    ),
    "temperature without do_sample": (lambda t, f: generate(t, temperature=0.7), ["temperature=0.7", "do_sample"]),
    "top_p without do_sample": (lambda t, f: generate(t, do_sample=False, top_p=0.9), ["top_p=0.9", "do_sample"]),
    "min_new_tokens above max": (
        lambda t, f: generate(t, min_new_tokens=5, max_new_tokens=2),
        ["min_new_tokens=5", "max_new_tokens=2"],
    ),
    "input_ids with a prompt": (lambda t, f: generate(t, input_ids=[1, 2]), ["input_ids=[1, 2]"]),
    "max_length": (lambda t, f: generate(t, max_length=3), ["max_length=3"]),
    "a dynamic cache": (
        lambda t, f: generate(t, cache_implementation="dynamic"),
        ["cache_implementation='dynamic'"],
    ),
    "num_return_sequences 2": (
        lambda t, f: generate(t, do_sample=True, num_return_sequences=2),
        ["num_return_sequences=2"],
    ),
}


@pytest.mark.parametrize("case", sorted(CANNOT_APPLY))
def test_options_that_cannot_apply_are_refused(case, tiny, folder):
    call, named = CANNOT_APPLY[case]
    named = [str(folder) if n is FOLDER else n for n in named]
    refused(lambda: call(tiny, folder), *named, kind=InvalidArgument)


def test_a_closed_session_is_refused(tiny):
    s = session(tiny)
    s.close()
    assert s.closed
    refused(lambda: s.generate("hello", max_new_tokens=2), "session is closed", kind=InvalidArgument)
    refused(lambda: s.warmup([4]), "session is closed", kind=InvalidArgument)
    refused(lambda: tl.widgets.GenerationPanel(s), "session is closed", kind=InvalidArgument)
    first = session(tiny)
    with pytest.warns(UserWarning, match="took over"):
        second = session(tiny)  # takes the model over
    refused(lambda: first.generate("hello"), "another GenerationSession took over", kind=InvalidArgument)
    second.close()


# ---- what the machine lacks, or a checkpoint that cannot work -----------------------------------


def test_paths_that_do_not_exist_are_refused(tmp_path):
    missing = str(tmp_path / "no-such-sysfs")
    refused(lambda: tl.probe(sysfs_root=missing), f"sysfs_root={missing!r}", kind=InvalidArgument)
    refused(lambda: tl.probe(dev_root=missing), f"dev_root={missing!r}", kind=InvalidArgument)


def _nan_checkpoint(folder, target, fill):
    import torch

    loaded = tl.load_model(folder, device="cpu")
    with torch.no_grad():
        fill(dict(loaded.model.named_parameters()))
    loaded.model.save_pretrained(target)
    loaded.tokenizer.save_pretrained(target)
    return target


def test_weights_with_nan_or_infinity_are_refused(folder, tmp_path):
    def all_nan(params):
        for p in params.values():
            p.fill_(NAN)

    def one_inf(params):
        params["model.layers.1.mlp.down_proj.weight"][3, 5] = INF

    nan = _nan_checkpoint(folder, tmp_path / "nan", all_nan)
    e = refused(lambda: tl.load_model(nan, device="cpu"), "model.embed_tokens.weight", "NaN", kind=ModelLoadError)
    assert "diverged" in e.cause and "check_finite=False" in e.fix
    inf = _nan_checkpoint(folder, tmp_path / "inf", one_inf)
    refused(
        lambda: tl.load_model(inf, device="cpu"), "model.layers.1.mlp.down_proj.weight has 1 of", kind=ModelLoadError
    )
    loaded = tl.load_model(inf, device="cpu", check_finite=False)  # the opt-out: load it to inspect it
    assert math.isinf(loaded.model.model.layers[1].mlp.down_proj.weight[3, 5].item())
    refused(lambda: tl.load_model(inf, device="cpu", check_finite="no"), "check_finite", "'no'")


def test_weights_larger_than_memory_are_refused_before_loading(folder, tmp_path):
    """A checkpoint folder whose embeddings alone are twice this machine's memory (a sparse file: it
    takes no disk): refused from the headers in well under a second, before anything is read."""
    import time

    from tpu_lab.host.memory import memory_gib

    gib = memory_gib()
    if not gib:
        pytest.skip("this machine's memory is unknown")
    big = tmp_path / "big"
    big.mkdir()
    for name in os.listdir(folder):
        if name != "model.safetensors" and not name.startswith("tpu_lab"):
            (big / name).write_bytes((folder / name).read_bytes())
    config = json.loads((folder / "config.json").read_text())
    rows = int(2 * gib * 2**30 / (config["hidden_size"] * 4)) + 1
    config["vocab_size"] = rows
    (big / "config.json").write_text(json.dumps(config))
    header, offset = {}, 0
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        size = rows * config["hidden_size"] * 4
        header[name] = {"dtype": "F32", "shape": [rows, config["hidden_size"]], "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header).encode()
    with open(big / "model.safetensors", "wb") as fh:
        fh.write(len(head).to_bytes(8, "little") + head)
        fh.truncate(8 + len(head) + offset)  # sparse: the promised bytes exist, no disk is used
    start = time.monotonic()
    e = refused(lambda: tl.load_model(big, device="cpu", dtype="float32"), str(big), "GiB", kind=ModelLoadError)
    assert "more than this cpu has" in str(e) and time.monotonic() - start < 5


def test_a_full_disk_during_the_tiny_build_is_a_build_error(tmp_path):
    """A real failed write: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes every write past it
    fail with EFBIG, as a full disk fails with ENOSPC; safetensors reports it as its own error class."""
    script = textwrap.dedent(
        f"""
        import json, resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
        import tpu_lab as tl
        try:
            tl.tiny_model({str(tmp_path / "model")!r}, trained=False)
        except Exception as e:
            print(json.dumps({{"type": type(e).__name__, "tpu_lab": isinstance(e, tl.TpuLabError),
                              "message": str(e), "cause": getattr(e, "cause", None), "fix": getattr(e, "fix", None)}}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert proc.stdout.strip(), f"the build did not fail: {proc.stderr[-2000:]}"
    error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert error["type"] == ModelBuildError.__name__ and error["tpu_lab"], error
    assert str(tmp_path / "model") in error["message"] and "File too large" in error["message"]
    assert "disk is full" in error["cause"] and error["fix"]
    assert not (tmp_path / "model").exists()  # nothing half-written left where the model would be
