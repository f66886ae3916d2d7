"""Torch-free syntax utilities: trees, syntactic distances, annotators and subword alignment."""

from .alignment import align_tokens_to_words, token_features
from .annotation import Annotation, annotation_from_spacy, annotation_from_stanza, locate_words, merge_annotations, read_conllu
from .annotators import (
    Annotator, DespacedSpacyAnnotator, PreParsedAnnotator, PretokenizedSpacyAnnotator, SpacyAnnotator, StanzaAnnotator,
    load_annotator,
)
from .distance import (
    LARGE_DISTANCE,
    SENTENCE_DISTANCE,
    BracketTree,
    dependency_to_distance,
    fill_subword_distances,
    local_range_mask,
    parse_bracketed,
    syntactic_distance,
    tree_leaves,
    tree_to_bracketed,
)
from .evaluation import attachment_scores
from .spacing import (
    SOURCE_SPACINGS,
    apply_source_spacing,
    despace_cjk,
    despace_cjk_positions,
    detect_source_spacing,
    unsegmented_lines,
)
from .trees import (
    IGNORE_INDEX,
    depths,
    labeled_relation_matrix,
    project_heads_to_subwords,
    relative_depth_matrix,
    reroute_heads,
    tree_roots,
    validate_heads,
)

__all__ = [
    "IGNORE_INDEX",
    "LARGE_DISTANCE",
    "SENTENCE_DISTANCE",
    "SOURCE_SPACINGS",
    "Annotation",
    "Annotator",
    "BracketTree",
    "DespacedSpacyAnnotator",
    "PreParsedAnnotator",
    "PretokenizedSpacyAnnotator",
    "SpacyAnnotator",
    "StanzaAnnotator",
    "align_tokens_to_words",
    "apply_source_spacing",
    "annotation_from_spacy",
    "attachment_scores",
    "annotation_from_stanza",
    "dependency_to_distance",
    "despace_cjk",
    "despace_cjk_positions",
    "detect_source_spacing",
    "depths",
    "fill_subword_distances",
    "labeled_relation_matrix",
    "load_annotator",
    "local_range_mask",
    "locate_words",
    "merge_annotations",
    "parse_bracketed",
    "project_heads_to_subwords",
    "read_conllu",
    "relative_depth_matrix",
    "reroute_heads",
    "syntactic_distance",
    "token_features",
    "tree_leaves",
    "tree_roots",
    "tree_to_bracketed",
    "unsegmented_lines",
    "validate_heads",
]
