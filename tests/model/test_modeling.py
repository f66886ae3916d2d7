"""The model family (issue 2): relation matrices, efficient == naive attention, generation, saving."""

import os
import random
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.nn import functional as F

from hf_syntax_mt import (
    SyntaxMTConfig,
    SyntaxMTForConditionalGeneration,
    SyntaxMTModel,
    dependency_depth_buckets,
    labeled_relation_names,
)
from hf_syntax_mt.attention_functions import make_attention_mask
from hf_syntax_mt.features.synthetic import random_dependency_tree
from hf_syntax_mt.modeling_syntax_mt import SyntaxMTEncoderLayer
from hf_syntax_mt.relation_attention import (
    NO_RELATION,
    combined_relation_ids,
    combined_relation_table,
    dependency_relation_ids,
    make_source_relation_ids,
    relation_logits,
    relation_values,
    relative_position_ids,
    walk_to_roots,
)
from model_helpers import ALL_PRESETS, EXAMPLE_HEADS, random_batch, syntax_kwargs, tiny_config

# Seed 000, Table 1 (SPEC §3): relative depth depth_j - depth_i for "My father bought a red car ."
SEED000_TABLE1 = [
    [0, -1, -2, 0, 0, -1, -1],
    [1, 0, -1, 1, 1, 0, 0],
    [2, 1, 0, 2, 2, 1, 1],
    [0, -1, -2, 0, 0, -1, -1],
    [0, -1, -2, 0, 0, -1, -1],
    [1, 0, -1, 1, 1, 0, 0],
    [1, 0, -1, 1, 1, 0, 0],
]
# Seed 002, Table 1 (SPEC §4)
N = "none"
SEED002_TABLE1 = [
    ["self", -1, -2, N, N, N, N],
    [1, "self", -1, N, N, "sib", "sib"],
    [2, 1, "self", 2, 2, 1, 1],
    [N, N, -2, "self", "sib", -1, N],
    [N, N, -2, "sib", "self", -1, N],
    [N, "sib", -1, 1, 1, "self", "sib"],
    [N, "sib", -1, N, N, "sib", "self"],
]


def test_relative_depth_matches_seed000_table1():
    ids, num = dependency_relation_ids(torch.tensor([EXAMPLE_HEADS]), "depth", max_distance=2)
    assert num == 5
    assert (ids[0] - 2).tolist() == SEED000_TABLE1


def test_labeled_relations_match_seed002_table1():
    ids, num = dependency_relation_ids(torch.tensor([EXAMPLE_HEADS]), "labeled", max_distance=2)
    names = labeled_relation_names(2)
    assert num == len(names) == 6
    derived = [[names[i] if i != NO_RELATION else N for i in row] for row in ids[0].tolist()]
    assert derived == SEED002_TABLE1


def test_labeled_relations_beyond_k_and_other_sentences_get_zero_vector():
    # two sentences in one row: 0<-1<-2<-3 (chain, root 0) and 4<-5 (root 4); then eos (-100)
    heads = torch.tensor([[0, 0, 1, 2, 4, 4, -100]])
    labeled, _ = dependency_relation_ids(heads, "labeled", max_distance=2)
    depth, _ = dependency_relation_ids(heads, "depth", max_distance=2)
    assert labeled[0, 3, 0] == NO_RELATION  # ancestor at distance 3 > k: zero vector, not clipped
    assert depth[0, 3, 0] - 2 == -2  # the depth scheme clips instead
    assert (labeled[0, :4, 4:] == NO_RELATION).all() and (depth[0, :4, 4:] == NO_RELATION).all()
    assert (labeled[0, 6] == NO_RELATION).all() and (depth[0, :, 6] == NO_RELATION).all()


def _naive_walk(heads):
    """Depth, ancestors {j: s} and root of every token of one row, walking head by head (-100: outside)."""
    out = []
    for i, head in enumerate(heads):
        if head == -100:
            out.append((0, {}, i))
            continue
        node, ancestors = i, {}
        while heads[node] != node:
            node = heads[node]
            ancestors[node] = len(ancestors) + 1
        out.append((len(ancestors), ancestors, node))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_pointer_doubling_walk_equals_naive_walk(seed):
    """`walk_to_roots` (ceil(log2 n) doubling rounds) == the head-by-head walk, on rows of several random
    trees (chains as deep as the row included) with tokens outside the tree, for every row length 1..40."""
    rng = random.Random(seed)
    for length in range(1, 41):
        rows = []
        for _ in range(3):
            heads, start = [-100] * length, 0
            while start < length:
                size = rng.randint(1, length - start)
                chain = rng.random() < 0.3
                for k in range(size):  # a tree over positions start..start+size-1, rooted at its first token
                    heads[start + k] = start if k == 0 else start + (k - 1 if chain else rng.randrange(k))
                start += size + rng.randint(0, 1)  # sometimes a token outside the tree between trees
            rows.append(heads)
        depth, distance, root, in_tree, max_depth, max_trees = walk_to_roots(torch.tensor(rows))
        naive = [_naive_walk(heads) for heads in rows]
        for b, heads in enumerate(rows):
            for i, (d, ancestors, r) in enumerate(naive[b]):
                assert depth[b, i] == d and root[b, i] == r and bool(in_tree[b, i]) == (heads[i] != -100)
                assert {j: s for j, s in enumerate(distance[b, i].tolist()) if s} == ancestors
        assert max_depth == max(d for row in naive for d, _, _ in row)
        assert max_trees == max(sum(heads[i] == i for i in range(length)) for heads in rows)


def test_relative_position_ids_with_past_length():
    ids = relative_position_ids(1, 6, max_relative_position=2, past_length=5)
    assert (ids - 2).tolist() == [[-2, -2, -2, -2, -1, 0]]


# ---------------------------------------------------------------------------------------------
# Efficient relative attention == naive reference written from the formulas
# ---------------------------------------------------------------------------------------------


def _vectors(table, ids):
    """r_ij = w[id_ij], the zero vector for NO_RELATION: (…, n, n, d_k)."""
    padded = torch.cat([table, torch.zeros_like(table[:1])])
    return padded[torch.where(ids == NO_RELATION, table.shape[0], ids)]


def naive_self_attention(layer, hidden, padding_mask, relative_ids, dependency_ids):
    """Shaw / Omote / seed-002 self-attention straight from the formulas, materialising r_ij.

    e_ij = q_i·(k_j + r^K_ij)/sqrt(d_k), z_i = Σ_j α_ij (v_j + r^V_ij), with r = a, b, a + b or
    Concat(a, b) W_rel depending on the configuration.
    """
    attention, relations, config = layer.self_attn, layer.relations, layer.config
    batch, length, _ = hidden.shape
    heads, head_dim = attention.num_heads, attention.head_dim

    def split(x):
        return x.view(batch, length, heads, head_dim).transpose(1, 2)

    q, k, v = split(attention.q_proj(hidden)), split(attention.k_proj(hidden)), split(attention.v_proj(hidden))
    r = {}
    for side in ("key", "value"):
        a = b = None
        if relations.relative is not None and getattr(config, f"relative_{side}_term"):
            a = _vectors(getattr(relations.relative, side), relative_ids).expand(batch, length, length, head_dim)
        if relations.dependency is not None and getattr(config, f"dependency_{side}_term"):
            b = _vectors(getattr(relations.dependency, side), dependency_ids)
        if relations.combine is not None:
            a = torch.zeros(batch, length, length, head_dim) if a is None else a
            b = torch.zeros(batch, length, length, head_dim) if b is None else b
            r[side] = torch.cat([a, b], -1) @ getattr(relations.combine, side).weight.T
        else:
            parts = [x for x in (a, b) if x is not None]
            r[side] = sum(parts) if parts else None
    scores = torch.einsum("bhid,bhjd->bhij", q, k)
    if r["key"] is not None:
        scores = scores + torch.einsum("bhid,bijd->bhij", q, r["key"])
    scores = scores / head_dim**0.5
    scores = scores.masked_fill(~padding_mask[:, None, None, :], torch.finfo(scores.dtype).min)
    alpha = scores.softmax(-1)
    z = alpha @ v
    if r["value"] is not None:
        z = z + torch.einsum("bhij,bijd->bhid", alpha, r["value"])
    return attention.out_proj(z.transpose(1, 2).reshape(batch, length, heads * head_dim))


RELATION_VARIANTS = {
    "rel": dict(relative_positions=True),
    "dep": dict(dependency_relations="depth"),
    "dep_rel_sum": dict(relative_positions=True, dependency_relations="depth"),
    "dep_rel_concat": dict(relative_positions=True, dependency_relations="depth", relation_combination="concat_linear"),
    "labeled": dict(dependency_relations="labeled"),
    "labeled_rel_concat": dict(relative_positions=True, dependency_relations="labeled", relation_combination="concat_linear"),
    "labeled_rel_sum": dict(relative_positions=True, dependency_relations="labeled"),
    "dep_key_only": dict(dependency_relations="depth", dependency_value_term=False),
    "dep_value_only": dict(dependency_relations="depth", dependency_key_term=False),
    "rel_key_only_dep_concat": dict(
        relative_positions=True, relative_value_term=False, dependency_relations="labeled", relation_combination="concat_linear"
    ),
    "dep_forest": dict(dependency_relations="depth"),
    "dep_rel_forest": dict(relative_positions=True, dependency_relations="depth"),
    "labeled_forest": dict(dependency_relations="labeled"),
    "k3_l3": dict(relative_positions=True, max_relative_position=3, dependency_relations="depth", max_dependency_distance=3),
}


def test_depth_buckets_factorise_the_depth_ids():
    """id(i, j) = query_ids[i, bucket(j)] for keys in the tree, NO_RELATION otherwise — on seed 000's
    example, random padded batches and a forest of two sentences."""
    batch = random_batch([9, 6, 12], seed=4)
    heads = batch["source_heads"]
    heads[2, :11] = torch.tensor([1, 1, 1, 2, 3, 5, 5, 6, 10, 8, 10])
    for source_heads in (torch.tensor([EXAMPLE_HEADS]), heads):
        for distance in (1, 2, 3):
            ids, _ = dependency_relation_ids(source_heads, "depth", distance)
            key_buckets, query_ids = dependency_depth_buckets(source_heads, distance)
            assert set(key_buckets.unique().tolist()) <= {0.0, 1.0} and (key_buckets.sum(-1) <= 1).all()
            length = source_heads.shape[1]
            key_bucket = key_buckets.argmax(-1)[:, None, :].expand(-1, length, -1)
            in_tree = key_buckets.sum(-1) > 0
            rebuilt = torch.where(in_tree[:, None, :], query_ids.gather(2, key_bucket), NO_RELATION)
            assert torch.equal(rebuilt, ids), (source_heads, distance)
    # the forest row has 3 trees and depths 0..3: 3 × 4 buckets (10 of them non-empty), M rounded up to 16
    key_buckets = dependency_depth_buckets(heads[2:], 2)[0]
    assert key_buckets.shape[-1] == 16 and int(key_buckets.sum(1).gt(0).sum()) == 10


@pytest.mark.parametrize("variant", list(RELATION_VARIANTS))
def test_efficient_relative_attention_equals_naive_reference(variant):
    torch.manual_seed(0)
    config = tiny_config("transformer_abs", **RELATION_VARIANTS[variant])
    layer = SyntaxMTEncoderLayer(config, layer_number=1)
    for parameter in layer.parameters():  # relation tables start at N(0, 0.02); make them matter
        torch.nn.init.normal_(parameter, std=0.3)
    batch = random_batch([9, 6, 8], seed=1)
    length = batch["input_ids"].shape[1]
    hidden = torch.randn(3, length, config.d_model)
    padding_mask = batch["attention_mask"].bool()
    relative_ids = relative_position_ids(length, length, config.max_relative_position)
    position_ids = relative_ids if config.relative_positions else None
    dependency_ids = None
    relation_ids = combined_relation_ids(position_ids) if position_ids is not None else None
    if config.dependency_relations:
        heads = batch["source_heads"]
        if variant.endswith("forest"):  # row 0 holds two sentences (roots 1 and 5)
            heads[0, :8] = torch.tensor([1, 1, 1, 2, 3, 5, 5, 6])
        dependency_ids, _ = dependency_relation_ids(heads, config.dependency_relations, config.max_dependency_distance)
        relation_ids = make_source_relation_ids(config, heads, position_ids)  # the model's: buckets for depth alone

    relation = layer.relations(relation_ids)
    mask = make_attention_mask(padding_mask, length, length)
    efficient, _, _ = layer.self_attn(hidden, mask=mask, relation=relation)
    explicit, _, _ = layer.self_attn(hidden, mask=mask, relation=relation, need_weights=True)
    assert torch.allclose(efficient, explicit, atol=1e-5, rtol=1e-5)  # fused (SDPA) path == explicit path
    naive = naive_self_attention(layer, hidden, padding_mask, relative_ids, dependency_ids)
    assert torch.allclose(efficient, naive, atol=1e-5, rtol=1e-5)

    weights = torch.randn_like(naive)
    grads_efficient = torch.autograd.grad((efficient * weights).sum(), list(layer.parameters()), allow_unused=True)
    grads_naive = torch.autograd.grad((naive * weights).sum(), list(layer.parameters()), allow_unused=True)
    compared = 0
    for (name, _), ge, gn in zip(layer.named_parameters(), grads_efficient, grads_naive):
        if gn is None:
            assert ge is None or torch.count_nonzero(ge) == 0, name
            continue
        if name.endswith("k_proj.bias"):  # exactly 0 (softmax ignores a per-row constant q·b): compare to 0
            assert ge.abs().max() < 1e-4 and gn.abs().max() < 1e-4, name
            continue
        assert torch.allclose(ge, gn, atol=1e-5, rtol=1e-4), name
        compared += 1
    assert compared >= 8  # q/k/v/out projections plus the relation tables


@pytest.mark.parametrize("query_length, key_length", [(7, 7), (1, 9), (5, 40)])
@pytest.mark.parametrize("tree", [None, "depth", "labeled"])
def test_combined_relation_terms_equal_the_per_pair_vectors(tree, query_length, key_length):
    """One gather / one scatter-add at the combined ids a·T + b (`RelationIds`, `combined_relation_table`) equal the
    per-pair vectors w^pos_{a(i, j)} + w^tree_{b(i, j)} (zero for NO_RELATION) written out: the key term
    q_i · r_ij and the value term Σ_j α_ij r_ij, queries after a cache too."""
    torch.manual_seed(3)
    past, head_dim = key_length - query_length, 4
    position_ids = relative_position_ids(query_length, key_length, 2, past_length=past)
    position_table = torch.randn(5, head_dim, dtype=torch.float64)
    pair_vectors = position_table[position_ids].expand(2, -1, -1, -1)
    tree_ids, size, tree_table = None, 0, None
    if tree is not None:
        if query_length != key_length:
            pytest.skip("tree relations are encoder self-attention terms: no cache")
        rng = random.Random(2)
        heads = torch.tensor([random_dependency_tree(key_length, rng) for _ in range(2)])
        tree_ids, size = dependency_relation_ids(heads, tree, 2)
        tree_table = torch.randn(size, head_dim, dtype=torch.float64)
        tree_vectors = torch.cat([tree_table, tree_table.new_zeros(1, head_dim)])[tree_ids]  # NO_RELATION = -1: zero
        pair_vectors = pair_vectors + tree_vectors
    relations = combined_relation_ids(position_ids, tree_ids, size)
    table = combined_relation_table(position_table, tree_table, 5, relations.tree_size)
    query = torch.randn(2, 3, query_length, head_dim, dtype=torch.float64)
    weights = torch.randn(2, 3, query_length, key_length, dtype=torch.float64).softmax(-1)
    torch.testing.assert_close(relation_logits(query, relations.ids, table),
                               torch.einsum("bhid,bijd->bhij", query, pair_vectors))
    torch.testing.assert_close(relation_values(weights, relations.ids, table),
                               torch.einsum("bhij,bijd->bhid", weights, pair_vectors))


@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_fused_and_explicit_paths_give_the_same_logits_and_gradients(preset):
    """Every preset with padding, in training mode without dropout: the default path (fused attention where it is
    exact, Toeplitz Shaw terms, labeled terms at the related pairs) and the explicit one of
    `attn_implementation="eager"` give the same loss, logits and gradients."""
    batch = random_batch([9, 6, 12], seed=7)
    results = []
    for implementation in ("sdpa", "eager"):
        torch.manual_seed(0)
        config = tiny_config(preset, init_std=0.3, attn_implementation=implementation, attention_dropout=0.0,
                             dropout=0.0, activation_dropout=0.0)
        model = SyntaxMTForConditionalGeneration(config).train()
        labels = torch.randint(3, 40, (3, 8))
        labels[0, 6:] = -100
        features = syntax_kwargs(config, batch)
        if config.dbsa_decoder_layer:
            rng = random.Random(1)
            features["target_heads"] = torch.tensor([random_dependency_tree(7, rng) + [-100] for _ in range(3)])
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels, **features)
        out.loss.backward()
        results.append((out.logits, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}))
    (fused, fused_grads), (explicit, explicit_grads) = results
    assert torch.allclose(fused, explicit, atol=1e-5)
    assert fused_grads.keys() == explicit_grads.keys()
    for name, grad in fused_grads.items():  # within 1e-5 of the gradient's scale (float32 summation order)
        scale = max(1.0, grad.abs().max().item())
        assert torch.allclose(grad, explicit_grads[name], atol=1e-5 * scale, rtol=0), name


@pytest.mark.parametrize("preset", ["transformer_dep_labeled_rel", "transformer_dep_rel"])
def test_efficient_attention_never_materialises_pairwise_vectors(preset):
    """The largest float tensor of a relative layer is (B, H, n, n), never (…, n, n, d_k)."""
    config = tiny_config(preset, d_model=64)
    layer = SyntaxMTEncoderLayer(config, layer_number=1)
    batch = random_batch([40, 40], seed=2)
    length = 40
    hidden = torch.randn(2, length, config.d_model)
    relation = layer.relations(make_source_relation_ids(config, batch["source_heads"]))
    mask = make_attention_mask(batch["attention_mask"].bool(), length, length)
    largest = []
    from torch.utils._python_dispatch import TorchDispatchMode

    class LargestTensor(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for tensor in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
                    largest.append(tensor.numel())
            return out

    with LargestTensor():
        output, _, _ = layer.self_attn(hidden, mask=mask, relation=relation)
        output.sum().backward()
    heads, head_dim = config.encoder_attention_heads, config.d_model // config.encoder_attention_heads
    assert max(largest) <= 2 * heads * length * (length + 1)
    assert max(largest) < 2 * length * length * head_dim


# ---------------------------------------------------------------------------------------------
# Model-level properties
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["transformer_dep", "transformer_dep_labeled"])
def test_dependency_only_encoder_is_permutation_equivariant(preset):
    """Without absolute positions the dependency terms carry the tree, not the word order: permuting the words
    (and renumbering the heads) permutes the encoder states (what seed 000's ablation removes with the PE)."""
    torch.manual_seed(0)
    config = tiny_config(preset, use_absolute_positions=False)
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([9], seed=3)
    words = 8
    permutation = torch.randperm(words)
    inverse = torch.argsort(permutation)
    order = torch.cat([permutation, torch.tensor([words])])  # keep eos last
    heads = batch["source_heads"][0]
    permuted_heads = heads[order].clone()
    permuted_heads[:words] = inverse[heads[permutation]]
    encoder = model.get_encoder()
    original = encoder(input_ids=batch["input_ids"], source_heads=batch["source_heads"]).last_hidden_state
    permuted = encoder(input_ids=batch["input_ids"][:, order], source_heads=permuted_heads[None]).last_hidden_state
    assert torch.allclose(original[:, order], permuted, atol=1e-5)
    # and the absolute PE breaks it (the property is not trivially true)
    with_pe = SyntaxMTForConditionalGeneration(tiny_config(preset)).eval().get_encoder()
    a = with_pe(input_ids=batch["input_ids"], source_heads=batch["source_heads"]).last_hidden_state
    b = with_pe(input_ids=batch["input_ids"][:, order], source_heads=permuted_heads[None]).last_hidden_state
    assert not torch.allclose(a[:, order], b, atol=1e-3)


@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_cached_decoding_equals_full_forward(preset):
    torch.manual_seed(0)
    config = tiny_config(preset)
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([8, 6], seed=4)
    features = syntax_kwargs(config, batch)
    decoder_input_ids = torch.randint(3, config.vocab_size, (2, 7))
    decoder_input_ids[:, 0] = config.decoder_start_token_id
    with torch.no_grad():
        full = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_input_ids,
            use_cache=False,
            **features,
        ).logits
        encoder_outputs = model.get_encoder()(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **features
        )
        past, steps = None, []
        for t in range(decoder_input_ids.shape[1]):
            out = model(
                encoder_outputs=encoder_outputs,
                attention_mask=batch["attention_mask"],
                decoder_input_ids=decoder_input_ids[:, t : t + 1],
                cache=past,
                use_cache=True,
            )
            past = out.cache
            steps.append(out.logits)
    assert torch.allclose(full, torch.cat(steps, 1), atol=1e-5)


def test_deprecated_past_key_values_keyword_still_continues_the_cache():
    """transformers 5.24 renamed the cache argument to `cache`; code passing `past_key_values=` keeps working."""
    torch.manual_seed(0)
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_rel")).eval()
    batch = random_batch([6, 5], seed=2)
    decoder_input_ids = torch.tensor([[0, 5, 6, 7], [0, 8, 9, 10]])
    with torch.no_grad():
        full = model(**batch, decoder_input_ids=decoder_input_ids, use_cache=False).logits
        for keyword in ("cache", "past_key_values"):
            cache = model(**batch, decoder_input_ids=decoder_input_ids[:, :2], use_cache=True).cache
            assert cache.get_seq_length() == 2
            rest = model(**batch, decoder_input_ids=decoder_input_ids[:, 2:], use_cache=True, **{keyword: cache})
            assert rest.cache.get_seq_length() == 4, keyword
            assert torch.allclose(rest.logits, full[:, 2:], atol=1e-5), keyword


@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_generate_greedy_and_beam_for_every_preset(preset):
    torch.manual_seed(0)
    config = tiny_config(preset, init_std=0.3)
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([8, 5, 7], seed=5)
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **syntax_kwargs(config, batch),
                  max_new_tokens=6, eos_token_id=None, return_dict_in_generate=True, output_scores=True)
    # random models repeat a few tokens, so compare the step scores, which differ by row and step
    greedy, greedy_no_cache = model.generate(**inputs), model.generate(**inputs, use_cache=False)
    assert greedy.sequences.shape == (3, 7) and torch.equal(greedy.sequences, greedy_no_cache.sequences)
    scores, scores_no_cache = torch.stack(greedy.scores), torch.stack(greedy_no_cache.scores)
    assert torch.allclose(scores, scores_no_cache, atol=1e-4)
    assert not torch.allclose(scores[1], scores[2], atol=1e-3) and not torch.allclose(scores[:, 0], scores[:, 1], atol=1e-3)
    beam = model.generate(**inputs, num_beams=3, num_return_sequences=2)
    beam_no_cache = model.generate(**inputs, num_beams=3, num_return_sequences=2, use_cache=False)
    assert beam.sequences.shape == (6, 7) and torch.equal(beam.sequences, beam_no_cache.sequences)
    assert torch.allclose(beam.sequences_scores, beam_no_cache.sequences_scores, atol=1e-4)
    assert (beam.sequences_scores[0::2] >= beam.sequences_scores[1::2]).all()  # best beam first
    assert torch.equal(model.generate(**inputs, num_beams=1).sequences, greedy.sequences)


def test_syntax_features_reach_the_encoder_in_generate():
    """Different source trees must change the translation scores of a dependency model."""
    torch.manual_seed(0)
    config = tiny_config("transformer_dep_rel")
    model = SyntaxMTForConditionalGeneration(config).eval()
    for parameter in model.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    batch = random_batch([8], seed=6)
    other = random_batch([8], seed=7)
    inputs = dict(input_ids=batch["input_ids"], max_new_tokens=5, num_beams=2, output_scores=True, return_dict_in_generate=True)
    a = model.generate(**inputs, source_heads=batch["source_heads"])
    b = model.generate(**inputs, source_heads=other["source_heads"])
    assert not torch.allclose(a.scores[0], b.scores[0])


@pytest.mark.parametrize("preset", ["transformer_dep_labeled_rel", "transformer_sla", "transformer_dbsa"])
def test_padding_does_not_change_encoder_outputs(preset):
    torch.manual_seed(0)
    config = tiny_config(preset)
    encoder = SyntaxMTForConditionalGeneration(config).eval().get_encoder()
    batch = random_batch([9, 5], seed=8)
    padded = encoder(**{k: v for k, v in batch.items() if k != "source_heads" or config.needs_source_heads}).last_hidden_state
    single = {k: v[1:2, :5] for k, v in batch.items()}
    alone = encoder(**{k: v for k, v in single.items() if k != "source_heads" or config.needs_source_heads}).last_hidden_state
    assert torch.allclose(padded[1, :5], alone[0], atol=1e-5)


def test_save_and_load_give_identical_logits(tmp_path):
    torch.manual_seed(0)
    config = tiny_config("transformer_dep_labeled_rel+transformer_dbsa+transformer_sla")
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([8, 6], seed=9)
    decoder_input_ids = torch.zeros(2, 4, dtype=torch.long)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert (tmp_path / "modeling_syntax_mt.py").exists() and (tmp_path / "configuration_syntax_mt.py").exists()
    loaded = SyntaxMTForConditionalGeneration.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        before = model(**batch, decoder_input_ids=decoder_input_ids).logits
        after = loaded(**batch, decoder_input_ids=decoder_input_ids).logits
    assert torch.equal(before, after)
    assert loaded.config.preset == config.preset and loaded.config.sla_layers == [1]


@pytest.mark.parametrize("stored", ["save_model", "lm_head only", "encoder embedding only", "bf16 load"])
def test_every_way_of_storing_the_tied_embedding_loads(tmp_path, stored):
    """The tied embedding (shared, encoder, decoder, lm_head) loads from whichever of its names the file
    keeps: safetensors.torch.save_model keeps lm_head.weight; a file may lack model.shared.weight."""
    from safetensors.torch import save_file, save_model

    torch.manual_seed(0)
    config = tiny_config("transformer_dep_rel")
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([7, 5], seed=11)
    inputs = dict(**batch, decoder_input_ids=batch["input_ids"])
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    names = ("model.shared.weight", "lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight")
    if stored == "save_model":
        save_model(model, str(weights), metadata={"format": "pt"})
    elif stored != "bf16 load":
        keep = "lm_head.weight" if stored == "lm_head only" else "model.encoder.embed_tokens.weight"
        state = {k: v.clone() for k, v in model.state_dict().items() if k not in names}
        save_file({**state, keep: model.lm_head.weight.detach().clone()}, str(weights), metadata={"format": "pt"})
    dtype = torch.bfloat16 if stored == "bf16 load" else torch.float32
    loaded, info = SyntaxMTForConditionalGeneration.from_pretrained(tmp_path, dtype=dtype, output_loading_info=True)
    loaded.eval()
    assert info["missing_keys"] == set() or info["missing_keys"] == []
    assert all(loaded.get_parameter(name) is loaded.model.shared.weight for name in names)
    assert loaded.model.shared.weight.device.type == "cpu" and loaded.model.shared.weight.dtype == dtype
    with torch.no_grad():
        expected = model(**inputs).logits
        logits = loaded(**inputs).logits.float()
    torch.testing.assert_close(logits, expected, atol=0.05 if dtype == torch.bfloat16 else 0.0, rtol=0)
    generated = loaded.generate(**batch, max_new_tokens=4, num_beams=2)
    assert generated.shape[0] == 2


def test_outputs_follow_the_config_and_return_dict():
    torch.manual_seed(0)
    config = tiny_config("transformer_rel", output_hidden_states=True)
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([6, 4], seed=12)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    with torch.no_grad():
        outputs = model(**inputs)
        assert len(outputs.encoder_hidden_states) == len(outputs.decoder_hidden_states) == config.encoder_layers + 1
        assert model(**inputs, output_hidden_states=False).encoder_hidden_states is None
        model.set_attn_implementation("eager")  # transformers allows config.output_attentions with eager only
        model.config.output_attentions = True
        assert len(model(**inputs).cross_attentions) == config.decoder_layers
        loss, logits, *rest = model(**inputs, return_dict=False)
        model.config.return_dict = False
        assert isinstance(model(**inputs), tuple) and isinstance(model.model(**batch, decoder_input_ids=labels.clamp(0)), tuple)
    torch.testing.assert_close((loss, logits), (outputs.loss, outputs.logits))  # eager vs sdpa: rounding only


def test_plain_cross_entropy_by_default_and_label_smoothing_on_request():
    torch.manual_seed(0)
    batch = random_batch([6, 4], seed=13)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    assert SyntaxMTConfig().label_smoothing == 0.0
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_abs")).eval()
    with torch.no_grad():
        outputs = model(**inputs)
        plain = F.cross_entropy(outputs.logits.flatten(0, 1), labels.flatten())
        model.config.label_smoothing = 0.1
        smoothed = model(**inputs).loss
    torch.testing.assert_close(outputs.loss, plain)
    torch.testing.assert_close(smoothed, F.cross_entropy(outputs.logits.flatten(0, 1), labels.flatten(), label_smoothing=0.1))


def test_decoder_attention_mask_masks_padded_target_keys_and_follows_the_cache():
    torch.manual_seed(0)
    config = tiny_config("transformer_rel")
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([6, 6], seed=14)
    decoder_input_ids = batch["input_ids"][:, :5]
    mask = torch.ones_like(decoder_input_ids)
    mask[1, 1] = 0  # a padded key
    encoder_inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    with torch.no_grad():
        unmasked = model(**encoder_inputs, decoder_input_ids=decoder_input_ids).logits
        ones = model(**encoder_inputs, decoder_input_ids=decoder_input_ids, decoder_attention_mask=torch.ones_like(mask)).logits
        masked = model(**encoder_inputs, decoder_input_ids=decoder_input_ids, decoder_attention_mask=mask).logits
        # the same with a cache: the prefix, then one token at a time with the mask of all tokens so far
        step = model(**encoder_inputs, decoder_input_ids=decoder_input_ids[:, :3], decoder_attention_mask=mask[:, :3], use_cache=True)
        cache, cached = step.cache, [step.logits]
        for t in (3, 4):
            step = model(**encoder_inputs, decoder_input_ids=decoder_input_ids[:, t : t + 1], decoder_attention_mask=mask[:, : t + 1],
                         cache=cache, use_cache=True)
            cache = step.cache
            cached.append(step.logits)
        with pytest.raises(ValueError, match="decoder_attention_mask has length 1"):
            model(**encoder_inputs, decoder_input_ids=decoder_input_ids[:, 4:], decoder_attention_mask=mask[:, 4:], cache=cache)
    assert torch.equal(ones, unmasked)
    assert torch.allclose(masked[0], unmasked[0]) and torch.allclose(masked[1, :1], unmasked[1, :1], atol=1e-6)
    assert not torch.allclose(masked[1, 2:], unmasked[1, 2:], atol=1e-4)  # later queries no longer see key 1
    torch.testing.assert_close(torch.cat(cached, 1), masked, atol=1e-5, rtol=1e-5)


def test_unknown_keywords_are_refused_by_both_models():
    config = tiny_config("transformer_abs")
    batch = random_batch([5], seed=15)
    for model in (SyntaxMTModel(config), SyntaxMTForConditionalGeneration(config)):
        with pytest.raises(TypeError, match="source_head"):
            model(**batch, decoder_input_ids=batch["input_ids"], source_head=batch["source_heads"])


def test_remote_code_reload_without_the_package(tmp_path):
    torch.manual_seed(0)
    config = tiny_config("transformer_dep_rel")
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([7], seed=10)
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        expected = model(**{k: batch[k] for k in ("input_ids", "source_heads")}, decoder_input_ids=torch.zeros(1, 3, dtype=torch.long)).logits
    torch.save({"batch": batch, "expected": expected}, tmp_path / "check.pt")
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["hf_syntax_mt"] = None  # the package must not be importable
        import torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        check = torch.load({str(tmp_path / "check.pt")!r})
        b = check["batch"]
        with torch.no_grad():
            logits = model(input_ids=b["input_ids"], source_heads=b["source_heads"],
                           decoder_input_ids=torch.zeros(1, 3, dtype=torch.long)).logits
        # another process may use another thread count, hence fused-kernel rounding: compare at 1e-5
        assert torch.allclose(logits, check["expected"], atol=1e-5), (logits - check["expected"]).abs().max()
        print("REMOTE-OK")
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "REMOTE-OK" in result.stdout, result.stderr[-3000:]


def test_auto_classes_are_registered(tmp_path):
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    config = tiny_config("transformer_rel")
    model = AutoModelForSeq2SeqLM.from_config(config)
    assert isinstance(model, SyntaxMTForConditionalGeneration)
    model.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), SyntaxMTConfig)
    assert type(AutoModel.from_pretrained(tmp_path)).__name__ == "SyntaxMTModel"


@pytest.mark.parametrize("preset", ALL_PRESETS + ["transformer_dep_rel+transformer_dbsa+transformer_sla"])
def test_every_preset_learns_a_reordering_task(preset):
    """Tiny reversal task: the token loss falls clearly within 200 steps on CPU.

    (A tiny model needs a larger init than the 0.02 default, as MarianMTModel of this size does.)
    """
    torch.manual_seed(0)
    config = tiny_config(preset, label_smoothing=0.0, init_std=0.1)
    model = SyntaxMTForConditionalGeneration(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(200):
        batch = random_batch([8] * 16, seed=100 + step, vocab_size=12)
        words = batch["input_ids"][:, :7]
        labels = torch.cat([words.flip(1), torch.ones(16, 1, dtype=torch.long)], 1)
        target_heads = torch.cat([torch.tensor([[1, 2, 3, 3, 3, 4, 5]]).expand(16, 7), torch.full((16, 1), -100)], 1)
        out = model(**batch, labels=labels, target_heads=target_heads)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(out.token_loss.item())
    start, end = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert end < 0.25 * start, (start, end)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


def test_dependency_preset_without_source_heads_names_the_preset():
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep_rel")).eval()
    with pytest.raises(ValueError, match="transformer_dep_rel.*source_heads"):
        model(input_ids=torch.tensor([[5, 6, 1]]), decoder_input_ids=torch.zeros(1, 1, dtype=torch.long))


def test_source_heads_shape_mismatch_and_out_of_range_heads():
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep")).eval()
    ids = torch.tensor([[5, 6, 7, 1]])
    start = torch.zeros(1, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="shape"):
        model(input_ids=ids, source_heads=torch.tensor([[1, 1, -100]]), decoder_input_ids=start)
    with pytest.raises(ValueError, match="contains 9"):
        model(input_ids=ids, source_heads=torch.tensor([[1, 9, 1, -100]]), decoder_input_ids=start)
    with pytest.raises(ValueError, match="cycle"):
        model(input_ids=ids, source_heads=torch.tensor([[1, 0, 1, -100]]), decoder_input_ids=start)


def test_empty_source_float_heads_and_nan_distances_are_refused():
    start = torch.zeros(1, 1, dtype=torch.long)
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep")).eval()
    with pytest.raises(ValueError, match="the source is empty"):
        model(input_ids=torch.zeros(1, 0, dtype=torch.long), source_heads=torch.zeros(1, 0, dtype=torch.long), decoder_input_ids=start)
    with pytest.raises(ValueError, match="source_heads must hold integer head indices"):
        model(input_ids=torch.tensor([[5, 6, 1]]), source_heads=torch.tensor([[1.0, 1.0, -100.0]]), decoder_input_ids=start)
    sla = SyntaxMTForConditionalGeneration(tiny_config("transformer_sla")).eval()
    with pytest.raises(ValueError, match="source_distances contains NaN"):
        sla(input_ids=torch.tensor([[5, 6, 1]]), source_distances=torch.tensor([[1.0, float("nan"), 2000.0]]), decoder_input_ids=start)


def test_misspelt_syntax_inputs_are_refused():
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep")).eval()
    batch = random_batch([5, 4], seed=3)
    with pytest.raises(ValueError, match=r"not used by the model: \['source_head'\]"):
        model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       source_head=batch["source_heads"], max_new_tokens=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'source_distance'"):
        model(input_ids=batch["input_ids"], source_heads=batch["source_heads"], source_distance=batch["source_distances"],
              decoder_input_ids=batch["input_ids"][:, :1])


def test_invalid_configs_are_refused():
    with pytest.raises(ValueError, match="dependency_relations"):
        tiny_config(dependency_relations="tree")
    with pytest.raises(ValueError, match="unknown preset"):
        SyntaxMTConfig.from_preset("transformer_xyz")
    with pytest.raises(ValueError, match="unknown config setting 'd_modle'; did you mean 'd_model'"):
        SyntaxMTConfig.from_preset("transformer_abs", d_modle=64)
    assert SyntaxMTConfig.from_preset("transformer_abs", attn_implementation="eager")._attn_implementation == "eager"
    with pytest.raises(ValueError, match="relation_combination"):
        tiny_config(relation_combination="product")
    with pytest.raises(ValueError, match="distance_source='trees'"):
        tiny_config("transformer_sla", distance_source="trees")


@pytest.mark.parametrize("preset", ["transformer_abs", "transformer_dep_labeled_rel+transformer_dbsa+transformer_sla"])
def test_padded_batch_generates_what_each_sentence_generates_alone(preset):
    torch.manual_seed(0)
    config = tiny_config(preset, init_std=0.3)
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([9, 4, 7], seed=17)
    features = syntax_kwargs(config, batch)
    together = model.generate(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=8, num_beams=3, **features
    )
    for row, length in enumerate([9, 4, 7]):
        alone = model.generate(
            input_ids=batch["input_ids"][row : row + 1, :length],
            max_new_tokens=8,
            num_beams=3,
            **{name: value[row : row + 1, :length] for name, value in features.items()},
        )
        generated = together[row][: alone.shape[1]]
        assert torch.equal(generated, alone[0]), (row, together[row], alone[0])


def test_sentences_longer_than_the_model_allows_are_refused():
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_rel", max_position_embeddings=8)).eval()
    with pytest.raises(ValueError, match="source length 9 exceeds max_position_embeddings=8"):
        model(input_ids=torch.ones(1, 9, dtype=torch.long), decoder_input_ids=torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="target length 9 exceeds max_position_embeddings=8"):
        model(input_ids=torch.ones(1, 3, dtype=torch.long), decoder_input_ids=torch.zeros(1, 9, dtype=torch.long))


def test_fused_attention_path_equals_the_explicit_one():
    """Plain attention runs through F.scaled_dot_product_attention unless the probabilities are
    asked for; both paths give the same logits (padding, causal mask, cache)."""
    torch.manual_seed(0)
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_abs", init_std=0.3)).eval()
    batch = random_batch([9, 5], seed=18)
    decoder_input_ids = torch.randint(3, 40, (2, 6))
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_input_ids)
    with torch.no_grad():
        fused = model(**inputs).logits
        explicit = model(**inputs, output_attentions=True)
    assert explicit.encoder_attentions is not None and explicit.cross_attentions[0].shape == (2, 4, 6, 9)
    assert torch.allclose(fused, explicit.logits, atol=1e-5)


@pytest.mark.parametrize("preset", ["transformer_abs", "transformer_dep"])
def test_eager_attn_implementation_skips_sdpa_with_the_same_output(preset, tmp_path, monkeypatch):
    """`attn_implementation="eager"` (config or `from_pretrained`) runs every attention through the
    explicit path — the fast one under CPU bf16 autocast; the default "sdpa" uses the fused kernel."""
    torch.manual_seed(0)
    model = SyntaxMTForConditionalGeneration(tiny_config(preset, init_std=0.3)).eval()
    model.save_pretrained(tmp_path)
    eager = SyntaxMTForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert model.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    batch = random_batch([9, 5], seed=18)
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                  decoder_input_ids=torch.randint(3, 40, (2, 6)), **syntax_kwargs(model.config, batch))
    fused_calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: fused_calls.append(1) or sdpa(*a, **k))
    with torch.no_grad():
        fused = model(**inputs).logits
        calls_fused = len(fused_calls)
        explicit = eager(**inputs).logits
    assert calls_fused == model.config.encoder_layers + 2 * model.config.decoder_layers  # self + cross
    assert len(fused_calls) == calls_fused
    assert torch.allclose(fused, explicit, atol=1e-5)
    model.set_attn_implementation("eager")  # switching a loaded model takes effect at the next call
    with torch.no_grad():
        switched = model(**inputs).logits
    assert len(fused_calls) == calls_fused and torch.equal(switched, explicit)
    gradients = []  # training (no dropout): the same loss and gradients through either path
    for implementation in ("sdpa", "eager"):
        torch.manual_seed(0)
        config = tiny_config(preset, init_std=0.3, attn_implementation=implementation, attention_dropout=0.0,
                             dropout=0.0, activation_dropout=0.0)
        trained = SyntaxMTForConditionalGeneration(config).train()
        trained(**inputs, labels=inputs["decoder_input_ids"]).loss.backward()
        gradients.append(torch.cat([p.grad.flatten() for p in trained.parameters() if p.grad is not None]))
    assert torch.allclose(gradients[0], gradients[1], atol=1e-5)
    eager_config = tiny_config(preset, attn_implementation="eager")
    assert SyntaxMTForConditionalGeneration(eager_config).config._attn_implementation == "eager"
