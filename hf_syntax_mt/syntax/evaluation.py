"""Unlabeled attachment score of predicted parses against gold, robust to tokenization differences."""

from __future__ import annotations

from typing import Sequence

from .annotation import Annotation


def attachment_scores(gold: Sequence[Annotation], predicted: Sequence[Annotation]) -> dict:
    """UAS of ``predicted`` against ``gold`` annotations of the same texts (CoNLL 2018 style).

    Words are aligned by identical character spans (whitespace ignored, so both sides must
    annotate the same text). A gold word's attachment is correct when it is aligned, and its
    aligned predicted word is a root exactly when the gold word is, or has as head the word
    aligned to the gold head. Returns ``precision = correct / predicted words``,
    ``recall = correct / gold words``, ``uas`` = their F1 (equal to both when tokenizations agree)
    and ``aligned`` = aligned gold words / gold words.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold annotations but {len(predicted)} predicted")
    correct = n_gold = n_pred = aligned = 0
    for g, p in zip(gold, predicted):
        if "".join(g.text.split()) != "".join(p.text.split()):
            raise ValueError(f"gold and predicted texts differ: {g.text[:40]!r} vs {p.text[:40]!r}")
        g_key, p_key = _span_keys(g), _span_keys(p)
        p_index = {key: i for i, key in enumerate(p_key) if key is not None}
        n_gold += len(g.words)
        n_pred += len(p.words)
        for i, key in enumerate(g_key):
            j = p_index.get(key)
            if key is None or j is None:
                continue
            aligned += 1
            if g.heads[i] == i:
                correct += p.heads[j] == j
            else:
                head_key = g_key[g.heads[i]]
                correct += p.heads[j] != j and head_key is not None and p_key[p.heads[j]] == head_key
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    uas = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "uas": uas,
        "precision": precision,
        "recall": recall,
        "aligned": aligned / n_gold if n_gold else 0.0,
        "gold_words": n_gold,
        "predicted_words": n_pred,
    }


def _span_keys(annotation: Annotation) -> list:
    """Spans re-expressed as offsets into the text with all whitespace removed."""
    text = annotation.text
    squeezed = [0] * (len(text) + 1)
    for c, ch in enumerate(text):
        squeezed[c + 1] = squeezed[c] + (not ch.isspace())
    return [None if s is None else (squeezed[s[0]], squeezed[s[1]]) for s in annotation.spans]
