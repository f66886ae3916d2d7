"""PyTorch syntax-aware Transformer encoder–decoder for NMT (SPEC §1–8).

One model, many switches (see `SyntaxMTConfig`): absolute sinusoidal positions, Shaw relative
positions, dependency relative depth or labeled tree relations derived from `source_heads`,
bi-affine parse heads (DBSA) in the encoder/decoder, syntax-guided localized attention (SLA)
from `source_distances`, and a parse module that predicts the source tree itself (self-parsing). The relation
terms of attention and the ids and masks the syntax gives them live in `relation_attention`, the checks of a model's
files in `model_files`; those modules and this file are copied next to saved models for `trust_remote_code` loading,
so they stay free of parser imports.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import logging
from transformers.utils.deprecation import deprecate_kwarg

from .attention_functions import ATTENTION_FUNCTIONS, choose_attention, make_attention_mask
from .configuration_syntax_mt import SyntaxMTConfig
from .fast_ops import dropout, label_smoothed_cross_entropy
from .model_files import DamagedModelFileError, check_model_files, check_weights_files  # noqa: F401
from .relation_attention import (  # noqa: F401
    IGNORE_INDEX,
    NO_RELATION,
    RelationIds,
    RelationTable,
    RelativePositionIdTable,
    SyntaxMTRelations,
    check_source_relation_ids,
    combined_relation_ids,
    combined_relation_table,
    dependency_depth_buckets,
    dependency_relation_ids,
    labeled_relation_names,
    localized_attention_log_mask,
    make_source_relation_ids,
    relation_logits,
    relation_values,
    relative_position_ids,
    tree_distances,
    walk_to_roots,
)
from .tree_decoding import decode_tree

logger = logging.get_logger(__name__)


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------


def sinusoidal_positions(positions, dim):
    """Vaswani et al.'s sinusoids with the sines and cosines in two halves instead of interleaved:
    PE(p, i) = sin(p / 10000^{i/h}), PE(p, h + i) = cos(p / 10000^{i/h}), h = d/2, i < h.

    Computed in float64 and rounded once to float32, as Marian's static table (`MarianSinusoidalPositionalEmbedding`),
    so converted Marian models see the same positions (float32 angles would differ by up to 3e-5 at p = 512).
    """
    device = positions.device if positions.device.type != "mps" else torch.device("cpu")  # MPS has no float64
    half = dim // 2
    frequencies = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float64, device=device) / half)
    angles = positions.to(device, torch.float64)[:, None] * frequencies[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1).float().to(positions.device)


def shift_tokens_right(input_ids, pad_token_id, decoder_start_token_id):
    """Decoder inputs from labels: [start, y_0, ..., y_{m-2}], with -100 replaced by pad."""
    shifted = input_ids.new_zeros(input_ids.shape)
    shifted[:, 1:] = input_ids[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_token_id)


def shift_target_heads_right(target_heads):
    """Align `target_heads` (indices into the labels row) with the decoder inputs.

    Decoder position p reads labels[p-1], whose head labels[h] is read at position h + 1:
    gold[p] = target_heads[p-1] + 1 (root -> itself), gold[0] = -100 (the start token).
    A head in the future (gold[p] > p) cannot be attended under the causal mask: ignored.
    """
    shifted = torch.full_like(target_heads, IGNORE_INDEX)
    previous = target_heads[:, :-1]
    shifted[:, 1:] = torch.where(previous == IGNORE_INDEX, IGNORE_INDEX, previous + 1)
    positions = torch.arange(target_heads.shape[1], device=target_heads.device)
    return shifted.masked_fill(shifted > positions, IGNORE_INDEX)


def decoder_parse_targets(target_heads, supervised_row="reading"):
    """Gold columns of the decoder parse head's rows (SPEC §5), from `target_heads` (indices into the labels row).

    "reading" (`shift_target_heads_right`): row p reads labels[p-1], gold[p] = target_heads[p-1] + 1.
    "predicting" (seed 004's code): row p predicts labels[p] and column h is the row that predicted labels[h],
    gold[p] = target_heads[p]: the head of the word about to be generated among the words already generated.
    Either way a head right of its row (gold[p] > p) is under the causal mask and ignored (-100).
    """
    if supervised_row == "reading":
        return shift_target_heads_right(target_heads)
    positions = torch.arange(target_heads.shape[1], device=target_heads.device)
    return target_heads.masked_fill(target_heads > positions, IGNORE_INDEX)


class SyntaxMTAttention(nn.Module):
    """Multi-head attention with optional relation terms, localized-attention mask and parse head.

        e_ij = q_i · (k_j + r^K_ij) / sqrt(d_k) (+ log G_ij on localized heads)
        z_i  = Σ_j α_ij (v_j + r^V_ij)

    where r is the relation vector of the pair's combined id (Shaw a + dependency b, or Concat(a, b) W_rel), which
    the layer's `AttentionRelation` contributes (`relation_attention`). With `parse_head=True`, head 0 is a bi-affine
    parse head (seeds 001/004):
        s_tq = Q_p[t] U K_p[q]^T + K_p[q] · u,   A_parse = softmax_q(s)
    and its scores are returned as `parse_logits`. The attention itself is the function `choose_attention` names
    (`attention_functions.ATTENTION_FUNCTIONS`: "sdpa" by default, "eager", "flex_attention").
    """

    def __init__(self, config, num_heads, is_cross_attention=False, parse_head=False, layer_idx=None):
        super().__init__()
        self.config = config
        self.embed_dim = config.d_model
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = config.attention_dropout
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.k_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.v_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.out_proj = nn.Linear(self.embed_dim, self.embed_dim)
        self.parse_head = parse_head
        if parse_head:
            self.parse_bilinear = nn.Parameter(torch.zeros(self.head_dim, self.head_dim))
            self.parse_key_bias = nn.Parameter(torch.zeros(self.head_dim))

    def _project(self, states, projection):
        batch, length, _ = states.shape
        return projection(states).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

    def _keys_and_values(self, hidden_states, key_value_states, cache):
        """(B, H, k, d) keys and values: projected, appended to the cache, or read from it (cross-attention)."""
        layer_cache = cache
        if isinstance(cache, EncoderDecoderCache):
            layer_cache = cache.cross_attention_cache if self.is_cross_attention else cache.self_attention_cache
        if self.is_cross_attention and layer_cache is not None and cache.is_updated.get(self.layer_idx):
            return layer_cache.layers[self.layer_idx].keys, layer_cache.layers[self.layer_idx].values
        source = key_value_states if self.is_cross_attention else hidden_states
        key, value = self._project(source, self.k_proj), self._project(source, self.v_proj)
        if layer_cache is not None:
            key, value = layer_cache.update(key, value, self.layer_idx)
            if self.is_cross_attention:
                cache.is_updated[self.layer_idx] = True
        return key, value

    def forward(
        self,
        hidden_states,
        key_value_states=None,
        mask=None,
        cache=None,
        relation=None,
        localized_log_mask=None,
        localized_heads=0,
        need_weights=False,
    ):
        """
        Args:
            hidden_states: (B, q, d) queries (and keys/values for self-attention).
            key_value_states: (B, k, d) encoder states for cross-attention.
            mask: the forward's `AttentionMask` (padding, and the future for causal self-attention) or None.
            relation: the layer's `AttentionRelation` (None without relation terms).
            localized_log_mask: (B, q, k) log G added to the last `localized_heads` heads.
            need_weights: return the attention probabilities.
        Returns:
            (output (B, q, d), attention probabilities (B, H, q, k) or None, parse logits (B, q, k) or None)
        """
        query = self._project(hidden_states, self.q_proj)
        key, value = self._keys_and_values(hidden_states, key_value_states, cache)
        if localized_log_mask is None or localized_heads == 0:
            localized_log_mask, localized_heads = None, 0
        if relation is not None and query.shape[2] == 1 and relation.key_buckets is None and not self.parse_head:
            key, value = relation.fold_into(key, value)
            relation = None
        learning = torch.is_grad_enabled() and (query.requires_grad or (
            relation is not None and relation.key_table is not None and relation.key_table.requires_grad))
        implementation = choose_attention(self.config._attn_implementation, relation, need_weights, self.training,
                                          self.dropout, query.device, learning)
        scaled_query = query * self.scaling
        if implementation == "eager":  # (B, H, ·, d) in memory order: the products read them without a copy each
            scaled_query, key, value = scaled_query.contiguous(), key.contiguous(), value.contiguous()
        parse_logits = self._parse_logits(query, key, mask) if self.parse_head else None
        relation_scores = None
        if relation is not None:
            relation_scores = relation.key_scores(scaled_query)
            scaled_query, key, value = relation.extend(scaled_query, key, value)
        output, probs = ATTENTION_FUNCTIONS[implementation](
            self, scaled_query, key, value, mask=mask, relation=relation, relation_scores=relation_scores,
            parse_logits=parse_logits, localized_log_mask=localized_log_mask, localized_heads=localized_heads,
        )
        if relation is not None:
            output = relation.finish(output, self.head_dim, self.parse_head)
        batch_size, length = hidden_states.shape[:2]
        output = self.out_proj(output.transpose(1, 2).reshape(batch_size, length, self.embed_dim))
        return output, probs if need_weights else None, parse_logits

    def _parse_logits(self, query, key, mask):
        """Bi-affine scores of head 0, s = Q_p U K_p^T + K_p u (unscaled), masked like the attention scores."""
        parse_query, parse_key = query[:, 0], key[:, 0]
        parse_logits = (parse_query @ self.parse_bilinear) @ parse_key.transpose(-1, -2)
        parse_logits = parse_logits + (parse_key @ self.parse_key_bias)[:, None, :]
        if mask is not None:
            parse_logits = parse_logits.masked_fill(mask.blocked[:, 0], torch.finfo(parse_logits.dtype).min)
        return parse_logits


class SyntaxMTFeedForward(nn.Module):
    def __init__(self, config, ffn_dim):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.activation = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states):
        hidden_states = self.activation(self.fc1(hidden_states))
        hidden_states = dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


class SyntaxMTEncoderLayer(GradientCheckpointingLayer):
    """Self-attention (with the relation terms, SLA mask and parse head of this layer) and feed-forward;
    under `activation_checkpointing_enable()` its activations are recomputed in the backward pass."""

    def __init__(self, config, layer_number, in_source_parser=False):
        super().__init__()
        self.config = config
        parse_head = not in_source_parser and config.dbsa_encoder_layer == layer_number
        self.self_attn = SyntaxMTAttention(config, config.encoder_attention_heads, parse_head=parse_head)
        self.relations = SyntaxMTRelations(config, self.self_attn.head_dim, use_dependency=not in_source_parser)
        in_sla = not in_source_parser and config.sla_layers and layer_number in config.sla_layers
        self.localized_heads = config.sla_heads if in_sla else 0
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.feed_forward = SyntaxMTFeedForward(config, config.encoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model)
        self.dropout = config.dropout

    def _residual(self, hidden_states, layer_norm, sublayer):
        """post-LN: x = LN(x + dropout(f(x))); pre-LN: x = x + dropout(f(LN(x))). `f` returns (out, *extras)."""
        pre_ln = self.config.normalize_before
        output, *extras = sublayer(layer_norm(hidden_states) if pre_ln else hidden_states)
        hidden_states = hidden_states + dropout(output, self.dropout, self.training)
        return (hidden_states if pre_ln else layer_norm(hidden_states)), extras

    def forward(self, hidden_states, mask, relation_ids=None, localized_log_mask=None, output_attentions=False):
        """mask: the forward's `AttentionMask`; relation_ids: its `RelationIds` (shared by the layers)."""
        relation = self.relations(relation_ids)
        hidden_states, (probs, parse_logits) = self._residual(
            hidden_states,
            self.self_attn_layer_norm,
            lambda x: self.self_attn(
                x,
                mask=mask,
                relation=relation,
                localized_log_mask=localized_log_mask if self.localized_heads else None,
                localized_heads=self.localized_heads,
                need_weights=output_attentions,
            ),
        )
        hidden_states, _ = self._residual(hidden_states, self.final_layer_norm, lambda x: (self.feed_forward(x),))
        return hidden_states, probs, parse_logits


class SyntaxMTDecoderLayer(SyntaxMTEncoderLayer):
    def __init__(self, config, layer_number):
        nn.Module.__init__(self)
        self.config = config
        self.self_attn = SyntaxMTAttention(
            config,
            config.decoder_attention_heads,
            parse_head=config.dbsa_decoder_layer == layer_number,
            layer_idx=layer_number - 1,
        )
        self.relations = SyntaxMTRelations(config, self.self_attn.head_dim, use_dependency=False)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.encoder_attn = SyntaxMTAttention(
            config, config.decoder_attention_heads, is_cross_attention=True, layer_idx=layer_number - 1
        )
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.feed_forward = SyntaxMTFeedForward(config, config.decoder_ffn_dim)
        self.final_layer_norm = nn.LayerNorm(config.d_model)
        self.dropout = config.dropout

    def forward(
        self,
        hidden_states,
        encoder_hidden_states,
        encoder_mask,
        mask=None,
        cache=None,
        output_attentions=False,
        relation_ids=None,
    ):
        """encoder_mask, mask: the forward's `AttentionMask`s of the source keys and of the target keys (padding and
        the future); relation_ids: the Shaw ids of the new queries (`RelationIds`)."""
        relation = self.relations(relation_ids)
        hidden_states, (self_probs, parse_logits) = self._residual(
            hidden_states,
            self.self_attn_layer_norm,
            lambda x: self.self_attn(x, mask=mask, cache=cache, relation=relation, need_weights=output_attentions),
        )
        hidden_states, (cross_probs, _) = self._residual(
            hidden_states,
            self.encoder_attn_layer_norm,
            lambda x: self.encoder_attn(
                x,
                key_value_states=encoder_hidden_states,
                mask=encoder_mask,
                cache=cache,
                need_weights=output_attentions,
            ),
        )
        hidden_states, _ = self._residual(hidden_states, self.final_layer_norm, lambda x: (self.feed_forward(x),))
        return hidden_states, self_probs, cross_probs, parse_logits


# ---------------------------------------------------------------------------------------------
# Model outputs
# ---------------------------------------------------------------------------------------------


@dataclass
class SyntaxMTEncoderOutput(BaseModelOutput):
    """Encoder output plus the scores of the encoder parse head (B, n, n) when DBSA-enc is on, and,
    for a self-parsing model, the parse module's scores (B, n, n) and the tree the encoder read
    (`source_heads`, B × n: given, or decoded from those scores; -100 outside the tree)."""

    parse_logits: torch.FloatTensor | None = None
    source_tree_logits: torch.FloatTensor | None = None
    source_heads: torch.LongTensor | None = None


@dataclass
class SyntaxMTDecoderOutput(BaseModelOutputWithPastAndCrossAttentions):
    """Decoder output plus the scores of the decoder parse head (B, m, m) when DBSA-dec is on."""

    parse_logits: torch.FloatTensor | None = None


@dataclass
class SyntaxMTModelOutput(Seq2SeqModelOutput):
    encoder_parse_logits: torch.FloatTensor | None = None
    decoder_parse_logits: torch.FloatTensor | None = None
    source_tree_logits: torch.FloatTensor | None = None
    source_heads: torch.LongTensor | None = None


@dataclass
class SyntaxMTSeq2SeqLMOutput(Seq2SeqLMOutput):
    """`loss` = token_loss + λ_enc · encoder_parse_loss + λ_dec · decoder_parse_loss (SPEC §5)
    + λ_self · source_tree_loss (self-parsing, SPEC §9)."""

    token_loss: torch.FloatTensor | None = None
    encoder_parse_loss: torch.FloatTensor | None = None
    decoder_parse_loss: torch.FloatTensor | None = None
    source_tree_loss: torch.FloatTensor | None = None
    encoder_parse_logits: torch.FloatTensor | None = None
    decoder_parse_logits: torch.FloatTensor | None = None
    source_tree_logits: torch.FloatTensor | None = None
    source_heads: torch.LongTensor | None = None


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


class SyntaxMTPreTrainedModel(PreTrainedModel):
    config_class = SyntaxMTConfig
    config: SyntaxMTConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True  # the layers are GradientCheckpointingLayers
    _supports_sdpa = True  # "eager" runs every attention through the explicit path
    _supports_flex_attn = True  # "flex_attention": `attention_functions.flex_attention`
    accepts_loss_kwargs = False  # the loss is a per-batch mean (token + parse terms)
    _no_split_modules = ["SyntaxMTEncoderLayer", "SyntaxMTDecoderLayer"]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """`PreTrainedModel.from_pretrained` after `model_files.check_model_files`: a folder without config.json, a
        checkpoint of another model type (a MarianMT one: convert it with `from_marian`) and a damaged
        `*.safetensors` file are refused naming them (the last also through `AutoModelForSeq2SeqLM` and `pipeline()`,
        which pass the config they read)."""
        model_type = cls.config_class.model_type if kwargs.get("config") is None else None
        check_model_files(pretrained_model_name_or_path, model_type, **kwargs)
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        """`set_attn_implementation("eager" | "sdpa" | "flex_attention")` works: attention reads the config at every
        call (`attention_functions.choose_attention`)."""
        return True

    def _output_switches(self, output_attentions, output_hidden_states, return_dict):
        """The call's `output_attentions`, `output_hidden_states`, `return_dict`; the config's where not given."""
        config = self.config
        return (
            config.output_attentions if output_attentions is None else output_attentions,
            config.output_hidden_states if output_hidden_states is None else output_hidden_states,
            config.return_dict if return_dict is None else return_dict,
        )

    def syntax_parameter_names(self) -> list[str]:
        """Names (as `named_parameters()` gives them) of the parameters the syntax adds to a plain Transformer:
        the relation tables and W_rel, the U and u of DBSA parse heads, the self-parsing parse module. A converted
        MarianMT checkpoint has a counterpart for every other parameter (`convert_marian`); training can give
        these their own learning rate (`--syntax_lr_multiplier`)."""
        modules = list(self.named_modules())
        prefixes = tuple(f"{name}." for name, module in modules
                         if isinstance(module, (SyntaxMTRelations, SyntaxMTSourceParser)))
        parse_extras = {f"{name}.{extra}" for name, module in modules
                        if isinstance(module, SyntaxMTAttention) and module.parse_head
                        for extra in ("parse_bilinear", "parse_key_bias")}
        return [name for name, _ in self.named_parameters() if name.startswith(prefixes) or name in parse_extras]

    @torch.no_grad()
    def _init_weights(self, module):
        super()._init_weights(module)
        std = self.config.init_std
        if isinstance(module, RelationTable):
            init.normal_(module.key, mean=0.0, std=std)
            init.normal_(module.value, mean=0.0, std=std)
        elif isinstance(module, SyntaxMTAttention) and module.parse_head:
            init.normal_(module.parse_bilinear, mean=0.0, std=std)
            init.zeros_(module.parse_key_bias)
        elif isinstance(module, SyntaxMTSourceParser):
            init.normal_(module.arc_bilinear, mean=0.0, std=std)
            init.zeros_(module.arc_key_bias)
        elif isinstance(module, SyntaxMTForConditionalGeneration):
            init.zeros_(module.final_logits_bias)


def _check_features(name, tensor, reference, reference_name="input_ids"):
    """Shape of a syntax feature against its tokens; integer heads, finite distances."""
    if tensor.shape != reference.shape:
        raise ValueError(f"{name} has shape {tuple(tensor.shape)} but {reference_name} has shape {tuple(reference.shape)}")
    if name.endswith("heads") and (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"{name} must hold integer head indices, not {tensor.dtype}")
    if name.endswith("distances") and not torch.isfinite(tensor).all():
        raise ValueError(f"{name} contains NaN or infinite values")


class SyntaxMTSourceParser(nn.Module):
    """The model's own source parser (`config.self_parsing`, SPEC §9): `self_parsing_layers` encoder
    layers with no tree term over the encoder's embedded input S, then bi-affine arc scores (SPEC §5)

        Q_p = S W^Qp / sqrt(d_k),  K_p = S W^Kp,  s_tq = Q_p[t] U K_p[q]^T + K_p[q] · u

    (B, n, n), padding keys masked: P(q = head(t)) = softmax_q(s_t)."""

    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(
            [SyntaxMTEncoderLayer(config, i + 1, in_source_parser=True) for i in range(config.self_parsing_layers)]
        )
        head_dim = config.d_model // config.encoder_attention_heads
        self.arc_query = nn.Linear(config.d_model, head_dim)
        self.arc_key = nn.Linear(config.d_model, head_dim)
        self.arc_bilinear = nn.Parameter(torch.zeros(head_dim, head_dim))
        self.arc_key_bias = nn.Parameter(torch.zeros(head_dim))

    def forward(self, hidden_states, mask, relation_ids=None):
        """mask: the encoder's `AttentionMask`; relation_ids: its Shaw ids (`RelationIds`) or None."""
        for layer in self.layers:
            hidden_states, _, _ = layer(hidden_states, mask, relation_ids)
        query = self.arc_query(hidden_states) / math.sqrt(self.arc_bilinear.shape[0])
        key = self.arc_key(hidden_states)
        scores = (query @ self.arc_bilinear) @ key.transpose(-1, -2) + (key @ self.arc_key_bias)[:, None, :]
        return scores.masked_fill(mask.blocked[:, 0], torch.finfo(scores.dtype).min)


def decode_source_heads(tree_logits, input_ids, attention_mask, special_token_ids):
    """The best single-root tree of every row (`tree_decoding.decode_tree`) over its tree tokens:
    non-padding tokens other than `special_token_ids` (e.g. `</s>`); -100 elsewhere. (B, n) long."""
    in_tree = attention_mask.bool()
    for token_id in special_token_ids:
        in_tree &= input_ids != token_id
    heads = torch.full_like(input_ids, IGNORE_INDEX)
    scores = tree_logits.detach().float().cpu().numpy()
    for row, mask in enumerate(in_tree.cpu()):
        positions = mask.nonzero().flatten()
        if len(positions) == 0:
            continue
        index = positions.numpy()
        tree = decode_tree(scores[row][index[:, None], index[None, :]])
        heads[row, positions.to(heads.device)] = positions.to(heads.device)[torch.tensor(tree, device=heads.device)]
    return heads


class SyntaxMTStack(SyntaxMTPreTrainedModel):
    """What the encoder and decoder stacks share: layers, and the input embedding
    x_t = sqrt(d_model) · E[y_t] (+ PE(position_t) when `use_absolute_positions`), then dropout.
    Each stack owns its token embedding E; the models tie them (`_tied_weights_keys`)."""

    def __init__(self, config, layer_class, num_layers):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.layers = nn.ModuleList([layer_class(config, i + 1) for i in range(num_layers)])
        self.layer_norm = nn.LayerNorm(config.d_model) if config.normalize_before else None
        self.shaw_id_table = RelativePositionIdTable(config.max_relative_position)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def embed(self, input_ids=None, inputs_embeds=None, past_length=0, side="source"):
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        length = inputs_embeds.shape[1]
        if past_length + length > self.config.max_position_embeddings:
            raise ValueError(
                f"{side} length {past_length + length} exceeds max_position_embeddings="
                f"{self.config.max_position_embeddings}"
            )
        hidden_states = inputs_embeds * self.embed_scale
        if self.config.use_absolute_positions:
            positions = torch.arange(past_length, past_length + length, device=hidden_states.device)
            hidden_states = hidden_states + sinusoidal_positions(positions, self.config.d_model).to(hidden_states.dtype)
        return dropout(hidden_states, p=self.config.dropout, training=self.training)


class SyntaxMTEncoder(SyntaxMTStack):
    def __init__(self, config):
        super().__init__(config, SyntaxMTEncoderLayer, config.encoder_layers)
        self.source_parser = SyntaxMTSourceParser(config) if config.self_parsing else None

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        source_heads=None,
        source_distances=None,
        inputs_embeds=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        source_relation_ids=None,
        source_key_buckets=None,
    ):
        """Encode the source; `source_heads` / `source_distances` as in SPEC §7. A self-parsing model
        without `source_heads` reads the tree its parse module predicts (SPEC §9). `source_relation_ids` (and
        `source_key_buckets`), the relation ids the data collator made on the host (`SourceRelationIds`), replace
        the ones the model makes from `source_heads`."""
        config = self.config
        output_attentions, output_hidden_states, return_dict = self._output_switches(
            output_attentions, output_hidden_states, return_dict
        )
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("the encoder takes exactly one of input_ids and inputs_embeds")
        hidden_states = self.embed(input_ids, inputs_embeds)
        batch_size, length = hidden_states.shape[:2]
        if length == 0:
            raise ValueError("the source is empty: input_ids has length 0 (every sentence needs at least one token)")
        reference = input_ids if input_ids is not None else hidden_states[..., 0]
        if attention_mask is None:
            attention_mask = torch.ones(batch_size, length, dtype=torch.long, device=hidden_states.device)
        mask = make_attention_mask(attention_mask, length, length)
        preset = config.preset or "this configuration"
        shaw_ids = self.shaw_id_table(length, length, 0, hidden_states.device) if config.relative_positions else None
        position_relations = combined_relation_ids(shaw_ids) if shaw_ids is not None else None
        source_tree_logits = None
        if self.source_parser is not None:
            source_tree_logits = self.source_parser(hidden_states, mask, position_relations)
            own_tree_rate = config.self_parsing_own_tree_rate if self.training else 0.0
            if source_heads is None or own_tree_rate:
                if input_ids is None:
                    raise ValueError("a self-parsing model needs input_ids (not inputs_embeds) to find the tree tokens "
                                     "when no source_heads are given")
                special = {i for i in (config.eos_token_id, config.pad_token_id, config.bos_token_id) if i is not None}
                own_heads = decode_source_heads(source_tree_logits, input_ids, attention_mask, sorted(special))
                if source_heads is None:
                    source_heads = own_heads
                else:  # training: a share of the sentences read the model's own tree
                    own = torch.rand(batch_size, device=own_heads.device) < own_tree_rate
                    source_heads = torch.where(own[:, None], own_heads, source_heads)
        relation_ids = position_relations
        if source_relation_ids is not None and config.dependency_relations is not None and not config.self_parsing:
            relation_ids = check_source_relation_ids(config, source_relation_ids, source_key_buckets, reference)
            if config.dbsa_encoder_layer and source_heads is not None:
                walk_to_roots(source_heads.masked_fill(attention_mask == 0, IGNORE_INDEX), ancestors=False)
        elif config.dependency_relations is not None or (config.dbsa_encoder_layer and source_heads is not None):
            if source_heads is None:
                raise ValueError(
                    f"{preset} uses dependency relations ({config.dependency_relations}) and needs `source_heads` "
                    "(head index of every source token, -100 outside the tree); see hf_syntax_mt.add_syntax_features"
                )
            _check_features("source_heads", source_heads, reference)
            source_heads = source_heads.masked_fill(attention_mask == 0, IGNORE_INDEX)
            if config.dependency_relations is not None:
                relation_ids = make_source_relation_ids(config, source_heads, shaw_ids)
                if relation_ids.key_buckets is not None:
                    relation_ids.key_buckets = relation_ids.key_buckets.to(hidden_states.dtype)
            else:
                walk_to_roots(source_heads, ancestors=False)  # validates the gold trees of the parse loss
        localized_log_mask = None
        if config.sla_layers:
            if config.self_parsing:
                if source_distances is not None:
                    raise ValueError(
                        f"{preset} parses for itself (self_parsing=True) and derives its SLA distances from the "
                        "source tree it reads; pass source_heads (or nothing), not source_distances"
                    )
                source_distances = tree_distances(source_heads)
            if source_distances is None:
                raise ValueError(
                    f"{preset} uses syntax-guided localized attention and needs `source_distances` "
                    "(syntactic distance of the gap after every source token); see hf_syntax_mt.add_syntax_features"
                )
            _check_features("source_distances", source_distances, reference)
            localized_log_mask = localized_attention_log_mask(source_distances, config.sla_tau)

        all_hidden_states, all_attentions, parse_logits = [], [], None
        for layer in self.layers:
            all_hidden_states.append(hidden_states)
            hidden_states, probs, layer_parse_logits = layer(
                hidden_states, mask, relation_ids, localized_log_mask, output_attentions
            )
            all_attentions.append(probs)
            if layer_parse_logits is not None:
                parse_logits = layer_parse_logits
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        all_hidden_states.append(hidden_states)
        output = SyntaxMTEncoderOutput(
            last_hidden_state=hidden_states,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(all_attentions) if output_attentions else None,
            parse_logits=parse_logits,
            source_tree_logits=source_tree_logits,
            source_heads=source_heads if self.source_parser is not None else None,
        )
        return output if return_dict else output.to_tuple()


class SyntaxMTDecoder(SyntaxMTStack):
    def __init__(self, config):
        super().__init__(config, SyntaxMTDecoderLayer, config.decoder_layers)

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        encoder_hidden_states=None,
        encoder_attention_mask=None,
        cache=None,
        inputs_embeds=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
    ):
        """Decode with causal self-attention; query positions start at the cache's past length.

        attention_mask: (B, past + m) padding mask of the decoder tokens (1 = real), optional.
        """
        config = self.config
        output_attentions, output_hidden_states, return_dict = self._output_switches(
            output_attentions, output_hidden_states, return_dict
        )
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("the decoder takes exactly one of input_ids and inputs_embeds")
        use_cache = config.use_cache if use_cache is None else use_cache
        if self.training and any(layer.gradient_checkpointing for layer in self.layers):
            if cache is not None and cache.get_seq_length() > 0:
                raise ValueError(
                    "activation checkpointing recomputes the decoder layers in the backward pass and cannot continue "
                    "a filled decoder `cache`; call model.eval() or model.activation_checkpointing_disable()"
                )
            if use_cache:
                logger.warning_once("`use_cache=True` is incompatible with activation checkpointing; using `use_cache=False`")
            use_cache, cache = False, None
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        past_length = cache.get_seq_length() if cache is not None else 0
        hidden_states = self.embed(input_ids, inputs_embeds, past_length=past_length, side="target")
        length = hidden_states.shape[1]
        padding_mask = None
        if attention_mask is not None:
            if attention_mask.shape[-1] != past_length + length:
                raise ValueError(
                    f"decoder_attention_mask has length {attention_mask.shape[-1]}, but the decoder reads "
                    f"{past_length} cached + {length} new tokens: give the mask of all {past_length + length}"
                )
            padding_mask = attention_mask.bool()
        device = hidden_states.device
        mask = make_attention_mask(padding_mask, length, past_length + length, causal=True, device=device)
        encoder_mask = None if encoder_attention_mask is None else make_attention_mask(encoder_attention_mask)
        relation_ids = None
        if config.relative_positions:  # one new row a decoding step
            relation_ids = combined_relation_ids(self.shaw_id_table(length, past_length + length, past_length, device))
        all_hidden_states, self_attentions, cross_attentions, parse_logits = [], [], [], None
        for layer in self.layers:
            all_hidden_states.append(hidden_states)
            hidden_states, self_probs, cross_probs, layer_parse_logits = layer(
                hidden_states,
                encoder_hidden_states,
                encoder_mask,
                mask=mask,
                cache=cache,
                output_attentions=output_attentions,
                relation_ids=relation_ids,
            )
            self_attentions.append(self_probs)
            cross_attentions.append(cross_probs)
            if layer_parse_logits is not None:
                parse_logits = layer_parse_logits
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        all_hidden_states.append(hidden_states)
        output = SyntaxMTDecoderOutput(
            last_hidden_state=hidden_states,
            cache=cache if use_cache else None,
            hidden_states=tuple(all_hidden_states) if output_hidden_states else None,
            attentions=tuple(self_attentions) if output_attentions else None,
            cross_attentions=tuple(cross_attentions) if output_attentions else None,
            parse_logits=parse_logits,
        )
        return output if return_dict else output.to_tuple()


class SyntaxMTModel(SyntaxMTPreTrainedModel):
    """The bare syntax-aware encoder–decoder (no LM head). With `tie_word_embeddings` (the default) the
    source and target embeddings are one matrix (`shared`), as in Vaswani et al."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = SyntaxMTEncoder(config)
        self.decoder = SyntaxMTDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    def get_encoder(self):
        return self.encoder

    def get_decoder(self):
        return self.decoder

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        source_heads=None,
        source_distances=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        source_relation_ids=None,
        source_key_buckets=None,
    ):
        """Syntax features reach the encoder only; once `encoder_outputs` is given they are ignored.
        `decoder_attention_mask` (B, past + m) masks padded decoder tokens as keys (1 = real)."""
        output_attentions, output_hidden_states, return_dict = self._output_switches(
            output_attentions, output_hidden_states, return_dict
        )
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                source_heads=source_heads,
                source_distances=source_distances,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                return_dict=True,
                source_relation_ids=source_relation_ids,
                source_key_buckets=source_key_buckets,
            )
        elif not isinstance(encoder_outputs, SyntaxMTEncoderOutput):
            encoder_outputs = SyntaxMTEncoderOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        output = SyntaxMTModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            cache=decoder_outputs.cache,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            encoder_parse_logits=encoder_outputs.parse_logits,
            decoder_parse_logits=decoder_outputs.parse_logits,
            source_tree_logits=encoder_outputs.source_tree_logits,
            source_heads=encoder_outputs.source_heads,
        )
        return output if return_dict else output.to_tuple()


class SyntaxMTForConditionalGeneration(SyntaxMTPreTrainedModel, GenerationMixin):
    """Syntax-aware NMT model with a (tied) LM head; loss = cross-entropy (label-smoothed when
    `config.label_smoothing` > 0) plus the DBSA parse losses and the self-parsing loss.

    logits = lm_head(h) + final_logits_bias, the bias a (1, V) buffer as in BART / Marian (zeros unless a
    converted checkpoint brings one; checkpoints saved without it load with zeros). `from_marian`, the warm start
    from a MarianMT checkpoint, is defined by `hf_syntax_mt.hub.convert_marian` (imported with the package).
    """

    _keys_to_ignore_on_load_missing = ["final_logits_bias"]

    _tied_weights_keys = {
        "lm_head.weight": "model.shared.weight",
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }

    def __init__(self, config):
        super().__init__(config)
        self.model = SyntaxMTModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.final_logits_bias = nn.Buffer(torch.zeros((1, config.vocab_size)))
        self.post_init()

    def _prepare_generated_length(self, generation_config, has_default_max_length, *args, **kwargs):
        """As in `GenerationMixin`, except that `max_new_tokens` replaces the model's saved `max_length` (training saves
        its `max_target_length` there, the limit of a plain `generate()`) without the warning that both were set; a
        `max_length` other than the saved one, given with `max_new_tokens`, still warns."""
        if generation_config.max_new_tokens is not None and generation_config.max_length == self.generation_config.max_length:
            has_default_max_length = True
        return super()._prepare_generated_length(generation_config, has_default_max_length, *args, **kwargs)

    def resize_token_embeddings(self, new_num_tokens=None, pad_to_multiple_of=None, mean_resizing=True):
        """Resize the embeddings (and LM head) as transformers does, and `final_logits_bias` with them (new entries 0)."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        bias, size = self.final_logits_bias, embeddings.weight.shape[0]
        extra = bias.new_zeros((1, max(size - bias.shape[1], 0)))
        self.final_logits_bias = nn.Buffer(torch.cat([bias[:, :size], extra], dim=1))
        return embeddings

    def get_encoder(self):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def get_input_embeddings(self):
        return self.model.shared

    def set_input_embeddings(self, value):
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        decoder_input_ids=None,
        decoder_attention_mask=None,
        encoder_outputs=None,
        cache=None,
        inputs_embeds=None,
        decoder_inputs_embeds=None,
        labels=None,
        source_heads=None,
        source_distances=None,
        target_heads=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        source_relation_ids=None,
        source_key_buckets=None,
    ):
        """
        labels: (B, m) target ids, -100 ignored; decoder inputs are labels shifted right.
        source_heads, source_distances, target_heads: syntax features (SPEC §7); `target_heads`
        indexes the labels row and is shifted with it (`shift_target_heads_right`).
        source_relation_ids, source_key_buckets: the encoder's relation ids made by the data collator
        (`SourceRelationIds`), in place of the ones the model makes from `source_heads`.
        loss = token loss + λ_enc · encoder parse loss + λ_dec · decoder parse loss; the token loss is
        the cross-entropy, label-smoothed with ε = `config.label_smoothing` (default 0: plain CE); a parse
        term is added when its gold heads are given (required in training, optional in evaluation).
        """
        config = self.config
        return_dict = config.return_dict if return_dict is None else return_dict
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = shift_tokens_right(labels, config.pad_token_id, config.decoder_start_token_id)
        if self.training and labels is not None:
            if config.dbsa_encoder_layer and source_heads is None:
                raise ValueError(
                    f"{config.preset or 'this configuration'} trains an encoder parse head (dbsa_encoder_layer="
                    f"{config.dbsa_encoder_layer}) and needs `source_heads` during training"
                )
            if config.self_parsing and source_heads is None:
                raise ValueError(
                    f"{config.preset or 'this configuration'} trains its own source parser (self_parsing=True) and "
                    "needs the parser's `source_heads` during training"
                )
            if config.dbsa_decoder_layer and target_heads is None:
                raise ValueError(
                    f"{config.preset or 'this configuration'} trains a decoder parse head (dbsa_decoder_layer="
                    f"{config.dbsa_decoder_layer}) and needs `target_heads` during training: the target's trees, which "
                    "hf-syntax-mt-train attaches (a --target_parser) and a preprocessing that tokenizes the targets "
                    "alone, as transformers' run_translation.py, does not (train transformer_dbsa_enc there)"
                )
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            source_heads=source_heads,
            source_distances=source_distances,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            return_dict=True,
            source_relation_ids=source_relation_ids,
            source_key_buckets=source_key_buckets,
        )
        logits = F.linear(outputs.last_hidden_state, self.lm_head.weight, self.final_logits_bias[0])

        loss = token_loss = encoder_parse_loss = decoder_parse_loss = source_tree_loss = None
        if labels is not None:
            token_loss = label_smoothed_cross_entropy(
                logits.view(-1, logits.shape[-1]), labels.reshape(-1), config.label_smoothing, IGNORE_INDEX
            )
            loss = token_loss
            if outputs.encoder_parse_logits is not None and source_heads is not None:
                gold = source_heads if attention_mask is None else source_heads.masked_fill(attention_mask == 0, IGNORE_INDEX)
                encoder_parse_loss = _parse_loss(outputs.encoder_parse_logits, gold)
                loss = loss + config.dbsa_encoder_loss_weight * encoder_parse_loss
            if outputs.decoder_parse_logits is not None and target_heads is not None:
                _check_features("target_heads", target_heads, labels, "labels")
                walk_to_roots(target_heads, "target_heads", ancestors=False)
                gold = decoder_parse_targets(target_heads, config.dbsa_decoder_supervised_row)
                num_arcs = None  # "kept": the mean over the supervised arcs
                if config.dbsa_decoder_loss_normalization == "all":  # the dropped arcs count too (seed 004's code)
                    num_arcs = (target_heads[:, : outputs.decoder_parse_logits.shape[1]] != IGNORE_INDEX).sum()
                decoder_parse_loss = _parse_loss(outputs.decoder_parse_logits, gold, num_arcs)
                loss = loss + config.dbsa_decoder_loss_weight * decoder_parse_loss
            if outputs.source_tree_logits is not None and source_heads is not None:
                gold = source_heads if attention_mask is None else source_heads.masked_fill(attention_mask == 0, IGNORE_INDEX)
                source_tree_loss = _parse_loss(outputs.source_tree_logits, gold)
                loss = loss + config.self_parsing_loss_weight * source_tree_loss

        output = SyntaxMTSeq2SeqLMOutput(
            loss=loss,
            logits=logits,
            cache=outputs.cache,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            token_loss=token_loss,
            encoder_parse_loss=encoder_parse_loss,
            decoder_parse_loss=decoder_parse_loss,
            source_tree_loss=source_tree_loss,
            encoder_parse_logits=outputs.encoder_parse_logits,
            decoder_parse_logits=outputs.decoder_parse_logits,
            source_tree_logits=outputs.source_tree_logits,
            source_heads=outputs.source_heads,
        )
        return output if return_dict else output.to_tuple()

    @torch.no_grad()
    def predict_heads(self, input_ids, attention_mask=None, decoder_input_ids=None, labels=None, **syntax_features):
        """The model as a dependency parser: argmax heads of the DBSA parse heads (SPEC §5), or the
        maximum spanning tree of a self-parsing model's parse module (SPEC §9).

        Returns a dict with `source_heads` (B, n) from the self-parsing module or else the encoder parse
        head (given `source_heads` are ignored: the model parses), and, when the decoder
        has a parse head and a target is given (`labels`, or `decoder_input_ids` from `generate`),
        `target_heads` indexing the target row (as `config.dbsa_decoder_supervised_row`: "reading", token t's
        head is the argmax of row t + 1 (column h + 1 is token h; -100 where it is the start token);
        "predicting", of row t (column h is token h)). Padding positions are -100. Runs in eval mode (no
        dropout) and restores the model's mode.
        """
        config = self.config
        if not (config.dbsa_encoder_layer or config.dbsa_decoder_layer or config.self_parsing):
            raise ValueError("predict_heads needs a model with a parse head (dbsa_encoder_layer/dbsa_decoder_layer) "
                             "or its own parser (self_parsing)")
        if config.self_parsing:
            syntax_features.pop("source_heads", None)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        start = torch.full_like(input_ids[:, :1], self.config.decoder_start_token_id)
        if labels is not None:  # read every label token: [start, y_0, ..., y_{m-1}]
            decoder_input_ids = torch.cat([start, labels.masked_fill(labels == IGNORE_INDEX, self.config.pad_token_id)], 1)
        if decoder_input_ids is None:
            decoder_input_ids = start
        was_training = self.training
        self.eval()  # deterministic: no dropout
        try:
            outputs = self(
                input_ids=input_ids,
                attention_mask=attention_mask,
                decoder_input_ids=decoder_input_ids,
                use_cache=False,
                return_dict=True,
                **syntax_features,
            )
        finally:
            self.train(was_training)
        result = {}
        if outputs.source_heads is not None:
            result["source_heads"] = outputs.source_heads
        elif outputs.encoder_parse_logits is not None:
            result["source_heads"] = outputs.encoder_parse_logits.argmax(-1).masked_fill(attention_mask == 0, IGNORE_INDEX)
        if outputs.decoder_parse_logits is not None and decoder_input_ids.shape[1] > 1:
            predicted = outputs.decoder_parse_logits.argmax(-1)
            if config.dbsa_decoder_supervised_row == "predicting":
                heads = predicted[:, :-1]
            else:
                positions = predicted[:, 1:] - 1
                heads = positions.masked_fill(positions < 0, IGNORE_INDEX)
            if labels is not None:
                heads = heads.masked_fill(labels == IGNORE_INDEX, IGNORE_INDEX)
            else:
                heads = heads.masked_fill(decoder_input_ids[:, 1:] == self.config.pad_token_id, IGNORE_INDEX)
            result["target_heads"] = heads
        return result


def _parse_loss(parse_logits, gold_heads, num_arcs=None):
    """Cross-entropy of the parse rows against gold head indices (-100 ignored): the NLL summed over the
    supervised rows divided by `num_arcs`, by default their number (the mean)."""
    length = parse_logits.shape[-1]
    gold = gold_heads[:, : parse_logits.shape[1]]
    if not (gold != IGNORE_INDEX).any():
        return parse_logits.sum() * 0.0
    logits = parse_logits.reshape(-1, length).float()
    if num_arcs is None:
        return F.cross_entropy(logits, gold.reshape(-1), ignore_index=IGNORE_INDEX)
    return F.cross_entropy(logits, gold.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum") / num_arcs


__all__ = [
    "SyntaxMTPreTrainedModel",
    "SyntaxMTModel",
    "SyntaxMTForConditionalGeneration",
    "dependency_depth_buckets",
    "dependency_relation_ids",
    "labeled_relation_names",
    "relative_position_ids",
    "localized_attention_log_mask",
]
