"""The syntax inside attention (SPEC §2–6): relation ids and masks derived from the inputs, and the relation terms
of attention, computed without a (B, H, q, k, d_k) tensor of per-pair vectors.

Relation-aware attention (Shaw et al.; seeds 000 and 002) adds learned vectors of the relation id(i, j) of each
query–key pair to the keys and values of every head:

    e_ij = q_i · (k_j + r^K_ij) / sqrt(d_k),   z_i = Σ_j α_ij (v_j + r^V_ij),   r^K_ij = w^K_{id(i, j)}, r^V_ij = w^V_{id(i, j)},

w^K, w^V (V, d_k) tables shared by the heads. Every relation type of a layer reads one combined id per pair
(`RelationIds`: Shaw position a and tree relation b as a·T + b, made once a forward and shared by the layers) and one
combined table (`combined_relation_table`, w_{a·T+b} = w^pos_a + w^tree_b), so that both terms are a few large
operations whatever the combination:

    key term    q_i · w^K_{id(i, j)} = (q W^K^T)[i, id(i, j)]                  (one product with the table, one gather),
    value term  Σ_j α_ij w^V_{id(i, j)} = Σ_c (Σ_{j: id(i, j) = c} α_ij) w^V_c  (one scatter-add of the weights, one
                                                                              product with the table).

Relative depth alone is factorised through key buckets instead, M extra columns of q, k and v
(`dependency_depth_buckets`), so that it runs inside fused attention; key terms alone (`relative_value_term` /
`dependency_value_term` off) enter fused attention as its additive mask, or FlexAttention's `score_mod`.

One place a method: its ids (the functions of the first section, combined by `make_source_relation_ids` once a forward, by
the model or by the data collator, `SourceRelationIds`), its parameters (`ShawRelativePositions`,
`DependencyRelativeDepth`, `LabeledTreeRelations`, `ConcatLinearCombination`, held by a layer's `SyntaxMTRelations`),
and what it contributes to attention (`AttentionRelation`, which the attention functions of `attention_functions`
read).

Imported by `modeling_syntax_mt` and copied with it next to saved models (`trust_remote_code`): torch only.
"""

from dataclasses import dataclass
from typing import NamedTuple, Optional

import torch
from torch import nn
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


def walk_to_roots(source_heads, name="source_heads", ancestors=True, ancestors_within=None) -> TreeWalk:
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
        ancestors_within: only the ancestors up to this distance (all when None).
    Returns a TreeWalk:
        depth (B, n): depth(root) = 0, depth(child) = depth(head) + 1 (0 outside the tree);
        ancestor_distance (B, n, n): s > 0 where token j is the s-th ancestor of token i (s <= ancestors_within),
            else 0;
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
        for step in range(1, min(max_depth, ancestors_within or max_depth) + 1):
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
    # ancestors beyond k get NO_RELATION, and siblings (same head) are never ancestor and descendant: k steps suffice
    depth, ancestor_distance, root, in_tree, _, _ = walk_to_roots(
        source_heads, ancestors=scheme == "labeled", ancestors_within=max_distance)
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
# The relation ids of one forward: one combined id per query–key pair, made once and shared by the layers
# ---------------------------------------------------------------------------------------------


def num_tree_relations(config):
    """Number of tree-relation embeddings of `config.dependency_relations` (0 without): 2l + 1 depth differences
    (`depth`), or self, sib and 2k signed ancestor distances (`labeled`)."""
    scheme, distance = config.dependency_relations, config.max_dependency_distance
    if scheme is None:
        return 0
    if scheme not in ("depth", "labeled"):
        raise ValueError(f"unknown dependency relation scheme {scheme!r}")
    return 2 * distance + 1 if scheme == "depth" else 2 * distance + 2


def uses_depth_buckets(config):
    """Relative depth without Shaw positions runs through key buckets (`dependency_depth_buckets`), inside fused
    attention even with its value term; every other relation preset reads one id per pair."""
    return config.dependency_relations == "depth" and not config.relative_positions


@dataclass
class RelationIds:
    """The relation id of every query–key pair of one forward, made once and shared by the layers (SPEC §2–4):

        id(i, j) = a(i, j) · T + b(i, j),

    a the Shaw id clip(j - i, k) + k (0 without relative positions), b the tree id (dependency depth or labeled
    relation; T - 1 for NO_RELATION, the zero vector; T = 1 without tree relations). ids: LongTensor (B, q, k), or
    (1, q, k) when they are the same for every row (positions only). For relative depth in key buckets
    (`uses_depth_buckets`), ids are the per-query ids R (B, n, M) and key_buckets the one-hot buckets O (B, n, M) of
    `dependency_depth_buckets`: id(i, j) = R[i, m(j)]."""

    ids: torch.Tensor
    tree_size: int
    key_buckets: Optional[torch.Tensor] = None


def combined_relation_ids(shaw_ids=None, tree_ids=None, num_tree_relations=0):
    """`RelationIds` of Shaw ids (q, k) and/or tree ids (B, q, k) with `num_tree_relations` ids and NO_RELATION."""
    if tree_ids is None:
        return RelationIds(shaw_ids[None], 1)
    tree_size = num_tree_relations + 1
    tree_ids = tree_ids.remainder(tree_size)  # NO_RELATION = -1 -> T - 1
    if shaw_ids is None:
        return RelationIds(tree_ids, tree_size)
    return RelationIds(shaw_ids * tree_size + tree_ids, tree_size)


def make_source_relation_ids(config, source_heads=None, shaw_ids=None):
    """The relation ids of the encoder's self-attention (None when it has no relation terms), made once a forward
    from `source_heads` (B, n) — by the model, or by the data collator on the host (`SourceRelationIds`) — and
    the Shaw ids `shaw_ids` (n, n), made from the length when not given."""
    if not config.relative_positions and config.dependency_relations is None:
        return None
    if config.relative_positions and shaw_ids is None:
        length = source_heads.shape[1]
        shaw_ids = relative_position_ids(length, length, config.max_relative_position, device=source_heads.device)
    if config.dependency_relations is None:
        return combined_relation_ids(shaw_ids)
    count = num_tree_relations(config)
    if uses_depth_buckets(config):
        key_buckets, query_ids = dependency_depth_buckets(source_heads, config.max_dependency_distance)
        return RelationIds(combined_relation_ids(tree_ids=query_ids, num_tree_relations=count).ids, count + 1,
                           key_buckets)
    tree_ids, _ = dependency_relation_ids(source_heads, config.dependency_relations, config.max_dependency_distance)
    return combined_relation_ids(shaw_ids if config.relative_positions else None, tree_ids, count)


def check_source_relation_ids(config, relation_ids, key_buckets, input_ids):
    """`RelationIds` of relation ids given with the batch (`SourceRelationIds`), checked against the tokens
    (B, n) and the tables of `config`: shape, integer type, ids within the combined table (one look at the data)."""
    count = num_tree_relations(config)
    tree_size = count + 1 if count else 1
    positions = 2 * config.max_relative_position + 1 if config.relative_positions else 1
    batch_size, length = input_ids.shape[:2]
    if relation_ids.is_floating_point() or relation_ids.is_complex():
        raise ValueError(f"source_relation_ids must hold integer relation ids, not {relation_ids.dtype}")
    buckets = uses_depth_buckets(config)
    if buckets and key_buckets is None:
        raise ValueError("source_relation_ids of relative depth alone come with source_key_buckets "
                         "(hf_syntax_mt.relation_attention.SourceRelationIds makes both)")
    width = key_buckets.shape[-1] if buckets else length
    if relation_ids.dim() != 3 or tuple(relation_ids.shape) not in {(batch_size, length, width), (1, length, width)}:
        raise ValueError(f"source_relation_ids has shape {tuple(relation_ids.shape)}; for input_ids of shape "
                         f"{tuple(input_ids.shape)} it must be ({batch_size}, {length}, {width})")
    if buckets and tuple(key_buckets.shape) != (batch_size, length, width):
        raise ValueError(f"source_key_buckets has shape {tuple(key_buckets.shape)}, not ({batch_size}, {length}, M)")
    low, high = torch.stack(torch.aminmax(relation_ids)).tolist()  # one look at the data
    if low < 0 or high >= positions * tree_size:
        raise ValueError(f"source_relation_ids holds ids in [{low}, {high}], outside the "
                         f"{positions * tree_size} relations of this configuration: were they made for another one?")
    return RelationIds(relation_ids.long(), tree_size, key_buckets)


class SourceRelationIds:
    """Adds the encoder's relation ids to a collated batch on the host (a data collator's last step), so that a
    training step on a GPU launches none of the walk up the trees: `source_relation_ids` (B, n, n) combined ids
    (`make_source_relation_ids`; (B, n, M) and `source_key_buckets` for relative depth alone). Configurations without
    tree relations, or that parse for themselves (`self_parsing`: the tree may be the model's own), get nothing."""

    def __init__(self, config):
        self.config = config
        self.active = getattr(config, "dependency_relations", None) is not None and not config.self_parsing

    def __call__(self, batch):
        if not self.active or batch.get("source_heads") is None:
            return batch
        heads = batch["source_heads"]
        if batch.get("attention_mask") is not None:
            heads = heads.masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
        relations = make_source_relation_ids(self.config, heads.long())
        batch["source_relation_ids"] = relations.ids
        if relations.key_buckets is not None:
            batch["source_key_buckets"] = relations.key_buckets
        return batch


class RelativePositionIdTable:
    """Shaw ids clip(j - (past + i), k) + k of queries past..past+q-1 and keys 0..k-1 (`relative_position_ids`),
    read from a table made once and grown on demand: a decoding step makes no operation for them."""

    def __init__(self, max_relative_position):
        self.max_relative_position = max_relative_position
        self.table = None

    def __call__(self, query_length, key_length, past_length, device):
        size = max(key_length, past_length + query_length)
        table = self.table
        if table is None or table.shape[0] < size or table.device != torch.device(device):
            grown = 2 * table.shape[0] if table is not None and table.device == torch.device(device) else 64
            size = max(size, grown)
            self.table = table = relative_position_ids(size, size, self.max_relative_position, device=device)
        return table[past_length : past_length + query_length, :key_length]


# ---------------------------------------------------------------------------------------------
# The relation methods: each one's parameters, and their combination into one table a layer
# ---------------------------------------------------------------------------------------------


class RelationTable(nn.Module):
    """Learned key/value embeddings w^K, w^V ∈ R^{V × d_k} of one relation type, shared by all heads."""

    def __init__(self, num_relations, head_dim):
        super().__init__()
        self.key = nn.Parameter(torch.zeros(num_relations, head_dim))
        self.value = nn.Parameter(torch.zeros(num_relations, head_dim))


class ShawRelativePositions(RelationTable):
    """Shaw et al. 2018: a(i, j) = clip(j - i, k) + k (`relative_position_ids`), 2k + 1 embeddings a^K, a^V."""

    def __init__(self, config, head_dim):
        super().__init__(2 * config.max_relative_position + 1, head_dim)


class DependencyRelativeDepth(RelationTable):
    """Seed 000: b(i, j) = clip(depth_j - depth_i, l) + l within one tree (`dependency_relation_ids`, or key buckets
    `dependency_depth_buckets`), 2l + 1 embeddings b^K, b^V."""

    def __init__(self, config, head_dim):
        super().__init__(num_tree_relations(config), head_dim)


class LabeledTreeRelations(RelationTable):
    """Seed 002: self, sib (same head), ±s for an s-th ancestor or descendant (s <= k), no relation otherwise
    (`dependency_relation_ids`, `labeled_relation_names`), 2k + 2 embeddings."""

    def __init__(self, config, head_dim):
        super().__init__(num_tree_relations(config), head_dim)


TREE_RELATIONS = {"depth": DependencyRelativeDepth, "labeled": LabeledTreeRelations}


class ConcatLinearCombination(nn.Module):
    """Seed 002's combination of Shaw positions and tree relations, r = Concat(a, b) W_rel, one W_rel (d_k, 2 d_k)
    for the keys and one for the values (`sum`, seed 000's r = a + b, has no parameters)."""

    def __init__(self, head_dim):
        super().__init__()
        self.key = nn.Linear(2 * head_dim, head_dim, bias=False)
        self.value = nn.Linear(2 * head_dim, head_dim, bias=False)


def combined_relation_table(position_table, tree_table, num_positions, tree_size, projection=None):
    """The table of the combined ids of `RelationIds`, (num_positions · T, d_k):

        w_{a·T + b} = w^pos_a + w^tree_b                   (`sum`, seed 000),
        w_{a·T + b} = Concat(w^pos_a, w^tree_b) W_rel^T     (`concat_linear`, seed 002; `projection` = W_rel (d_k, 2 d_k)),

    w^tree_{T-1} = 0 (NO_RELATION), so that one gather / one scatter-add covers both relation types. A table that is
    off (None) counts as zeros; None when both are."""
    if position_table is None and tree_table is None:
        return None
    like = tree_table if tree_table is not None else position_table
    if tree_size == 1:
        return position_table
    tree = F.pad(tree_table, (0, 0, 0, 1)) if tree_table is not None else like.new_zeros(tree_size, like.shape[-1])
    position = position_table if position_table is not None else like.new_zeros(num_positions, like.shape[-1])
    if projection is not None:
        pairs = torch.cat([position[:, None].expand(-1, tree_size, -1), tree[None].expand(num_positions, -1, -1)], -1)
        return pairs.flatten(0, 1) @ projection.transpose(0, 1)
    if position_table is None:
        return tree if num_positions == 1 else tree.repeat(num_positions, 1)
    return (position[:, None] + tree[None]).flatten(0, 1)


class SyntaxMTRelations(nn.Module):
    """The relation terms of one self-attention layer (SPEC §2–4): Shaw positions (`relative`), a tree relation
    (`dependency`: relative depth or labeled relations) and their combination (`combine`, for `concat_linear`).
    Called with the forward's `RelationIds`, it builds the combined tables once and returns the `AttentionRelation`
    the attention reads (None when the layer has no relation term)."""

    def __init__(self, config, head_dim, use_dependency):
        super().__init__()
        self.config = config
        self.relative = ShawRelativePositions(config, head_dim) if config.relative_positions else None
        self.dependency = None
        if use_dependency and config.dependency_relations is not None:
            self.dependency = TREE_RELATIONS[config.dependency_relations](config, head_dim)
        self.combine = None
        if self.relative is not None and self.dependency is not None and config.relation_combination == "concat_linear":
            self.combine = ConcatLinearCombination(head_dim)

    def forward(self, relation_ids):
        config = self.config
        if relation_ids is None:
            return None
        if relation_ids.tree_size > 1 and self.dependency is None:
            raise ValueError("tree relation ids given to a layer without tree relations (a decoder or source-parser layer)")
        num_positions = self.relative.key.shape[0] if self.relative is not None else 1
        tables = []
        for side, position_on, tree_on in (("key", config.relative_key_term, config.dependency_key_term),
                                           ("value", config.relative_value_term, config.dependency_value_term)):
            position = getattr(self.relative, side) if self.relative is not None and position_on else None
            tree = getattr(self.dependency, side) if self.dependency is not None and tree_on else None
            projection = getattr(self.combine, side).weight if self.combine is not None else None
            tables.append(combined_relation_table(position, tree, num_positions, relation_ids.tree_size, projection))
        if tables[0] is None and tables[1] is None:
            return None
        return AttentionRelation(relation_ids.ids, *tables, relation_ids.key_buckets)


# ---------------------------------------------------------------------------------------------
# What the relation terms contribute to attention
# ---------------------------------------------------------------------------------------------


def relation_logits(scaled_query, ids, key_table):
    """Key term q_i · w^K_{id(i, j)} = (q W^K^T)[i, id(i, j)]: one product with the table, one gather.

    scaled_query: (B, H, q, d_k); ids: (B or 1, q, k); key_table: (C, d_k) -> (B, H, q, k).
    """
    return RelationScores(scaled_query @ key_table.transpose(0, 1), ids).dense()


def relation_values(weights, ids, value_table):
    """Value term Σ_j α_ij w^V_{id(i, j)} = Σ_c (Σ_{j: id(i, j) = c} α_ij) w^V_c: the weights summed per id by one
    scatter-add, times the table.

    weights: (B, H, q, k); ids: (B or 1, q, k); value_table: (C, d_k) -> (B, H, q, d_k).
    """
    return summed_per_relation(weights, ids, value_table.shape[0]) @ value_table.to(weights.dtype)


def summed_per_relation(weights, ids, num_relations):
    """Σ_{j: id(i, j) = c} w_ij for every relation c, one scatter-add: (B, H, q, k) -> (B, H, q, C)."""
    sums = weights.new_zeros(*weights.shape[:-1], num_relations)
    return sums.scatter_add_(-1, ids[:, None].expand(weights.shape), weights)


@dataclass
class RelationScores:
    """The key term of a pair-id relation before it is read at the pairs: per_relation (B, H, q, C) = q W^K^T, the
    score of every query against every relation, and ids (B or 1, q, k). Eager and SDPA attention read it as a
    (B, H, q, k) bias (`dense`); FlexAttention reads per_relation[b, h, i, ids[b, i, j]] in its `score_mod`, so no
    (n, n) bias is built."""

    per_relation: torch.Tensor
    ids: torch.Tensor

    def dense(self):
        per_relation, ids = self.per_relation, self.ids
        return per_relation.gather(-1, ids[:, None].expand(*per_relation.shape[:-1], ids.shape[-1]))

    def heads(self, start, end):
        return RelationScores(self.per_relation[:, start:end], self.ids)


@dataclass
class AttentionRelation:
    """What one layer's relation terms contribute to its attention, with the combined tables (C, d_k) of its ids
    (either table None when that term is off):

    - pair ids (`key_buckets` None): the key term q_i · w^K_{id(i, j)} enters the scores (`key_scores`); the value
      term Σ_j α_ij w^V_{id(i, j)} needs the attention probabilities (`needs_probabilities`: explicit attention;
      `values_from_weights`).
    - one query a row (`fold_into`, a decoding step): both terms fold into the keys and values.
    - key buckets (relative depth alone): q, k and v get M extra columns (`extend`), q_i ⊕ (q_i W^K^T)[R[i, m]],
      k_j ⊕ O[j], v_j ⊕ O[j], so that fused attention computes both terms; `finish` turns the attention mass per
      bucket into the value term.
    A parse head (head 0) gets no relation term: `finish` and `values_from_weights` leave it out."""

    ids: torch.Tensor
    key_table: Optional[torch.Tensor]
    value_table: Optional[torch.Tensor]
    key_buckets: Optional[torch.Tensor] = None

    @property
    def needs_probabilities(self):
        return self.key_buckets is None and self.value_table is not None

    @property
    def has_pair_key_term(self):
        return self.key_buckets is None and self.key_table is not None

    def key_scores(self, scaled_query):
        """`RelationScores` of the pair key term (None with key buckets or without a key table)."""
        if self.key_buckets is not None or self.key_table is None:
            return None
        return RelationScores(scaled_query @ self.key_table.transpose(0, 1), self.ids)

    def fold_into(self, key, value):
        """One query a row (a decoding step): r_ij depends on j alone, so the terms fold into the keys and values,
        k_j + w^K_{id(i, j)} and v_j + w^V_{id(i, j)} (B, H, k, d), and plain fused attention computes them."""
        ids = self.ids[:, 0]
        if self.key_table is not None:
            key = key + self.key_table[ids][:, None].to(key.dtype)
        if self.value_table is not None:
            value = value + self.value_table[ids][:, None].to(value.dtype)
        return key, value

    def extend(self, scaled_query, key, value):
        """q, k, v with the key buckets' columns appended (unchanged for pair ids)."""
        if self.key_buckets is None:
            return scaled_query, key, value
        buckets = self.key_buckets[:, None].expand(-1, key.shape[1], -1, -1).to(key.dtype)
        if self.key_table is not None:
            scaled_query = torch.cat([scaled_query, relation_logits(scaled_query, self.ids, self.key_table)], -1)
            key = torch.cat([key, buckets], -1)
        if self.value_table is not None:
            value = torch.cat([value, buckets], -1)
        return scaled_query, key, value

    def values_from_weights(self, weights, parse_head):
        """The pair value term of the attention weights (B, H, q, k) -> (B, H, q, d_k), zero on a parse head."""
        return _without_parse_head(relation_values(weights, self.ids, self.value_table), parse_head)

    def finish(self, output, head_dim, parse_head):
        """Head outputs (B, H, q, d_k) from α @ (v ⊕ O): the value term of the attention mass per bucket added, the
        bucket columns dropped (pair ids: unchanged)."""
        if self.key_buckets is None or self.value_table is None:
            return output
        bucket_values = relation_values(output[..., head_dim:], self.ids, self.value_table)
        return output[..., :head_dim] + _without_parse_head(bucket_values, parse_head)


def _without_parse_head(relation_output, parse_head):
    """M_parse = A_parse V_p: no relation term on the parse head (head 0)."""
    if not parse_head:
        return relation_output
    return torch.cat([torch.zeros_like(relation_output[:, :1]), relation_output[:, 1:]], 1)


__all__ = [
    "AttentionRelation",
    "ConcatLinearCombination",
    "DependencyRelativeDepth",
    "LabeledTreeRelations",
    "RelationIds",
    "RelationScores",
    "RelationTable",
    "RelativePositionIdTable",
    "ShawRelativePositions",
    "SourceRelationIds",
    "SyntaxMTRelations",
    "combined_relation_ids",
    "combined_relation_table",
    "dependency_depth_buckets",
    "dependency_relation_ids",
    "labeled_relation_names",
    "localized_attention_log_mask",
    "make_source_relation_ids",
    "num_tree_relations",
    "relation_logits",
    "relation_values",
    "summed_per_relation",
    "relative_position_ids",
    "tree_distances",
    "walk_to_roots",
]
