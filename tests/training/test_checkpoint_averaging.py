"""Checkpoint averaging (`hf_syntax_mt.training.checkpoint_averaging`, `hf-syntax-mt average`): the averaged weights are the
mean of the checkpoints', the averaged folder loads and translates, `last_checkpoints` orders by step numerically,
bad input is refused."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

import hf_syntax_mt  # noqa: F401  (registers the Auto classes and the pipeline)
from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration, average_checkpoints, last_checkpoints
from hf_syntax_mt.cli import main as cli_main
from hf_syntax_mt.features.joint_bpe import train_joint_bpe_tokenizer
from hf_syntax_mt.features.synthetic import write_synthetic_corpus
from hf_syntax_mt.syntax import PreParsedAnnotator, read_conllu
from model_helpers import TINY

PRESETS = ["transformer_abs", "transformer_dep_labeled_rel"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    data = tmp_path_factory.mktemp("averaging_data")
    write_synthetic_corpus(data, n_train=24, n_dev=4, n_test=2, seed=5, max_words=8)
    texts = (data / "train.src").read_text().splitlines() + (data / "train.tgt").read_text().splitlines()
    tokenizer = train_joint_bpe_tokenizer(texts, vocab_size=80)
    return data, tokenizer


def save_run(run_dir: Path, preset: str, tokenizer, steps=(1, 2, 3), **overrides) -> list[Path]:
    """A run dir like the Trainer's: the tokenizer at its top, one tiny random model per `checkpoint-<step>`."""
    config = SyntaxMTConfig.from_preset(preset, **{**TINY, "vocab_size": len(tokenizer),
                                                   "pad_token_id": tokenizer.pad_token_id,
                                                   "eos_token_id": tokenizer.eos_token_id,
                                                   "decoder_start_token_id": tokenizer.pad_token_id, **overrides})
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(run_dir)
    paths = []
    for step in steps:
        torch.manual_seed(step)
        model = SyntaxMTForConditionalGeneration(config)
        with torch.no_grad():  # every weight random (LayerNorm scales and biases too), so a wrong mean shows
            for parameter in model.parameters():
                parameter.normal_(0.0, 0.3)
        model.save_pretrained(run_dir / f"checkpoint-{step}")
        paths.append(run_dir / f"checkpoint-{step}")
    return paths


def naive_mean(paths: list[Path]) -> dict:
    """Per key, the mean of the loaded checkpoints' tensors, one checkpoint at a time in plain float64."""
    states = [AutoModelForSeq2SeqLM.from_pretrained(p).state_dict() for p in paths]
    return {name: sum(state[name].double() for state in states) / len(states) for name in states[0]}


@pytest.mark.parametrize("preset", PRESETS)
def test_averaged_weights_are_the_mean_and_the_folder_translates(corpus, tmp_path, preset):
    data, tokenizer = corpus
    paths = save_run(tmp_path / "run", preset, tokenizer)
    out = average_checkpoints(paths, tmp_path / "averaged")
    assert out == tmp_path / "averaged"
    assert (out / "model.safetensors").is_file() and (out / "generation_config.json").is_file()
    averaged = AutoModelForSeq2SeqLM.from_pretrained(out)
    expected = naive_mean(paths)
    state = averaged.state_dict()
    assert set(state) == set(expected)
    if preset == "transformer_dep_labeled_rel":
        assert any("relation" in name for name in state)  # the labeled-relation tables are averaged too
    for name, tensor in state.items():
        torch.testing.assert_close(tensor.double(), expected[name], rtol=0, atol=1e-6, msg=name)
    # the weights are tied after loading: one matrix for the embeddings and the output projection
    assert averaged.get_output_embeddings().weight.data_ptr() == averaged.get_input_embeddings().weight.data_ptr()
    assert json.loads((out / "averaged_checkpoints.json").read_text())["checkpoints"] == [str(p) for p in paths]
    assert json.loads((out / "config.json").read_text())["preset"] == preset

    # the folder is a model like any other: tokenizer from the run dir, the pipeline translates as generate does
    assert AutoTokenizer.from_pretrained(out).get_vocab() == tokenizer.get_vocab()
    sources = (data / "dev.src").read_text().splitlines()
    annotations = read_conllu(data / "dev.src.conllu")
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(annotations))
    got = [o["translation_text"] for o in translate(sources, num_beams=2, max_new_tokens=6)]
    assert len(got) == len(sources)
    manual = SyntaxMTForConditionalGeneration(averaged.config).eval()
    manual.load_state_dict({name: tensor.float() for name, tensor in expected.items()})
    direct = pipeline("syntax-translation", model=manual, tokenizer=tokenizer, annotator=PreParsedAnnotator(annotations))
    assert got == [o["translation_text"] for o in direct(sources, num_beams=2, max_new_tokens=6)]


def test_one_checkpoint_averages_to_itself(corpus, tmp_path):
    (path,) = save_run(tmp_path / "run", "transformer_abs", corpus[1], steps=(7,))
    out = average_checkpoints([str(path)], tmp_path / "averaged")
    original = AutoModelForSeq2SeqLM.from_pretrained(path).state_dict()
    for name, tensor in AutoModelForSeq2SeqLM.from_pretrained(out).state_dict().items():
        assert torch.equal(tensor, original[name]), name


def with_buffer(monkeypatch, name, values):
    """Each model loaded from now on gets the next of `values` as buffer `name` (as if saved with it)."""
    load = AutoModelForSeq2SeqLM.from_pretrained
    values = iter(values)

    def load_with_buffer(path, *args, **kwargs):
        model = load(path, *args, **kwargs)
        model.register_buffer(name, next(values))
        return model

    monkeypatch.setattr(AutoModelForSeq2SeqLM, "from_pretrained", load_with_buffer)


def test_integer_buffers_must_match(corpus, tmp_path, monkeypatch):
    """An integer tensor cannot be averaged: equal ones pass through, different ones are refused."""
    from safetensors.torch import load_file

    paths = save_run(tmp_path / "run", "transformer_abs", corpus[1], steps=(1, 2))
    with_buffer(monkeypatch, "counter", [torch.tensor([3, 4]), torch.tensor([3, 4]), torch.tensor([3, 4]),
                                         torch.tensor([3, 5])])
    out = average_checkpoints(paths, tmp_path / "equal")
    assert torch.equal(load_file(out / "model.safetensors")["counter"], torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="integer buffer 'counter' differs"):
        average_checkpoints(paths, tmp_path / "different")


def test_refuses_checkpoints_with_different_weight_shapes(corpus, tmp_path, monkeypatch):
    """Same config, different tensors (e.g. a checkpoint edited by hand): the message names the weight."""
    paths = save_run(tmp_path / "run", "transformer_abs", corpus[1], steps=(1, 2))
    with_buffer(monkeypatch, "extra", [torch.zeros(2), torch.zeros(3)])
    with pytest.raises(ValueError, match=r"differ in 'extra': \(2,\) torch.float32 in the first, \(3,\) torch.float32"):
        average_checkpoints(paths, tmp_path / "out")


def test_last_checkpoints_orders_by_step_number(tmp_path):
    for step in (1, 9, 10, 100, 25):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-final").mkdir()  # not a checkpoint-N folder
    (tmp_path / "checkpoint-11").write_text("a file, not a checkpoint")
    assert last_checkpoints(tmp_path, 3) == [tmp_path / f"checkpoint-{s}" for s in (10, 25, 100)]
    assert last_checkpoints(str(tmp_path), 5) == [tmp_path / f"checkpoint-{s}" for s in (1, 9, 10, 25, 100)]
    with pytest.raises(ValueError, match="has 5 checkpoint-N folders, fewer than the 6 asked for"):
        last_checkpoints(tmp_path, 6)
    with pytest.raises(ValueError, match="integer >= 1"):
        last_checkpoints(tmp_path, 0)
    with pytest.raises(ValueError, match="does not exist"):
        last_checkpoints(tmp_path / "nowhere", 1)


def test_refuses_bad_input(corpus, tmp_path):
    tokenizer = corpus[1]
    paths = save_run(tmp_path / "a", "transformer_abs", tokenizer, steps=(1, 2))
    wider = save_run(tmp_path / "b", "transformer_abs", tokenizer, steps=(3,), encoder_ffn_dim=96)
    other_preset = save_run(tmp_path / "c", "transformer_rel", tokenizer, steps=(4,))
    with pytest.raises(ValueError, match="at least one checkpoint"):
        average_checkpoints([], tmp_path / "out")
    with pytest.raises(ValueError, match="config 'encoder_ffn_dim' is 64 in the first and 96 in the second"):
        average_checkpoints(paths + wider, tmp_path / "out")
    with pytest.raises(ValueError, match="different models: config '"):
        average_checkpoints(paths + other_preset, tmp_path / "out")
    (paths[1] / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=f"checkpoint {paths[1]} has no weights file"):
        average_checkpoints(paths, tmp_path / "out")
    with pytest.raises(ValueError, match="does not exist"):
        average_checkpoints([paths[0], tmp_path / "missing"], tmp_path / "out")
    with pytest.raises(ValueError, match="more than once"):
        average_checkpoints([paths[0], paths[0]], tmp_path / "out")
    with pytest.raises(ValueError, match="is one of the checkpoints"):
        average_checkpoints([paths[0]], paths[0])
    assert not (tmp_path / "out").exists()


def test_cli_average(corpus, tmp_path, capsys):
    paths = save_run(tmp_path / "run", "transformer_abs", corpus[1], steps=(2, 9, 10))
    assert cli_main(["average", "--run-dir", str(tmp_path / "run"), "--last", "2", "--out", str(tmp_path / "last2")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "last2")
    record = json.loads((tmp_path / "last2" / "averaged_checkpoints.json").read_text())
    assert record["checkpoints"] == [str(tmp_path / "run" / "checkpoint-9"), str(tmp_path / "run" / "checkpoint-10")]
    expected = naive_mean(paths[1:])
    for name, tensor in AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "last2").state_dict().items():
        torch.testing.assert_close(tensor.double(), expected[name], rtol=0, atol=1e-6, msg=name)

    assert cli_main(["average", "--checkpoints", *map(str, paths), "--out", str(tmp_path / "all")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "all")
    # errors: one line on stderr, exit status 2 (argparse's for bad usage)
    assert cli_main(["average", "--run-dir", str(tmp_path / "run"), "--last", "4", "--out", str(tmp_path / "x")]) == 2
    assert "hf-syntax-mt average: error: " in capsys.readouterr().err
    for bad in (["--run-dir", str(tmp_path / "run"), "--out", "x"],
                ["--checkpoints", str(paths[0]), "--run-dir", str(tmp_path / "run"), "--last", "1", "--out", "x"],
                ["--checkpoints", str(paths[0])]):
        with pytest.raises(SystemExit) as error:
            cli_main(["average", *bad])
        assert error.value.code == 2


def test_average_refuses_to_write_over_a_trained_model_unless_asked(corpus, tmp_path, capsys):
    """`--out RUN_DIR` would replace the run's trained model.safetensors: refused (exit 2, nothing written) unless
    --overwrite; a folder with any file in it too. With --overwrite, the card left there says the weights are the average."""
    run = tmp_path / "run"
    paths = save_run(run, "transformer_abs", corpus[1], steps=(1, 2))
    AutoModelForSeq2SeqLM.from_pretrained(paths[-1]).save_pretrained(run)  # the trained model at the run's top
    (run / "README.md").write_text("---\nlibrary_name: transformers\n---\n\n# a trained model\n\n| dev | bleu | 9.00 |\n")
    before = {name: (run / name).read_bytes() for name in ("model.safetensors", "config.json", "README.md")}
    average = ["average", "--run-dir", str(run), "--last", "2", "--out", str(run)]
    capsys.readouterr()
    assert cli_main(average) == 2
    assert capsys.readouterr().err == (
        f"hf-syntax-mt average: error: output dir {run} is not empty: it holds a model (model.safetensors) that the "
        "average would replace; choose a new folder, or pass overwrite=True (hf-syntax-mt average --overwrite) to "
        "write over it\n")
    assert {name: (run / name).read_bytes() for name in before} == before
    assert not (run / "averaged_checkpoints.json").exists()
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("keep me\n")
    with pytest.raises(ValueError, match=f"output dir {notes} is not empty: it holds files that the average"):
        average_checkpoints(paths, notes)
    with pytest.raises(ValueError, match="is a file, not a folder"):
        average_checkpoints(paths, notes / "todo.txt")

    assert cli_main([*average, "--overwrite"]) == 0
    expected = naive_mean(paths)
    for name, tensor in AutoModelForSeq2SeqLM.from_pretrained(run).state_dict().items():
        torch.testing.assert_close(tensor.double(), expected[name], rtol=0, atol=1e-6, msg=name)
    card = (run / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n---\n\n> **Averaged weights.** `model.safetensors` here is "
                           "the mean of 2 checkpoint(s) (checkpoint-1, checkpoint-2; `averaged_checkpoints.json`)")
    assert card.endswith("# a trained model\n\n| dev | bleu | 9.00 |\n")
    assert cli_main([*average, "--overwrite"]) == 0  # again: one note, not two
    assert (run / "README.md").read_text() == card
