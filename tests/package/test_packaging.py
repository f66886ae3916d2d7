"""What `pip install` brings: a core every user needs, the rest in extras whose features name them."""

import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hf_syntax_mt.inference.metrics import check_bleu_tokenize
from training_helpers import scratch_dir, tiny_args

tomllib = pytest.importorskip("tomllib")
ROOT = Path(__file__).parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements(specs):
    return {re.match(r"[A-Za-z0-9_.-]+(\[\w+\])?", spec).group(0).lower(): spec for spec in specs}


def test_core_dependencies_are_what_every_user_needs():
    core = _requirements(PROJECT["dependencies"])
    assert set(core) == {"torch", "transformers", "tokenizers", "datasets", "accelerate", "evaluate", "sacrebleu",
                         "stanza", "safetensors", "numpy"}
    assert core["sacrebleu"] == "sacrebleu>=2.4"  # MeCab for ja-mecab comes with the ja extra
    # at least what transformers 5.24 itself requires, and no upper pin that refuses a patch release
    assert core["torch"] == "torch>=2.6" and core["accelerate"] == "accelerate>=1.1"
    extras = {name: set(_requirements(specs)) for name, specs in PROJECT["optional-dependencies"].items()}
    assert extras["ja"] == {"ja-ginza", "sacrebleu[ja]"} and extras["spacy"] == {"spacy"}
    assert extras["plot"] == {"matplotlib", "notojp-matplotlib"}


def test_ja_mecab_bleu_without_mecab_names_the_extra_before_training(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "MeCab" else find_spec(name, *a))
    check_bleu_tokenize("13a")
    model_args, data_args, training_args = tiny_args(scratch_dir("mecab"))
    data_args.bleu_tokenize = "ja-mecab"
    from hf_syntax_mt.training.run import train

    with pytest.raises(ImportError, match=r'ja-mecab" needs MeCab and its dictionary: pip install "hf_syntax_mt\[ja\]"'):
        train(model_args, data_args, training_args)
    assert not any(Path(training_args.output_dir).glob("checkpoint-*"))


def test_the_wheel_holds_the_files_the_package_reads(tmp_path):
    """A non-editable install has the model card template and the metric module (package data)."""
    source = tmp_path / "source"
    shutil.copytree(ROOT / "hf_syntax_mt", source / "hf_syntax_mt", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    names = zipfile.ZipFile(next((tmp_path / "dist").glob("hf_syntax_mt-*.whl"))).namelist()
    assert {"hf_syntax_mt/hub/templates/model_card.md", "hf_syntax_mt/inference/metrics/syntax_sacrebleu.py"} <= set(names)
