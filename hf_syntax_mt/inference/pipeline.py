"""The `syntax-translation` pipeline: raw sentences in, `[{"translation_text": ...}]` out.

    translate = pipeline("syntax-translation", model="path/to/model")   # after `import hf_syntax_mt`
    translate(["A sentence .", "Another one ."], num_beams=4, batch_size=16)

transformers v5 removed the `translation` task, so the pipeline is registered under its own task
name. Steps per batch: parse the sources with the parser recorded in `config.parser` — only when
`config.needs_parser_at_inference` (dependency relations, localized attention; DBSA-only and plain
models need none) — or with an `annotator` / pre-parsed `annotations` passed in, build the features
with `SyntaxFeatureProcessor` (the same path as training), `generate`, decode. With `num_return_sequences=k`
> 1 each sentence gets a list of k outputs, best first (its n-best list); with `return_scores=True` each
output also has its `log_probability` under the model and its `score` (see `sequence_scores`).

Inputs are strings or UTF-8 `bytes`, read as NMT toolkits read them (`syntax.lines.normalize_line`: zero-width
spaces, byte-order marks, form feeds and the like become spaces, other control characters are removed). Bad lines
are reported and skipped, never fatal for the batch: an empty (or whitespace-only) line (also one that is empty once
normalized, such as a lone zero-width space), one that is not valid text (bytes that are not UTF-8, a string with
lone surrogates, an item of the list that is neither, such as `42`), a line longer than the model allows
(`config.max_position_embeddings` tokens), or a line the parser cannot handle (e.g. a text missing from a
`PreParsedAnnotator`), gives `{"translation_text": "", "error": "..."}` and one logged warning with its line number
(1-based, as editors number lines: the first input is line 1). A line with subwords unknown to the model (the
tokenizer's `unk_token`: characters it was not trained on, such as another script, emoji, or capitals for a
lowercase model) is translated, and its output says how many in `"warning"` (logged too); so does a line in which
the parser finds more than one sentence (the models are trained one sentence a line). A parser that is not installed
raises `ImportError` saying what to install when the pipeline is built; a model directory without a tokenizer raises
`ValueError`; a damaged (truncated, overwritten) weights file raises `DamagedModelFileError` naming it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Optional, Sequence, Union

import torch
from huggingface_hub import HfApi
from huggingface_hub import constants as hub_constants
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
from transformers import AutoModelForSeq2SeqLM, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY

from ..features.syntax_features import SyntaxFeatureProcessor, plain_encoding
from ..model_files import check_model_files
from ..modeling_syntax_mt import DamagedModelFileError, check_weights_files
from ..relation_attention import SourceRelationIds
from ..syntax import Annotation, Annotator, load_annotator, locate_words, normalize_line, unsegmented_lines
from ..syntax.annotators import check_parser_installed
from .length_cap import check_length_cap, with_length_cap

logger = logging.getLogger(__name__)

TASK = "syntax-translation"
HUB_LOOKUP_TIMEOUT = 10
"""Seconds `model_location` waits for the Hub to say whether a name that is no folder is a model there."""


def model_location(name: str, what: str = "model") -> str:
    """`name` when it is a directory (a model's files checked: `check_model_files`, so a folder without
    config.json or with a damaged weights file says so); a name that
    could be a Hub repo id (`repo` or `owner/repo`) when online and the Hub knows it (one lookup of at most
    `HUB_LOOKUP_TIMEOUT` seconds), after logging that no such directory exists; else
    `FileNotFoundError("no model directory ...")`, naming the missing folder first and then why the Hub did not
    help (no such repo, or no answer), before transformers' Hub lookup (which says "Repo id must be in the form..."
    or retries for half a minute). `owner/repo` where `owner` is a local directory is a mistyped local path."""
    path = Path(name).expanduser()
    if path.is_dir():
        if what == "model":
            check_model_files(path, "syntax_mt")
        return str(path)
    could_be_hub_id = re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) and not name.startswith(".")
    if could_be_hub_id and "/" in name and path.parent.is_dir():
        raise FileNotFoundError(f"no {what} directory {name} (there is a local folder {path.parent}, so it is no "
                                "Hub repo id)")
    if path.exists() or not could_be_hub_id or hub_constants.HF_HUB_OFFLINE:
        raise FileNotFoundError(f"no {what} directory {name}")
    logger.warning("no %s directory %s; trying it as a Hugging Face Hub repo id", what, name)
    try:
        HfApi().model_info(name, timeout=HUB_LOOKUP_TIMEOUT)
    except RepositoryNotFoundError:
        raise FileNotFoundError(f"no {what} directory {name}, nor a model {name} on the Hugging Face Hub (a private "
                                "one needs `hf auth login`)") from None
    except HfHubHTTPError:
        pass  # the Hub answered (e.g. a gated model): from_pretrained says what it needs
    except Exception as err:  # no answer (name resolution, connection, timeout: the HTTP client's errors)
        raise FileNotFoundError(f"no {what} directory {name}, and the Hugging Face Hub could not be reached to look "
                                f"it up there ({type(err).__name__}: {err}); offline, give a local folder") from None
    return name


def resolve_device(name: Optional[str] = None) -> torch.device:
    """The torch device named `name` ("cpu", "cuda", "cuda:1", "mps"; None: the first CUDA GPU if there is one,
    else the CPU, as fairseq does), checked: `ValueError("NAME: why")` for a name that is no device or a device
    this machine lacks."""
    if name is None:
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(f"{name}: not a device (cpu, cuda, cuda:1, mps)") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{name}: expected cpu, cuda[:N] or mps")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{name}: no CUDA GPU here (torch.cuda.is_available() is False); use the CPU (\"cpu\")")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"{name}: this machine has {torch.cuda.device_count()} CUDA GPU(s), numbered from 0")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}: no Apple GPU (MPS) here; use the CPU (\"cpu\")")
    return device


def _is_positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def decode_line(line) -> tuple[str, Optional[str]]:
    """`(text, None)` for a line that is valid Unicode text, normalized (`normalize_line`), `("", why)` for one
    that is not: bytes that are not UTF-8, a string with lone surrogates (as `errors="surrogateescape"` decoding
    leaves), or an item that is neither `str` nor `bytes` (e.g. `42` in a list of sentences)."""
    if isinstance(line, bytes):
        try:
            return normalize_line(line.decode("utf-8")), None
        except UnicodeDecodeError as err:
            return "", f"not UTF-8 text (invalid byte {line[err.start]:#04x} at byte {err.start + 1} of the line)"
    if not isinstance(line, str):
        return "", f"not text but {type(line).__name__} ({_short_repr(line)}): give a string or UTF-8 bytes"
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as err:
        return "", f"not valid Unicode text (lone surrogate {line[err.start]!r} at character {err.start + 1})"
    return normalize_line(line), None


def _short_repr(value, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


class SyntaxTranslationPipeline(Pipeline):
    """Translate raw sentences with a `SyntaxMTForConditionalGeneration` model (see module doc).

    Args (at construction or per call):
        annotator: an `Annotator` (or its dict) that replaces `config.parser`, e.g.
            `PreParsedAnnotator.from_conllu(...)` for models trained on pre-parsed data.
        annotations (per call): one pre-parsed `Annotation` per input sentence.
        batch_size: sentences per `generate` call (default 8).
        max_length_a, max_length_b: cap each translation at floor(a * source tokens + b) subwords
            (`length_cap.SourceLengthCapLogitsProcessor`, as fairseq's --max-len-a/b); a missing one is 0.
        num_return_sequences: k > 1 gives each sentence a list of k translations, best first (the
            n-best list of the beam, so k <= num_beams; or k samples with do_sample=True).
        return_scores: add to each output `log_probability` (log P(translation | source)) and `score`
            (that over length ** length_penalty: what beam search ranks by), from `sequence_scores`.
        return_tensors, return_text, clean_up_tokenization_spaces: as in transformers v4's translation
            pipeline: `return_tensors=True` gives `translation_token_ids` (generate's ids, up to the first
            </s>) instead of the text, unless `return_text=True` asks for both. `src_lang` / `tgt_lang` (which
            choose a multilingual model's languages) and truncation are refused, saying why.
        num_beams, max_length, max_new_tokens, ...: passed to `generate`.
    Settings given at construction are the defaults of every call and are checked with the call's.
    """

    _load_tokenizer = None  # soft: a missing tokenizer reaches __init__, which explains it
    _pipeline_calls_generate = True

    def __init__(self, *args, annotator: Union[None, dict, Annotator] = None, **kwargs):
        super().__init__(*args, **kwargs)
        if self._batch_size is not None and not _is_positive_int(self._batch_size):
            raise ValueError(f"batch_size={self._batch_size!r}: the number of sentences per batch must be an "
                             "integer >= 1")
        # generation settings given here (num_beams=4, ...) are defaults of every call, checked as a call's are
        _, self._forward_params, self._postprocess_params = self._sanitize_parameters(
            **self._generate_kwargs, **self._forward_params, **self._postprocess_params)
        self._construction_generation_keys, self._generate_kwargs = set(self._generate_kwargs), {}
        if self.tokenizer is None:
            raise ValueError(
                f"no tokenizer could be loaded for the model {self.model.name_or_path!r}: the syntax-translation "
                "pipeline needs it; save it next to the model (tokenizer.save_pretrained(model_dir)) or pass tokenizer=..."
            )
        config = self.model.config
        self.annotator = load_annotator(annotator)
        # a self-parsing model parses for itself unless the user forces an external parser
        forced = self.annotator is not None and getattr(config, "self_parsing", False)
        self.needs_parser = bool(getattr(config, "needs_parser_at_inference", False)) or forced
        if self.annotator is None and self.needs_parser:
            check_parser_installed(getattr(config, "parser", None))
            self.annotator = load_annotator(getattr(config, "parser", None))
        self.processor = SyntaxFeatureProcessor(
            self.tokenizer,
            self.annotator,
            needs_source_heads=getattr(config, "dependency_relations", None) is not None and self.needs_parser,
            needs_source_distances=bool(getattr(config, "needs_source_distances", False)),
            needs_target_heads=False,
            distance_source=getattr(config, "distance_source", "auto"),
            distance_binarize=getattr(config, "sla_binarize", "none"),
            source_spacing=getattr(config, "source_spacing", "as_is"),
        )

    def _sanitize_parameters(self, annotator=None, return_scores=None, return_tensors=None, return_text=None,
                             clean_up_tokenization_spaces=None, src_lang=None, tgt_lang=None, truncation=None,
                             **generate_kwargs):
        if annotator is not None:
            raise ValueError("pass `annotator` when building the pipeline: pipeline(..., annotator=...)")
        for name, value in (("return_scores", return_scores), ("return_tensors", return_tensors),
                            ("return_text", return_text), ("clean_up_tokenization_spaces", clean_up_tokenization_spaces)):
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"{name}={value!r}: expected True or False")
        for name, value in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
            if value is not None:
                raise ValueError(f"{name}={value!r}: a syntax-translation model translates the one language pair it "
                                 "was trained on, so it takes no src_lang / tgt_lang (they choose the languages of "
                                 "multilingual models such as mBART or NLLB); leave them out")
        if truncation not in (None, False, "do_not_truncate"):
            raise ValueError(f"truncation={truncation!r}: the pipeline does not truncate: a line longer than the model "
                             "allows is reported and left untranslated, since a cut line's tokens would no longer "
                             "match its parse; split long lines before translating them")
        postprocess_params = {name: value for name, value in (("return_tensors", return_tensors),
                              ("return_text", return_text), ("clean_up_tokenization_spaces", clean_up_tokenization_spaces))
                              if value is not None}
        if return_text is False and not return_tensors:
            raise ValueError("return_text=False without return_tensors=True leaves nothing to return")
        for name in ("return_dict_in_generate", "output_scores", "output_logits"):
            if generate_kwargs.get(name):
                raise ValueError(f"{name}=True: the pipeline returns translations, not generate's outputs; pass "
                                 "return_scores=True for each translation's log-probability and score, or call "
                                 "model.generate for the rest")
        num_beams = generate_kwargs.get("num_beams")
        if num_beams is not None and not _is_positive_int(num_beams):
            raise ValueError(f"num_beams={num_beams!r}: the beam size must be an integer >= 1 (1 = greedy)")
        for name in ("max_new_tokens", "max_length"):
            value = generate_kwargs.get(name)
            if value is not None and not _is_positive_int(value):
                raise ValueError(f"{name}={value!r}: the length limit must be an integer >= 1")
        if generate_kwargs.get("max_length_a") is not None or generate_kwargs.get("max_length_b") is not None:
            check_length_cap(generate_kwargs.get("max_length_a"), generate_kwargs.get("max_length_b"))
        self._check_translations_per_sentence(generate_kwargs)
        forward_params = dict(generate_kwargs)
        if return_scores is not None:
            forward_params["return_scores"] = return_scores
        return {}, forward_params, postprocess_params

    def _translations_per_sentence(self, generate_kwargs: dict) -> int:
        """k of `num_return_sequences` (the call's, else the model's generation config's)."""
        k = generate_kwargs.get("num_return_sequences")
        if k is None:
            k = getattr(self.model.generation_config, "num_return_sequences", None) or 1
        return k

    def _check_translations_per_sentence(self, generate_kwargs: dict):
        """`num_return_sequences` k >= 1, and at most the beam size unless sampling: the beam keeps no more."""
        k = self._translations_per_sentence(generate_kwargs)
        if not _is_positive_int(k):
            raise ValueError(f"num_return_sequences={k!r}: the number of translations per sentence must be an "
                             "integer >= 1")
        beams = generate_kwargs.get("num_beams") or getattr(self.model.generation_config, "num_beams", None) or 1
        sampling = generate_kwargs.get("do_sample", getattr(self.model.generation_config, "do_sample", False))
        if k > beams and not sampling:
            raise ValueError(f"num_return_sequences={k} but num_beams={beams}: beam search returns at most "
                             "num_beams translations per sentence; raise num_beams to at least "
                             f"{k} (or sample them with do_sample=True)")

    # One "input" of the base class is a batch: {"texts", "annotations", "offset"}.
    def preprocess(self, batch):
        annotations, offset = batch["annotations"], batch["offset"]
        texts, errors = [], {}
        for i, line in enumerate(batch["texts"]):
            text, error = decode_line(line)
            texts.append(text)
            if error is not None:
                errors[i] = error
            elif not text.strip():
                errors[i] = "empty input line"
        texts = self.processor.prepare_sources(texts)
        cut = {}  # line -> its parse, re-spanned on the cut text (not parsed a second time)
        if self.processor.source_spacing == "segmented":
            if annotations is None and self.annotator is not None:
                texts, cut = self._cut_at_parser_words(texts, errors)
            read = texts if annotations is None else [a.text for a in annotations]  # the processor reads these
            for i in unsegmented_lines(read):
                if i not in errors:
                    logger.warning(
                        "line %d has no spaces between its CJK characters, but this model was trained on "
                        "space-segmented text (config.source_spacing='segmented'): segment it as the training data "
                        "was, build the pipeline with annotator=... (a parser of the source language) to cut it at "
                        "the parser's words, or use a model trained on natural text (source_spacing='despace_cjk')",
                        offset + i + 1)
        keep = [i for i in range(len(texts)) if i not in errors]
        limit = self.model.config.max_position_embeddings
        # verbose=False: the line's own message below, not transformers' "Token indices sequence length ..."
        with plain_encoding(self.tokenizer):
            encoded = self.tokenizer([texts[i] for i in keep], verbose=False)["input_ids"] if keep else []
        notes = {}
        for i, ids in zip(keep, encoded):
            if len(ids) > limit:
                errors[i] = f"{len(ids)} tokens, more than the model allows (max_position_embeddings={limit})"
            elif (note := self._unknown_note(ids)) is not None:
                notes[i] = note
        keep = [i for i in keep if i not in errors]
        if self.needs_parser and annotations is None:
            if self.annotator is None:
                raise ValueError(
                    f"{self.model.config.preset or 'this model'} needs parsed sources but its config records no "
                    "parser (it was trained on pre-parsed data): pass pipeline(..., annotator=PreParsedAnnotator(...)) "
                    "or annotations=[...] per call"
                )
            rest = [i for i in keep if i not in cut]
            parsed = self._parse([texts[i] for i in rest], rest, errors) + [(i, cut[i]) for i in keep if i in cut]
            parsed.sort(key=lambda pair: pair[0])
        else:
            parsed = None if annotations is None else [(i, annotations[i]) for i in keep]
        if parsed is not None:
            for i, annotation in parsed:
                if annotation.num_sentences > 1:
                    notes[i] = "; ".join(filter(None, [notes.get(i), self._sentences_note(annotation)]))
            keep, parsed = [i for i, _ in parsed], [a for _, a in parsed]
        model_inputs = {}
        if keep:
            model_inputs = dict(self.processor([texts[i] for i in keep], annotations=parsed, return_tensors="pt"))
            model_inputs = SourceRelationIds(self.model.config)(model_inputs)  # made here, on the host
        for i, message in sorted(errors.items()):
            logger.warning("line %d: %s; its translation is left empty", offset + i + 1, message)
        notes = {i: note for i, note in notes.items() if i in keep}
        for i, note in sorted(notes.items()):
            logger.warning("line %d: %s (translated anyway)", offset + i + 1, note)
        return {"model_inputs": model_inputs, "keep": keep, "size": len(texts), "errors": errors, "notes": notes}

    def _unknown_note(self, ids: list[int]) -> Optional[str]:
        """What to say of a line some of whose subwords `ids` are the tokenizer's unknown token, else None."""
        unknown = self.tokenizer.unk_token_id
        if unknown is None:
            return None
        special = set(self.tokenizer.all_special_ids) - {unknown}
        subwords = [token for token in ids if token not in special]
        count = sum(token == unknown for token in subwords)
        if not count:
            return None
        return (f"{count} of its {len(subwords)} subwords are unknown to this model ({self.tokenizer.unk_token}: "
                "characters it was not trained on)" + (", so its translation says little" if 2 * count > len(subwords)
                                                       else ""))

    @staticmethod
    def _sentences_note(annotation: Annotation) -> str:
        """What to say of a line in which the parser found several sentences."""
        return (f"the parser found {annotation.num_sentences} sentences in this line, but the model was trained on "
                "one sentence a line and may leave some out: give each sentence its own line")

    def _cut_at_parser_words(self, texts, errors):
        """A model trained on space-segmented CJK text (`source_spacing="segmented"`) reads an unsegmented
        line cut at the words of its parser. The parser's cuts are not the corpus's (small_parallel_enja
        ja→en dev, `transformer_dep_labeled_rel+transformer_sla` seed 1: 41.90 BLEU on the corpus's
        segmentation, 33.56 cut at GiNZA's words, 2.32 uncut). Returns the texts and {line: its parse
        on the cut text}, so that a model that needs the parse does not parse the line again."""
        lines = [i for i in unsegmented_lines(texts) if i not in errors]
        if not lines:
            return texts, {}
        texts, cut = list(texts), {}
        for i, annotation in self._parse([texts[i] for i in lines], lines, {}):  # a failing line fails again later
            words = [word for word in annotation.words if word.strip()]
            texts[i] = " ".join(words)
            if len(words) == len(annotation.words):  # else the line is parsed again, cut
                cut[i] = dataclasses.replace(annotation, text=texts[i], spans=locate_words(texts[i], words))
        logger.info("cut %d unsegmented line(s) at the parser's words for this space-segmented model", len(lines))
        return texts, cut

    def _parse(self, texts, positions, errors):
        """Parse a batch; if the parser rejects it (ValueError), parse line by line and record the
        failing lines in `errors` so that the rest of the batch is still translated."""
        out = []
        for position, annotation in zip(positions, self.annotator.annotate_each(texts)):
            if isinstance(annotation, ValueError):
                errors[position] = f"could not parse: {annotation}"
            else:
                out.append((position, annotation))
        return out

    def _forward(self, batch, return_scores: bool = False, **generate_kwargs):
        generated = scores = None
        eos = generate_kwargs.get("eos_token_id", self._model_eos_token_id())
        if batch["model_inputs"]:
            inputs = {k: v for k, v in batch["model_inputs"].items() if k != "labels"}
            generate_kwargs = self._with_length_cap(generate_kwargs, inputs["attention_mask"])
            if generate_kwargs.get("max_new_tokens") is not None and "max_length" not in generate_kwargs:
                # the same limit: the decoder starts from one token; without generate's warning that the
                # model's generation config sets max_length too
                generate_kwargs = dict(generate_kwargs)
                generate_kwargs["max_length"] = generate_kwargs.pop("max_new_tokens") + 1
            generated = self.model.generate(**inputs, **self._prepare_generate_kwargs(generate_kwargs))
            if return_scores:
                penalty = generate_kwargs.get("length_penalty", self.model.generation_config.length_penalty)
                scores = sequence_scores(self.model, inputs, generated, eos, 1.0 if penalty is None else penalty)
        return {**batch, "generated": generated, "scores": scores, "eos": eos_ids(eos),
                "per_sentence": self._translations_per_sentence(generate_kwargs)}

    def _with_length_cap(self, generate_kwargs: dict, attention_mask) -> dict:
        """`max_length_a` / `max_length_b` replaced by a `SourceLengthCapLogitsProcessor` for this batch."""
        a, b = generate_kwargs.get("max_length_a"), generate_kwargs.get("max_length_b")
        generate_kwargs = {k: v for k, v in generate_kwargs.items() if k not in ("max_length_a", "max_length_b")}
        if a is None and b is None:
            return generate_kwargs
        eos = self._model_eos_token_id()
        return with_length_cap(generate_kwargs, attention_mask, a, b, eos_token_id=eos[0] if isinstance(eos, list) else eos)

    def _model_eos_token_id(self):
        """The model's </s> (an id or a list of ids): its generation config's, else its config's."""
        eos = self.model.generation_config.eos_token_id
        return self.model.config.eos_token_id if eos is None else eos

    def postprocess(self, batch, return_tensors: bool = False, return_text: Optional[bool] = None,
                    clean_up_tokenization_spaces: Optional[bool] = None):
        """One `{"translation_text"}` per sentence (or `translation_token_ids`, see the class doc), or with
        k = `num_return_sequences` > 1 a list of k of them, best first (as `generate` returns them: k rows per
        sentence, sentence after sentence)."""
        k = batch["per_sentence"]
        text_wanted = not return_tensors if return_text is None else return_text
        empty = {**({"translation_text": ""} if text_wanted else {}),
                 **({"translation_token_ids": []} if return_tensors else {})}
        out = [[dict(empty) for _ in range(k)] for _ in range(batch["size"])]
        if batch["generated"] is not None:
            decoded = self.tokenizer.batch_decode(batch["generated"], skip_special_tokens=True,
                                                  clean_up_tokenization_spaces=clean_up_tokenization_spaces)
            if len(decoded) != k * len(batch["keep"]):
                raise RuntimeError(f"generate returned {len(decoded)} sequences for {len(batch['keep'])} sentences; "
                                   f"expected {k} per sentence (num_return_sequences)")
            scores = None if batch["scores"] is None else [values.tolist() for values in batch["scores"]]
            ids = batch["generated"].tolist() if return_tensors else None
            for row, text in enumerate(decoded):
                record = out[batch["keep"][row // k]][row % k]
                if text_wanted:
                    record["translation_text"] = text.strip()
                if return_tensors:
                    row_ids = ids[row]
                    end = next((t + 1 for t in range(1, len(row_ids)) if row_ids[t] in batch["eos"]), len(row_ids))
                    record["translation_token_ids"] = row_ids[:end]  # the decoder start kept, the padding dropped
                if scores is not None:
                    record["log_probability"], record["score"] = scores[0][row], scores[1][row]
        for i, message in batch["errors"].items():
            for record in out[i]:
                record["error"] = message
        for i, note in batch["notes"].items():
            for record in out[i]:
                record["warning"] = note
        return [alternatives[0] if k == 1 else alternatives for alternatives in out]

    def __call__(self, inputs: Union[str, bytes, Sequence[Union[str, bytes]]], *, batch_size: Optional[int] = None,
                 annotations: Optional[Sequence[Annotation]] = None, **kwargs) -> list[dict]:
        """Translate one sentence or a list; returns one `{"translation_text": ...}` per sentence, or a list of
        `num_return_sequences` of them, best first, where that is > 1."""
        if isinstance(inputs, (str, bytes)):
            texts = [inputs]
        elif isinstance(inputs, Iterable) and not isinstance(inputs, dict):
            texts = list(inputs)
        else:
            raise ValueError(f"the input is {type(inputs).__name__}: give a sentence (str or UTF-8 bytes) or a list "
                             "of them")
        if annotations is not None and len(annotations) != len(texts):
            raise ValueError(f"{len(texts)} sentences but {len(annotations)} annotations")
        batch_size = next((size for size in (batch_size, self._batch_size) if size is not None), 8)
        if not _is_positive_int(batch_size):
            raise ValueError(f"batch_size={batch_size!r}: the number of sentences per batch must be an integer >= 1")
        defaults = {**self._forward_params, **self._postprocess_params}
        if "generation_config" in kwargs:  # it replaces the construction's generation settings, as in transformers
            defaults = {k: v for k, v in defaults.items() if k not in self._construction_generation_keys}
        _, forward_params, postprocess_params = self._sanitize_parameters(**{**defaults, **kwargs})  # checked together
        outputs = []
        for start in range(0, len(texts), batch_size):
            batch = {
                "texts": texts[start : start + batch_size],
                "annotations": None if annotations is None else annotations[start : start + batch_size],
                "offset": start,
            }
            outputs.extend(self.run_single(batch, {}, forward_params, postprocess_params))
        return outputs


def eos_ids(eos_token_id) -> list[int]:
    """The </s> ids of a generation setting that is an id, a list of ids or None."""
    return eos_token_id if isinstance(eos_token_id, list) else [] if eos_token_id is None else [eos_token_id]


def sequence_scores(model, inputs: dict, sequences, eos_token_id, length_penalty: float, rows_per_pass: int = 16):
    """(log P, score) of each row of `generate`'s `sequences` (k rows per sentence of `inputs`), by one
    forced-decoding pass: log P = sum over the generated tokens y_1..y_n (after the decoder start, up to
    and with the first </s>) of log softmax(logits)[y_t], and score = log P / n ** length_penalty, the
    score beam search ranks finished hypotheses by (its `sequences_scores`)."""
    k = len(sequences) // len(inputs["input_ids"])
    rows = {name: value.repeat_interleave(k, dim=0) for name, value in inputs.items()}
    targets = sequences[:, 1:]
    is_eos = torch.isin(targets, torch.tensor(eos_ids(eos_token_id), dtype=targets.dtype, device=targets.device))
    counted = (is_eos.long().cumsum(dim=1) - is_eos.long()) == 0  # not after the first </s>
    log_probability = []
    with torch.no_grad():
        for start in range(0, len(sequences), rows_per_pass):
            part = slice(start, start + rows_per_pass)
            logits = model(**{name: value[part] for name, value in rows.items()},
                           decoder_input_ids=sequences[part, :-1]).logits
            token = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[part, :, None]).squeeze(-1)
            log_probability.append(token.masked_fill(~counted[part], 0.0).sum(dim=1))
    log_probability = torch.cat(log_probability)
    return log_probability, log_probability / counted.sum(dim=1) ** length_penalty


def register_pipeline() -> None:
    """Register the `syntax-translation` task (done when `hf_syntax_mt.inference.pipeline` is imported)."""
    PIPELINE_REGISTRY.register_pipeline(
        TASK,
        pipeline_class=SyntaxTranslationPipeline,
        pt_model=AutoModelForSeq2SeqLM,  # SyntaxMTPreTrainedModel.from_pretrained names a damaged weights file
        type="text",
    )


register_pipeline()

__all__ = ["DamagedModelFileError", "SyntaxTranslationPipeline", "check_weights_files", "decode_line", "model_location",
           "register_pipeline", "TASK"]
