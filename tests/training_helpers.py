"""Tiny trained models shared by test_training / test_pipeline / test_cli (trained once per session), and the start and
stop of a training command in a child process (the interrupt, data-parallel and demo tests)."""

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import torch

from hf_syntax_mt.features.synthetic import write_synthetic_corpus
from hf_syntax_mt.training.run import DataArguments, ModelArguments, SyntaxMTTrainingArguments, train
from model_helpers import TINY as MODEL_TINY

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


# a training command in a child process: offline, one thread, its log lines as they come
CHILD_ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def started_until(command: list[str], marker: str, stderr=subprocess.STDOUT) -> subprocess.Popen:
    """Start `command` in its own process group and read its output until a line contains `marker` (the first log of
    a training step: training runs); the lines read are in `process.lines`."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=CHILD_ENV,
                               start_new_session=True)
    process.lines = []
    for line in process.stdout:
        process.lines.append(line)
        if marker in line:
            return process
    process.wait()
    raise AssertionError(f"no line with {marker!r} before the command ended:\n" + "".join(process.lines)[-3000:])


def stopped(process: subprocess.Popen, stop: Callable[[], None], timeout: float = 180) -> tuple[str, str]:
    """Stop the command with `stop()`, wait for it and kill what is left of its process group; (all it printed on
    its standard output, its standard error or "" when that went to the output)."""
    try:
        stop()
        output, errors = process.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # the whole group has ended
            pass
    return "".join(process.lines) + output, errors or ""
