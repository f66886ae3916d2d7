"""From raw text to model-ready syntax features: processor, ``datasets`` map function, collator.

There is exactly one path from text to features, ``SyntaxFeatureProcessor``:
parse (annotator) -> tokenize with offsets -> align words to subwords -> per-token features
(``hf_syntax_mt.syntax.token_features``). ``add_syntax_features`` (for ``Dataset.map``), the
pipeline and the CLI all call it; ``DataCollatorForSyntaxSeq2Seq`` pads its output.

Features (SPEC §7): ``source_heads`` (B, n) and ``target_heads`` (B, m, aligned with ``labels``)
hold the subword-level head index in the same row (root -> itself, -100 outside the tree);
``source_distances`` (B, n) the syntactic distance of the gap after each token
(``LARGE_DISTANCE`` next to special tokens and for padding).
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch
from transformers import BatchEncoding, DataCollatorForSeq2Seq, PretrainedConfig

from ..relation_attention import SourceRelationIds
from ..syntax import (
    IGNORE_INDEX,
    LARGE_DISTANCE,
    SOURCE_SPACINGS,
    Annotation,
    Annotator,
    apply_source_spacing,
    despace_cjk_positions,
    load_annotator,
    token_features,
)
from ..syntax.distance import BINARIZATIONS
from .joint_bpe import despaces_cjk

SYNTAX_FEATURES = {"source_heads": IGNORE_INDEX, "source_distances": LARGE_DISTANCE, "target_heads": IGNORE_INDEX}
"""Syntax feature names and their padding values."""


class SyntaxFeatureProcessor:
    """Turns raw texts (or pre-parsed ``Annotation``s) into ``input_ids`` + syntax features.

    Args:
        tokenizer: a fast tokenizer (offsets are needed for the alignment).
        annotator: parses source texts (any ``Annotator``, or its ``to_dict()``); not needed when
            annotations are passed in or no source feature is needed.
        needs_source_heads / needs_source_distances / needs_target_heads: which features to build.
        target_annotator: parses target texts (needed for ``target_heads``).
        max_source_length / max_target_length: truncation; features are cut with the tokens.
        distance_source: "auto" (constituency trees when the parser gives them, else derived from
            the dependency tree), "constituency", "dependency" or "flat" (no syntax: every word gap
            alike, see ``Annotation.word_distances``).
        distance_binarize: "none" (Algorithm 1 on the n-ary trees), "right" or "left": binarise the
            constituency trees (or the constituents derived from the dependency tree) as NLTK's
            ``chomsky_normal_form(factor=...)`` first, as seed 003's code does ("right"); a model's
            ``config.sla_binarize``.
        source_spacing: "as_is", "despace_cjk" (whitespace next to CJK characters is removed from
            every source text before it is parsed and tokenized) or "segmented" (the text is used
            as given); see ``hf_syntax_mt.syntax.spacing``. Default: "despace_cjk" when the tokenizer
            itself removes that whitespace (one saved with such a model), else "as_is";
            ``from_config`` takes the model's ``config.source_spacing``.
    """

    def __init__(
        self,
        tokenizer,
        annotator: Union[None, dict, Annotator] = None,
        *,
        needs_source_heads: bool = True,
        needs_source_distances: bool = False,
        needs_target_heads: bool = False,
        target_annotator: Union[None, dict, Annotator] = None,
        max_source_length: Optional[int] = None,
        max_target_length: Optional[int] = None,
        distance_source: str = "auto",
        distance_binarize: str = "none",
        source_spacing: Optional[str] = None,
    ):
        if distance_binarize not in BINARIZATIONS:
            raise ValueError(f"distance_binarize={distance_binarize!r}; expected one of {BINARIZATIONS}")
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("SyntaxFeatureProcessor needs a fast tokenizer (offset mappings align parser words)")
        if source_spacing is None:
            source_spacing = "despace_cjk" if despaces_cjk(tokenizer) else "as_is"
        if source_spacing not in SOURCE_SPACINGS:
            raise ValueError(f"source_spacing={source_spacing!r}; expected one of {SOURCE_SPACINGS}")
        self.tokenizer = tokenizer
        self.annotator = load_annotator(annotator)
        self.target_annotator = load_annotator(target_annotator)
        self.needs_source_heads = needs_source_heads
        self.needs_source_distances = needs_source_distances
        self.needs_target_heads = needs_target_heads
        self.max_source_length = max_source_length
        self.max_target_length = max_target_length
        self.distance_source = distance_source
        self.distance_binarize = distance_binarize
        self.source_spacing = source_spacing

    @classmethod
    def from_config(cls, config, tokenizer, annotator=None, **kwargs) -> "SyntaxFeatureProcessor":
        """Features as ``config.needs_*`` asks; the annotator defaults to ``config.parser``, the
        distance source to ``config.distance_source`` binarised as ``config.sla_binarize`` ("none" for a
        config without it), the spacing to ``config.source_spacing``."""
        return cls(
            tokenizer,
            annotator if annotator is not None else getattr(config, "parser", None),
            needs_source_heads=config.needs_source_heads,
            needs_source_distances=config.needs_source_distances,
            needs_target_heads=config.needs_target_heads,
            **{"distance_source": getattr(config, "distance_source", "auto"),
               "distance_binarize": getattr(config, "sla_binarize", "none"),
               "source_spacing": getattr(config, "source_spacing", None), **kwargs},
        )

    def prepare_sources(self, texts: Sequence[str]) -> list[str]:
        """The source texts as the model reads them (``source_spacing`` applied)."""
        return [apply_source_spacing(t, self.source_spacing) for t in texts]

    def prepare_source_annotation(self, annotation: Annotation) -> Annotation:
        """A source annotation carried over to its text as the model reads it (spans re-indexed)."""
        if self.source_spacing != "despace_cjk":
            return annotation
        text, index = despace_cjk_positions(annotation.text)
        if text == annotation.text:
            return annotation
        spans = [None if span is None else (index[span[0]], index[span[1] - 1] + 1) for span in annotation.spans]
        return Annotation(text, annotation.words, spans, annotation.heads, annotation.deprels,
                          annotation.sentence_ids, annotation.trees)

    @property
    def needs_source_parse(self) -> bool:
        return self.needs_source_heads or self.needs_source_distances

    def _annotations(self, texts, annotations, annotator, side: str) -> list[Annotation]:
        if annotations is not None:
            if texts is not None:
                if len(texts) != len(annotations):
                    raise ValueError(f"{len(texts)} {side} texts but {len(annotations)} {side} annotations")
                for i, (text, annotation) in enumerate(zip(texts, annotations)):
                    if "".join(text.split()) != "".join(annotation.text.split()):
                        raise ValueError(
                            f"{side} annotation {i} is of the text {annotation.text!r}, not of {text!r} "
                            "(annotations must be in the order of the texts)"
                        )
            return list(annotations)
        if annotator is None:
            raise ValueError(f"{side} syntax features are needed but no {side} annotator (parser) was given")
        return annotator.annotate(texts)

    def _encode(self, texts, annotations, *, target: bool, heads: bool, distances: bool, max_length) -> dict:
        """Tokenize one side and attach its features (lists, unpadded)."""
        # no token_type_ids: generate() would treat them as a decoder-length input
        kwargs = dict(truncation=max_length is not None, max_length=max_length, return_token_type_ids=False)
        if annotations is not None:
            texts = [a.text for a in annotations]
        with plain_encoding(self.tokenizer):  # this processor parses: the tokenizer must not
            if not (heads or distances):
                return dict(self.tokenizer(text_target=texts, **kwargs) if target else self.tokenizer(texts, **kwargs))
            kwargs.update(return_offsets_mapping=True, return_special_tokens_mask=True)
            enc = self.tokenizer(text_target=texts, **kwargs) if target else self.tokenizer(texts, **kwargs)
        offsets, special = enc.pop("offset_mapping"), enc.pop("special_tokens_mask")
        out = dict(enc)
        prefix = "target" if target else "source"
        feats = [
            token_features(a, o, s, heads=heads, distances=distances, distance_source=self.distance_source,
                           distance_binarize=self.distance_binarize)
            for a, o, s in zip(annotations, offsets, special)
        ]
        if heads:
            out[f"{prefix}_heads"] = [f["heads"] for f in feats]
        if distances:
            out[f"{prefix}_distances"] = [f["distances"] for f in feats]
        return out

    def __call__(
        self,
        text: Union[None, str, Sequence[str]] = None,
        text_target: Union[None, str, Sequence[str]] = None,
        *,
        annotations: Optional[Sequence[Annotation]] = None,
        target_annotations: Optional[Sequence[Annotation]] = None,
        return_tensors: Optional[str] = "pt",
    ) -> BatchEncoding:
        """Encode a batch. ``return_tensors="pt"`` pads (as ``DataCollatorForSyntaxSeq2Seq``) and
        returns tensors; ``None`` returns unpadded lists (what ``Dataset.map`` stores)."""
        if isinstance(text, str):
            text = [text]
        if isinstance(text_target, str):
            text_target = [text_target]
        if text is None and annotations is None:
            raise ValueError("give source texts or source annotations")
        if text is not None:
            text = self.prepare_sources(text)
        if annotations is not None or self.needs_source_parse:
            annotations = [self.prepare_source_annotation(a)
                           for a in self._annotations(text, annotations, self.annotator, "source")]
        out = self._encode(
            text,
            annotations,
            target=False,
            heads=self.needs_source_heads,
            distances=self.needs_source_distances,
            max_length=self.max_source_length,
        )
        if text_target is not None or target_annotations is not None:
            if self.needs_target_heads:
                target_annotations = self._annotations(text_target, target_annotations, self.target_annotator, "target")
            target = self._encode(
                text_target,
                target_annotations,
                target=True,
                heads=self.needs_target_heads,
                distances=False,
                max_length=self.max_target_length,
            )
            out["labels"] = target.pop("input_ids")
            if "target_heads" in target:
                out["target_heads"] = target["target_heads"]
        if return_tensors is None:
            return BatchEncoding(out)
        if return_tensors != "pt":
            raise ValueError(f"return_tensors must be 'pt' or None, not {return_tensors!r}")
        rows = [{k: v[i] for k, v in out.items()} for i in range(len(out["input_ids"]))]
        batch = DataCollatorForSyntaxSeq2Seq(self.tokenizer)(rows)
        return BatchEncoding({k: v for k, v in batch.items() if v is not None})


def plain_encoding(tokenizer):
    """A context in which `tokenizer` encodes text without parsing it: a tokenizer that parses by itself
    (`features.parsing_tokenizer`) otherwise attaches syntax features to every source it encodes. For what needs
    the tokens alone: lengths, offsets, the features made here, a self-parsing model's own parse."""
    return getattr(tokenizer, "without_parsing", contextlib.nullcontext)()


_TOKENIZER_PROCESSORS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def tokenizer_feature_processor(tokenizer, settings: dict) -> SyntaxFeatureProcessor:
    """The `SyntaxFeatureProcessor` of a tokenizer that parses by itself (`features.parsing_tokenizer`), made from its
    `syntax_features` settings at the first call and kept here, outside the tokenizer: its parser is then neither
    pickled with the tokenizer (each process loads its own) nor part of the `datasets` fingerprint of a `map`
    function that uses the tokenizer (which hashes the tokenizer's attributes, and the class of a remote-code
    tokenizer by value)."""
    processor = _TOKENIZER_PROCESSORS.get(tokenizer)
    if processor is None:
        processor = _TOKENIZER_PROCESSORS[tokenizer] = SyntaxFeatureProcessor(
            tokenizer, settings["parser"], needs_source_heads=bool(settings.get("needs_source_heads")),
            needs_source_distances=bool(settings.get("needs_source_distances")),
            distance_source=settings.get("distance_source", "auto"),
            distance_binarize=settings.get("distance_binarize", "none"), source_spacing=settings.get("source_spacing"))
    return processor


def _column(batch: dict, name: str) -> list:
    """A batch column; ``"translation.ja"`` reads the ``ja`` field of a ``translation`` column."""
    if name in batch:
        return list(batch[name])
    outer, _, inner = name.partition(".")
    if inner and outer in batch:
        return [row[inner] for row in batch[outer]]
    raise KeyError(f"column {name!r} not in the batch (columns: {sorted(batch)})")


def add_syntax_features(
    batch: dict,
    tokenizer,
    annotator: Union[None, dict, Annotator] = None,
    source_column: str = "source",
    target_column: Optional[str] = "target",
    max_source_length: Optional[int] = None,
    max_target_length: Optional[int] = None,
    source_heads: bool = True,
    source_distances: bool = False,
    target_heads: bool = False,
    target_annotator: Union[None, dict, Annotator] = None,
    distance_source: str = "auto",
    distance_binarize: str = "none",
    source_spacing: Optional[str] = None,
) -> dict:
    """``Dataset.map(add_syntax_features, batched=True, fn_kwargs={...})``: tokenize the source
    (and the target as ``labels``), parse, align and attach the requested syntax features.

    Annotators pickle and hash by their settings and load their parser lazily in each process,
    so ``num_proc > 1`` works and an identical second run is served from the ``datasets`` cache
    without parsing. Set ``target_column=None`` for source-only data. Pass a model's ``config.sla_binarize``
    as ``distance_binarize``, so that training reads the distances its pipeline will compute.
    """
    processor = SyntaxFeatureProcessor(
        tokenizer,
        annotator,
        needs_source_heads=source_heads,
        needs_source_distances=source_distances,
        needs_target_heads=target_heads,
        target_annotator=target_annotator,
        max_source_length=max_source_length,
        max_target_length=max_target_length,
        distance_source=distance_source,
        distance_binarize=distance_binarize,
        source_spacing=source_spacing,
    )
    sources = _column(batch, source_column)
    targets = _column(batch, target_column) if target_column is not None else None
    return dict(processor(sources, targets, return_tensors=None))


@dataclass
class DataCollatorForSyntaxSeq2Seq(DataCollatorForSeq2Seq):
    """``DataCollatorForSeq2Seq`` that also pads the syntax features, on the same side as the
    tokens: ``source_heads`` and ``target_heads`` with -100, ``source_distances`` with
    ``LARGE_DISTANCE``. Source features are padded to ``input_ids``, ``target_heads`` to ``labels``;
    with left padding the head indices are shifted by the padding length.

    With ``model_config``, the config of a model whose encoder reads tree relations, the batch also gets the
    encoder's relation ids made here, on the host (``source_relation_ids``, ``relation_attention.SourceRelationIds``):
    a training step on a GPU then launches none of the walk up the trees.
    """

    model_config: Optional[PretrainedConfig] = None

    def __post_init__(self):
        self._relation_ids = SourceRelationIds(self.model_config) if self.model_config is not None else None

    def __call__(self, features, return_tensors=None):
        if (return_tensors or self.return_tensors) != "pt":
            raise ValueError("DataCollatorForSyntaxSeq2Seq returns PyTorch tensors only (return_tensors='pt')")
        check_same_syntax_features(features)
        names = [name for name in SYNTAX_FEATURES if name in features[0]]
        syntax = {name: [list(f[name]) for f in features] for name in names}
        features = [{k: v for k, v in f.items() if k not in SYNTAX_FEATURES} for f in features]
        for name, rows in syntax.items():
            reference = "labels" if name.startswith("target") else "input_ids"
            for i, (row, f) in enumerate(zip(rows, features)):
                if len(row) != len(f[reference]):
                    raise ValueError(f"example {i}: {name} has {len(row)} entries but {reference} has {len(f[reference])}")
        batch = super().__call__(features, return_tensors="pt")
        side = self.tokenizer.padding_side
        for name, rows in syntax.items():
            length = batch["labels" if name.startswith("target") else "input_ids"].shape[1]
            dtype = torch.float32 if name == "source_distances" else torch.long
            batch[name] = torch.tensor([pad_syntax_feature(name, row, length, side) for row in rows], dtype=dtype)
        return self._relation_ids(batch) if self._relation_ids is not None else batch


def check_same_syntax_features(examples) -> None:
    """`ValueError` naming the feature and the example when the examples of a batch do not carry the same syntax
    features (one parsed, another not): padding cannot make up a parse, nor drop one."""
    carried = [[name for name in SYNTAX_FEATURES if name in example] for example in examples]
    for number, names in enumerate(carried[1:], 1):
        differing = [name for name in SYNTAX_FEATURES if (name in names) != (name in carried[0])]
        if differing:
            name = differing[0]
            has, lacks = (number, 0) if name in names else (0, number)
            raise ValueError(f"example {lacks} of the batch has no {name} but example {has} has: a batch pads the "
                             f"syntax features of every example or of none (parse every example alike)")


def pad_syntax_feature(name: str, row: list, length: int, side: str = "right") -> list:
    """One example's syntax feature `name` padded to `length` on `side` with its value in `SYNTAX_FEATURES`; head
    indices move with left padding."""
    pad = [SYNTAX_FEATURES[name]] * (length - len(row))
    if side == "right":
        return row + pad
    if name.endswith("heads"):
        return pad + [h if h == IGNORE_INDEX else h + len(pad) for h in row]
    return pad + row
