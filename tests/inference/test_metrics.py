import pytest

evaluate = pytest.importorskip("evaluate")
sacrebleu = pytest.importorskip("sacrebleu")

from hf_syntax_mt.features.synthetic import generate_synthetic_corpus  # noqa: E402
from hf_syntax_mt.inference.metrics import SACREBLEU_METRIC_PATH, load_metric  # noqa: E402


@pytest.fixture(scope="module")
def metric():
    return load_metric()


def corrupt(sentence, k):
    """A deterministic imperfect hypothesis: drop one word, swap two."""
    words = sentence.split()
    del words[k % len(words)]
    if len(words) > 3:
        words[1], words[2] = words[2], words[1]
    return " ".join(words)


def test_loads_offline_by_path(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert isinstance(evaluate.load(SACREBLEU_METRIC_PATH), evaluate.Metric)


def test_equals_sacrebleu_on_synthetic_sentences(metric):
    refs = [ex.target for ex in generate_synthetic_corpus(60, seed=11)]
    hyps = [corrupt(r, k) for k, r in enumerate(refs)]
    result = metric.compute(predictions=hyps, references=[[r] for r in refs])
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    chrf = sacrebleu.corpus_chrf(hyps, [refs])
    assert 0 < result["bleu"] < 100
    assert result["bleu"] == pytest.approx(bleu.score, abs=1e-9)
    assert result["chrf"] == pytest.approx(chrf.score, abs=1e-9)
    assert result["counts"] == bleu.counts and result["totals"] == bleu.totals
    assert (result["sys_len"], result["ref_len"]) == (bleu.sys_len, bleu.ref_len)
    assert result["bp"] == pytest.approx(bleu.bp)
    # plain string references are accepted too
    assert metric.compute(predictions=hyps, references=refs)["bleu"] == pytest.approx(bleu.score, abs=1e-9)


def test_multiple_references_and_options(metric):
    hyps = ["The cat sat on the mat .", "a dog ran in the park"]
    refs = [["the cat sat on a mat .", "The cat is on the mat ."], ["A dog ran in a park", "the dog ran in the park"]]
    result = metric.compute(predictions=hyps, references=refs, lowercase=True, tokenize="none", chrf_word_order=2)
    streams = [[r[0] for r in refs], [r[1] for r in refs]]
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, streams, lowercase=True, tokenize="none").score)
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, streams, word_order=2).score)


def test_ja_mecab_tokenizer(metric):
    pytest.importorskip("MeCab")
    refs = ["私は赤い車を買った。", "猫が庭で静かに寝ている。", "明日は雨が降るでしょう。"]
    hyps = ["私は青い車を買った。", "猫は庭で静かに寝ている。", "明日は雨が降るだろう。"]
    result = metric.compute(predictions=hyps, references=[[r] for r in refs], tokenize="ja-mecab")
    expected = sacrebleu.corpus_bleu(hyps, [refs], tokenize="ja-mecab")
    assert result["bleu"] == pytest.approx(expected.score, abs=1e-9)
    assert result["sys_len"] > len(hyps) * 5  # really segmented into words
    # without word segmentation each Japanese sentence is one token and BLEU collapses
    assert metric.compute(predictions=hyps, references=refs, tokenize="13a")["bleu"] < result["bleu"]
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)


def test_bad_input(metric):
    with pytest.raises(ValueError, match="tokenize"):
        metric.compute(predictions=["a b"], references=["a b"], tokenize="no-such-tokenizer")
    with pytest.raises(ValueError, match="same number of references"):
        metric.compute(predictions=["a b", "c d"], references=[["a b"], ["c d", "c e"]])
