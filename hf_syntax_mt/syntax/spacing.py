"""How a model's source text is spaced: natural CJK text vs corpora segmented with spaces.

Japanese and Chinese are written without spaces, but MT corpora often ship them segmented
("私 は 赤い 車 を 買っ た 。", KyTea-style). A model whose tokenizer learned the segmented text
reads natural input as unseen pieces (ja→en dev: 41.59 BLEU on the segmented input, 2.13 with the
spaces removed). `config.source_spacing` records what the model expects, and
`SyntaxFeatureProcessor` applies it to every source text — training, `Dataset.map`, the pipeline and
the CLI alike:

- ``"as_is"``: the text is used as given (languages written with spaces).
- ``"despace_cjk"``: every run of whitespace next to a CJK character (Han, kana, CJK punctuation,
  full-width forms; not Hangul, which is written with spaces) is removed before parsing and
  tokenizing, so natural and segmented input give the same tokens: "私 は New York に 行っ た" →
  "私はNew Yorkに行った". Spaces between Latin words stay.
- ``"segmented"``: the model was trained on space-segmented CJK text and needs input segmented the
  same way; the pipeline cuts input lines that look unsegmented at its parser's words, or warns
  about them when the model has no parser.

`detect_source_spacing` chooses ``"despace_cjk"`` for training text that contains CJK characters,
else ``"as_is"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

SOURCE_SPACINGS = ("as_is", "despace_cjk", "segmented")

# CJK radicals .. Kanbun/strokes, CJK punctuation (not U+3000, the ideographic space), kana,
# extension A, unified ideographs, compatibility ideographs, vertical/compatibility forms,
# full-/half-width forms, supplementary ideographs.
_CJK = (
    "\u2e80-\u2fdf\u3001-\u303f\u3040-\u30ff\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f"
)
# what Python's `\s` matches, spelled out so that the `tokenizers` (Oniguruma) regex matches the same
_WHITESPACE = "\t\n\x0b\x0c\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_CJK_CHAR = re.compile(f"[{_CJK}]")
SPACE_NEXT_TO_CJK = f"(?<=[{_CJK}])[{_WHITESPACE}]+|[{_WHITESPACE}]+(?=[{_CJK}])"
"""The regex of the whitespace `despace_cjk` removes; a saved tokenizer's normalizer removes it too
(`hf_syntax_mt.features.joint_bpe.add_cjk_despacing`), so the same pattern serves Python and `tokenizers`."""
_SPACE_NEXT_TO_CJK = re.compile(SPACE_NEXT_TO_CJK)
_SPACE_BETWEEN_CJK = re.compile(f"[{_CJK}][{_WHITESPACE}]+[{_CJK}]")


def despace_cjk(text: str) -> str:
    """`text` without the whitespace next to CJK characters (idempotent)."""
    return _SPACE_NEXT_TO_CJK.sub("", text)


def despace_cjk_positions(text: str) -> tuple[str, list[int]]:
    """`despace_cjk(text)` and, for every character of `text`, its index in the result (the index
    of the next kept character for a removed one), so character spans can be carried over."""
    new_index, kept, removed = [], 0, iter(m.span() for m in _SPACE_NEXT_TO_CJK.finditer(text))
    span = next(removed, None)
    for i in range(len(text)):
        while span is not None and i >= span[1]:
            span = next(removed, None)
        new_index.append(kept)
        kept += not (span is not None and span[0] <= i < span[1])
    new_index.append(kept)
    return despace_cjk(text), new_index


def has_cjk(text: str) -> bool:
    return _CJK_CHAR.search(text) is not None


def looks_segmented(text: str) -> bool:
    """Whether `text` has whitespace between two CJK characters (a segmented corpus line)."""
    return _SPACE_BETWEEN_CJK.search(text) is not None


def apply_source_spacing(text: str, spacing: str) -> str:
    """The source text as a model with `config.source_spacing == spacing` reads it."""
    if spacing not in SOURCE_SPACINGS:
        raise ValueError(f"source_spacing={spacing!r}; expected one of {SOURCE_SPACINGS}")
    return despace_cjk(text) if spacing == "despace_cjk" else text


def unsegmented_lines(texts: Iterable[str]) -> list[int]:
    """0-based indices of the texts that hold two or more CJK characters and no space between
    CJK characters: what a ``"segmented"`` model did not see in training."""
    return [i for i, t in enumerate(texts)
            if len(_CJK_CHAR.findall(t)) > 1 and not looks_segmented(t)]


def detect_source_spacing(texts: Iterable[str], min_cjk_fraction: float = 0.1) -> str:
    """``"despace_cjk"`` when at least `min_cjk_fraction` of the non-empty texts contain CJK
    characters (segmented or not: the model then reads both), else ``"as_is"``."""
    lines = cjk = 0
    for text in texts:
        if text.strip():
            lines += 1
            cjk += has_cjk(text)
    return "despace_cjk" if lines and cjk / lines >= min_cjk_fraction else "as_is"


__all__ = [
    "SOURCE_SPACINGS",
    "SPACE_NEXT_TO_CJK",
    "apply_source_spacing",
    "despace_cjk",
    "despace_cjk_positions",
    "detect_source_spacing",
    "has_cjk",
    "looks_segmented",
    "unsegmented_lines",
]
