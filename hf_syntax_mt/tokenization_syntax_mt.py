"""`SyntaxMTTokenizer`: a fast tokenizer whose target side may have its own `tokenizers` pipeline.

MarianMT ships two SentencePiece models over one vocabulary (`source.spm`, `target.spm`, `vocab.json`):
the source text is cut by one model, the target text by the other, and both index the same embeddings.
`SyntaxMTTokenizer` is the fast equivalent: a `TokenizersBackend` (offsets, as the syntax path needs) with
an optional second `tokenizers.Tokenizer` over the same vocabulary, used for `text_target=` and by
`decode` (generated text is target text). Without one it is an ordinary
fast tokenizer. It saves `tokenizer.json` (source) and `target_tokenizer.json` (target) and loads with
`AutoTokenizer.from_pretrained(dir)` after `import hf_syntax_mt`, or with `trust_remote_code=True` without
the package (this file is saved next to the tokenizer). This file must import only transformers and
tokenizers: it is copied next to saved tokenizers for remote code.
"""

from __future__ import annotations

import copy
import os

from tokenizers import Tokenizer
from transformers.tokenization_utils_tokenizers import TokenizersBackend

TARGET_TOKENIZER_FILE = "target_tokenizer.json"


class SyntaxMTTokenizer(TokenizersBackend):
    """Fast tokenizer with an optional target-side pipeline over the same vocabulary.

    Args:
        target_tokenizer_object: a `tokenizers.Tokenizer` for target text, or
        target_tokenizer_file: its `tokenizer.json` serialization (what `save_pretrained` writes).
        Everything else as `PreTrainedTokenizerFast` (`tokenizer_object=` / `tokenizer_file=` is the source side).
    """

    vocab_files_names = {"tokenizer_file": "tokenizer.json", "target_tokenizer_file": TARGET_TOKENIZER_FILE}
    _target_tokenizer = None

    def __init__(self, *args, target_tokenizer_object=None, target_tokenizer_file=None, **kwargs):
        if target_tokenizer_object is not None:
            self._target_tokenizer = copy.deepcopy(target_tokenizer_object)
        elif target_tokenizer_file is not None and os.path.isfile(target_tokenizer_file):
            self._target_tokenizer = Tokenizer.from_file(target_tokenizer_file)
        super().__init__(*args, **kwargs)
        self._source_tokenizer = self._tokenizer
        if self._target_tokenizer is not None:
            source_vocab = self._tokenizer.get_vocab(with_added_tokens=True)
            if self._target_tokenizer.get_vocab(with_added_tokens=True) != source_vocab:
                raise ValueError("the target tokenizer must have the source tokenizer's vocabulary (token -> id)")
            self._target_tokenizer.encode_special_tokens = self.split_special_tokens

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        """Load `tokenizer.json` as saved (the base class rebuilds the backend of subclasses that define `__init__`)."""
        return kwargs

    @property
    def has_target_tokenizer(self) -> bool:
        """Whether target text has a pipeline of its own (else both sides use the source one)."""
        return self._target_tokenizer is not None

    @property
    def target_backend_tokenizer(self) -> Tokenizer:
        """The `tokenizers.Tokenizer` that encodes target text."""
        return self._target_tokenizer if self._target_tokenizer is not None else self._source_tokenizer

    def _switch_to_input_mode(self):
        self._tokenizer = self._source_tokenizer

    def _switch_to_target_mode(self):
        self._tokenizer = self.target_backend_tokenizer

    def _add_tokens(self, new_tokens, special_tokens=False) -> int:
        """Added tokens go to both sides, so the two keep one vocabulary."""
        if self._target_tokenizer is not None and self._target_tokenizer is not self._tokenizer:
            add = self._target_tokenizer.add_special_tokens if special_tokens else self._target_tokenizer.add_tokens
            add(new_tokens)
        return super()._add_tokens(new_tokens, special_tokens=special_tokens)

    def _decode(self, token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=None, **kwargs) -> str:
        """Decode with the target pipeline (generated text); `use_source_tokenizer=True` decodes with the source one."""
        use_source = kwargs.pop("use_source_tokenizer", False)
        current, self._tokenizer = self._tokenizer, self._source_tokenizer if use_source else self.target_backend_tokenizer
        try:
            return super()._decode(token_ids, skip_special_tokens, clean_up_tokenization_spaces, **kwargs)
        finally:
            self._tokenizer = current

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        file_names = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        if self._target_tokenizer is None:
            return file_names
        target_file = os.path.join(str(save_directory), (filename_prefix + "-" if filename_prefix else "") + TARGET_TOKENIZER_FILE)
        self._target_tokenizer.save(target_file)
        return file_names + (target_file,)


__all__ = ["SyntaxMTTokenizer", "TARGET_TOKENIZER_FILE"]
