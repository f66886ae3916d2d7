"""Alignment of parser words to tokenizer subwords, and the per-token syntax features.

Rule: a subword belongs to the word holding its first non-whitespace character (the fast
tokenizer's ``offset_mapping`` gives the characters). Disagreements between the parser and the
tokenizer are resolved as follows, so features are never misaligned:

* a whitespace-only piece (e.g. a lone "▁") joins the word of the next non-special token
  (or the previous one at the end of the text);
* a piece whose first character is not inside any parser word (the parser dropped it, or
  normalised the text) joins the word covering the closest preceding character
  (or the following word at the start of the text);
* a piece spanning several parser words (the parser split finer than the tokenizer, or
  merged differently) belongs to the first of them; the other words get no token and their
  dependents are re-attached to the nearest ancestor that has one (``reroute_heads``);
* special tokens (``special_tokens_mask == 1``) belong to no word.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .annotation import Annotation
from .distance import fill_subword_distances
from .trees import project_heads_to_subwords


def align_tokens_to_words(
    annotation: Annotation,
    offsets: Sequence[tuple[int, int]],
    special_tokens_mask: Optional[Sequence[int]] = None,
) -> list[Optional[int]]:
    """Word index (into ``annotation.words``) of every token, None for special tokens."""
    text = annotation.text
    n_tokens = len(offsets)
    special = list(special_tokens_mask) if special_tokens_mask is not None else [0] * n_tokens
    if not annotation.words:
        return [None] * n_tokens
    char_word = [-1] * len(text)
    for w, span in enumerate(annotation.spans):
        if span is None:
            continue
        for c in range(max(span[0], 0), min(span[1], len(text))):
            if char_word[c] < 0:
                char_word[c] = w
    # word of the closest covered character at or before / at or after each position
    before, last = [-1] * len(text), -1
    for c in range(len(text)):
        last = char_word[c] if char_word[c] >= 0 else last
        before[c] = last
    after, nxt = [-1] * len(text), -1
    for c in range(len(text) - 1, -1, -1):
        nxt = char_word[c] if char_word[c] >= 0 else nxt
        after[c] = nxt
    fallback = next((w for w, sp in enumerate(annotation.spans) if sp is not None), 0)

    word_ids: list[Optional[int]] = [None] * n_tokens
    pending = []  # whitespace-only tokens waiting for the next word
    for t, (start, end) in enumerate(offsets):
        if special[t]:
            continue
        first = next((c for c in range(start, min(end, len(text))) if not text[c].isspace()), None)
        if first is None:
            pending.append(t)
            continue
        w = char_word[first]
        if w < 0:
            w = before[first] if before[first] >= 0 else after[first]
        if w < 0:
            w = fallback
        word_ids[t] = w
        for p in pending:
            word_ids[p] = w
        pending = []
    if pending:
        previous = next((word_ids[t] for t in range(pending[0] - 1, -1, -1) if word_ids[t] is not None), fallback)
        for p in pending:
            word_ids[p] = previous
    return word_ids


def token_features(
    annotation: Annotation,
    offsets: Sequence[tuple[int, int]],
    special_tokens_mask: Optional[Sequence[int]] = None,
    *,
    heads: bool = True,
    distances: bool = False,
    distance_source: str = "auto",
    distance_binarize: str = "none",
) -> dict:
    """Per-token features of one tokenized text: ``{"heads": [...], "distances": [...]}``.

    ``heads``: subword-level heads (``project_heads_to_subwords``; special tokens -100).
    ``distances``: the gap after each token (``fill_subword_distances``; word-level distances
    from ``annotation.word_distances(distance_source, distance_binarize)``).
    Truncation: words without tokens are skipped by the projection (a kept word whose root was cut
    off becomes the root of its own subtree, so a truncated sentence can become a forest), and the
    last kept token is followed by a special token or the end, hence a large gap.
    """
    word_ids = align_tokens_to_words(annotation, offsets, special_tokens_mask)
    out = {}
    if heads:
        out["heads"] = project_heads_to_subwords(annotation.heads, word_ids)
    if distances:
        out["distances"] = fill_subword_distances(
            annotation.word_distances(distance_source, distance_binarize) if annotation.words else [],
            word_ids,
            annotation.sentence_ids,
        )
    return out
