"""The attention functions chosen by name (issue 107, items 1 and 3): FlexAttention with the key term read at the
pairs' ids inside its `score_mod` computes what the explicit path computes (forward on the CPU, where FlexAttention
has no backward), the choice of function per call, and the masks made once a forward."""

import pytest
import torch

from hf_syntax_mt import SyntaxMTForConditionalGeneration, attention_functions
from hf_syntax_mt.attention_functions import choose_attention, make_attention_mask
from hf_syntax_mt.relation_attention import AttentionRelation
from model_helpers import random_batch, syntax_kwargs, tiny_config

KEYS_ONLY = dict(relative_value_term=False, dependency_value_term=False)
CASES = {  # the key-only presets FlexAttention runs, beside parse heads and localized heads, and plain attention
    "abs": ("transformer_abs", {}),
    "rel@keys": ("transformer_rel", KEYS_ONLY),
    "dep_labeled_rel@keys": ("transformer_dep_labeled_rel", KEYS_ONLY),
    "dep_rel@keys+dbsa": ("transformer_dep_rel+transformer_dbsa", KEYS_ONLY),
    "rel@keys+sla": ("transformer_rel+transformer_sla", KEYS_ONLY),
    "dep": ("transformer_dep", {}),  # key buckets: extra q/k/v columns
}


def models(preset, overrides):
    """{implementation: model} with the same random weights."""
    built = {}
    for implementation in ("eager", "flex_attention"):
        torch.manual_seed(0)
        config = tiny_config(preset, init_std=0.3, attn_implementation=implementation, **overrides)
        built[implementation] = SyntaxMTForConditionalGeneration(config).eval()
    return built


@pytest.mark.parametrize("name", list(CASES))
def test_flex_attention_forward_equals_the_explicit_path(name, monkeypatch):
    calls = []
    run_flex = attention_functions._flex
    monkeypatch.setattr(attention_functions, "_flex", lambda *args: calls.append(1) or run_flex(*args))
    built = models(*CASES[name])
    config = built["eager"].config
    batch = random_batch([9, 6, 12], seed=3)
    labels = torch.randint(3, 40, (3, 8))
    labels[2, 6:] = -100
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels,
                  **syntax_kwargs(config, batch))
    with torch.no_grad():
        eager, flex = (built[implementation](**inputs) for implementation in ("eager", "flex_attention"))
        torch.testing.assert_close(flex.logits, eager.logits, rtol=0, atol=1e-5)
        generate = dict(max_new_tokens=6, do_sample=False, num_beams=1, **syntax_kwargs(config, batch))
        tokens = [built[implementation].generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                                 **generate) for implementation in ("eager", "flex_attention")]
    assert torch.equal(tokens[0], tokens[1])
    assert len(calls) >= 2 * (config.encoder_layers + 2 * config.decoder_layers)  # it ran, not a fallback


def test_each_call_gets_the_function_that_can_compute_it():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    pair_keys = AttentionRelation(torch.zeros(1, 2, 2, dtype=torch.long), torch.zeros(3, 4, requires_grad=True), None)
    pair_values = AttentionRelation(torch.zeros(1, 2, 2, dtype=torch.long), None, torch.zeros(3, 4))
    buckets = AttentionRelation(torch.zeros(1, 2, 16, dtype=torch.long), torch.zeros(3, 4), torch.zeros(3, 4),
                                torch.zeros(1, 2, 16))

    def choose(requested, relation=None, need_weights=False, training=False, dropout=0.0, device=cpu, learning=False):
        return choose_attention(requested, relation, need_weights, training, dropout, device, learning)

    assert choose("flex_attention", pair_keys) == "flex_attention"  # inference on a CPU
    assert choose("flex_attention", pair_keys, training=True, learning=True) == "sdpa"  # no CPU backward: as sdpa
    assert choose("flex_attention", pair_keys, training=True, learning=True, device=cuda) == "flex_attention"
    assert choose("flex_attention", pair_keys, training=True, dropout=0.1, learning=True, device=cuda) == "sdpa"
    assert choose("flex_attention", pair_values) == "eager"  # the value term needs the probabilities
    assert choose("sdpa", need_weights=True) == "eager"
    assert choose("sdpa", pair_keys, training=True, learning=True) == "sdpa"  # the fused kernel, a recomputing backward
    assert choose("sdpa", pair_keys, training=True, dropout=0.1, learning=True) == "eager"  # which cannot repeat dropout
    assert choose("sdpa", pair_keys, training=True, learning=True, device=cuda) == "sdpa"
    assert choose("sdpa", buckets, training=True, learning=True) == "sdpa"  # buckets ride in fused attention
    assert choose("eager", buckets) == "eager"


@pytest.mark.parametrize("past, new", [(0, 5), (4, 1), (3, 2)])
def test_the_mask_made_once_hides_padding_and_the_future(past, new):
    padding = torch.tensor([[1] * (past + new), [1] * (past + new - 1) + [0]]).bool()
    mask = make_attention_mask(padding, new, past + new, causal=True)
    naive = torch.zeros(2, 1, new, past + new, dtype=torch.bool)
    for b in range(2):
        for i in range(new):
            for j in range(past + new):
                naive[b, 0, i, j] = (not padding[b, j]) or j > past + i
    assert torch.equal(mask.blocked.expand_as(naive), naive)
    additive = mask.additive(torch.float32)
    assert torch.equal(additive.expand_as(naive) == torch.finfo(torch.float32).min, naive)
    assert mask.additive(torch.float32) is additive  # made once a dtype
    assert make_attention_mask(None, 1, 7, causal=True) is None  # one new query sees every key


def test_the_cpu_s_fused_attention_with_a_learned_key_term_has_the_gradients_of_its_formula():
    """`_FusedAttentionWithLearnedKeyTerm` (the CPU's training path of a key-only term: the fused kernel forward, the
    probabilities recomputed in backward) against finite differences, with padding in the additive mask."""
    torch.manual_seed(0)
    batch, heads, length, dim, relations = 2, 3, 5, 4, 7
    query, key, value = (torch.randn(batch, heads, length, dim, dtype=torch.float64, requires_grad=True)
                         for _ in range(3))
    per_relation = torch.randn(batch, heads, length, relations, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, relations, (batch, length, length))
    padding = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]).bool()
    additive = make_attention_mask(padding, length, length).additive(torch.float64)
    function = attention_functions._FusedAttentionWithLearnedKeyTerm.apply
    assert torch.autograd.gradcheck(lambda q, k, v, r: function(q, k, v, r, ids, additive),
                                    (query, key, value, per_relation))
    explicit = ((query @ key.transpose(-1, -2) + per_relation.gather(-1, ids[:, None].expand(-1, heads, -1, -1))
                 + additive).softmax(-1) @ value)
    torch.testing.assert_close(function(query, key, value, per_relation, ids, additive), explicit)
