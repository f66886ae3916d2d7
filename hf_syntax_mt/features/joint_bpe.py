"""A joint source/target BPE tokenizer built with the `tokenizers` library.

Pipeline of the trained `tokenizers.Tokenizer`:
- normalizer: NFKC (optional; offsets still index the raw text); with `despace_cjk=True` (what training
  sets for a model with `source_spacing="despace_cjk"`) first the whitespace next to CJK characters is
  removed, as `hf_syntax_mt.syntax.despace_cjk` does, so the tokenizer alone reads spaced and unspaced
  Japanese as the model does (offsets still index the raw text; text without CJK characters, such as
  English targets, is untouched);
- pre-tokenizer: split on whitespace, then Metaspace prepends "▁" to every word, so no subword
  crosses a space and every offset lies inside one whitespace-delimited word of the raw input
  (a lone "▁" token gets the offsets of the character it precedes). Text without spaces
  (e.g. raw Japanese) is one "word" for BPE, as in sentencepiece. With `split_punctuation=True`
  every punctuation character (Unicode category P) is then split off as a piece of its own,
  keeping a "▁" before it, so "shirt." is "▁shirt" + "." — on raw text this keeps a parser's
  punctuation words from sharing a subword with the word before them. With
  `split_cjk_scripts=True` a text is also cut where its script changes between Han, hiragana,
  katakana and punctuation (the "▁" stays with the piece after it), so on unspaced Japanese
  "私は赤い車を買った。" BPE learns pieces such as "▁私" "は" "赤" "い" "車" "を" "買" "った" "。"
  instead of merging particles into the words before them ("車を", "買った。"): on ja→en dev
  (small_parallel_enja, 300 sentences) 25% of GiNZA's words get no subword of their own against 45%
  without the cut, so the parser's trees survive the subword alignment;
- model: BPE with `<unk>` for characters never seen in training (no byte fallback);
- post-processor: `$A </s>` and `$A </s> $B </s>`;
- decoder: Metaspace ("▁" → space, leading space removed), so `decode` gives clean text with
  runs of whitespace collapsed to one space.
Special tokens: `<pad>` = 0, `</s>` = 1, `<unk>` = 2.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from ..syntax.spacing import SPACE_NEXT_TO_CJK

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ("<pad>", "</s>", "<unk>")
CJK_SCRIPT_RUN = r"▁?(?:\p{Han}+|\p{Hiragana}+|[\p{Katakana}ー]+|\p{P})"
"""One piece of `split_cjk_scripts`: a run of one CJK script, or one punctuation character."""


def train_joint_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    min_frequency: int = 2,
    model_max_length: int = 512,
    normalization: str | None = "NFKC",
    split_punctuation: bool = False,
    split_cjk_scripts: bool = False,
    despace_cjk: bool = False,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a BPE tokenizer on `texts` (pass source and target sentences together for a joint
    vocabulary) and wrap it as a `PreTrainedTokenizerFast` that appends `</s>` to every sequence.

    `vocab_size` counts the special tokens; the vocabulary is smaller when the texts allow no
    more merges of at least `min_frequency` occurrences, and larger when `vocab_size` is below the
    characters of the texts plus the special tokens (BPE keeps every character): either is logged.
    `normalization` is "NFKC", "NFC" or None.
    `split_punctuation` isolates each punctuation character before BPE, `split_cjk_scripts` cuts at
    every change of CJK script, `despace_cjk` removes the whitespace next to CJK characters (see the
    module docstring).
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens, got {vocab_size}")
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    normalizer_classes = {"NFKC": normalizers.NFKC, "NFC": normalizers.NFC}
    if normalization is not None and normalization not in normalizer_classes:
        raise ValueError(f"normalization must be one of {sorted(normalizer_classes)} or None, got {normalization!r}")

    counts = {"texts": 0, "non_empty": 0}

    def checked(stream):
        for text in stream:
            if not isinstance(text, str):
                raise ValueError(f"texts must be strings, got {type(text).__name__}")
            counts["texts"] += 1
            counts["non_empty"] += bool(text.strip())
            yield text

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    if normalization is not None:
        tokenizer.normalizer = normalizer_classes[normalization]()
    if despace_cjk:
        _add_cjk_despacing(tokenizer)
    splitters = [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    if split_punctuation:
        splitters.append(pre_tokenizers.Split(Regex(r"▁?\p{P}"), behavior="isolated"))
    if split_cjk_scripts:
        splitters.append(pre_tokenizers.Split(Regex(CJK_SCRIPT_RUN), behavior="isolated"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(splitters)
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        show_progress=show_progress,
    )
    tokenizer.train_from_iterator(checked(texts), trainer=trainer)
    if counts["non_empty"] == 0:
        raise ValueError(f"no non-empty training text (got {counts['texts']} texts)")
    _log_vocabulary_size(tokenizer, vocab_size, min_frequency)
    eos_id = tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A:0 </s>:0 $B:1 </s>:1", special_tokens=[("</s>", eos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=model_max_length,
        padding_side="right",
        truncation_side="right",
        clean_up_tokenization_spaces=False,
        model_input_names=["input_ids", "attention_mask"],
    )


def _log_vocabulary_size(tokenizer: Tokenizer, vocab_size: int, min_frequency: int) -> None:
    """Say what the vocabulary became when it is not `vocab_size`, and why."""
    size = tokenizer.get_vocab_size()
    if size == vocab_size:
        return
    characters = sum(len(token) == 1 for token in tokenizer.get_vocab())  # BPE's alphabet; merges are longer
    if size > vocab_size:
        logger.warning("vocab_size=%d is below the %d characters of the training text plus the %d special tokens: "
                       "BPE keeps every character, so the vocabulary has %d tokens and no merges", vocab_size,
                       characters, len(SPECIAL_TOKENS), size)
    else:
        logger.info("the vocabulary has %d tokens, not vocab_size=%d: the training text has no more pairs seen at "
                    "least min_frequency=%d times to merge", size, vocab_size, min_frequency)


def _is_cjk_despacing(normalizer: dict) -> bool:
    return normalizer.get("type") == "Replace" and normalizer.get("pattern") == {"Regex": SPACE_NEXT_TO_CJK}


def despaces_cjk(tokenizer) -> bool:
    """Whether the (fast) tokenizer's normalizer removes the whitespace next to CJK characters."""
    return any(_is_cjk_despacing(step) for step in _normalizer_steps(tokenizer))


def _normalizer_steps(tokenizer) -> list[dict]:
    """The steps of a (fast) tokenizer's normalizer, each as tokenizer.json holds it."""
    normalizer = getattr(tokenizer, "backend_tokenizer", tokenizer).normalizer
    normalizer = {} if normalizer is None else json.loads(normalizer.__getstate__())
    return normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]


def _add_cjk_despacing(backend: Tokenizer) -> None:
    despacing = normalizers.Replace(Regex(SPACE_NEXT_TO_CJK), "")
    if backend.normalizer is not None:
        despacing = normalizers.Sequence([despacing, backend.normalizer])
    backend.normalizer = despacing


def add_cjk_despacing(tokenizer) -> None:
    """Make a fast tokenizer remove the whitespace next to CJK characters before its own normalizer, as
    `source_spacing="despace_cjk"` does to source text (no-op when it already does). The vocabulary stays;
    offsets still index the raw text; the target pipeline of a `SyntaxMTTokenizer` is left as it is."""
    if not despaces_cjk(tokenizer):
        _add_cjk_despacing(tokenizer.backend_tokenizer)


def lowercases(tokenizer) -> bool:
    """Whether the (fast) tokenizer's normalizer lowercases the text."""
    return any(step.get("type") == "Lowercase" for step in _normalizer_steps(tokenizer))


def add_lowercasing(tokenizer) -> None:
    """Make a fast tokenizer lowercase the text after its own normalizer (no-op when it already does), for a model
    whose training text is all lowercase (the demo's corpus): its ids of that text stay, and "The Dog" reads as "the
    dog" instead of unknown capitals. Offsets still index the raw text."""
    if lowercases(tokenizer):
        return
    backend = tokenizer.backend_tokenizer
    lowercase = normalizers.Lowercase()
    backend.normalizer = lowercase if backend.normalizer is None else normalizers.Sequence([backend.normalizer,
                                                                                             lowercase])


CALL_STATE_KEYS = ("is_local", "local_files_only", "max_length", "stride", "truncation_strategy", "pad_to_multiple_of",
                   "pad_token_type_id")
"""What transformers adds to a loaded tokenizer's `init_kwargs` from where it was loaded and from the
truncation / padding of its last call; saved, it lands in tokenizer_config.json."""


def clear_call_state(tokenizer) -> None:
    """Make `tokenizer.save_pretrained` write the tokenizer itself: no truncation or padding of its last
    call in tokenizer.json, no loading leftovers (`is_local`, `max_length`, ...) in tokenizer_config.json."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        backend.no_truncation()
        backend.no_padding()
    for key in CALL_STATE_KEYS:
        tokenizer.init_kwargs.pop(key, None)
