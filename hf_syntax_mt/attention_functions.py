"""Attention functions, chosen by name from one registry (`ATTENTION_FUNCTIONS`) as 🤗's models choose theirs by
`config._attn_implementation`, and the masks they read, made once a forward (`make_attention_mask`).

Every function computes, for the heads of one attention (`SyntaxMTAttention`),

    e_ij = q_i · k_j  (+ q_i · w^K_{id(i, j)}, a relation's key term)  (+ log G_ij on the last `localized_heads`),
    α_i = softmax_j(e_i) over the keys the mask leaves,   z_i = Σ_j α_ij v_j,

q already scaled by 1/sqrt(d_k), with head 0 a bi-affine parse head reading softmax(parse_logits) when there is one:

- "eager": the explicit product, mask and softmax; the only one that returns the probabilities and so the only one
  that computes a relation's value term read through pair ids (Σ_j α_ij w^V_{id(i, j)}, `AttentionRelation`).
- "sdpa": `F.scaled_dot_product_attention` per group of heads (plain, localized), the key term and log G in its
  additive mask.
- "flex_attention": `torch.nn.attention.flex_attention` per group, the key term read in its `score_mod` from the
  (B, H, q, C) scores of every query against every relation at the pair's id (`RelationScores`), so no (n, n) bias is
  built; compiled on a GPU, where its backward scatters the key term's gradient into the (B, H, q, C) scores with
  atomic adds (PyTorch's learnable score_mod buffers: not bit-for-bit deterministic). It has no dropout and no
  backward on a CPU.

`choose_attention` picks the function of a call: the one asked for, except where the call needs what only another
computes (probabilities, a learned bias on a CPU, dropout or gradients in FlexAttention).
"""

from dataclasses import dataclass, field

import torch
from torch.nn import functional as F

from .fast_ops import dropout
from .relation_attention import RelationScores, summed_per_relation

try:  # torch >= 2.5
    from torch.nn.attention.flex_attention import flex_attention as _flex_attention
except ImportError:  # pragma: no cover - older torch
    _flex_attention = None


@dataclass
class AttentionMask:
    """The keys each query may not attend, made once a forward and shared by the layers: `blocked` (B or 1, 1, q or
    1, k) bool, True where hidden (padding, the future of a causal query); `additive(dtype)` the same as 0 / the
    dtype's minimum, for fused attention (made once a dtype)."""

    blocked: torch.Tensor
    _additive: dict = field(default_factory=dict, repr=False)

    def additive(self, dtype):
        if dtype not in self._additive:
            self._additive[dtype] = torch.zeros(self.blocked.shape, dtype=dtype, device=self.blocked.device).masked_fill(
                self.blocked, torch.finfo(dtype).min)
        return self._additive[dtype]


def make_attention_mask(padding_mask=None, query_length=1, key_length=1, causal=False, device=None):
    """`AttentionMask` of padding (bool (B, k), True for a real key) and, when `causal`, of the keys after each query
    (query i sits at position k - q + i); None when nothing is hidden."""
    blocked = None if padding_mask is None else ~padding_mask.bool()[:, None, None, :]
    if causal and query_length > 1:  # a single new query sees every key
        future = torch.ones(query_length, key_length, dtype=torch.bool, device=device).triu(key_length - query_length + 1)
        blocked = future[None, None] if blocked is None else blocked | future
    return None if blocked is None else AttentionMask(blocked)


def _head_groups(num_heads, parse_logits, localized_heads):
    """(start, end, localized) of the heads fused attention runs together: the plain heads after a parse head, then
    the localized heads."""
    first = 1 if parse_logits is not None else 0
    localized_start = max(num_heads - localized_heads, first) if localized_heads else num_heads
    return [(start, end, localized) for start, end, localized in
            ((first, localized_start, False), (localized_start, num_heads, True)) if start < end]


def _parse_head_output(module, parse_logits, value):
    """M_parse = softmax(parse_logits) V_p of the parse head, (B, 1, q, d_v)."""
    probs = dropout(parse_logits.softmax(-1), p=module.dropout, training=module.training)
    return (probs @ value[:, 0])[:, None]


def eager_attention(module, query, key, value, mask=None, relation=None, relation_scores=None, parse_logits=None,
                    localized_log_mask=None, localized_heads=0):
    """The explicit path -> (output (B, H, q, d_v), probabilities (B, H, q, k)); with pair relation ids that have a
    value table, the value term Σ_j α_ij w^V_{id(i, j)} of the dropped-out weights is added."""
    scores = query @ key.transpose(-1, -2)
    if relation_scores is not None:
        scores = scores.add_(relation_scores.dense())
    if localized_heads:
        scores[:, -localized_heads:] += localized_log_mask[:, None]
    if parse_logits is not None:
        scores = torch.cat([parse_logits[:, None], scores[:, 1:]], dim=1)
    if mask is not None:
        scores.masked_fill_(mask.blocked, torch.finfo(scores.dtype).min)
    probs = scores.softmax(dim=-1)
    weights = dropout(probs, p=module.dropout, training=module.training)
    output = weights @ value
    if relation is not None and relation.needs_probabilities:
        output = output + relation.values_from_weights(weights, module.parse_head)
    return output, probs


class _FusedAttentionWithLearnedKeyTerm(torch.autograd.Function):
    """Fused attention whose key term learns, for the CPU (whose fused kernel falls back to an unfused form when its
    mask needs a gradient). Forward: the fused kernel with the bias b = per_relation[ids] (+ the fixed additive mask
    m) as a constant mask. Backward: the probabilities recomputed from what the forward kept (q, k, v and the
    (B, H, q, C) relation scores; nothing (n, n)):

        P = softmax(q k^T + b + m),  dv = P^T dO,  dS = P ⊙ (dP − rowsum(dP ⊙ P)), dP = dO v^T,
        dq = dS k,  dk = dS^T q,  d per_relation[c] = Σ_{j: id(i, j) = c} dS_ij.
    No dropout (the recomputed P could not repeat the kernel's)."""

    @staticmethod
    def forward(ctx, query, key, value, per_relation, ids, additive):
        bias = RelationScores(per_relation, ids).dense()
        bias = bias if additive is None else bias + additive
        output = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=1.0)
        ctx.save_for_backward(query, key, value, per_relation, ids, *(() if additive is None else (additive,)))
        return output

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, per_relation, ids, *additive = ctx.saved_tensors
        scores = torch.baddbmm(RelationScores(per_relation, ids).dense().flatten(0, 1), query.flatten(0, 1),
                               key.flatten(0, 1).transpose(1, 2)).view(*query.shape[:-1], key.shape[-2])
        if additive:
            scores = scores + additive[0]
        probs = scores.softmax(-1)
        grad_value = probs.transpose(-1, -2) @ grad_output
        grad_scores = torch._softmax_backward_data(grad_output @ value.transpose(-1, -2), probs, -1, probs.dtype)
        grad_per_relation = summed_per_relation(grad_scores, ids, per_relation.shape[-1])
        return grad_scores @ key, grad_scores.transpose(-1, -2) @ query, grad_value, grad_per_relation, None, None


def _learned_on_cpu(per_relation):
    """Whether a key term learns on a CPU, where SDPA's fused kernel cannot learn its mask."""
    return per_relation.device.type == "cpu" and torch.is_grad_enabled() and per_relation.requires_grad


def sdpa_attention(module, query, key, value, mask=None, relation=None, relation_scores=None, parse_logits=None,
                   localized_log_mask=None, localized_heads=0):
    """Fused attention per group of heads, the key term (B, H, q, k) and log G in the additive mask (a fully hidden
    row gets uniform weights, as the explicit path) -> (output, None). On a CPU, a key term that learns goes through
    `_FusedAttentionWithLearnedKeyTerm` (no dropout: `choose_attention` picks eager for a call that drops out)."""
    learned = relation_scores is not None and _learned_on_cpu(relation_scores.per_relation)
    bias = relation_scores.dense() if relation_scores is not None and not learned else None
    outputs = [_parse_head_output(module, parse_logits, value)] if parse_logits is not None else []
    for start, end, localized in _head_groups(query.shape[1], parse_logits, localized_heads):
        additive = None if bias is None else bias[:, start:end]
        if localized:
            log_mask = localized_log_mask[:, None].to(query.dtype)
            additive = log_mask if additive is None else additive + log_mask
        if mask is not None:
            additive = mask.additive(query.dtype) if additive is None else additive + mask.additive(query.dtype)
        if learned:
            outputs.append(_FusedAttentionWithLearnedKeyTerm.apply(
                query[:, start:end], key[:, start:end], value[:, start:end],
                relation_scores.per_relation[:, start:end], relation_scores.ids, additive))
            continue
        outputs.append(F.scaled_dot_product_attention(
            query[:, start:end], key[:, start:end], value[:, start:end], attn_mask=additive,
            dropout_p=module.dropout if module.training else 0.0, scale=1.0,
        ))
    return (torch.cat(outputs, 1) if len(outputs) > 1 else outputs[0]), None


def _batch_index(tensor, b):
    """Index of row b in a tensor whose batch dimension may be 1 (shared by the rows)."""
    return b if tensor.shape[0] > 1 else 0


def _score_mod(relation_scores, log_mask, blocked):
    """FlexAttention's score_mod of one group of heads: s + per_relation[b, h, i, ids[b, i, j]] (+ log G[b, i, j]),
    the dtype's minimum where the mask hides the key."""
    minimum = torch.finfo(torch.float32).min

    def score_mod(score, b, h, q_idx, kv_idx):
        if relation_scores is not None:
            ids = relation_scores.ids
            relation = ids[_batch_index(ids, b), q_idx, kv_idx]
            score = score + relation_scores.per_relation[b, h, q_idx, relation]
        if log_mask is not None:
            score = score + log_mask[b, q_idx, kv_idx]
        if blocked is not None:
            row = q_idx if blocked.shape[2] > 1 else 0
            score = torch.where(blocked[_batch_index(blocked, b), 0, row, kv_idx], minimum, score)
        return score

    return score_mod


_compiled_flex_attention = None


def _flex(query, key, value, score_mod):
    """`flex_attention`, compiled once off the CPU (its eager form materialises the scores)."""
    global _compiled_flex_attention
    if query.device.type == "cpu":
        return _flex_attention(query, key, value, score_mod=score_mod, scale=1.0)
    if _compiled_flex_attention is None:
        _compiled_flex_attention = torch.compile(_flex_attention, dynamic=True)
    return _compiled_flex_attention(query, key, value, score_mod=score_mod, scale=1.0)


def flex_attention(module, query, key, value, mask=None, relation=None, relation_scores=None, parse_logits=None,
                   localized_log_mask=None, localized_heads=0):
    """FlexAttention per group of heads, the key term read at the pairs' ids inside its `score_mod` -> (output,
    None). No dropout (`choose_attention` does not pick it for a call that drops out)."""
    outputs = [_parse_head_output(module, parse_logits, value)] if parse_logits is not None else []
    blocked = None if mask is None else mask.blocked
    for start, end, localized in _head_groups(query.shape[1], parse_logits, localized_heads):
        scores = None if relation_scores is None else relation_scores.heads(start, end)
        score_mod = _score_mod(scores, localized_log_mask if localized else None, blocked)
        outputs.append(_flex(query[:, start:end], key[:, start:end], value[:, start:end], score_mod))
    return (torch.cat(outputs, 1) if len(outputs) > 1 else outputs[0]), None


ATTENTION_FUNCTIONS = {"eager": eager_attention, "sdpa": sdpa_attention, "flex_attention": flex_attention}


def choose_attention(requested, relation, need_weights, training, dropout_p, device, learning):
    """The name of the attention function of one call: `requested` (the config's `_attn_implementation`), or
    (`learning`: gradients will flow to the call's inputs or relation tables)

    - "eager" when the call returns its weights or a relation's value term reads them (pair ids);
    - "eager" for "sdpa" on a CPU whose key term learns under attention dropout (a learned key term goes through
      `_FusedAttentionWithLearnedKeyTerm` there, whose recomputing backward cannot repeat the dropout);
    - "sdpa" for "flex_attention" where it cannot run: dropout in training, gradients on a CPU, no FlexAttention.
    """
    if need_weights or (relation is not None and relation.needs_probabilities) or requested == "eager":
        return "eager"
    if requested == "flex_attention":
        if _flex_attention is not None and not (training and dropout_p > 0) and not (device.type == "cpu" and learning):
            return "flex_attention"
        requested = "sdpa"
    if (requested == "sdpa" and device.type == "cpu" and learning and training and dropout_p > 0
            and relation is not None and relation.has_pair_key_term):
        return "eager"
    return "sdpa" if requested not in ATTENTION_FUNCTIONS else requested


__all__ = ["ATTENTION_FUNCTIONS", "AttentionMask", "make_attention_mask", "choose_attention", "eager_attention",
           "flex_attention", "sdpa_attention"]
