"""Bad input that used to crash with a traceback: a damaged weights file (translate, the pipeline, training
from a model or a checkpoint) and lengths, sizes and counts below 1 or an unknown BLEU tokenizer given to
training (refused before any data is read)."""

import shutil

import pytest
from transformers import pipeline

import hf_syntax_mt.training.run
from hf_syntax_mt.cli import main
from hf_syntax_mt.inference.pipeline import DamagedModelFileError
from hf_syntax_mt.training.run import DataArguments, ModelArguments, train
from training_helpers import TINY_OVERRIDES, scratch_dir, synthetic_corpus, tiny_args, trained_model

DAMAGES = {
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
    "overwritten": lambda data: b"\0" * 64 + data[64:],
}


def damaged_copy(damage: str):
    """A copy of a tiny trained transformer_abs model whose model.safetensors is damaged; (dir, weights file)."""
    model_dir, _ = trained_model("transformer_abs")
    copy = scratch_dir(f"damaged_{damage}") / "model"
    shutil.copytree(model_dir, copy, ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = copy / "model.safetensors"
    weights.write_bytes(DAMAGES[damage](weights.read_bytes()))
    return copy, weights


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_translate_names_a_damaged_weights_file_in_one_line(damage, tmp_path, capsys):
    model_dir, weights = damaged_copy(damage)
    source = tmp_path / "in.txt"
    source.write_text("a sentence\n")
    capsys.readouterr()  # drop what training the shared tiny model printed
    assert main(["translate", "--model", str(model_dir), str(source)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith(f"hf-syntax-mt translate: error: {weights} is damaged (")
    assert "it is incomplete or corrupted" in line


def test_pipeline_names_a_damaged_weights_file():
    model_dir, weights = damaged_copy("truncated")
    with pytest.raises(DamagedModelFileError, match=f"^{weights} is damaged .*incomplete metadata"):
        pipeline("syntax-translation", model=str(model_dir))


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_from_pretrained_names_a_damaged_weights_file(damage):
    """Bare `from_pretrained`, through the auto class or the model class, names the damaged file."""
    from transformers import AutoModelForSeq2SeqLM

    from hf_syntax_mt import SyntaxMTForConditionalGeneration

    model_dir, weights = damaged_copy(damage)
    for loader in (AutoModelForSeq2SeqLM, SyntaxMTForConditionalGeneration):
        with pytest.raises(DamagedModelFileError, match=f"^{weights} is damaged .*incomplete or corrupted"):
            loader.from_pretrained(model_dir)


def test_training_from_a_damaged_model_says_so(tmp_path, capsys):
    model_dir, weights = damaged_copy("truncated")
    data = synthetic_corpus()
    assert main(["train", "--model_name_or_path", str(model_dir), "--train_file", str(data / "train"),
                 "--output_dir", str(tmp_path / "out"), "--max_steps", "1", "--use_cpu", "true"]) == 2
    assert f"hf-syntax-mt-train: error: {weights} is damaged" in capsys.readouterr().err


def test_resuming_from_a_damaged_checkpoint_names_it_and_what_to_do():
    out = scratch_dir("damaged_checkpoint")
    settings = dict(max_steps=2, eval_strategy="no", save_steps=2, load_best_model_at_end=False)
    train(*tiny_args(out, **settings))
    weights = out / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    (out / "all_results.json").unlink()  # as if the run had stopped after saving the checkpoint
    with pytest.raises(DamagedModelFileError, match=f"{weights} is damaged .*there is no earlier checkpoint in {out} to "
                                                    "resume from: pass --overwrite_output_dir to start fresh"):
        train(*tiny_args(out, **{**settings, "max_steps": 4}))


def _train_argv(tmp_path, *extra):
    data = synthetic_corpus()
    return ["train", "--preset", "transformer_abs", "--parser", "preparsed", "--config_overrides", TINY_OVERRIDES,
            "--train_file", str(data / "train"), "--validation_file", str(data / "dev"), "--vocab_size", "120",
            "--output_dir", str(tmp_path / "out"), "--max_steps", "2", "--use_cpu", "true",
            "--cache_dir", str(tmp_path / "cache"), *extra]


@pytest.mark.parametrize("extra, message", [
    (["--max_target_length", "-5"], "--max_target_length -5: expected a length in subwords >= 1"),
    (["--max_source_length", "0"], "--max_source_length 0: expected a length in subwords >= 1"),
    (["--vocab_size", "3"], "--vocab_size 3: expected a vocabulary size (special tokens included) >= 4"),
    (["--max_train_samples", "0"], "--max_train_samples 0: expected a number of pairs >= 1"),
    (["--max_eval_samples", "-2"], "--max_eval_samples -2: expected a number of pairs >= 1"),
    (["--max_predict_samples", "0"], "--max_predict_samples 0: expected a number of pairs >= 1"),
    (["--preprocessing_num_workers", "0"], "--preprocessing_num_workers 0: expected a number of processes >= 1"),
    (["--per_device_train_batch_size", "0"], "--per_device_train_batch_size 0: expected a batch size >= 1"),
    (["--per_device_eval_batch_size", "-8"], "--per_device_eval_batch_size -8: expected a batch size >= 1"),
    (["--gradient_accumulation_steps", "0"], "--gradient_accumulation_steps 0: expected a number of batches >= 1"),
    (["--generation_max_length", "-1"], "--generation_max_length -1: expected a length in subwords >= 1"),
    (["--dataloader_num_workers", "-1"], "--dataloader_num_workers -1: expected a number of processes >= 0"),
    (["--max_steps", "-1", "--num_train_epochs", "0"],
     "--num_train_epochs 0.0 and --max_steps -1: nothing to train; give --num_train_epochs > 0 or --max_steps >= 1"),
    (["--eval_strategy", "steps", "--eval_steps", "-3"],
     "--eval_steps -3.0: expected a number of steps >= 1 (or a fraction of the run < 1) with --eval_strategy steps"),
    (["--save_strategy", "steps", "--save_steps", "0", "--eval_strategy", "no"], "--save_steps 0.0: expected a number"),
    (["--bleu_tokenize", "13b"], "--bleu_tokenize 13b: expected one of 13a, char, flores101, flores200, intl, "
                                 "ja-mecab, ko-mecab, none, spBLEU-1K, spm, zh"),
])
def test_bad_lengths_sizes_and_counts_fail_before_any_work(tmp_path, capsys, monkeypatch, extra, message):
    def no_work(*args, **kwargs):
        raise AssertionError("the data was read before the arguments were checked")

    monkeypatch.setattr(hf_syntax_mt.training.run, "load_raw_datasets", no_work)
    assert main(_train_argv(tmp_path, *extra)) == 2
    [line, hint] = capsys.readouterr().err.splitlines()
    assert line == f"hf-syntax-mt-train: error: {message}" or line.startswith(f"hf-syntax-mt-train: error: {message}")
    assert hint == "(--traceback shows where it was raised)"
    assert not (tmp_path / "out").exists()


def test_the_argument_dataclasses_refuse_bad_values_when_built():
    with pytest.raises(ValueError, match="--max_target_length -5: expected a length in subwords >= 1"):
        DataArguments(train_file="x", max_target_length=-5)
    with pytest.raises(ValueError, match="--vocab_size 0: expected a vocabulary size"):
        ModelArguments(vocab_size=0)
    assert DataArguments(max_train_samples=1, preprocessing_num_workers=1).max_train_samples == 1
