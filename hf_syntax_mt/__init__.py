"""hf_syntax_mt: syntax-aware Transformer NMT models for HuggingFace Transformers.

Importing the package registers `SyntaxMTConfig` / `SyntaxMTForConditionalGeneration` /
`SyntaxMTTokenizer` with the Auto classes (`AutoConfig`, `AutoModel`, `AutoModelForSeq2SeqLM`,
`AutoTokenizer`) and the `syntax-translation` pipeline task.

The package is lazy, so that `hf-syntax-mt --help` does not load torch: its public names are imported
when first used (PEP 562), and the registration is done as soon as transformers' Auto classes are
imported (at once when they already are), before any of them can be used.
"""

import importlib
import importlib.machinery
import sys

__version__ = "0.1.0"

_SUBMODULE_OF = {
    "PRESETS": "configuration_syntax_mt",
    "SyntaxMTConfig": "configuration_syntax_mt",
    "SyntaxMTForConditionalGeneration": "modeling_syntax_mt",
    "SyntaxMTModel": "modeling_syntax_mt",
    "SyntaxMTPreTrainedModel": "modeling_syntax_mt",
    **dict.fromkeys(["dependency_depth_buckets", "dependency_relation_ids", "labeled_relation_names",
                     "localized_attention_log_mask", "relative_position_ids"], "relation_attention"),
    **dict.fromkeys(["average_checkpoints", "last_checkpoints"], "training.checkpoint_averaging"),
    **dict.fromkeys(["DataCollatorForSyntaxSeq2Seq", "SyntaxFeatureProcessor", "add_syntax_features"], "features.syntax_features"),
    "SourceLengthCapLogitsProcessor": "inference.length_cap",
    "load_metric": "inference.metrics",
    **dict.fromkeys(["Annotation", "Annotator", "PreParsedAnnotator", "SpacyAnnotator", "StanzaAnnotator",
                     "dependency_to_distance", "load_annotator", "local_range_mask", "project_heads_to_subwords",
                     "read_conllu", "syntactic_distance", "validate_heads"], "syntax"),
    **dict.fromkeys(["generate_synthetic_corpus", "write_synthetic_corpus"], "features.synthetic"),
    "train_joint_bpe_tokenizer": "features.joint_bpe",
    "SyntaxMTTokenizer": "tokenization_syntax_mt",
    "SyntaxMTParsingTokenizer": "features.parsing_tokenizer",
    **dict.fromkeys(["convert_marian_model", "convert_marian_tokenizer"], "hub.convert_marian"),
    "SyntaxTranslationPipeline": "inference.pipeline",
}

__all__ = sorted(_SUBMODULE_OF)


def __getattr__(name):
    if name not in _SUBMODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_SUBMODULE_OF[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *_SUBMODULE_OF])


def register() -> None:
    """Register the classes with the Auto classes and the `syntax-translation` task (once; imports torch)."""
    global _registered
    if _registered:
        return
    _registered = True
    if _ON_IMPORT in sys.meta_path:
        sys.meta_path.remove(_ON_IMPORT)
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

    from .configuration_syntax_mt import SyntaxMTConfig
    from .features.parsing_tokenizer import SyntaxMTParsingTokenizer
    from .hub import convert_marian  # noqa: F401  (defines SyntaxMTForConditionalGeneration.from_marian)
    from .modeling_syntax_mt import SyntaxMTForConditionalGeneration, SyntaxMTModel
    from .tokenization_syntax_mt import SyntaxMTTokenizer

    AutoConfig.register(SyntaxMTConfig.model_type, SyntaxMTConfig, exist_ok=True)
    AutoModel.register(SyntaxMTConfig, SyntaxMTModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(SyntaxMTConfig, SyntaxMTForConditionalGeneration, exist_ok=True)
    SyntaxMTConfig.register_for_auto_class()
    SyntaxMTModel.register_for_auto_class("AutoModel")
    SyntaxMTForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
    # both classes by name (a folder's tokenizer_config.json names one); the config's own is the plain one
    AutoTokenizer.register(SyntaxMTConfig, tokenizer_class=SyntaxMTParsingTokenizer, exist_ok=True)
    AutoTokenizer.register(SyntaxMTConfig, tokenizer_class=SyntaxMTTokenizer, exist_ok=True)
    SyntaxMTTokenizer.register_for_auto_class("AutoTokenizer")
    SyntaxMTParsingTokenizer.register_for_auto_class("AutoTokenizer")
    from .inference import pipeline  # noqa: F401  (registers "syntax-translation")


_registered = False
_AUTO = "transformers.models.auto.configuration_auto"  # every Auto class and pipeline() reads the config through it


class _RegisterOnImport:
    """A `sys.meta_path` finder that calls `register()` once transformers' Auto config module is imported, after
    the outermost import of a transformers or hf_syntax_mt module in progress (so that no module `register`
    imports is half done)."""

    def __init__(self):
        self.depth = 0  # imports of watched modules in progress, nested

    def find_spec(self, name, path=None, target=None):
        if name != "transformers" and not name.startswith(("transformers.", f"{__name__}.")):
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader.exec_module = self._then_register(spec.loader.exec_module)
        return spec

    def _then_register(self, exec_module):
        def exec_then_register(module):
            self.depth += 1
            try:
                exec_module(module)
            finally:
                self.depth -= 1
            if self.depth == 0 and _AUTO in sys.modules:
                register()

        return exec_then_register


_ON_IMPORT = _RegisterOnImport()
if _AUTO in sys.modules:
    register()
else:
    sys.meta_path.insert(0, _ON_IMPORT)
