"""Configuration of the syntax-aware Transformer NMT model family (SPEC §1).

Every syntax method of the source papers is an independent switch on `SyntaxMTConfig`; the
systems of the papers are named presets (`PRESETS`, `SyntaxMTConfig.from_preset`).
This file must stay free of parser imports: it is copied next to saved models for remote code.
"""

import difflib
import inspect

from transformers import PretrainedConfig
from transformers.utils import logging

logger = logging.get_logger(__name__)

DEPENDENCY_SCHEMES = (None, "depth", "labeled")
RELATION_COMBINATIONS = ("sum", "concat_linear")
DISTANCE_SOURCES = ("auto", "constituency", "dependency", "flat")  # as syntax.annotation (no parser imports here)
SOURCE_SPACINGS = ("as_is", "despace_cjk", "segmented")  # as syntax.spacing
SLA_BINARIZATIONS = ("none", "right", "left")  # as syntax.distance.BINARIZATIONS
DBSA_DECODER_ROWS = ("reading", "predicting")
DBSA_LOSS_NORMALIZATIONS = ("kept", "all")

_REL = {"relative_positions": True}
_DEP = {"dependency_relations": "depth", "relation_combination": "sum"}
_LABELED = {"dependency_relations": "labeled", "relation_combination": "concat_linear"}
DBSA_AT_TWO_THIRDS = "two thirds of the depth"  # a preset's DBSA layer: round(2L/3), seed 004's layer 4 of 6
_DBSA_ENC = {"dbsa_encoder_layer": DBSA_AT_TWO_THIRDS}
_DBSA_DEC = {"dbsa_decoder_layer": DBSA_AT_TWO_THIRDS}
_SLA = {"sla_layers": [1]}
_OPTIONAL_SETTING_TYPES = {  # settings whose default is None: the type of a value that is not None
    "dependency_relations": str,
    "dbsa_encoder_layer": int,
    "dbsa_decoder_layer": int,
    "sla_layers": list,
    "sla_binarize": str,
    "parser": dict,
    "source_lang": str,
    "target_lang": str,
    "bos_token_id": int,
}

PRESETS = {
    # Vaswani et al. 2017: absolute sinusoidal positions only.
    "transformer_abs": {},
    # Shaw et al. 2018: relative positions a^K, a^V (clip k) in encoder and decoder self-attention.
    "transformer_rel": {**_REL},
    # Omote et al. 2019 (seeds 000/001): dependency relative depth b^K, b^V (clip l), encoder only.
    "transformer_dep": {**_DEP},
    # Omote et al. 2019: relative positions + relative depth, summed (a + b).
    "transformer_dep_rel": {**_REL, **_DEP},
    # Seed 002, method 1: labeled tree relations (self / sib / ancestor-descendant / none).
    "transformer_dep_labeled": {**_LABELED},
    # Seed 002, method 2: relative positions + labeled relations, Concat(a, b) W_rel.
    "transformer_dep_labeled_rel": {**_REL, **_LABELED},
    # Deguchi et al. 2019 (seeds 001/004): bi-affine parse head in encoder / decoder / both.
    "transformer_dbsa_enc": {**_DBSA_ENC},
    "transformer_dbsa_dec": {**_DBSA_DEC},
    "transformer_dbsa": {**_DBSA_ENC, **_DBSA_DEC},
    # Hou/Zhu et al. 2022 (seed 003): syntax-guided localized attention, encoder layer 1.
    "transformer_sla": {**_SLA},
}


class SyntaxMTConfig(PretrainedConfig):
    r"""
    Configuration of [`SyntaxMTModel`] / [`SyntaxMTForConditionalGeneration`].

    Sizes and training defaults follow a Transformer-base-like encoder–decoder (post-LN by default).
    Syntax switches (all independent):

    - `use_absolute_positions`: sinusoidal absolute PE on the embeddings.
    - `relative_positions`, `max_relative_position` (k): Shaw et al. relative positions in encoder
      and decoder self-attention, label(i, j) = clip(j - i, k).
    - `dependency_relations`: `None`, `"depth"` (seed 000: clip(depth_j - depth_i, l),
      l = `max_dependency_distance`) or `"labeled"` (seed 002: self / sib / signed
      ancestor–descendant depth within k = `max_dependency_distance` / none -> zero vector), in
      encoder self-attention, derived in the model from `source_heads`.
    - `relation_combination`: how relative positions a and dependency relations b combine when
      both are on: `"sum"` (a + b, seed 000) or `"concat_linear"` (Concat(a, b) W_rel, seed 002).
    - `dependency_key_term`, `dependency_value_term`, `relative_key_term`, `relative_value_term`:
      ablation switches for the key-side (e_ij) and value-side (z_i) terms.
    - `dbsa_encoder_layer`, `dbsa_decoder_layer` (1-based, `None` = off): one head of that layer
      becomes a bi-affine parse head (seeds 001/004); `dbsa_encoder_loss_weight`,
      `dbsa_decoder_loss_weight` are λ_enc, λ_dec. Two conventions of the decoder parse loss that
      the paper leaves open (SPEC §5): `dbsa_decoder_supervised_row` `"reading"` (default: the decoder
      position that reads y_i learns y_i's head among the words read so far, y_i included) or
      `"predicting"` (seed 004's code: the position that predicts y_i learns the head of the word about to
      be generated among the words already generated); for labels `y0 y1 y2 </s>` with y0→y1, y1 the root,
      y2→y1 the supervised (row → column) cells are (2 → 2), (3 → 2) reading and (1 → 1), (2 → 1)
      predicting; arcs to a later head are dropped in both. `dbsa_decoder_loss_normalization` `"kept"`
      (default: the mean NLL over the supervised arcs) or `"all"` (seed 004's code: the summed NLL over
      the supervised arcs divided by all target arcs, the dropped ones included).
    - `sla_layers` (1-based encoder layers), `sla_heads`, `sla_tau`: syntax-guided localized
      attention (seed 003) on the last `sla_heads` heads of those layers, from `source_distances`;
      `distance_source`: how those distances come from a parse ("constituency" trees, the
      "dependency" tree, or "auto": trees when the parser gives them; "flat": a flat tree over
      the words, the no-syntax control), the same in training and at inference.
      `sla_binarize`: `"right"` / `"left"` binarise the trees (or the constituents derived from the
      dependency tree) as NLTK's `chomsky_normal_form(factor=...)` before Algorithm 1, `"none"` reads the
      n-ary trees as the paper prints Algorithm 1. Seed 003's code binarises ("right"), so its published
      numbers come from binary trees: Fig. 1's tree gives raw distances [5, 3, 2, 1, 4] right-binarised
      against [4, 3, 2, 1, 4] n-ary, and on the PTB sample about 3 gaps in 5 change. Default for a new
      config: `"right"`, the published setting (`"none"` for a self-parsing model, which derives its
      distances from the n-ary tree it reads and accepts only `"none"`). A saved config without the key
      (a model trained before the setting existed, on n-ary distances) loads as `"none"`, so it keeps
      reading the distances it was trained on. The flat control (`distance_source="flat"`) is never binarised.
    - `self_parsing` (SPEC §9): the model carries its own source parser and needs no external one at
      inference. A parse module of `self_parsing_layers` encoder layers without any tree term
      (the embeddings shared with the encoder, absolute and, when on, relative positions) and
      bi-affine arc scores on top (SPEC §5) runs before the encoder; when no
      `source_heads` are given its scores are decoded into a single-root tree per sentence
      (maximum spanning tree, `hf_syntax_mt.tree_decoding`) that the dependency relation terms read.
      Training reads the parser's trees (`source_heads`) in the relation terms and adds
      `self_parsing_loss_weight` · CE(parse scores, parser's heads) to the loss. Cost: the parse
      module adds `self_parsing_layers` / `encoder_layers` of the encoder's FLOPs (plus the arc
      scores: two d_model × d_k projections per token and one d_k × d_k bilinear form per token pair). Needs dependency relations.
      With SLA, the model derives the distances itself from the subword tree it reads (the parser's in
      training, its own at inference): 1 + the height of the lowest common ancestor of the two tokens
      of a gap (`distance_source="dependency"` over subwords; `tree_distances` in the modeling file).
      `self_parsing_own_tree_rate` p: in training, each sentence's relation terms read the model's own
      decoded tree with probability p instead of the parser's (exposure to its own parse errors, which
      it meets at inference); the parse loss always takes the parser's. Default 0: the parser's trees only
      (measured on ja→en, seeds 1–3: decoding with its own trees −0.16 [−0.47, +0.17] dev BLEU against the
      same weights fed the parser's; model_cards/RESULTS.md).
    - `source_spacing`: how source text is spaced before parsing and tokenizing, in training and at
      inference (`hf_syntax_mt.syntax.spacing`): `"as_is"`, `"despace_cjk"` (whitespace next to CJK
      characters removed, so natural and segmented Japanese/Chinese read alike) or `"segmented"`
      (trained on space-segmented CJK text; the pipeline warns about unsegmented input).
    - `parser`: the annotator settings recorded for the pipeline (a dict, or `None`).
    - `source_lang`, `target_lang`: the language codes of the training data (e.g. "ja", "en"), or `None`.
    - `label_smoothing`: ε of the token loss that `forward(labels=...)` returns; 0 (the default) is
      plain cross-entropy, as every transformers model; the training recipes set the seeds' 0.1.
    - `tie_word_embeddings`: one matrix for the source embedding, the target embedding and the output
      projection (Vaswani et al.); `False` unties all three.
    """

    model_type = "syntax_mt"
    keys_to_ignore_at_inference = ["cache"]
    attribute_map = {
        "num_attention_heads": "encoder_attention_heads",
        "hidden_size": "d_model",
        "num_hidden_layers": "encoder_layers",
    }

    def __init__(
        self,
        vocab_size=8000,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        activation_function="relu",
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_position_embeddings=1024,
        scale_embedding=True,
        normalize_before=False,
        init_std=0.02,
        label_smoothing=0.0,
        use_absolute_positions=True,
        relative_positions=False,
        max_relative_position=2,
        dependency_relations=None,
        max_dependency_distance=2,
        relation_combination="sum",
        relative_key_term=True,
        relative_value_term=True,
        dependency_key_term=True,
        dependency_value_term=True,
        dbsa_encoder_layer=None,
        dbsa_decoder_layer=None,
        dbsa_encoder_loss_weight=1.0,
        dbsa_decoder_loss_weight=1.0,
        dbsa_decoder_supervised_row="reading",
        dbsa_decoder_loss_normalization="kept",
        sla_layers=None,
        sla_heads=2,
        sla_tau=10.0,
        distance_source="auto",
        sla_binarize=None,
        source_spacing="as_is",
        self_parsing=False,
        self_parsing_layers=2,
        self_parsing_loss_weight=1.0,
        self_parsing_own_tree_rate=0.0,
        preset=None,
        parser=None,
        source_lang=None,
        target_lang=None,
        use_cache=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
        decoder_start_token_id=0,
        is_encoder_decoder=True,
        tie_word_embeddings=True,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_attention_heads = decoder_attention_heads
        self.encoder_ffn_dim = encoder_ffn_dim
        self.decoder_ffn_dim = decoder_ffn_dim
        self.activation_function = activation_function
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.max_position_embeddings = max_position_embeddings
        self.scale_embedding = scale_embedding
        self.normalize_before = normalize_before
        self.init_std = init_std
        self.label_smoothing = label_smoothing
        self.use_absolute_positions = use_absolute_positions
        self.relative_positions = relative_positions
        self.max_relative_position = max_relative_position
        self.dependency_relations = dependency_relations
        self.max_dependency_distance = max_dependency_distance
        self.relation_combination = relation_combination
        self.relative_key_term = relative_key_term
        self.relative_value_term = relative_value_term
        self.dependency_key_term = dependency_key_term
        self.dependency_value_term = dependency_value_term
        self.dbsa_encoder_layer = dbsa_encoder_layer
        self.dbsa_decoder_layer = dbsa_decoder_layer
        self.dbsa_encoder_loss_weight = dbsa_encoder_loss_weight
        self.dbsa_decoder_loss_weight = dbsa_decoder_loss_weight
        self.dbsa_decoder_supervised_row = dbsa_decoder_supervised_row
        self.dbsa_decoder_loss_normalization = dbsa_decoder_loss_normalization
        self.sla_layers = list(sla_layers) if sla_layers else None
        self.sla_heads = sla_heads
        self.sla_tau = sla_tau
        self.distance_source = distance_source
        self.sla_binarize = sla_binarize if sla_binarize is not None else ("none" if self_parsing else "right")
        self.source_spacing = source_spacing
        self.self_parsing = self_parsing
        self.self_parsing_layers = self_parsing_layers
        self.self_parsing_loss_weight = self_parsing_loss_weight
        self.self_parsing_own_tree_rate = self_parsing_own_tree_rate
        self.preset = preset
        self.parser = parser
        self.source_lang = source_lang
        self.target_lang = target_lang
        self.use_cache = use_cache
        super().__init__(
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            bos_token_id=bos_token_id,
            decoder_start_token_id=decoder_start_token_id,
            is_encoder_decoder=is_encoder_decoder,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self.validate_syntax_settings()

    def validate_syntax_settings(self):
        """Raise a `ValueError` naming the first inconsistent syntax setting."""
        if self.d_model % self.encoder_attention_heads or self.d_model % self.decoder_attention_heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by the head counts "
                f"({self.encoder_attention_heads}, {self.decoder_attention_heads})"
            )
        if self.dependency_relations not in DEPENDENCY_SCHEMES:
            raise ValueError(
                f"dependency_relations={self.dependency_relations!r}; expected one of {DEPENDENCY_SCHEMES}"
            )
        if self.relation_combination not in RELATION_COMBINATIONS:
            raise ValueError(
                f"relation_combination={self.relation_combination!r}; expected one of {RELATION_COMBINATIONS}"
            )
        if self.distance_source not in DISTANCE_SOURCES:
            raise ValueError(f"distance_source={self.distance_source!r}; expected one of {DISTANCE_SOURCES}")
        if self.source_spacing not in SOURCE_SPACINGS:
            raise ValueError(f"source_spacing={self.source_spacing!r}; expected one of {SOURCE_SPACINGS}")
        if self.sla_binarize not in SLA_BINARIZATIONS:
            raise ValueError(f"sla_binarize={self.sla_binarize!r}; expected one of {SLA_BINARIZATIONS}")
        if self.dbsa_decoder_supervised_row not in DBSA_DECODER_ROWS:
            raise ValueError(
                f"dbsa_decoder_supervised_row={self.dbsa_decoder_supervised_row!r}; expected one of {DBSA_DECODER_ROWS}"
            )
        if self.dbsa_decoder_loss_normalization not in DBSA_LOSS_NORMALIZATIONS:
            raise ValueError(f"dbsa_decoder_loss_normalization={self.dbsa_decoder_loss_normalization!r}; "
                             f"expected one of {DBSA_LOSS_NORMALIZATIONS}")
        if self.max_relative_position < 1 or self.max_dependency_distance < 1:
            raise ValueError("max_relative_position and max_dependency_distance must be >= 1")
        for name, layer, count in (
            ("dbsa_encoder_layer", self.dbsa_encoder_layer, self.encoder_layers),
            ("dbsa_decoder_layer", self.dbsa_decoder_layer, self.decoder_layers),
        ):
            if layer is not None and not 1 <= layer <= count:
                raise ValueError(f"{name}={layer} is outside the layer range 1..{count} (1-based)")
        if self.sla_layers:
            for layer in self.sla_layers:
                if not 1 <= layer <= self.encoder_layers:
                    raise ValueError(
                        f"sla_layers contains {layer}, outside the encoder layer range 1..{self.encoder_layers}"
                    )
            if not 1 <= self.sla_heads <= self.encoder_attention_heads:
                raise ValueError(
                    f"sla_heads={self.sla_heads} must be between 1 and encoder_attention_heads="
                    f"{self.encoder_attention_heads}"
                )
            if (
                self.dbsa_encoder_layer in self.sla_layers
                and self.sla_heads >= self.encoder_attention_heads
            ):
                raise ValueError(
                    f"encoder layer {self.dbsa_encoder_layer} has a DBSA parse head (head 0) and "
                    f"sla_heads={self.sla_heads} localized heads, but only {self.encoder_attention_heads} heads"
                )
            if self.sla_tau <= 0:
                raise ValueError(f"sla_tau={self.sla_tau} must be > 0")
        if self.self_parsing:
            if self.dependency_relations is None:
                raise ValueError(
                    "self_parsing=True predicts the source tree for the dependency relation terms, but "
                    "dependency_relations is None: use a dependency preset (e.g. transformer_dep_rel) or self_parsing=False"
                )
            if self.sla_layers and self.distance_source not in ("auto", "dependency"):
                raise ValueError(
                    f"self_parsing=True derives the SLA distances from the dependency tree the model reads, but "
                    f"distance_source={self.distance_source!r}: set distance_source='dependency' or self_parsing=False"
                )
            if self.sla_layers and self.sla_binarize != "none":
                raise ValueError(
                    f"self_parsing=True derives the SLA distances in the model from the n-ary tree it reads, but "
                    f"sla_binarize={self.sla_binarize!r}: set sla_binarize='none' or self_parsing=False"
                )
            if self.self_parsing_layers < 1:
                raise ValueError(f"self_parsing_layers={self.self_parsing_layers} must be >= 1 (the parse module's layers)")
        if not 0.0 <= self.self_parsing_own_tree_rate <= 1.0:
            raise ValueError(f"self_parsing_own_tree_rate={self.self_parsing_own_tree_rate} must be in [0, 1] "
                             "(the share of training sentences that read the model's own tree)")
        if self.self_parsing_own_tree_rate and not self.self_parsing:
            raise ValueError(f"self_parsing_own_tree_rate={self.self_parsing_own_tree_rate} needs a parser of the "
                             "model's own: set self_parsing=True, or self_parsing_own_tree_rate=0")

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        """As `PretrainedConfig.from_dict`; a dict without `sla_binarize` (a config saved before the setting
        existed, whose model was trained on n-ary distances) gets `"none"` instead of the new default."""
        if "sla_binarize" not in config_dict:
            config_dict = {**config_dict, "sla_binarize": "none"}
        return super().from_dict(config_dict, **kwargs)

    @property
    def needs_source_heads(self):
        """Whether training needs `source_heads` (dependency relations, or the DBSA-enc parse loss)."""
        return self.dependency_relations is not None or self.dbsa_encoder_layer is not None

    @property
    def needs_source_distances(self):
        """Whether `forward` needs `source_distances` (syntax-guided localized attention; a self-parsing
        model derives them from its source tree)."""
        return bool(self.sla_layers) and not self.self_parsing

    @property
    def needs_source_parse(self):
        """Whether training reads the source's parse (`source_heads` or `source_distances`)."""
        return self.needs_source_heads or self.needs_source_distances

    @property
    def needs_target_heads(self):
        """Whether training needs `target_heads` (the decoder parse loss of DBSA-dec)."""
        return self.dbsa_decoder_layer is not None

    @property
    def needs_parser_at_inference(self):
        """Whether translating needs the source parsed (dependency relations or SLA) by an external
        parser; DBSA does not, nor a self-parsing model."""
        return (self.dependency_relations is not None or bool(self.sla_layers)) and not self.self_parsing

    @classmethod
    def setting_names(cls) -> set:
        """The settings `__init__` names (what a saved config.json holds beside transformers' own keys)."""
        return set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}

    @classmethod
    def from_preset(cls, name, **overrides):
        """Build the config of a named system; `name` may join presets with '+' (e.g.
        "transformer_dep_rel+transformer_dbsa+transformer_sla"). A DBSA preset puts its parse head at two thirds
        of the depth, layer max(1, round(2L/3)) of L (seed 004: layer 4 of 6; 2 of 3), unless the layer is given;
        the config records the layer chosen."""
        known = cls.setting_names() | set(inspect.signature(PretrainedConfig.__init__).parameters)
        known = (known | {"attn_implementation"}) - {"self", "kwargs", "preset"}
        for key in overrides:
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"unknown config setting {key!r}{hint}")
        defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()}
        for key, value in overrides.items():
            expected = _OPTIONAL_SETTING_TYPES.get(key) or type(defaults.get(key))
            if expected is type(None):  # transformers' own settings: PretrainedConfig checks them
                continue
            if value is None and key in _OPTIONAL_SETTING_TYPES:
                continue
            accepted = (int, float) if expected is float else expected
            if not isinstance(value, accepted) or isinstance(value, bool) and expected is not bool:
                raise ValueError(f"config setting {key}={value!r} must be of type {expected.__name__}")
        settings, set_by = {}, {}
        for part in name.split("+"):
            if part not in PRESETS:
                raise ValueError(f"unknown preset {part!r}; available: {', '.join(PRESETS)}")
            for key, value in PRESETS[part].items():
                if key in settings and settings[key] != value:
                    raise ValueError(f"presets {set_by[key]} and {part} conflict: {key}={settings[key]!r} in the "
                                     f"first, {value!r} in the second; combine presets that set different switches")
                settings[key], set_by[key] = value, part
        settings.update(overrides)
        for key, count_key in (("dbsa_encoder_layer", "encoder_layers"), ("dbsa_decoder_layer", "decoder_layers")):
            if settings.get(key) == DBSA_AT_TWO_THIRDS:
                layers = settings.get(count_key, defaults[count_key])
                settings[key] = max(1, round(2 * layers / 3))
                if layers <= 2:
                    logger.warning(f"{name}: {key}={settings[key]} of {layers} ({count_key}), the layer nearest two "
                                   f"thirds of the depth (seed 004: 4 of 6); set {key} to choose another")
        return cls(preset=name, **settings)


__all__ = ["SyntaxMTConfig", "PRESETS"]
