"""Warm start from MarianMT (SPEC §10): convert a Marian checkpoint and its tokenizers.

`convert_marian_model` (also `SyntaxMTForConditionalGeneration.from_marian`, defined here so that the model file
does not depend on the converter) maps every Marian weight onto a SyntaxMT model of the same size: the shared
embeddings (and an untied LM head), `final_logits_bias`, every q/k/v/out projection with its bias, the feed-forward
layers, the post-LN layer norms; the activation (opus-mt: swish), `scale_embedding`, tying, pad / eos /
decoder-start ids, `max_position_embeddings` and the generation config come along. Marian's positions are a static
sinusoid table with the sines and cosines in two halves, which is what SyntaxMT computes (`sinusoidal_positions`;
the converter checks the table equals it).

The syntax parameters of the preset are added so that the converted model computes Marian's function:
- relative positions a^K, a^V and dependency relations b^K, b^V (depth or labeled) are added to the keys and
  values, so their tables start at zero; with Concat(a, b) W_rel (`concat_linear`) zero tables give
  zero for any W_rel, and W_rel keeps its random initialisation (zeroing it too would leave every gradient of
  the tables and of W_rel at zero for ever);
- a DBSA parse head replaces head 0 of its layer with s_tq = Q_p[t] U K_p[q]^T + K_p[q] u over that head's
  own projections (SPEC §5); U = I / sqrt(d_k) and u = 0 make s equal the replaced head's scores, so the
  model is unchanged until the parse loss turns that head into a parser during fine-tuning (a warning says so);
- a self-parsing parse module (`self_parsing=True`) starts untrained: it only chooses the trees that the zero
  relation tables read, so the function is Marian's until its parse loss and the tables have trained;
- SLA multiplies the attention of its heads by the syntactic mask G, which changes the function at
  initialisation: the converter warns, and the fine-tuning starts from a perturbed Marian.

`convert_marian_tokenizer` builds a `SyntaxMTTokenizer` (fast, with offsets) from `source.spm`, `target.spm`
and `vocab.json`, giving the ids of `MarianTokenizer` (see `sentencepiece_to_tokenizers`).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
from tokenizers import AddedToken, processors
from tokenizers.models import Unigram
from transformers import AutoConfig, GenerationConfig, MarianMTModel, PreTrainedModel
from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf
from transformers.utils import cached_file

from ..configuration_syntax_mt import SyntaxMTConfig
from ..modeling_syntax_mt import (
    SyntaxMTAttention,
    SyntaxMTForConditionalGeneration,
    SyntaxMTRelations,
    sinusoidal_positions,
)
from ..tokenization_syntax_mt import SyntaxMTTokenizer

MARIAN_TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")
FOREIGN_CHARACTER_SCORE = -1e9
"""Unigram score per character of a vocabulary entry that the SentencePiece model does not have (see
`sentencepiece_to_tokenizers`): low enough that such an entry is never preferred to the model's own pieces."""

# settings a converted model takes from the checkpoint (an override may not change them)
ARCHITECTURE_SETTINGS = (
    "vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
    "encoder_ffn_dim", "decoder_ffn_dim", "activation_function", "max_position_embeddings", "scale_embedding",
    "pad_token_id", "eos_token_id", "bos_token_id", "decoder_start_token_id", "tie_word_embeddings",
)
_PIECE_NORMAL, _PIECE_USER_DEFINED, _PIECE_BYTE = 1, 4, 6  # sentencepiece ModelProto.SentencePiece.Type


# ---------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------


def _load_marian(model_or_path, **hub_kwargs) -> PreTrainedModel:
    if isinstance(model_or_path, PreTrainedModel):
        model = model_or_path
        model_type = getattr(model.config, "model_type", None)
        if model_type != "marian" or not isinstance(model, MarianMTModel):
            raise ValueError(f"cannot convert a {type(model).__name__} ({model_type}): from_marian needs a MarianMTModel")
        return model
    config = AutoConfig.from_pretrained(model_or_path, **hub_kwargs)
    if config.model_type != "marian":
        raise ValueError(f"{model_or_path} is a {config.model_type!r} checkpoint, not MarianMT: from_marian converts "
                         "Marian models (e.g. Helsinki-NLP/opus-mt-*) only")
    return MarianMTModel.from_pretrained(model_or_path, **hub_kwargs)


def _marian_settings(marian_config) -> dict:
    """The SyntaxMT config settings a Marian config fixes."""
    mc = marian_config
    settings = {name: getattr(mc, name) for name in ARCHITECTURE_SETTINGS}
    settings.update(
        dropout=mc.dropout, attention_dropout=mc.attention_dropout, activation_dropout=mc.activation_dropout,
        init_std=mc.init_std, normalize_before=False, use_absolute_positions=True,
    )
    return settings


def _check_convertible(marian, name: str) -> None:
    mc = marian.config
    if not mc.share_encoder_decoder_embeddings or mc.decoder_vocab_size != mc.vocab_size:
        raise ValueError(
            f"cannot convert {name}: it has separate source and target vocabularies (share_encoder_decoder_embeddings="
            f"{mc.share_encoder_decoder_embeddings}, decoder_vocab_size={mc.decoder_vocab_size}); SyntaxMT models "
            "have one embedding matrix for both sides"
        )
    if mc.encoder_layerdrop or mc.decoder_layerdrop:
        warnings.warn(f"{name} sets LayerDrop ({mc.encoder_layerdrop}, {mc.decoder_layerdrop}), which SyntaxMT does "
                      "not have: fine-tuning runs every layer (inference is unchanged)")
    for side in ("encoder", "decoder"):
        table = getattr(marian.model, side).embed_positions.weight.detach().float().cpu()
        ours = sinusoidal_positions(torch.arange(table.shape[0]), mc.d_model)
        if table.shape != ours.shape or not torch.allclose(table, ours, atol=1e-6, rtol=0):
            raise ValueError(f"cannot convert {name}: its {side} positions are not the sinusoids (sines | cosines) "
                             "that SyntaxMT computes")


def convert_marian_model(model_or_path, preset: str = "transformer_abs", *, model_class=None, hub_kwargs=None,
                         **config_overrides):
    """Convert a MarianMT checkpoint into a SyntaxMT model with the syntax of `preset` (see the module docstring).

    Args:
        model_or_path: a `MarianMTModel`, or a local directory / Hub id of one.
        preset: a SyntaxMT preset, or presets joined with '+'.
        model_class: the class to build (default `SyntaxMTForConditionalGeneration`).
        hub_kwargs: passed to `from_pretrained` (e.g. `revision`, `cache_dir`).
        config_overrides: syntax and training settings (e.g. `max_relative_position=4`, `dropout=0.2`);
            the sizes, ids, activation and tying are the checkpoint's and cannot be overridden.
    Returns:
        the converted model in eval mode, in the checkpoint's dtype, with Marian's generation config.
    Raises:
        ValueError: the checkpoint is not a MarianMT model, has separate vocabularies or non-sinusoidal
            positions, an override contradicts the checkpoint, or the preset needs more than the
            checkpoint has (e.g. `sla_heads` above the head count, a DBSA layer past the last layer).
    """
    model_class = model_class or SyntaxMTForConditionalGeneration
    marian = _load_marian(model_or_path, **(hub_kwargs or {}))
    name = str(getattr(marian, "name_or_path", "") or type(marian).__name__)
    _check_convertible(marian, name)
    settings = _marian_settings(marian.config)
    for key, value in config_overrides.items():
        if key in ARCHITECTURE_SETTINGS and value != settings[key]:
            raise ValueError(f"cannot convert {name} with {key}={value!r}: the checkpoint has {key}={settings[key]!r} "
                             "(a converted model keeps the checkpoint's sizes, ids and activation)")
    try:
        config = SyntaxMTConfig.from_preset(preset, **{**settings, **config_overrides})
    except ValueError as err:
        raise ValueError(f"cannot convert {name} to {preset}: {err}") from None

    model = model_class(config)
    marian_state = marian.state_dict()
    added = set(model.syntax_parameter_names())
    state, used = {}, set()
    for key in model.state_dict():
        if key in added:
            continue
        source = key.replace(".feed_forward.fc", ".fc")
        if source not in marian_state:
            raise ValueError(f"cannot convert {name}: it has no weight {source!r} for {key!r} (not a Marian-like model)")
        state[key] = marian_state[source]
        used.add(source)
    unused = sorted(k for k in marian_state if k not in used and ".embed_positions." not in k)
    if unused:
        raise ValueError(f"cannot convert {name}: weights SyntaxMT has no place for: {', '.join(unused[:5])}")
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k in added for k in missing), (missing, unexpected)
    _initialize_syntax_as_identity(model)
    model.generation_config = GenerationConfig.from_dict(marian.generation_config.to_dict())
    model.to(marian.dtype).eval()

    if config.dbsa_encoder_layer or config.dbsa_decoder_layer:
        warnings.warn(
            f"{preset}: the DBSA parse head replaces head 0 of encoder layer {config.dbsa_encoder_layer} / decoder "
            f"layer {config.dbsa_decoder_layer} and starts as that head (U = I/sqrt(d_k), u = 0), so the converted "
            "model computes Marian's function; the parse loss retrains that head into a parser when fine-tuning"
        )
    if config.sla_layers:
        warnings.warn(
            f"{preset}: syntax-guided localized attention masks the last {config.sla_heads} heads of encoder layers "
            f"{config.sla_layers}, so the converted model no longer computes Marian's function before fine-tuning"
        )
    return model


def from_marian(cls, model_or_path, preset="transformer_abs", **config_overrides):
    """A MarianMT checkpoint (a `MarianMTModel` or its local / Hub path) converted weight for weight into a `cls`
    model, with the syntax parameters of `preset` added so that the model computes Marian's function where the
    method allows (SLA masks change it, and a warning says so): `convert_marian_model`."""
    return convert_marian_model(model_or_path, preset, model_class=cls, **config_overrides)


SyntaxMTForConditionalGeneration.from_marian = classmethod(from_marian)


@torch.no_grad()
def _initialize_syntax_as_identity(model) -> None:
    """Relation tables at zero (W_rel keeps its initialisation); parse heads scoring like the head they replace."""
    for module in model.modules():
        if isinstance(module, SyntaxMTRelations):
            for table in (module.relative, module.dependency):
                if table is not None:
                    table.key.zero_()
                    table.value.zero_()
        elif isinstance(module, SyntaxMTAttention) and module.parse_head:
            module.parse_bilinear.copy_(torch.eye(module.head_dim) * module.scaling)
            module.parse_key_bias.zero_()


# ---------------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------------


def sentencepiece_to_tokenizers(spm_model: bytes, vocab: dict, special_tokens=("</s>", "<unk>", "<pad>"),
                                eos_token="</s>", unk_token="<unk>"):
    """A `tokenizers.Tokenizer` that cuts text as the SentencePiece unigram model `spm_model` and numbers
    the pieces by Marian's `vocab` (token -> id), as `MarianTokenizer` does with `spm.encode` + `vocab.json`.

    The normalizer (the model's precompiled charsmap, whitespace handling, dummy prefix), pre-tokenizer and
    decoder are transformers' `SpmConverter.build_tokenizer_from_spm_proto`. The Unigram model holds every
    vocabulary entry at its Marian id: the SentencePiece model's own pieces with their scores, every other
    entry (the other side's pieces, control tokens) with score len(entry) · FOREIGN_CHARACTER_SCORE - 1, so
    the Viterbi segmentation uses only the model's pieces wherever they cover the text, as SentencePiece does.
    Characters the model does not know are where the two can differ: SentencePiece emits a run of them as one
    piece that Marian looks up in `vocab.json`; here each is covered by the other side's pieces if the
    vocabulary has them (one piece per run where one exists), else by one fused `<unk>`.
    `special_tokens` (and Marian's `>>lang<<` codes in the vocabulary) are special added tokens; `</s>`
    ends every sequence. A leading code gives MarianTokenizer's ids (tested); MarianTokenizer reads a code
    only at the start of the text and spells one elsewhere with SentencePiece pieces, where this reads it
    as the code token.
    """
    model_pb2 = import_protobuf("converting a SentencePiece model needs protobuf or sentencepiece")
    proto = model_pb2.ModelProto()
    proto.ParseFromString(spm_model)
    if proto.trainer_spec.model_type != 1:
        raise ValueError("only SentencePiece unigram models can be converted (Marian's opus-mt models are unigram)")
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise ValueError("vocab.json must number its tokens 0..N-1")
    pieces = {p.piece: p for p in proto.pieces if p.type in (_PIECE_NORMAL, _PIECE_USER_DEFINED, _PIECE_BYTE)}
    outside = [p for p in pieces if p not in vocab]
    if outside:
        warnings.warn(f"{len(outside)} SentencePiece pieces are not in vocab.json (e.g. {outside[0]!r}): MarianTokenizer "
                      "gives them <unk>, the fast tokenizer cuts them into smaller pieces")
    backend = SpmConverter.build_tokenizer_from_spm_proto(proto, [(p.piece, p.score) for p in proto.pieces], legacy=True)
    tokens = sorted(vocab, key=vocab.get)
    scores = [pieces[t].score if t in pieces else len(t) * FOREIGN_CHARACTER_SCORE - 1.0 for t in tokens]
    backend.model = Unigram(list(zip(tokens, scores)), unk_id=vocab[unk_token], byte_fallback=proto.trainer_spec.byte_fallback)
    codes = [t for t in tokens if t.startswith(">>") and t.endswith("<<")]
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (*special_tokens, *codes)
                                if t in vocab])
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {eos_token}", pair=f"$A $B {eos_token}", special_tokens=[(eos_token, vocab[eos_token])]
    )
    return backend


def convert_marian_tokenizer(tokenizer_or_path, **hub_kwargs) -> SyntaxMTTokenizer:
    """A `SyntaxMTTokenizer` equivalent to a `MarianTokenizer` (an instance, or the local directory / Hub id
    holding `source.spm`, `target.spm` and `vocab.json`): source text through `source.spm`, `text_target`
    through `target.spm`, one vocabulary."""
    if hasattr(tokenizer_or_path, "spm_files"):  # a MarianTokenizer
        marian = tokenizer_or_path
        if marian.separate_vocabs:
            raise ValueError("cannot convert a Marian tokenizer with separate source and target vocabularies")
        models = [open(path, "rb").read() for path in marian.spm_files]
        vocab = dict(marian.encoder)
        options = dict(model_max_length=marian.model_max_length, unk_token=str(marian.unk_token),
                       eos_token=str(marian.eos_token), pad_token=str(marian.pad_token))
    else:
        paths = {}
        for filename in MARIAN_TOKENIZER_FILES:
            try:
                paths[filename] = cached_file(tokenizer_or_path, filename, **hub_kwargs)
            except OSError as err:
                raise ValueError(f"{tokenizer_or_path} has no Marian tokenizer ({filename}: {err})") from None
        config_path = cached_file(tokenizer_or_path, "tokenizer_config.json", _raise_exceptions_for_missing_entries=False,
                                  **hub_kwargs)
        tokenizer_config = json.load(open(config_path, encoding="utf-8")) if config_path else {}
        if tokenizer_config.get("separate_vocabs"):
            raise ValueError(f"cannot convert {tokenizer_or_path}: separate source and target vocabularies")
        models = [open(paths[f], "rb").read() for f in MARIAN_TOKENIZER_FILES[:2]]
        vocab = json.load(open(paths["vocab.json"], encoding="utf-8"))
        options = {key: tokenizer_config.get(key, default) for key, default in (
            ("model_max_length", 512), ("unk_token", "<unk>"), ("eos_token", "</s>"), ("pad_token", "<pad>"))}
        options = {k: v["content"] if isinstance(v, dict) else v for k, v in options.items()}  # saved AddedTokens
    specials = (options["eos_token"], options["unk_token"], options["pad_token"])
    source, target = (sentencepiece_to_tokenizers(model, vocab, specials, options["eos_token"], options["unk_token"])
                      for model in models)
    return SyntaxMTTokenizer(
        tokenizer_object=source, target_tokenizer_object=target, padding_side="right", truncation_side="right",
        clean_up_tokenization_spaces=False, model_input_names=["input_ids", "attention_mask"], **options,
    )


def is_marian_checkpoint(name_or_path, **hub_kwargs) -> bool:
    """Whether `name_or_path` (local directory or Hub id) holds a MarianMT config."""
    try:
        return AutoConfig.from_pretrained(name_or_path, **hub_kwargs).model_type == "marian"
    except (OSError, ValueError):
        return False


def train_marian_tokenizer(directory, source_lines, target_lines, source_size: int, target_size: int, *,
                           source_coverage: float = 1.0, num_threads: int = 1, **marian_kwargs):
    """Train an opus-mt-style tokenizer pair into `directory`: `source.spm` / `target.spm` (SentencePiece
    unigram) with Marian's joint `vocab.json` (</s>, <unk>, the source pieces, the target pieces not yet in,
    <pad>), saved as a `MarianTokenizer` (returned; `marian_kwargs` such as `source_lang` go to it). For
    building a Marian model of one's own; needs the `sentencepiece` package."""
    import io

    import sentencepiece as spm
    from transformers import MarianTokenizer

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    vocab = {"</s>": 0, "<unk>": 1}
    sides = (("source.spm", source_lines, source_size, source_coverage), ("target.spm", target_lines, target_size, 1.0))
    for name, lines, size, coverage in sides:
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=size,
                                       model_type="unigram", character_coverage=coverage, hard_vocab_limit=False,
                                       minloglevel=2, num_threads=num_threads)
        (directory / name).write_bytes(model.getvalue())
        processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
        for i in range(processor.get_piece_size()):
            if not (processor.is_control(i) or processor.is_unknown(i)):
                vocab.setdefault(processor.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Recommended: pip install sacremoses"
        tokenizer = MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"),
                                    str(directory / "vocab.json"), **marian_kwargs)
    tokenizer.save_pretrained(directory)
    return tokenizer


__all__ = ["convert_marian_model", "convert_marian_tokenizer", "is_marian_checkpoint", "sentencepiece_to_tokenizers",
           "train_marian_tokenizer"]
