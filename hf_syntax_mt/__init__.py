"""hf_syntax_mt: syntax-aware Transformer NMT models for HuggingFace Transformers.

Importing the package registers `SyntaxMTConfig` / `SyntaxMTForConditionalGeneration` with the
Auto classes (`AutoConfig`, `AutoModel`, `AutoModelForSeq2SeqLM`).
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_syntax_mt import PRESETS, SyntaxMTConfig
from .modeling_syntax_mt import (
    SyntaxMTForConditionalGeneration,
    SyntaxMTModel,
    SyntaxMTPreTrainedModel,
    dependency_relation_ids,
    labeled_relation_names,
    localized_attention_log_mask,
    relative_position_ids,
)

AutoConfig.register(SyntaxMTConfig.model_type, SyntaxMTConfig, exist_ok=True)
AutoModel.register(SyntaxMTConfig, SyntaxMTModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(SyntaxMTConfig, SyntaxMTForConditionalGeneration, exist_ok=True)
SyntaxMTConfig.register_for_auto_class()
SyntaxMTModel.register_for_auto_class("AutoModel")
SyntaxMTForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "SyntaxMTConfig",
    "SyntaxMTModel",
    "SyntaxMTForConditionalGeneration",
    "SyntaxMTPreTrainedModel",
    "dependency_relation_ids",
    "labeled_relation_names",
    "localized_attention_log_mask",
    "relative_position_ids",
]
