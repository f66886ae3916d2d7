"""`SyntaxMTParsingTokenizer`: the tokenizer of a model trained with a parser, which attaches the syntax features
itself, so that code written for any 🤗 seq2seq model (transformers' `examples/pytorch/translation/run_translation.py`)
trains and evaluates a syntax preset unchanged:

    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    tokenizer(sources, max_length=128, truncation=True)  # input_ids, attention_mask + source_heads / source_distances
    tokenizer(text_target=targets, max_length=128, truncation=True)  # plain: input_ids only
    DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)  # pads the features with their ignore value

A source text is parsed with the parser the model was trained with (`syntax_features["parser"]`, the model
config's `parser`, recorded in `tokenizer_config.json`), through `SyntaxFeatureProcessor`: the same features the
package's own training and pipeline compute (SPEC §7). The parser is loaded in each process at its first sentence,
never pickled (`syntax_features.tokenizer_feature_processor` keeps it outside the tokenizer), so `Dataset.map(..., num_proc=N)` works, and the tokenizer hashes by its settings, so a second
identical `map` is served from the `datasets` cache. Without `syntax_features` (a model that reads no parse) it is a
`SyntaxMTTokenizer`. The folder of a saved tokenizer holds, for `trust_remote_code`, a `parsing_tokenizer.py` that
imports this class (`REMOTE_CODE`), or without the hf_syntax_mt package gives the plain tokenizer, saying so (the
model too loads without it).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from transformers import BatchEncoding

from hf_syntax_mt.features.syntax_features import (
    SYNTAX_FEATURES,
    SyntaxFeatureProcessor,
    check_same_syntax_features,
    pad_syntax_feature,
    tokenizer_feature_processor,
)
from hf_syntax_mt.syntax.annotators import check_parser_installed
from hf_syntax_mt.tokenization_syntax_mt import SyntaxMTTokenizer

PADDING_ARGUMENTS = ("padding", "pad_to_multiple_of", "padding_side", "return_tensors")
REMOTE_CODE = '''"""This model's tokenizer: `SyntaxMTParsingTokenizer` of the hf_syntax_mt package (it parses each source sentence
with the model's parser and returns the syntax features beside `input_ids`). Without the package this is the plain
tokenizer of the same vocabulary (`input_ids`, `attention_mask`), as the model loads without it: its syntax inputs
are then built by hand (the model card says how)."""

try:
    from hf_syntax_mt.features.parsing_tokenizer import SyntaxMTParsingTokenizer
except ImportError:  # (transformers does not require an import made inside try)
    import logging

    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    class SyntaxMTParsingTokenizer(TokenizersBackend):
        """The tokenizer without the parse: hf_syntax_mt is not installed."""

        @classmethod
        def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
            return kwargs  # tokenizer.json as saved (the base class rebuilds the backend of a subclass)

        def __init__(self, *args, syntax_features=None, **kwargs):
            super().__init__(*args, **kwargs)
            logging.getLogger(__name__).warning(
                "hf_syntax_mt is not installed, so this tokenizer does not parse: it gives input_ids and "
                "attention_mask, and the model's syntax inputs (source_heads%s) are to be built by hand as its model "
                "card says; with the package (its source, or a Space exported by `hf-syntax-mt app --export`) the "
                "tokenizer parses with the model's parser", ", source_distances" if (syntax_features or {}).get(
                    "needs_source_distances") else "")

__all__ = ["SyntaxMTParsingTokenizer"]
'''
"""What a saved tokenizer's folder holds as `parsing_tokenizer.py` for `trust_remote_code`: the installed package's
class, so that the class a remote-code user gets is the package's own (pickled by reference to `map` workers and
hashed alike by `datasets`; a copied class is pickled by value)."""


class SyntaxMTParsingTokenizer(SyntaxMTTokenizer):
    """A `SyntaxMTTokenizer` that parses its source texts and returns their syntax features beside `input_ids`.

    Args:
        syntax_features: what to attach, as `SyntaxFeatureProcessor`'s settings: `parser` (an annotator's
            `to_dict()`), `needs_source_heads`, `needs_source_distances`, `distance_source`, `distance_binarize`,
            `source_spacing` (`from_model_config` fills them from a model's config).
        Everything else as `SyntaxMTTokenizer`.
    """

    def __init__(self, *args, syntax_features: Optional[dict] = None, **kwargs):
        super().__init__(*args, syntax_features=syntax_features, **kwargs)
        self.syntax_features = dict(syntax_features or {})
        self._parsing = bool(self.syntax_features.get("needs_source_heads")
                             or self.syntax_features.get("needs_source_distances"))

    @staticmethod
    def settings_from_config(config) -> dict:
        """`syntax_features` for a model's config: its parser and the source features its training reads."""
        return {"parser": getattr(config, "parser", None), "needs_source_heads": config.needs_source_heads,
                "needs_source_distances": config.needs_source_distances,
                "distance_source": getattr(config, "distance_source", "auto"),
                "distance_binarize": getattr(config, "sla_binarize", "none"),
                "source_spacing": getattr(config, "source_spacing", None)}

    @classmethod
    def from_tokenizer(cls, tokenizer, config) -> "SyntaxMTParsingTokenizer":
        """The parsing tokenizer of `tokenizer` (a fast tokenizer: its files, vocabulary and special tokens) for a
        model with `config`."""
        with tempfile.TemporaryDirectory(prefix="hf_syntax_mt_tokenizer_") as folder:
            tokenizer.save_pretrained(folder)
            return cls.from_pretrained(folder, syntax_features=cls.settings_from_config(config))

    @property
    def parses_sources(self) -> bool:
        """Whether calling it on source texts parses them and attaches syntax features."""
        return self._parsing

    @contextlib.contextmanager
    def without_parsing(self):
        """Encode as a plain `SyntaxMTTokenizer` inside the block (what `SyntaxFeatureProcessor` uses, which parses
        itself)."""
        parsing, self._parsing = self._parsing, False
        try:
            yield self
        finally:
            self._parsing = parsing

    def _feature_processor(self, max_length: Optional[int]) -> SyntaxFeatureProcessor:
        """This tokenizer's `SyntaxFeatureProcessor` (made at its first sentence, kept by `features_of`)."""
        settings = self.syntax_features
        if not settings.get("parser"):
            raise ValueError("this tokenizer's model reads the source's parse but records no parser (it was trained "
                             "on pre-parsed data): attach the features with hf_syntax_mt.add_syntax_features and your "
                             "parses")
        check_parser_installed(settings["parser"], "this tokenizer parses its source texts as the model was trained "
                                                   "(syntax_features in tokenizer_config.json) and")
        processor = tokenizer_feature_processor(self, settings)
        processor.max_source_length = max_length
        return processor

    def __call__(self, text=None, text_pair=None, text_target=None, *args, **kwargs):
        """As `SyntaxMTTokenizer`; source `text` (a string or a list of strings) also gets its syntax features.
        Pairs, pre-split words and target text are encoded plainly."""
        if (text is None or not self._parsing or text_pair is not None or args or kwargs.get("is_split_into_words")
                or kwargs.get("return_overflowing_tokens")):
            return super().__call__(text, text_pair, text_target, *args, **kwargs)
        padding = {key: kwargs.pop(key) for key in PADDING_ARGUMENTS if key in kwargs}
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        with self.without_parsing():
            encoded = dict(super().__call__(texts, **kwargs))
            labels = super().__call__(text_target=text_target, **kwargs)["input_ids"] if text_target is not None \
                else None
        truncation, max_length = kwargs.get("truncation"), kwargs.get("max_length")
        limit = (max_length or self.model_max_length) if truncation not in (None, False, "do_not_truncate") else None
        processor = self._feature_processor(limit)
        features = processor(texts, return_tensors=None)
        if features["input_ids"] != encoded["input_ids"]:
            raise ValueError("the syntax features were computed on other tokens than the text's (the source spacing "
                             f"{processor.source_spacing!r} changed the text): pass the text as the model reads it")
        encoded.update({name: features[name] for name in SYNTAX_FEATURES if name in features})
        if labels is not None:
            encoded["labels"] = labels
        if single:
            encoded = {key: value[0] for key, value in encoded.items()}
        if not any(padding.get(key) for key in ("padding", "return_tensors")):
            return BatchEncoding(encoded)
        return self.pad(encoded, **{key: value for key, value in padding.items() if key != "padding"},
                        padding=padding.get("padding", False), max_length=max_length)

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        """Also make the copy of this file that `save_pretrained` put beside the tokenizer for `trust_remote_code`
        (`REMOTE_CODE`) import the installed package's class instead of defining its own."""
        file_names = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        remote = Path(save_directory) / Path(__file__).name
        if remote.is_file():
            remote.write_text(REMOTE_CODE, encoding="utf-8")
        return file_names

    def pad(self, encoded_inputs, *args, **kwargs) -> BatchEncoding:
        """`SyntaxMTTokenizer.pad`, and the syntax features padded to the same length on the same side with their
        ignore values (`source_heads` -100, `source_distances` LARGE_DISTANCE; heads shifted by left padding); a list
        of examples must all carry the same features (`ValueError` naming the feature and the example)."""
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
            check_same_syntax_features(encoded_inputs)
            encoded_inputs = {key: [row[key] for row in encoded_inputs] for key in encoded_inputs[0]}
        names = [name for name in SYNTAX_FEATURES if name in encoded_inputs]
        if not names:
            return super().pad(encoded_inputs, *args, **kwargs)
        return_tensors = kwargs.pop("return_tensors", None)
        rows = {name: encoded_inputs[name] for name in names}
        padded = super().pad({key: value for key, value in encoded_inputs.items() if key not in names}, *args,
                             **kwargs)
        single = bool(padded["input_ids"]) and not isinstance(padded["input_ids"][0], (list, tuple))
        length = len(padded["input_ids"]) if single else len(padded["input_ids"][0])
        side = kwargs.get("padding_side") or self.padding_side
        data = dict(padded)
        for name, values in rows.items():
            feature_rows = [values] if single else values
            padded_rows = [pad_syntax_feature(name, list(row), length, side) for row in feature_rows]
            data[name] = padded_rows[0] if single else padded_rows
        return BatchEncoding(data, tensor_type=return_tensors)


__all__ = ["SyntaxMTParsingTokenizer"]
