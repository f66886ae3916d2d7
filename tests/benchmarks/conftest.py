"""A tiny recipe for the benchmark entries' smoke tests: a synthetic corpus whose gold CoNLL-U trees stand in for
the parser, the model tests' tiny model."""

import json

import pytest

from hf_syntax_mt.features.synthetic import write_synthetic_corpus
from model_helpers import TINY


@pytest.fixture(scope="module")
def tiny_recipe(tmp_path_factory):
    """(recipe path, its folder): 40 training pairs, 6 dev pairs, a blind source of 4 lines."""
    root = tmp_path_factory.mktemp("recipe")
    data = root / "data"
    write_synthetic_corpus(data, n_train=40, n_dev=6, n_test=4, seed=3, max_words=10)
    recipe = {
        "name": "synthetic.src-tgt", "source_lang": "src", "target_lang": "tgt",
        "data": {"train": [str(data / "train.src"), str(data / "train.tgt")],
                 "dev": [str(data / "dev.src"), str(data / "dev.tgt")]},
        "test_source": str(data / "test.src"), "source_parser": {"conllu_suffix": ".conllu"},
        "distance_source": "dependency", "vocab_size": 120, "max_source_length": 32, "max_target_length": 12,
        "model": {k: v for k, v in TINY.items() if k != "vocab_size"}, "training": {"max_tokens_per_batch": 96},
    }
    path = root / "recipe.json"
    path.write_text(json.dumps(recipe))
    return path, root
