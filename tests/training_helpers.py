"""Tiny trained models shared by test_training / test_pipeline / test_cli (trained once per session)."""

import atexit
import shutil
import tempfile
from pathlib import Path

import torch
from model_helpers import TINY as MODEL_TINY

from hf_syntax_mt.features.synthetic import write_synthetic_corpus
from hf_syntax_mt.training.run import DataArguments, ModelArguments, SyntaxMTTrainingArguments, train

# the model tests' tiny sizes; the vocabulary is the trained tokenizer's, positions the default
TINY = {k: v for k, v in MODEL_TINY.items() if k not in ("vocab_size", "max_position_embeddings")}
TINY_OVERRIDES = ",".join(f"{k}={v}" for k, v in TINY.items())

torch.set_num_threads(1)  # tiny models: one thread is as fast and does not fight over the 2 shared cores
_ROOT = Path(tempfile.mkdtemp(prefix="hf_syntax_mt_tests_"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)
_CACHE: dict = {}


def synthetic_corpus() -> Path:
    """train (48) / dev (6) / test (4) pairs with gold CoNLL-U and trees next to the text."""
    if "corpus" not in _CACHE:
        write_synthetic_corpus(_ROOT / "data", n_train=48, n_dev=6, n_test=4, seed=3, max_words=10)
        _CACHE["corpus"] = _ROOT / "data"
    return _CACHE["corpus"]


def tiny_args(output_dir, preset="transformer_abs", parser="preparsed", data_dir=None, **training):
    data_dir = Path(data_dir or synthetic_corpus())
    model_args = ModelArguments(preset=preset, config_overrides=TINY_OVERRIDES, vocab_size=120, parser=parser)
    data_args = DataArguments(
        train_file=str(data_dir / "train"),
        validation_file=str(data_dir / "dev"),
        max_source_length=32,
        max_target_length=12,
        cache_dir=str(_ROOT / "cache"),
    )
    settings = dict(
        output_dir=str(output_dir),
        max_steps=4,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=8,
        warmup_steps=2,
        learning_rate=3e-3,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        logging_steps=2,
        use_cpu=True,
        disable_tqdm=True,
    )
    settings.update(training)
    return model_args, data_args, SyntaxMTTrainingArguments(**settings)


def trained_model(preset="transformer_dep_rel+transformer_dbsa+transformer_sla"):
    """(output_dir, TrainingResult) of a tiny model trained on the synthetic corpus (cached)."""
    key = ("model", preset)
    if key not in _CACHE:
        out = _ROOT / preset.replace("+", "-")
        result = train(*tiny_args(out, preset))
        _CACHE[key] = (out, result)
    return _CACHE[key]


def scratch_dir(name) -> Path:
    path = Path(tempfile.mkdtemp(prefix=name, dir=_ROOT))
    return path
