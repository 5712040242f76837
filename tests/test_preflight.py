"""tp_preflight from configs alone (no weights, no processes)."""

import pytest
from transformers import Glm4Config, LlamaConfig, Qwen3Config

import tpu_lab as tl
from tpu_lab.errors import InvalidArgument
from tpu_lab.host.chips import TpuChips
from tpu_lab.tp.preflight.plan import REPLICATE

SEED_PLAN = {f"layers.*.self_attn.{p}": REPLICATE for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
# Shaped like the real models (head counts, sizes, ties), as their hub configs say.
QWEN3_06B = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    tie_word_embeddings=True,
)
QWEN3_8B = dict(
    hidden_size=4096,
    intermediate_size=12288,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    tie_word_embeddings=False,
)
GLM4_9B = dict(
    hidden_size=4096,
    intermediate_size=13696,
    num_hidden_layers=40,
    num_attention_heads=32,
    num_key_value_heads=2,
    head_dim=128,
    vocab_size=151552,
    tie_word_embeddings=False,
)
V6E_4 = TpuChips(4, "TPU v6e", 32, (1, 4), ("a", "b", "c", "d"))


def codes(report):
    return [p.code for p in report.problems]


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_real_model_shaped_verdicts(tp):
    assert tl.tp_preflight(Qwen3Config(**QWEN3_8B), tp).ok
    tied = tl.tp_preflight(Qwen3Config(**QWEN3_06B), tp)
    assert tied.ok and "tied-embeddings" in codes(tied)
    glm = tl.tp_preflight(Glm4Config(**GLM4_9B), tp)
    assert glm.ok is (tp == 2)
    if tp > 2:
        assert codes(glm)[0] == "heads-not-divisible" and "2 key/value heads" in glm.problems[0].message
        assert glm.suggestion_fixes_all
        fixed = tl.tp_preflight(Glm4Config(**GLM4_9B), tp, tp_plan=glm.suggested_tp_plan)
        assert fixed.ok and fixed.suggested_tp_plan is None


def test_query_heads_not_divisible():
    report = tl.tp_preflight(
        LlamaConfig(hidden_size=896, num_attention_heads=14, num_key_value_heads=2, intermediate_size=4864), 4
    )
    messages = " ".join(p.message for p in report.problems)
    assert not report.ok and "14 attention heads over 4 ranks: 3.5 per rank" in messages


def test_default_plan_is_resolved_to_full_paths():
    report = tl.tp_preflight("tiny:qwen3", 2)
    assert report.plan["model.layers.*.self_attn.q_proj"] == "colwise"
    assert report.plan["lm_head"] == "colwise_gather_output"
    assert report.model == "Qwen3ForCausalLM" and (report.heads, report.kv_heads) == (4, 4)


def test_seed_plan_keys_are_corrected():
    report = tl.tp_preflight(Glm4Config(**GLM4_9B), 4, tp_plan=SEED_PLAN)
    keys = [p for p in report.problems if p.code == "tp-plan-key"]
    assert len(keys) == 4 and not report.ok
    assert "match nothing" in keys[0].message
    assert keys[0].fix == "Use 'model.layers.*.self_attn.q_proj' instead."
    assert report.suggested_tp_plan == {f"model.{k}": v for k, v in SEED_PLAN.items()}
    assert report.suggestion_fixes_all
    assert "tp_plan={" in report.snippet and "'model.layers.*.self_attn.o_proj'" in report.snippet


def test_key_matching_nothing_at_all():
    report = tl.tp_preflight("tiny:qwen3", 2, tp_plan={"encoder.*.attn": "colwise"})
    assert codes(report)[0] == "tp-plan-key" and "matches no module" in report.problems[0].message


def test_unknown_style():
    with pytest.raises(InvalidArgument, match=r"'columnwise'.*not a parallel style") as e:
        tl.tp_preflight("tiny:qwen3", 2, tp_plan={"model.layers.*.self_attn.q_proj": "columnwise"})
    assert "colwise" in e.value.fix


def test_rank_counts_against_the_tpu_generation():
    assert codes(tl.tp_preflight("tiny:qwen3", 2, chips=V6E_4)) == ["rank-count-not-allowed"]
    assert codes(tl.tp_preflight(Qwen3Config(**QWEN3_8B), 8, chips=V6E_4)) == ["more-ranks-than-chips"]
    assert tl.tp_preflight("tiny:qwen3", 4, chips=V6E_4).problems == ()
    assert codes(tl.tp_preflight("tiny:qwen3", 2)) == ["no-tpu-here"]


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_bad_tp_size(bad):
    with pytest.raises(InvalidArgument, match="tp_size"):
        tl.tp_preflight("tiny:qwen3", bad)


def test_offline_hub_id_and_missing_folder():
    with pytest.raises(tl.TpuLabError, match="not reachable"):
        tl.tp_preflight("zai-org/GLM-4-9B-0414", 4)
    with pytest.raises(tl.TpuLabError, match="No checkpoint folder"):
        tl.tp_preflight("./nowhere", 4)


def test_a_tiny_config_check_builds_no_model(tmp_path, monkeypatch):
    monkeypatch.setenv("TPU_LAB_CACHE", str(tmp_path))
    report = tl.tp_preflight("tiny:qwen3-kv1", 2)
    assert not report.ok and report.kv_heads == 1
    made = [p.name for p in (tmp_path / "models").iterdir()]
    assert len(made) == 1 and made[0].endswith("-config-only"), made  # a config, no weights built or trained


def test_a_missing_folder_is_named_before_any_hub_check(monkeypatch):
    import tpu_lab.models.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "hub_problem", lambda *a: pytest.fail("the hub was asked"))
    with pytest.raises(tl.TpuLabError, match="No checkpoint folder at 'no_such_folder'"):
        tl.tp_preflight("no_such_folder", 2)


def test_report_renders():
    report = tl.tp_preflight("tiny:qwen3-kv2", 4)
    assert "WILL FAIL" in str(report) and "Suggested" in report._repr_mimebundle_()["text/html"]


SHARD_WORKER = """
import json, os, sys, torch, tpu_lab as tl
from transformers import AutoModelForCausalLM, DistributedConfig
world = int(os.environ["WORLD_SIZE"])
outcome = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        model = AutoModelForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(tp_size=world))
        with torch.no_grad():
            model(torch.arange(9).unsqueeze(0))
        outcome[name] = "ok"
    except Exception as e:
        outcome[name] = f"{type(e).__name__}: {e}"[:200]
tl.report(outcome)
"""


@pytest.fixture(scope="module")
def scaled_checkpoints(tmp_path_factory):
    """The three real-model shapes, scaled down (2 layers, head_dim 4, small MLP and vocab) with their head
    counts and ties kept: what decides whether sharding works."""
    import torch
    from transformers import AutoModelForCausalLM

    small = dict(
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=2,
        head_dim=4,
        vocab_size=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    out = {}
    for name, cls, shape in (
        ("qwen3-0.6b", Qwen3Config, QWEN3_06B),
        ("qwen3-8b", Qwen3Config, QWEN3_8B),
        ("glm4-9b", Glm4Config, GLM4_9B),
    ):
        config = cls(**{**shape, **small})
        torch.manual_seed(0)
        path = tmp_path_factory.mktemp(name)
        AutoModelForCausalLM.from_config(config).save_pretrained(path)
        out[name] = (str(path), config)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_verdicts_agree_with_real_sharding(scaled_checkpoints, tp):
    import json

    paths = {name: path for name, (path, _) in scaled_checkpoints.items()}
    result = tl.launch(SHARD_WORKER, nproc=tp, args=[json.dumps(paths)], timeout=600, on_output=lambda r, line: None)
    outcomes = result.values[0]
    assert all(v == outcomes for v in result.values)
    for name, (_, config) in scaled_checkpoints.items():
        predicted = tl.tp_preflight(config, tp).ok
        actual = outcomes[name] == "ok"
        assert predicted == actual, f"{name} at tp={tp}: preflight says {predicted}, transformers: {outcomes[name]}"
        if not actual:
            assert "is invalid for input of size" in outcomes[name]


def test_hosts_chips_per_host_times_hosts_and_tp_across_hosts():
    # a v6e slice of 4 hosts x 4 chips (each host's chips: V6E_4)
    assert codes(tl.tp_preflight("tiny:qwen3", 4, chips=V6E_4, hosts=4)) == []  # one rank per host: allowed
    two_each = tl.tp_preflight(Qwen3Config(**QWEN3_8B), 8, chips=V6E_4, hosts=4)
    assert codes(two_each) == ["rank-count-not-allowed", "tp-across-hosts"]  # v6e has no 2-chip topology
    assert "2 ranks per host" in two_each.problems[0].message
    report = tl.tp_preflight(Qwen3Config(**QWEN3_8B), 8, chips=V6E_4, hosts=["h0", "h1"])
    assert codes(report) == ["tp-across-hosts"] and report.ok  # allowed, but slow: flagged
    finding = report.problems[0]
    assert "larger than one host's 4 chips" in finding.message and "tp_size <= 4" in finding.fix
    too_many = tl.tp_preflight(Qwen3Config(**QWEN3_8B), 16, chips=V6E_4, hosts=2)
    assert "more-ranks-than-chips" in codes(too_many) and "2 hosts x 4 chips have 8" in str(too_many)
    assert codes(tl.tp_preflight("tiny:qwen3", 4, chips=V6E_4, hosts=3)) == ["ranks-not-split-evenly"]
    assert codes(tl.tp_preflight("tiny:qwen3", 4, chips=V6E_4, hosts=1)) == []
    cpu = TpuChips(0, None, None, (), ())
    assert codes(tl.tp_preflight("tiny:qwen3", 4, chips=cpu, hosts=2)) == ["no-tpu-here"]
    with pytest.raises(InvalidArgument, match="number of hosts or a list"):
        tl.tp_preflight("tiny:qwen3", 4, chips=V6E_4, hosts="h0,h1")
