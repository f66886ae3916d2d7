"""A self-parsing model used as a dependency parser (SPEC §9): word-level trees from its own parse.

The model decodes its parse module's scores into one subword tree per line
(`SyntaxMTForConditionalGeneration.predict_heads`); `word_heads_from_subword_heads` maps it to words.
The words are the ones given (e.g. a treebank's gold tokenization, for UAS), or else the tokenizer's
pre-tokenized units (whitespace-separated words; for unspaced Japanese, runs of one script).
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import torch

from ..features.syntax_features import plain_encoding
from ..syntax import Annotation, align_tokens_to_words, locate_words, word_heads_from_subword_heads
from ..syntax.spacing import apply_source_spacing

logger = logging.getLogger(__name__)


def _tokenizer_words(text: str, offsets, word_ids) -> tuple[list[str], list[tuple[int, int]]]:
    """The tokenizer's pre-tokenized units of `text` that kept a token: forms and character spans."""
    spans: dict[int, list[int]] = {}
    for (start, end), word in zip(offsets, word_ids):
        if word is None or end <= start:
            continue
        span = spans.setdefault(word, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    words, out = [], []
    for start, end in (spans[w] for w in sorted(spans)):
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            words.append(text[start:end])
            out.append((start, end))
    return words, out


def parse_with_model(
    model,
    tokenizer,
    texts: Sequence[str],
    words: Optional[Sequence[Sequence[str]]] = None,
    spans: Optional[Sequence[Sequence[tuple[int, int]]]] = None,
    batch_size: int = 32,
    max_source_length: Optional[int] = None,
) -> list[Annotation]:
    """One word-level `Annotation` (unlabelled, one tree) per text, parsed by the model itself.

    `texts` are spaced as the model reads them (`config.source_spacing` is applied). `words[i]`, when
    given, are the words of `texts[i]` in order (e.g. gold tokens), found in the text left to right;
    `spans[i]` gives their character spans instead, for words whose form is not written as such in the
    text (a parser's word over a space of a segmented corpus: "送っ" in "送 っ"); they index `texts[i]`, which
    the model's `source_spacing` must then leave unchanged. A word left without a
    subword of its own, or truncated at `max_source_length` tokens, is attached to the preceding word."""
    config = model.config
    if not getattr(config, "self_parsing", False):
        raise ValueError(
            f"{config.preset or 'this model'} has no parser of its own (config.self_parsing=False); "
            "train with self_parsing=True, or parse with an external parser (--parser)"
        )
    if words is not None and len(words) != len(texts):
        raise ValueError(f"{len(words)} word lists for {len(texts)} texts")
    if spans is not None and (words is None or [len(s) for s in spans] != [len(w) for w in words]):
        raise ValueError("spans go with words: one span per word of every text")
    prepared = [apply_source_spacing(text, config.source_spacing) for text in texts]
    if spans is not None and prepared != list(texts):
        raise ValueError(f"spans index the text as given, but source_spacing={config.source_spacing!r} changes it: "
                         "give words without spans")
    for number, text in enumerate(prepared, 1):
        if not text.strip():
            raise ValueError(f"text {number} is empty: there is nothing to parse")
    max_length = max_source_length or config.max_position_embeddings
    out = []
    for begin in range(0, len(prepared), batch_size):
        batch = prepared[begin: begin + batch_size]
        with plain_encoding(tokenizer):  # the model parses, not the tokenizer's parser
            encoded = tokenizer(batch, return_offsets_mapping=True, return_special_tokens_mask=True, truncation=True,
                                max_length=max_length, padding=True, return_tensors="pt")
        with torch.no_grad():
            heads = model.predict_heads(encoded["input_ids"].to(model.device),
                                        encoded["attention_mask"].to(model.device))["source_heads"].cpu()
        for row, text in enumerate(batch):
            length = int(encoded["attention_mask"][row].sum())
            offsets = encoded["offset_mapping"][row, :length].tolist()
            special = encoded["special_tokens_mask"][row, :length].tolist()
            if words is None:
                row_words, row_spans = _tokenizer_words(text, offsets, encoded.word_ids(row)[:length])
                if row_spans and row_spans[-1][1] < len(text.rstrip()):
                    logger.warning("text %d is longer than %d tokens: its words past the cut are not parsed",
                                   begin + row + 1, max_length)
            else:
                row_words = list(words[begin + row])
                row_spans = list(spans[begin + row]) if spans is not None else locate_words(text, row_words)
            if not row_words:
                raise ValueError(f"text {begin + row + 1} has no words")
            flat = Annotation(text, row_words, row_spans, [0] * len(row_words))  # words only: the heads come next
            token_words = align_tokens_to_words(flat, offsets, special)
            token_heads = heads[row, :length].tolist()
            word_heads = word_heads_from_subword_heads(token_heads, token_words, len(row_words))
            out.append(Annotation(text, row_words, row_spans, word_heads))
    return out
