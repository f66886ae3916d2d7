"""The project's `evaluate` metric (BLEU + chrF via sacrebleu), loadable offline by path."""

import importlib.util
from pathlib import Path

SACREBLEU_METRIC_PATH = str(Path(__file__).resolve().with_name("syntax_sacrebleu.py"))


def check_bleu_tokenize(tokenize: str) -> None:
    """Raise `ImportError` naming the extra to install when sacrebleu's BLEU tokenizer `tokenize` needs
    packages that are missing here (`ja-mecab`: MeCab and its dictionary), before anything is trained."""
    if tokenize == "ja-mecab" and not all(importlib.util.find_spec(name) for name in ("MeCab", "ipadic")):
        raise ImportError('BLEU tokenize="ja-mecab" needs MeCab and its dictionary: pip install "hf_syntax_mt[ja]"')


def load_metric(**kwargs):
    """`evaluate.load` of the local `syntax_sacrebleu.py` module (no Hub access needed).

    Keyword arguments go to `evaluate.load` (e.g. `experiment_id`, `num_process`, `process_id`);
    scoring options such as `tokenize="ja-mecab"` go to `metric.compute(...)`.
    """
    try:
        import evaluate
    except ImportError as err:
        raise ImportError("load_metric needs the `evaluate` package: pip install evaluate sacrebleu") from err
    return evaluate.load(SACREBLEU_METRIC_PATH, **kwargs)
