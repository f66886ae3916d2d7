"""Parsers behind one interface: ``annotator.annotate(texts) -> list[Annotation]``.

Annotators are defined by their settings only: they pickle, compare and hash by settings (so the
``datasets`` cache fingerprint of a ``map`` using them is stable across runs and processes), and
they load their parser lazily, once per process, on the first ``annotate`` call.
``annotator.to_dict()`` / ``load_annotator(d)`` round-trip the settings (e.g. via
``config.parser``).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import importlib.util
import logging
import os
import re
from pathlib import Path
from typing import Optional, Sequence, Union

from .annotation import (
    Annotation,
    annotation_from_spacy,
    annotation_from_stanza,
    empty_annotation,
    locate_words,
    read_conllu_with_errors,
)
from .grammar import FULL_STOP, parse_grammar_sentence

logger = logging.getLogger(__name__)


class Annotator:
    """Base class. Subclasses define ``name``, ``settings()`` (the keyword arguments of their
    ``__init__``, which unpickling calls again) and ``_annotate(texts)``."""

    name = "base"

    def settings(self) -> dict:
        raise NotImplementedError

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        raise NotImplementedError

    def annotate(self, texts: Union[str, Sequence[str]]) -> list[Annotation]:
        """Parse ``texts``; empty or whitespace-only texts give an annotation without words."""
        if isinstance(texts, str):
            texts = [texts]
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise ValueError(f"text {i} is {type(t).__name__}, expected str")
        todo = [t for t in texts if t.strip()]
        parsed = self._annotate(todo) if todo else []
        if len(parsed) != len(todo):
            raise ValueError(f"{type(self).__name__} returned {len(parsed)} annotations for {len(todo)} texts")
        parsed = iter(parsed)
        return [next(parsed) if t.strip() else empty_annotation(t) for t in texts]

    def annotate_each(self, texts: Sequence[str]) -> list:
        """`annotate(texts)`, but where the parser rejects a text (ValueError) that text's entry is the error and
        the others are still annotated: the batch first, then text by text once it fails."""
        try:
            return self.annotate(list(texts))
        except ValueError:
            pass
        out = []
        for text in texts:
            try:
                out.append(self.annotate([text])[0])
            except ValueError as err:
                out.append(err)
        return out

    def to_dict(self) -> dict:
        return {"type": self.name, **self.settings()}

    def _fingerprint(self) -> tuple:
        """Settings plus anything else that changes the parses (e.g. the model version)."""
        return (type(self).__name__, tuple(sorted(self.settings().items())))

    def __getstate__(self):
        return {"settings": self.settings(), "fingerprint": self._fingerprint()}

    def __setstate__(self, state):
        self.__init__(**state["settings"])

    def __eq__(self, other):
        return type(self) is type(other) and self._fingerprint() == other._fingerprint()

    def __hash__(self):
        return hash(self._fingerprint())

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings().items())
        return f"{type(self).__name__}({args})"


def _package_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class StanzaAnnotator(Annotator):
    """Stanza pipeline (dependency + optional constituency parses).

    Models are looked up in ``model_dir`` (``$STANZA_RESOURCES_DIR`` or stanza's default resources
    directory if None). Missing ones are downloaded there on first use (``stanza.download``),
    except offline (``HF_HUB_OFFLINE=1``) or with ``download=False``, where ``OSError`` explains
    how to download them; a failed download raises ``OSError`` too. ``pretokenized``: texts are
    whitespace-separated words (one sentence per line).
    """

    name = "stanza"

    def __init__(
        self,
        lang: str,
        processors: str = "tokenize,pos,lemma,depparse",
        pretokenized: bool = False,
        use_gpu: bool = False,
        model_dir: Optional[str] = None,
        download: bool = True,
    ):
        self.lang = lang
        self.download = download
        self.processors = processors
        self.pretokenized = pretokenized
        self.use_gpu = use_gpu
        self.model_dir = None if model_dir is None else str(model_dir)
        self._nlp = None

    def settings(self) -> dict:
        return {
            "lang": self.lang,
            "processors": self.processors,
            "pretokenized": self.pretokenized,
            "use_gpu": self.use_gpu,
            "model_dir": self.model_dir,
            "download": self.download,
        }

    def _fingerprint(self) -> tuple:
        parse_settings = {k: v for k, v in self.settings().items() if k != "download"}  # same parses either way
        return (type(self).__name__, tuple(sorted(parse_settings.items())), _package_version("stanza"))

    def _download_hint(self, model_dir: str) -> str:
        return (
            f"Stanza models for language {self.lang!r} (processors {self.processors!r}) were not found in "
            f"{model_dir}. Download them once (needs internet) with:\n"
            f"    python -c \"import stanza; stanza.download('{self.lang}', processors='{self.processors}', "
            f"model_dir='{model_dir}')\""
        )

    def _load(self):
        try:
            import stanza
            from stanza.resources.common import DEFAULT_MODEL_DIR
        except ImportError:
            raise ImportError("StanzaAnnotator needs stanza: pip install stanza") from None
        model_dir = self.model_dir or os.environ.get("STANZA_RESOURCES_DIR") or DEFAULT_MODEL_DIR
        if not (Path(model_dir) / "resources.json").is_file() or not (Path(model_dir) / self.lang).is_dir():
            if not self.download or os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
                raise OSError(f"{self._download_hint(model_dir)}\n(not downloaded: offline or download=False)")
            logger.info("downloading stanza models for %r to %s", self.lang, model_dir)
            try:
                stanza.download(self.lang, processors=self.processors, model_dir=model_dir, logging_level="WARN")
            except Exception as err:  # network errors of requests / stanza
                raise OSError(f"{self._download_hint(model_dir)}\n(the download failed: {err})") from err
        try:
            return stanza.Pipeline(
                lang=self.lang,
                processors=self.processors,
                tokenize_pretokenized=self.pretokenized,
                use_gpu=self.use_gpu,
                dir=model_dir,
                download_method=None,
                logging_level="WARN",
            )
        except (FileNotFoundError, ValueError, KeyError) as err:
            raise OSError(f"{self._download_hint(model_dir)}\n(stanza said: {err})") from err

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        if self._nlp is None:
            self._nlp = self._load()
        docs = self._nlp.bulk_process(texts)
        return [annotation_from_stanza(doc, text) for doc, text in zip(docs, texts)]


SUDACHI_MAX_INPUT_BYTES = 49149  # SudachiPy: "Input is too long, it can't be more than 49149 bytes"
GINZA_PIPELINES = {"ja_ginza": 'pip install "hf_syntax_mt[ja]"', "ja_ginza_electra": "pip install ja-ginza-electra"}
"""The spaCy pipelines on PyPI that this package knows, with their install commands."""
_OFFICIAL_SPACY_PIPELINE = re.compile(r"[a-z]{2}_(core|dep|ent|sent)_(web|news|wiki|ud)_(sm|md|lg|trf)")


def spacy_install_hint(model: str) -> str:
    """How to install spaCy with the pipeline `model`."""
    return GINZA_PIPELINES.get(model, 'pip install "hf_syntax_mt[spacy]"')


def missing_spacy_pipeline_message(model: str) -> str:
    """Why the spaCy pipeline `model` cannot be loaded and what to do. A name that is neither a known
    pipeline nor one of spaCy's official ones is likely misspelt: the closest known name is suggested,
    never a package named after the typo."""
    import spacy.util

    message = f"the spaCy pipeline {model!r} is not installed"
    if model in GINZA_PIPELINES:
        return f"{message}: {GINZA_PIPELINES[model]}"
    if _OFFICIAL_SPACY_PIPELINE.fullmatch(model):
        return f"{message}: python -m spacy download {model}"
    installed = sorted(spacy.util.get_installed_models())
    close = difflib.get_close_matches(model, sorted({*installed, *GINZA_PIPELINES, "stanza", "synthetic_grammar"}), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"{model!r} is neither an installed spaCy pipeline nor a parser this package knows{hint} (parsers: "
            "stanza, synthetic_grammar (the demo's), preparsed, none, or a spaCy pipeline; installed: "
            f"{', '.join(installed) or 'none'})")


def check_parser_installed(spec: Optional[dict], role: str = "this model's parser") -> None:
    """Raise `ImportError` saying what to install when the parser `spec` (`annotator.to_dict()`, e.g.
    a config's `parser`) cannot be loaded here; does not load the parser's model. `role` starts the message."""
    if not spec:
        return
    kind = spec.get("type")
    if kind in ("spacy", "spacy_despaced", "spacy_pretokenized"):
        model = spec.get("model", "")
        if importlib.util.find_spec("spacy") is None:
            raise ImportError(f"{role} needs spaCy: {spacy_install_hint(model)}")
        import spacy.util

        if not (spacy.util.is_package(model) or importlib.util.find_spec(model) is not None):
            raise ImportError(f"{role}: {missing_spacy_pipeline_message(model)}")
    elif kind == "stanza":
        if importlib.util.find_spec("stanza") is None:
            raise ImportError(f"{role} needs stanza: pip install stanza")


class SpacyAnnotator(Annotator):
    """Any installed spaCy pipeline with a dependency parser, e.g. GiNZA ``ja_ginza`` (offline).

    ``disable`` lists pipeline components to switch off for speed (the parse only needs the
    tokenizer, ``tok2vec`` and ``parser``); ``batch_size`` is passed to ``nlp.pipe``.
    """

    name = "spacy"

    def __init__(self, model: str = "ja_ginza", disable: Sequence[str] = (), batch_size: int = 256):
        self.model = model
        self.disable = tuple(disable)
        self.batch_size = batch_size
        self._nlp = None

    def settings(self) -> dict:
        return {"model": self.model, "disable": list(self.disable), "batch_size": self.batch_size}

    @property
    def max_text_bytes(self) -> Optional[int]:
        """The longest text (UTF-8 bytes) the pipeline's tokenizer accepts, where it has a limit: SudachiPy,
        the tokenizer of Japanese spaCy pipelines (`ja_*`: GiNZA, ja_core_news_*), refuses longer input."""
        return SUDACHI_MAX_INPUT_BYTES if self.model.startswith("ja_") else None

    def _fingerprint(self) -> tuple:
        settings = dict(self.settings(), disable=self.disable)
        return (type(self).__name__, tuple(sorted(settings.items())), _package_version(self.model.replace("_", "-")))

    def _load(self):
        try:
            import spacy
        except ImportError:
            raise ImportError(f"SpacyAnnotator needs spaCy: {spacy_install_hint(self.model)}") from None
        try:
            return spacy.load(self.model, disable=list(self.disable))
        except OSError as err:
            raise ImportError(missing_spacy_pipeline_message(self.model)) from err

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        if self._nlp is None:
            self._nlp = self._load()
        return [annotation_from_spacy(doc) for doc in self._nlp.pipe(texts, batch_size=self.batch_size)]


class DespacedSpacyAnnotator(Annotator):
    """A spaCy pipeline run on the text with all whitespace removed; word spans are mapped back into the
    original text. For pre-segmented Japanese or Chinese (e.g. KyTea-spaced corpora), whose orthography has
    no spaces: GiNZA parses natural text, and on spaced text Sudachi would follow the given cuts. A parser
    word may then cover a space (KyTea ``送 っ`` = Sudachi ``送っ``). Settings as ``SpacyAnnotator``."""

    name = "spacy_despaced"

    def __init__(self, model: str = "ja_ginza", disable: Sequence[str] = (), batch_size: int = 256):
        self.inner = SpacyAnnotator(model, disable=disable, batch_size=batch_size)

    def settings(self) -> dict:
        return self.inner.settings()

    def _fingerprint(self) -> tuple:
        return (type(self).__name__,) + self.inner._fingerprint()

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        keep = [[i for i, c in enumerate(t) if not c.isspace()] for t in texts]
        parsed = self.inner.annotate(["".join(t[i] for i in idx) for t, idx in zip(texts, keep)])
        out = []
        for text, idx, a in zip(texts, keep, parsed):
            spans = [None if s is None else (idx[s[0]], idx[s[1] - 1] + 1) for s in a.spans]
            out.append(Annotation(text, a.words, spans, a.heads, a.deprels, a.sentence_ids, a.trees))
        return out


class PretokenizedSpacyAnnotator(SpacyAnnotator):
    """A spaCy pipeline that keeps the whitespace tokens of pre-tokenized text as its words (spaCy's own
    tokenizer would split e.g. the Stanford token "'t" into "'" + "t"). Settings as ``SpacyAnnotator``."""

    name = "spacy_pretokenized"

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        from spacy.tokens import Doc

        if self._nlp is None:
            self._nlp = self._load()
        docs = (Doc(self._nlp.vocab, words=t.split()) for t in texts)
        out = []
        for text, doc in zip(texts, self._nlp.pipe(docs, batch_size=self.batch_size)):
            a = annotation_from_spacy(doc)  # spans index the single-spaced text: re-locate in `text`
            spans = locate_words(text, a.words)
            out.append(Annotation(text, a.words, spans, a.heads, a.deprels, a.sentence_ids, a.trees))
        return out


class PreParsedAnnotator(Annotator):
    """Looks texts up among existing annotations (gold treebanks, parses made elsewhere).

    A text matches an annotation with the same text, ignoring leading/trailing whitespace, or
    else one whose text differs only in whitespace (a segmented treebank looked up by the
    despaced text a ``source_spacing="despace_cjk"`` model reads; ``SyntaxFeatureProcessor``
    re-indexes its spans); an unknown text raises ``ValueError``. ``made_by``: the settings
    (``Annotator.to_dict()``) of the parser that made the annotations, if one did; ``train`` records
    them in the model's ``config.parser``, so the trained model's pipeline parses new text the same way.
    ``invalid``: {text: why its parse is unusable} (what ``from_conllu`` found wrong in a sentence);
    annotating such a text raises ``ValueError`` with that message, so only its line fails.
    """

    name = "preparsed"

    def __init__(self, annotations: Sequence[Annotation], made_by: Optional[dict] = None,
                 invalid: Optional[dict[str, str]] = None):
        self.annotations = list(annotations)
        self.made_by = dict(made_by) if made_by else None
        self.invalid = dict(invalid or {})
        self._index = {a.text.strip(): a for a in self.annotations}
        self._unspaced_index = {"".join(a.text.split()): a for a in self.annotations}
        self._unspaced_invalid = {"".join(text.split()): message for text, message in self.invalid.items()}

    @classmethod
    def from_conllu(cls, source: Union[str, Path], trees: Optional[Sequence] = None) -> "PreParsedAnnotator":
        """From a CoNLL-U file or string (+ optional bracketed trees, one per sentence). A sentence that
        is not one tree (a cycle, a head outside the sentence, ...) is kept as ``invalid``: only the
        line with its text fails; one whose text cannot be read raises ``ConlluSentenceError``."""
        annotations, errors = read_conllu_with_errors(source, trees=trees)
        unreadable = [err for err in errors if err.text is None]
        if unreadable:
            raise unreadable[0]
        return cls(annotations, invalid={err.text: str(err) for err in errors})

    def settings(self) -> dict:
        return {"annotations": self.annotations, **({"invalid": self.invalid} if self.invalid else {})}

    def _fingerprint(self) -> tuple:
        return (type(self).__name__, tuple(repr(a) for a in self.annotations), *sorted(self.invalid.items()))

    def to_dict(self) -> dict:
        raise ValueError("a PreParsedAnnotator cannot be recorded in a config; it holds its parses")

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        out = []
        for t in texts:
            unspaced = "".join(t.split())
            a = self._index.get(t.strip()) or self._unspaced_index.get(unspaced)
            if a is None and unspaced in self._unspaced_invalid:
                raise ValueError(self._unspaced_invalid[unspaced])
            if a is None:
                raise ValueError(f"no pre-parsed annotation for text {t[:80]!r}")
            out.append(a)
        return out


class GrammarAnnotator(Annotator):
    """The parser of the demo's source language, the synthetic grammar of `hf_syntax_mt.features.synthetic`
    (`grammar.parse_grammar_sentence`: the most probable tree of each sentence). Words are split at whitespace
    and before a full stop, and each full stop ends a sentence. Needs nothing installed."""

    name = "synthetic_grammar"

    def settings(self) -> dict:
        return {}

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        out = []
        for text in texts:
            matches = list(re.finditer(rf"[^\s{re.escape(FULL_STOP)}]+|{re.escape(FULL_STOP)}", text))
            words, spans = [m.group() for m in matches], [m.span() for m in matches]
            ends = [i + 1 for i, word in enumerate(words) if word == FULL_STOP]
            if not ends or ends[-1] != len(words):
                ends.append(len(words))
            heads, deprels, sentence_ids, trees, start = [], [], [], [], 0
            for sentence, end in enumerate(ends):
                sentence_heads, sentence_deprels, _, tree = parse_grammar_sentence(words[start:end])
                heads += [start + head for head in sentence_heads]
                deprels += sentence_deprels
                sentence_ids += [sentence] * (end - start)
                trees.append(tree)
                start = end
            out.append(Annotation(text, words, spans, heads, deprels, sentence_ids, trees))
        return out


ANNOTATORS = {cls.name: cls for cls in (StanzaAnnotator, SpacyAnnotator, DespacedSpacyAnnotator,
                                        PretokenizedSpacyAnnotator, GrammarAnnotator)}


def load_annotator(spec: Union[None, dict, Annotator]) -> Optional[Annotator]:
    """Build an annotator from ``annotator.to_dict()`` output (e.g. ``config.parser``)."""
    if spec is None or isinstance(spec, Annotator):
        return spec
    spec = dict(spec)
    kind = spec.pop("type", None)
    if kind not in ANNOTATORS:
        raise ValueError(f"unknown parser type {kind!r}; expected one of {sorted(ANNOTATORS)}")
    return ANNOTATORS[kind](**spec)
