"""hf_syntax_mt: syntax-aware Transformer NMT models for HuggingFace Transformers.

Importing the package registers `SyntaxMTConfig` / `SyntaxMTForConditionalGeneration` /
`SyntaxMTTokenizer` with the Auto classes (`AutoConfig`, `AutoModel`, `AutoModelForSeq2SeqLM`,
`AutoTokenizer`) and the `syntax-translation` pipeline task.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

from .configuration_syntax_mt import PRESETS, SyntaxMTConfig
from .modeling_syntax_mt import SyntaxMTForConditionalGeneration, SyntaxMTModel, SyntaxMTPreTrainedModel
from .relation_attention import (
    dependency_depth_buckets,
    dependency_relation_ids,
    labeled_relation_names,
    localized_attention_log_mask,
    relative_position_ids,
)

from .checkpoint_averaging import average_checkpoints, last_checkpoints
from .data import DataCollatorForSyntaxSeq2Seq, SyntaxFeatureProcessor, add_syntax_features
from .length_cap import SourceLengthCapLogitsProcessor
from .metrics import load_metric
from .syntax import (
    Annotation,
    Annotator,
    PreParsedAnnotator,
    SpacyAnnotator,
    StanzaAnnotator,
    dependency_to_distance,
    load_annotator,
    local_range_mask,
    project_heads_to_subwords,
    read_conllu,
    syntactic_distance,
    validate_heads,
)
from .synthetic import generate_synthetic_corpus, write_synthetic_corpus
from .tokenization import train_joint_bpe_tokenizer
from .tokenization_syntax_mt import SyntaxMTTokenizer
from .convert_marian import convert_marian_model, convert_marian_tokenizer  # also defines from_marian

AutoConfig.register(SyntaxMTConfig.model_type, SyntaxMTConfig, exist_ok=True)
AutoModel.register(SyntaxMTConfig, SyntaxMTModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(SyntaxMTConfig, SyntaxMTForConditionalGeneration, exist_ok=True)
SyntaxMTConfig.register_for_auto_class()
SyntaxMTModel.register_for_auto_class("AutoModel")
SyntaxMTForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
AutoTokenizer.register(SyntaxMTConfig, tokenizer_class=SyntaxMTTokenizer, exist_ok=True)
SyntaxMTTokenizer.register_for_auto_class("AutoTokenizer")

from .pipeline import SyntaxTranslationPipeline  # noqa: E402  (registers "syntax-translation")

__version__ = "0.1.0"

__all__ = [
    "Annotation",
    "Annotator",
    "DataCollatorForSyntaxSeq2Seq",
    "PreParsedAnnotator",
    "SourceLengthCapLogitsProcessor",
    "SpacyAnnotator",
    "StanzaAnnotator",
    "SyntaxFeatureProcessor",
    "SyntaxTranslationPipeline",
    "add_syntax_features",
    "average_checkpoints",
    "convert_marian_model",
    "convert_marian_tokenizer",
    "dependency_to_distance",
    "generate_synthetic_corpus",
    "last_checkpoints",
    "load_annotator",
    "load_metric",
    "local_range_mask",
    "project_heads_to_subwords",
    "read_conllu",
    "syntactic_distance",
    "train_joint_bpe_tokenizer",
    "validate_heads",
    "write_synthetic_corpus",
    "PRESETS",
    "SyntaxMTConfig",
    "SyntaxMTModel",
    "SyntaxMTForConditionalGeneration",
    "SyntaxMTPreTrainedModel",
    "SyntaxMTTokenizer",
    "dependency_depth_buckets",
    "dependency_relation_ids",
    "labeled_relation_names",
    "localized_attention_log_mask",
    "relative_position_ids",
]
