import json
import os

import pytest

import tpu_lab as tl
from tpu_lab.errors import EnvironmentProblem, InvalidArgument, ModelBuildError
from tpu_lab.models import tiny as models


def _load(path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_round_trip_and_greedy_generate(arch):
    path = tl.tiny_model(arch=arch)
    model, tok = _load(path)
    assert type(model).__name__ == {"qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}[arch]
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 2
    assert tok.pad_token is not None and tok.eos_token is not None and tok.pad_token != tok.eos_token
    assert tok.padding_side == "left" and len(tok) <= model.config.vocab_size
    inputs = tok("The French Bread Law states", return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 6
    assert tok.decode(out[0]).startswith("The French Bread Law states")
    again = model.generate(**inputs, max_new_tokens=6, do_sample=False, min_new_tokens=6)
    assert out.tolist() == again.tolist()


def test_trained_model_continues_in_english():
    # Issue 13: random weights wrote byte soup ("Ev\ufffdnew 64T attention"). Trained briefly on the corpus,
    # a lesson prompt continues with words from it, and no generated text can hold half a character.
    from tpu_lab.models.corpus import sentences

    model, tok = _load(tl.tiny_model())
    words = {w.strip(".!?,") for s in sentences() for w in s.split()}
    for prompt in ["The French Bread Law states", "The compiler", "A shape bucket"]:
        inputs = tok(prompt, return_tensors="pt")
        out = model.generate(**inputs, max_new_tokens=10, do_sample=False)
        text = tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        assert "\ufffd" not in text
        said = [w.strip(".!?,") for w in text.split()]
        assert len(said) >= 5 and all(w in words for w in said), (prompt, text)
    assert tok.decode(tok("The French Bread Law states")["input_ids"]) == "The French Bread Law states"


def test_random_weights_stay_available():
    import torch

    trained, _ = _load(tl.tiny_model())
    path = tl.tiny_model(trained=False)
    assert path.name.endswith(f"-random-r{models.RECIPE_VERSION}") and path != tl.tiny_model()
    random, tok = _load(path)
    assert random.config.to_dict()["hidden_size"] == trained.config.hidden_size
    assert not torch.equal(random.lm_head.weight, trained.lm_head.weight)
    # Even random weights never emit a lone byte >= 0x80 (U+FFFD when decoded): those ids are suppressed.
    suppressed = set(random.generation_config.suppress_tokens)
    assert len(suppressed) >= 128 and all("\ufffd" in tok.decode([i]) for i in suppressed if i < len(tok))
    inputs = tok("Ev", return_tensors="pt")
    out = random.generate(**inputs, max_new_tokens=30, do_sample=False)
    assert "\ufffd" not in tok.decode(out[0], skip_special_tokens=True)


def test_bad_trained_flag():
    with pytest.raises(InvalidArgument, match="trained must be True or False"):
        tl.tiny_model(trained="yes")


def test_weights_are_deterministic(tmp_path):
    import torch

    a, _ = _load(tl.tiny_model(tmp_path / "a"))
    b, _ = _load(tl.tiny_model(tmp_path / "b"))
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert na == nb and torch.equal(pa, pb)


def test_kv_heads_and_tied_embeddings():
    model, _ = _load(tl.tiny_model(kv_heads=2, tie_embeddings=True))
    assert model.config.num_key_value_heads == 2
    assert model.lm_head.weight is model.model.embed_tokens.weight
    untied, _ = _load(tl.tiny_model())
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight


def test_cached_by_arguments():
    a = tl.tiny_model(kv_heads=1)
    assert tl.tiny_model(kv_heads=1) == a
    assert tl.tiny_model(kv_heads=2) != a
    assert a.parent == models.cache_dir() / "models"
    assert json.loads((a / models.MARKER).read_text())["kv_heads"] == 1


def test_unknown_arch():
    with pytest.raises(InvalidArgument, match="Unknown arch 'gpt9'") as e:
        tl.tiny_model(arch="gpt9")
    assert "llama, qwen3" in e.value.fix


@pytest.mark.parametrize("kv", [3, 0, -2, 2.0, True])
def test_bad_kv_heads(kv):
    with pytest.raises(InvalidArgument, match="kv_heads") as e:
        tl.tiny_model(kv_heads=kv)
    assert e.value.fix == "Use one of: 1, 2, 4."


def test_unwritable_path(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(ModelBuildError, match="Cannot write a tiny model") as e:
        tl.tiny_model(blocker / "model")
    assert "writable path" in e.value.fix


def test_existing_folder_is_not_overwritten(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(InvalidArgument, match="already exists"):
        tl.tiny_model(tmp_path)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_empty_existing_folder_is_used(tmp_path):
    target = tmp_path / "empty"
    target.mkdir()
    assert tl.tiny_model(target) == target and (target / "config.json").exists()


def test_failed_build_leaves_nothing_half_written(tmp_path, monkeypatch):
    real_build = models._build

    def build_then_fail(folder, spec):
        real_build(folder, spec)  # the real files get written...
        raise OSError(28, "No space left on device")  # ...then the disk "fills up"

    monkeypatch.setattr(models, "_build", build_then_fail)
    with pytest.raises(ModelBuildError, match="No space left") as e:
        tl.tiny_model(tmp_path / "model")
    assert "Free disk space" in e.value.fix
    assert os.listdir(tmp_path) == []  # no target, no staging folder


def test_cache_env_empty_or_file(tmp_path):
    with pytest.raises(EnvironmentProblem, match="TPU_LAB_CACHE is set but empty"):
        tl.tiny_model(environ={"TPU_LAB_CACHE": " "})
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(EnvironmentProblem, match="points to a file") as e:
        tl.tiny_model(environ={"TPU_LAB_CACHE": str(f)})
    assert "unset it" in e.value.fix


def test_cache_env_is_honoured(tmp_path):
    path = tl.tiny_model(environ={"TPU_LAB_CACHE": str(tmp_path / "c")}, arch="llama")
    assert path.parent == tmp_path / "c" / "models"


def test_config_only_folder_is_the_models_config_without_building_it(tmp_path):
    env = {"TPU_LAB_CACHE": str(tmp_path)}
    folder = models.tiny_config_folder(kv_heads=1, environ=env)
    assert [p.name for p in folder.iterdir()] == ["config.json"]  # no weights made, none trained
    assert not list((tmp_path / "models").glob("*-r*[0-9]"))  # and no checkpoint built beside it
    built = models.tiny_model(kv_heads=1, environ=env)
    config = json.loads((folder / "config.json").read_text())
    full = json.loads((built / "config.json").read_text())
    for key in ("vocab_size", "num_key_value_heads", "num_attention_heads", "hidden_size", "tie_word_embeddings"):
        assert config[key] == full[key], key
    assert models.tiny_config_folder(kv_heads=1, environ=env) == built  # once built, the checkpoint itself
