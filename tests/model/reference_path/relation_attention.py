"""The syntax inside attention (SPEC §2–6): relation ids and masks derived from the inputs, and the relation terms
of attention, computed without a (B, H, q, k, d_k) tensor of per-pair vectors.

Relation-aware attention (Shaw et al.; seeds 000 and 002) adds learned vectors of the relation id(i, j) of each
query–key pair to the keys and values of every head:

    e_ij = q_i · (k_j + r^K_ij) / sqrt(d_k),   z_i = Σ_j α_ij (v_j + r^V_ij),   r^K_ij = w^K_{id(i, j)}, r^V_ij = w^V_{id(i, j)},

w^K, w^V (V, d_k) tables shared by the heads. Both terms go through the tables instead of a gather per pair:

    key term    q_i · w^K_{id(i, j)} = (q W^K^T)[i, id(i, j)]                  (the (q, V) products expanded to the pairs),
    value term  Σ_j α_ij w^V_{id(i, j)} = Σ_r (Σ_{j: id(i, j) = r} α_ij) w^V_r  (the weights summed per id, times w^V),

and each kind of id has its own expand and sum:
- Shaw relative positions, id = clip(j - i, k) + k: a banded Toeplitz structure of 2k - 1 diagonals and two tails
  (`relative_position_expand`, `relative_position_sums`; `RelativePositionTerm`);
- labeled tree relations (self, sibling, ancestor within k): the few related pairs only (`RelationPairs`,
  `RelationTerm`);
- relative depth: factorised through key buckets, M extra columns of q, k and v (`dependency_depth_buckets`,
  `BucketRelationTerm`), so that it also runs inside fused attention.
The autograd functions add the key terms to the (B, H, q, k) scores in place and sum the value terms' gradient back
by the adjoint (expand <-> sum), so no term allocates another (B, H, q, k) tensor.

Imported by `modeling_syntax_mt` and copied with it next to saved models (`trust_remote_code`): torch only.
"""

from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
from torch.nn import functional as F

IGNORE_INDEX = -100
NO_RELATION = -1  # relation id of pairs that get the zero vector


# ---------------------------------------------------------------------------------------------
# Relation ids and masks derived from the inputs (vectorised; no loop over tokens)
# ---------------------------------------------------------------------------------------------


def relative_position_ids(query_length, key_length, max_relative_position, past_length=0, device=None):
    """Shaw et al.: id(i, j) = clip(j - i, k) + k for query positions i = past_length + 0..q-1.

    Returns a LongTensor (query_length, key_length) with values in [0, 2k].
    """
    query_positions = torch.arange(past_length, past_length + query_length, device=device)
    key_positions = torch.arange(key_length, device=device)
    offsets = key_positions[None, :] - query_positions[:, None]
    return offsets.clamp(-max_relative_position, max_relative_position) + max_relative_position


class TreeWalk(NamedTuple):
    """What `walk_to_roots` finds out about a batch of forests (see there)."""

    depth: torch.Tensor
    ancestor_distance: Optional[torch.Tensor]
    root: torch.Tensor
    in_tree: torch.Tensor
    max_depth: int
    max_trees: int


def walk_to_roots(source_heads, name="source_heads", ancestors=True) -> TreeWalk:
    """Follow heads up to the roots of a batch of forests, with one look at the data (on a GPU, one wait
    for the device instead of one per tree level).

    Depth and root by pointer doubling: round k knows every token's 2^k-th ancestor a_k(i) (a root is its
    own head, so the jump stops there) and the steps s_k(i) = min(depth_i, 2^k) that jump really takes,
        a_{k+1}(i) = a_k(a_k(i)),   s_{k+1}(i) = s_k(i) + s_k(a_k(i)),
    for ceil(log2 n) rounds, a number the shape fixes; then depth = s and root = a. The one look at the data
    raises for heads outside the row, heads outside the tree and cycles, and reads the largest depth (the
    number of head-by-head steps that fill `ancestor_distance`) and the most trees in a row.

    Args:
        source_heads: LongTensor (B, n); head index in the row, root -> itself, -100 outside the tree.
        name: the feature's name in error messages.
        ancestors: whether to build `ancestor_distance` (None otherwise).
    Returns a TreeWalk:
        depth (B, n): depth(root) = 0, depth(child) = depth(head) + 1 (0 outside the tree);
        ancestor_distance (B, n, n): s > 0 where token j is the s-th ancestor of token i, else 0;
        root (B, n): the root reached from each token (itself outside the tree);
        in_tree (B, n) bool;
        max_depth, max_trees: ints, the largest depth and the most roots in one row.
    """
    batch_size, length = source_heads.shape
    positions = torch.arange(length, device=source_heads.device).expand(batch_size, length)
    in_tree = source_heads != IGNORE_INDEX
    outside_row = (in_tree & (source_heads < 0)) | (source_heads >= length)
    heads = torch.where(in_tree & ~outside_row, source_heads, positions)
    dangling = in_tree & ~in_tree.gather(1, heads)
    root, depth = heads, (heads != positions).long()
    for _ in range(max(length - 1, 1).bit_length()):
        depth = depth + depth.gather(1, root)
        root = root.gather(1, root)
    cycle = heads.gather(1, root) != root
    num_trees = (in_tree & (heads == positions)).sum(1)
    bad_row, bad_tree, has_cycle, max_depth, max_trees = torch.stack(
        [outside_row.any(), dangling.any(), cycle.any(), depth.max(), num_trees.max()]).tolist()
    if bad_row:
        bad = source_heads[outside_row][0].item()
        raise ValueError(f"{name} contains {bad}: a head must be an index in the same row (0..{length - 1}) or -100")
    if bad_tree:
        raise ValueError(f"{name}: a token in the tree points to a head outside the tree (-100)")
    if has_cycle:
        raise ValueError(f"{name} contains a cycle: some token never reaches a root")
    ancestor_distance = None
    if ancestors:
        ancestor_distance = heads.new_zeros(batch_size, length, length + 1)  # column n: where roots write
        current = positions
        for step in range(1, max_depth + 1):
            parent = heads.gather(1, current)
            ancestor_distance.scatter_(2, torch.where(parent != current, parent, length).unsqueeze(-1), step)
            current = parent
        ancestor_distance = ancestor_distance[..., :length]
    return TreeWalk(depth, ancestor_distance, root, in_tree, max_depth, max_trees)


def dependency_relation_ids(source_heads, scheme, max_distance):
    """Relation id of every token pair, derived from the dependency tree (SPEC §3–4).

    `depth` (seed 000): id = clip(depth_j - depth_i, l) + l, values 0..2l.
    `labeled` (seed 002): 0 = self, 1 = sib (same head), 2..2k+1 = signed depth difference
    -k..-1, 1..k of an ancestor–descendant pair (`labeled_relation_names`). Ancestor–descendant
    pairs with |depth_j - depth_i| > k and unrelated pairs are `NO_RELATION` (zero vector).
    In both schemes, pairs involving a token outside the tree or two different trees
    (sentences) are `NO_RELATION`.

    Returns (ids LongTensor (B, n, n), number of relation embeddings).
    """
    depth, ancestor_distance, root, in_tree, _, _ = walk_to_roots(source_heads, ancestors=scheme == "labeled")
    same_tree = in_tree[:, :, None] & in_tree[:, None, :] & (root[:, :, None] == root[:, None, :])
    if scheme == "depth":
        difference = depth[:, None, :] - depth[:, :, None]
        ids = difference.clamp(-max_distance, max_distance) + max_distance
        return ids.masked_fill(~same_tree, NO_RELATION), 2 * max_distance + 1
    if scheme != "labeled":
        raise ValueError(f"unknown dependency relation scheme {scheme!r}")
    # signed value depth_j - depth_i: -s when j is the s-th ancestor of i, +s when i is that of j
    signed = ancestor_distance.transpose(1, 2) - ancestor_distance
    related = signed != 0
    signed_ids = torch.where(signed < 0, signed + max_distance, signed + max_distance - 1) + 2
    ids = torch.where(related & (signed.abs() <= max_distance), signed_ids, NO_RELATION)
    heads = source_heads
    siblings = (heads[:, :, None] == heads[:, None, :]) & ~related
    ids = torch.where(siblings, 1, ids)
    ids = torch.where(torch.eye(ids.shape[-1], dtype=torch.bool, device=ids.device), 0, ids)
    return ids.masked_fill(~same_tree, NO_RELATION), 2 * max_distance + 2


def dependency_depth_buckets(source_heads, max_distance, dtype=torch.float32):
    """The `depth` relation ids of `dependency_relation_ids`, factorised through key buckets.

    The id of a pair, clip(depth_j - depth_i, l) + l within one tree, depends on the key j only
    through its bucket m(j) = (tree of j, depth_j). With the one-hot key buckets O[j, m] and the
    per-query ids R[i, m] = clip(depth(m) - depth_i, l) + l (NO_RELATION for another tree),
        id(i, j) = R[i, m(j)],
        q_i · w^K_{id(i, j)} = Σ_m (q_i · w^K_{R[i, m]}) O[j, m],
        Σ_j α_ij w^V_{id(i, j)} = Σ_m (α O)[i, m] w^V_{R[i, m]},
    i.e. M extra columns of q, k and v instead of a gather over the (n, n) pairs.
    M = (number of trees) × (maximum depth + 1) of the batch, rounded up to a multiple of 16 with
    empty buckets (fused attention kernels are much slower for head sizes that are not).

    Returns (key_buckets (B, n, M) in `dtype` (the attention's), zero rows outside the tree;
    query_ids LongTensor (B, n, M)).
    """
    depth, _, root, in_tree, max_depth, max_trees = walk_to_roots(source_heads, ancestors=False)
    positions = torch.arange(source_heads.shape[1], device=source_heads.device)
    is_root = in_tree & (root == positions)
    tree_rank = (is_root.long().cumsum(1) - 1).gather(1, root).clamp(min=0)
    num_depths = max_depth + 1
    num_buckets = -(-max(max_trees, 1) * num_depths // 16) * 16
    buckets = torch.arange(num_buckets, device=source_heads.device)
    key_buckets = F.one_hot(tree_rank * num_depths + depth, num_buckets).to(dtype) * in_tree[..., None]
    query_ids = (buckets % num_depths - depth[..., None]).clamp(-max_distance, max_distance) + max_distance
    same_tree = in_tree[..., None] & (buckets // num_depths == tree_rank[..., None])
    return key_buckets, query_ids.masked_fill(~same_tree, NO_RELATION)


def labeled_relation_names(max_distance):
    """Names of the labeled relation ids: ['self', 'sib', -k, ..., -1, 1, ..., k]."""
    return ["self", "sib"] + list(range(-max_distance, 0)) + list(range(1, max_distance + 1))


def localized_attention_log_mask(source_distances, tau):
    """log G of syntax-guided localized attention (seed 003, SPEC §6), (B, n, n).

    With σ(x) = (tanh(x/τ) + 1)/2 = sigmoid(2x/τ) and gap d_t between tokens t and t+1:
      G_ij = Π_{t=j}^{i-2} σ(d_{i-1} - d_t)  for j < i-1,
      G_ij = Π_{t=i+1}^{j-1} σ(d_i - d_t)    for j > i+1,   G_ij = 1 for |i - j| <= 1,
    computed as cumulative sums of log σ along the key axis.
    """
    distances = source_distances.float()
    length = distances.shape[-1]
    index = torch.arange(length, device=distances.device)
    query, gap = index[:, None], index[None, :]
    # right side: R[i, t] = log σ(d_i - d_t) for t >= i + 1; log G[i, j] = Σ_{t=i+1}^{j-1} R[i, t]
    right = F.logsigmoid(2.0 * (distances[:, :, None] - distances[:, None, :]) / tau)
    right = right.masked_fill(gap <= query, 0.0)
    right_cumulative = F.pad(right.cumsum(-1)[..., :-1], (1, 0))
    # left side: L[i, t] = log σ(d_{i-1} - d_t) for t <= i - 2; log G[i, j] = Σ_{t=j}^{i-2} L[i, t]
    previous_gap = F.pad(distances, (1, 0))[:, :-1]
    left = F.logsigmoid(2.0 * (previous_gap[:, :, None] - distances[:, None, :]) / tau)
    left = left.masked_fill(gap > query - 2, 0.0)
    left_cumulative = left.flip(-1).cumsum(-1).flip(-1)
    return torch.where(gap > query + 1, right_cumulative, torch.where(gap < query - 1, left_cumulative, 0.0))


def tree_distances(source_heads, large_distance=2000.0):
    """SLA distances of a self-parsing model (SPEC §6 "beyond the paper", §9), (B, n) float, from the subword tree
    it reads (the parser's in training, its own at inference), as `dependency_to_distance` over subwords:

        d_t = 1 + height(LCA(t, t+1)),   height(h) = max over descendants x of depth(x) - depth(h),

    and `large_distance` (the data pipeline's LARGE_DISTANCE) for a gap next to a token outside the tree
    (special tokens, padding) and after the last token."""
    batch_size, length = source_heads.shape
    index = torch.arange(length, device=source_heads.device).expand(batch_size, length)
    in_tree = source_heads >= 0
    heads = torch.where(in_tree, source_heads, index)  # outside the tree: a root of its own
    ancestors = torch.zeros(batch_size, length, length, dtype=torch.bool, device=source_heads.device)
    depth = torch.zeros(batch_size, length, device=source_heads.device)
    node = index
    for _ in range(length):  # ancestors[b, x, h]: h is x or an ancestor of x
        ancestors.scatter_(2, node.unsqueeze(-1), True)
        parent = heads.gather(1, node)
        depth = depth + (parent != node)
        node = parent
    deepest_below = torch.where(ancestors, depth[:, :, None], -1.0).amax(1)  # (B, h)
    height = deepest_below - depth
    common = ancestors[:, :-1] & ancestors[:, 1:]  # common ancestors of t and t + 1
    lowest = torch.where(common, depth[:, None, :], -1.0).argmax(-1)
    gaps = 1.0 + height.gather(1, lowest)
    gaps = gaps.masked_fill(~(in_tree[:, :-1] & in_tree[:, 1:]), large_distance)
    return torch.cat([gaps, gaps.new_full((batch_size, 1), large_distance)], 1)


# ---------------------------------------------------------------------------------------------
# Relation terms of attention
# ---------------------------------------------------------------------------------------------


class RelationPairs(NamedTuple):
    """The token pairs (i, j) of each row b that have a relation id r (not NO_RELATION), as four (P,) LongTensors."""

    batch: torch.Tensor
    query: torch.Tensor
    key: torch.Tensor
    relation: torch.Tensor


def relation_pairs(ids):
    """`RelationPairs` of relation ids (B, n, n): the labeled scheme relates few pairs (self, siblings, ancestors
    within k), so its terms cost O(pairs) instead of O(n²)."""
    batch, query, key = (ids != NO_RELATION).nonzero(as_tuple=True)
    return RelationPairs(batch, query, key, ids[batch, query, key])


@dataclass
class RelativePositionTerm:
    """Shaw relative positions: id(i, j) = clip(j - (past + i), k) + k with past = key length - query length
    (the KV cache's), a banded Toeplitz structure (`relative_position_sums`); key_table/value_table: (2k+1, d_k)
    or None when that term is off."""

    key_table: torch.Tensor | None
    value_table: torch.Tensor | None


@dataclass
class RelationTerm:
    """Labeled relation ids of the pairs that have one (`RelationPairs`; the other pairs get the zero vector) and
    the (possibly W_rel-transformed) tables to use, (V, d_k) or None when that term is off."""

    pairs: RelationPairs
    key_table: torch.Tensor | None
    value_table: torch.Tensor | None


@dataclass
class BucketRelationTerm:
    """Relation ids factorised through key buckets (`dependency_depth_buckets`): id(i, j) =
    query_ids[i, m(j)] with key_buckets[j] the one-hot of m(j). Computed by extending the query,
    key and value vectors with M columns, so it also runs inside fused attention."""

    key_buckets: torch.Tensor
    query_ids: torch.Tensor
    key_table: torch.Tensor | None
    value_table: torch.Tensor | None


def relation_key_logits(query, ids, key_table):
    """Key term q_i · w^K_{ids_im} for every query and key bucket m: gather of q·w^K.

    query: (B, H, q, d_k); ids: (B, q, M) -> (B, H, q, M).
    """
    per_relation = F.pad(query @ key_table.transpose(0, 1), (0, 1))  # the last column is the zero vector
    return per_relation.gather(-1, _expanded_ids(ids, per_relation))


def relation_value_output(weights, ids, value_table):
    """Value term Σ_m w_im w^V_{ids_im} = Σ_r (Σ_{m: ids_im = r} w_im) w^V_r: the weights summed per relation id,
    times the value table.

    weights: (B, H, q, M) (the attention mass per key bucket) -> (B, H, q, d_k).
    """
    num_relations = value_table.shape[0]
    expanded = _expanded_ids(ids, weights, num_relations)
    sums = weights.new_zeros(*weights.shape[:-1], num_relations + 1).scatter_add_(-1, expanded, weights)
    return sums[..., :num_relations] @ value_table


def _expanded_ids(ids, like, num_relations=None):
    """ids (B, q, M) as an index into the last axis of `like` (B, H, q, ·), expanded over the heads: NO_RELATION
    -> column V = `num_relations` (the zero column of `relation_key_logits`, the dropped sum of
    `relation_value_output`)."""
    num_relations = like.shape[-1] - 1 if num_relations is None else num_relations
    ids = torch.where(ids == NO_RELATION, num_relations, ids).unsqueeze(1)
    return ids.expand(*like.shape[:3], ids.shape[-1])


def _relative_diagonals(query_length, key_length, max_relative_position, past_length):
    """(d, first query row, rows) of each diagonal j - (past + i) = d, -k < d < k, within the (q, k) pairs."""
    diagonals = []
    for distance in range(1 - max_relative_position, max_relative_position):
        offset = past_length + distance
        first = max(0, -offset)
        rows = min(query_length - first, key_length - max(0, offset))
        if rows > 0:
            diagonals.append((distance, first, rows))
    return diagonals


def _at_or_after(query_length, key_length, offset, like):
    """1.0 where key j >= query i + offset, else 0.0: (q, k) in `like`'s dtype."""
    queries = torch.arange(query_length, device=like.device)[:, None]
    keys = torch.arange(key_length, device=like.device)[None, :]
    return (keys >= queries + offset).to(like.dtype)


def relative_position_expand(per_relation, key_length, past_length, out=None):
    """T[..., i, j] = per_relation[..., i, clip(j - past - i, k) + k] for per_relation (…, q, 2k+1) without an id
    tensor: the tails (d <= -k, d >= k) as the row constant plus one multiply-add with the step 1[j >= past + i],
    the 2k - 1 central diagonals by in-place additions. Added to `out` (…, q, k) in place if given."""
    query_length, width = per_relation.shape[-2:]
    max_relative_position = (width - 1) // 2
    lower, upper = per_relation[..., :1], per_relation[..., -1:]
    step = _at_or_after(query_length, key_length, past_length, per_relation)
    if out is None:
        out = lower.expand(*per_relation.shape[:-1], key_length).clone()
    else:
        out.add_(lower)
    out.addcmul_(upper - lower, step)
    for distance, first, rows in _relative_diagonals(query_length, key_length, max_relative_position, past_length):
        base = lower if distance < 0 else upper
        correction = per_relation[..., distance + max_relative_position, None] - base
        out.diagonal(past_length + distance, -2, -1).add_(correction[..., first : first + rows, 0])
    return out


def relative_position_sums(weights, max_relative_position, past_length, blocks=4):
    """M[..., i, r] = Σ_j weights[..., i, j] over the keys j with clip(j - past - i, k) + k = r, (…, q, 2k+1):
    the central diagonals read off, each tail summed over `blocks` row blocks (full columns plus a triangle),
    so nothing of size (…, q, k) is allocated."""
    query_length, key_length = weights.shape[-2:]
    block = max(32, -(-query_length // blocks))
    k = max_relative_position
    sums = weights.new_zeros(*weights.shape[:-1], 2 * k + 1)
    for distance, first, rows in _relative_diagonals(query_length, key_length, k, past_length):
        sums[..., first : first + rows, distance + k] = weights.diagonal(past_length + distance, -2, -1)
    for start in range(0, query_length, block):
        end = min(start + block, query_length)
        rows = weights[..., start:end, :]
        # lower tail j <= past + i - k: columns < past + start - k + 1 for every row, a triangle after them
        full, last = max(0, past_length + start - k + 1), min(key_length, max(0, past_length + end - k))
        lower = rows[..., :full].sum(-1)
        if last > full:
            triangle = 1.0 - _at_or_after(end - start, last - full, past_length + start - k + 1 - full, rows)
            lower = lower + (rows[..., full:last] * triangle).sum(-1)
        # upper tail j >= past + i + k: columns >= past + end - 1 + k for every row, a triangle before them
        first, full = min(key_length, past_length + start + k), min(key_length, past_length + end - 1 + k)
        upper = rows[..., full:].sum(-1)
        if full > first:
            triangle = _at_or_after(end - start, full - first, past_length + start + k - first, rows)
            upper = upper + (rows[..., first:full] * triangle).sum(-1)
        sums[..., start:end, 0] = lower
        sums[..., start:end, 2 * k] = upper
    return sums


class _RelativePositionKeyLogits(torch.autograd.Function):
    """scores += q_i · w^K_{clip(j - i, k)} in place, from per_relation = q·w^K (…, q, 2k+1); backward: the
    scores' gradient summed per relative position (`relative_position_sums`)."""

    @staticmethod
    def forward(ctx, scores, per_relation, past_length):
        ctx.past_length, ctx.max_relative_position = past_length, (per_relation.shape[-1] - 1) // 2
        ctx.mark_dirty(scores)
        return relative_position_expand(per_relation, scores.shape[-1], past_length, out=scores)

    @staticmethod
    def backward(ctx, grad):
        return grad, relative_position_sums(grad, ctx.max_relative_position, ctx.past_length), None


def _pair_index(pairs, num_heads, column):
    """Index of the given pairs in every head: (batch, head, query, column) broadcasting to (P, H)."""
    heads = torch.arange(num_heads, device=column.device)
    return pairs.batch[:, None], heads, pairs.query[:, None], column[:, None]


class _PairKeyLogits(torch.autograd.Function):
    """scores[b, h, i, j] += (q·w^K)[b, h, i, r] in place for the `RelationPairs` (b, i, j, r); backward: the
    scores' gradient at the pairs summed per relation id,
        ∂(q·w^K)[b, h, i, r] = Σ_{pairs (b, i, j, r)} ∂scores[b, h, i, j]."""

    @staticmethod
    def forward(ctx, scores, per_relation, batch, query, key, relation):
        pairs = RelationPairs(batch, query, key, relation)
        ctx.save_for_backward(batch, query, key, relation)
        ctx.shape = per_relation.shape
        ctx.mark_dirty(scores)
        values = per_relation[_pair_index(pairs, scores.shape[1], relation)]
        return scores.index_put_(_pair_index(pairs, scores.shape[1], key), values, accumulate=True)

    @staticmethod
    def backward(ctx, grad):
        pairs = RelationPairs(*ctx.saved_tensors)
        heads = ctx.shape[1]
        grad_per_relation = grad.new_zeros(ctx.shape).index_put_(
            _pair_index(pairs, heads, pairs.relation), grad[_pair_index(pairs, heads, pairs.key)], accumulate=True
        )
        return grad, grad_per_relation, None, None, None, None


def add_relation_key_logits_(scores, scaled_query, term):
    """scores += q_i · r^K_ij of a `RelativePositionTerm` or `RelationTerm`, in place (scores: (B, H, q, k)); under
    torch.compile, out of place by plain autograd ops (`relation_key_logits_by_index`), which dynamo can trace."""
    per_relation = scaled_query @ term.key_table.transpose(0, 1)
    if torch.compiler.is_compiling():
        return scores + relation_key_logits_by_index(per_relation, term, scores)
    if isinstance(term, RelativePositionTerm):
        return _RelativePositionKeyLogits.apply(scores, per_relation, scores.shape[-1] - scores.shape[-2])
    return _PairKeyLogits.apply(scores, per_relation, *term.pairs)


def _relation_sums(weights, term):
    """The weights (B, H, q, k) summed per relation id of a `RelativePositionTerm` or `RelationTerm`, (B, H, q, V):
        S[b, h, i, r] = Σ_{j: id(i, j) = r} weights[b, h, i, j]."""
    if isinstance(term, RelativePositionTerm):
        max_relative_position = (term.value_table.shape[0] - 1) // 2
        return relative_position_sums(weights, max_relative_position, weights.shape[-1] - weights.shape[-2])
    pairs, heads = term.pairs, weights.shape[1]
    return weights.new_zeros(*weights.shape[:-1], term.value_table.shape[0]).index_put_(
        _pair_index(pairs, heads, pairs.relation), weights[_pair_index(pairs, heads, pairs.key)], accumulate=True
    )


def _add_relation_expand_(out, per_relation, term):
    """out[b, h, i, j] += per_relation[b, h, i, id(i, j)] in place (the adjoint of `_relation_sums`)."""
    if isinstance(term, RelativePositionTerm):
        return relative_position_expand(per_relation, out.shape[-1], out.shape[-1] - out.shape[-2], out=out)
    pairs, heads = term.pairs, out.shape[1]
    values = per_relation[_pair_index(pairs, heads, pairs.relation)]
    return out.index_put_(_pair_index(pairs, heads, pairs.key), values, accumulate=True)


class _RelationAttentionOutput(torch.autograd.Function):
    """(o, z) = (α v, Σ_t S_t(α) w^V_t): the head outputs and the value terms of Shaw and labeled relations, S_t
    the weights summed per relation id of term t (`_relation_sums`). The backward,
        ∂α = ∂o v^T + Σ_t E_t(∂z (w^V_t)^T),   ∂v = α^T ∂o,   ∂w^V_t = S_t(α)^T ∂z,
    E_t the adjoint of S_t (`_add_relation_expand_`), adds every term's share of ∂α into ∂o v^T in place, so the
    value terms allocate nothing of size (B, H, q, k)."""

    @staticmethod
    def forward(ctx, weights, value, terms, *value_tables):
        sums = [_relation_sums(weights, term) for term in terms]
        ctx.terms = terms
        ctx.save_for_backward(weights, value, *value_tables, *sums)
        relation_output = sum(term_sums @ table.to(term_sums.dtype) for term_sums, table in zip(sums, value_tables))
        return weights @ value, relation_output

    @staticmethod
    def backward(ctx, grad_output, grad_relation):
        weights, value, *saved = ctx.saved_tensors
        tables, sums = saved[: len(ctx.terms)], saved[len(ctx.terms) :]
        grad_weights = grad_output.to(value.dtype) @ value.transpose(-1, -2)
        grad_value = weights.transpose(-1, -2) @ grad_output.to(weights.dtype)
        grad_tables = []
        for term, table, term_sums in zip(ctx.terms, tables, sums):
            _add_relation_expand_(grad_weights, grad_relation.to(grad_weights.dtype) @ table.to(grad_weights.dtype).T, term)
            grad = term_sums.flatten(0, -2).transpose(0, 1).to(grad_relation.dtype) @ grad_relation.flatten(0, -2)
            grad_tables.append(grad.to(table.dtype))
        return grad_weights, grad_value, None, *grad_tables


def relation_attention_output(weights, value, terms):
    """(α @ v, Σ_t S_t(α) @ w^V_t) for attention weights α (B, H, q, k), values v (B, H, k, d_v) and the
    `RelativePositionTerm`s / `RelationTerm`s `terms` that have a value table (`_RelationAttentionOutput`; under
    torch.compile, plain autograd ops: `relation_sums_by_index`)."""
    if torch.compiler.is_compiling():
        sums = [relation_sums_by_index(weights, term) for term in terms]
        return weights @ value, sum(term_sums @ term.value_table.to(term_sums.dtype) for term_sums, term in zip(sums, terms))
    return _RelationAttentionOutput.apply(weights, value, terms, *[term.value_table for term in terms])


# The same two terms by plain autograd ops, for torch.compile: dynamo cannot trace the outputs of the autograd functions
# above, which modify their input in place. A gather / scatter over the expanded ids (Shaw) or over the pairs
# (labeled relations); their backward allocates what the functions above avoid, which a compiled graph may fuse away.


def _relative_position_index(like, num_relations):
    """The Shaw id of every (query, key) pair of `like` (…, q, k) (`relative_position_ids`, the KV cache's past
    = k - q), expanded over its leading axes."""
    query_length, key_length = like.shape[-2:]
    ids = relative_position_ids(query_length, key_length, (num_relations - 1) // 2, key_length - query_length,
                                device=like.device)
    return ids.expand(like.shape)


def relation_key_logits_by_index(per_relation, term, like):
    """(B, H, q, k) of q_i · w^K_{id(i, j)} from per_relation = q·w^K (B, H, q, V), like `like`: a gather at the Shaw
    ids, or the labeled pairs' values scattered into zeros."""
    if isinstance(term, RelativePositionTerm):
        return per_relation.gather(-1, _relative_position_index(like, per_relation.shape[-1]))
    pairs, heads = term.pairs, like.shape[1]
    return like.new_zeros(like.shape, dtype=per_relation.dtype).index_put(
        _pair_index(pairs, heads, pairs.key), per_relation[_pair_index(pairs, heads, pairs.relation)], accumulate=True)


def relation_sums_by_index(weights, term):
    """`_relation_sums` (the weights summed per relation id, (B, H, q, V)) by a scatter-add."""
    num_relations = term.value_table.shape[0]
    sums = weights.new_zeros(*weights.shape[:-1], num_relations)
    if isinstance(term, RelativePositionTerm):
        return sums.scatter_add(-1, _relative_position_index(weights, num_relations), weights)
    pairs, heads = term.pairs, weights.shape[1]
    return sums.index_put(_pair_index(pairs, heads, pairs.relation), weights[_pair_index(pairs, heads, pairs.key)],
                          accumulate=True)


__all__ = [
    "BucketRelationTerm",
    "RelationPairs",
    "RelationTerm",
    "RelativePositionTerm",
    "add_relation_key_logits_",
    "dependency_depth_buckets",
    "dependency_relation_ids",
    "labeled_relation_names",
    "localized_attention_log_mask",
    "relation_attention_output",
    "relation_key_logits",
    "relation_key_logits_by_index",
    "relation_pairs",
    "relation_sums_by_index",
    "relation_value_output",
    "relative_position_expand",
    "relative_position_ids",
    "relative_position_sums",
    "tree_distances",
    "walk_to_roots",
]
