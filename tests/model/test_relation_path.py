"""Relation attention in few operations (issue 91) computes what the path before it computed: the frozen copy of that
path (`reference_path`, commit af0d50e) with the same weights gives the same losses, gradients, logits and greedy
translations, on every relation preset and combination (beside SLA's localized heads and DBSA's parse heads too),
with padding, odd lengths, the KV cache and both attention implementations."""

import random
import sys
from pathlib import Path

import pytest
import torch

from hf_syntax_mt import PRESETS, SyntaxMTForConditionalGeneration
from hf_syntax_mt.features.synthetic import random_dependency_tree
from model_helpers import random_batch, syntax_kwargs, tiny_config

sys.path.insert(0, str(Path(__file__).parent))
from reference_path.modeling_syntax_mt import SyntaxMTForConditionalGeneration as ReferenceModel  # noqa: E402

RELATION_PRESETS = [name for name, preset in PRESETS.items()
                    if preset.get("relative_positions") or preset.get("dependency_relations")]
COMBINATIONS = {  # what the presets do not cover: other clips, key-only / value-only terms, depth with labels' W_rel
    "rel_k3": dict(relative_positions=True, max_relative_position=3),
    "rel_keys": dict(relative_positions=True, relative_value_term=False),
    "rel_values": dict(relative_positions=True, relative_key_term=False),
    "dep_rel_concat_l3": dict(relative_positions=True, dependency_relations="depth", max_dependency_distance=3,
                              relation_combination="concat_linear"),
    "dep_labeled_rel_keys": dict(relative_positions=True, dependency_relations="labeled",
                                 relation_combination="concat_linear", relative_value_term=False,
                                 dependency_value_term=False),
    "dep_labeled_rel_mixed": dict(relative_positions=True, dependency_relations="labeled", relative_key_term=False,
                                  dependency_value_term=False),
    "dep_labeled_sum_pre_ln": dict(relative_positions=True, dependency_relations="labeled", normalize_before=True),
}
KEYS_ONLY = dict(relative_value_term=False, dependency_value_term=False)
WITH_OTHER_METHODS = {  # relation terms beside localized heads (log G in the same scores or mask) and a parse head
    "labeled_rel+sla+dbsa": ("transformer_dep_labeled_rel+transformer_sla+transformer_dbsa", {}),
    "dep_rel_keys+dbsa": ("transformer_dep_rel+transformer_dbsa", KEYS_ONLY),
    "rel_keys+sla": ("transformer_rel+transformer_sla", KEYS_ONLY),
}
CASES = ([(name, {}) for name in RELATION_PRESETS] + [("transformer_abs", overrides) for overrides in COMBINATIONS.values()]
         + list(WITH_OTHER_METHODS.values()))
IDS = RELATION_PRESETS + list(COMBINATIONS) + list(WITH_OTHER_METHODS)


def both_models(preset, overrides, implementation="sdpa"):
    """(the package's model, the reference path's) with the same random weights, relation tables included."""
    torch.manual_seed(0)
    config = tiny_config(preset, init_std=0.3, attn_implementation=implementation, attention_dropout=0.0,
                         dropout=0.0, activation_dropout=0.0, **overrides)
    model = SyntaxMTForConditionalGeneration(config)
    reference = ReferenceModel(config)
    assert reference.load_state_dict(model.state_dict(), strict=True)
    return model, reference


def training_inputs(config, lengths=(9, 6, 12), target_length=8):
    batch = random_batch(list(lengths), seed=7)
    labels = torch.randint(3, 40, (len(lengths), target_length))
    labels[0, target_length - 2:] = -100
    features = syntax_kwargs(config, batch)
    if config.dbsa_decoder_layer:
        rng = random.Random(1)
        features["target_heads"] = torch.tensor(
            [random_dependency_tree(target_length - 1, rng) + [-100] for _ in lengths])
    return dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels, **features)


def loss_and_grads(model, inputs):
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(**inputs)
    out.loss.backward()
    return out.loss.detach(), out.logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("preset, overrides", CASES, ids=IDS)
def test_losses_and_gradients_equal_the_reference_path(preset, overrides, implementation):
    model, reference = both_models(preset, overrides, implementation)
    inputs = training_inputs(model.config)
    loss, logits, grads = loss_and_grads(model, inputs)
    reference_loss, reference_logits, reference_grads = loss_and_grads(reference, inputs)
    torch.testing.assert_close(loss, reference_loss, atol=1e-5, rtol=0)
    torch.testing.assert_close(logits, reference_logits, atol=1e-5, rtol=0)
    assert grads.keys() == reference_grads.keys()
    relation_grads = 0
    for name, grad in grads.items():  # within 1e-5 of the gradient's scale (float32 summation order)
        scale = max(1.0, reference_grads[name].abs().max().item())
        torch.testing.assert_close(grad, reference_grads[name], atol=1e-5 * scale, rtol=0, msg=name)
        relation_grads += ".relations." in name and grad.abs().max().item() > 0
    assert relation_grads >= 2  # the relation tables (or W_rel) learn


@pytest.mark.parametrize("lengths", [(5,), (13, 4, 7)])
@pytest.mark.parametrize("preset, overrides", CASES, ids=IDS)
def test_cached_greedy_decoding_equals_the_reference_path(preset, overrides, lengths):
    """Odd lengths, padding and the KV cache (one new query row a step): the same logits at every step."""
    model, reference = both_models(preset, overrides)
    batch = random_batch(list(lengths), seed=3)
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                  **syntax_kwargs(model.config, batch))
    generated = []
    for m in (model, reference):
        m.eval()
        with torch.no_grad():
            generated.append(m.generate(**inputs, max_new_tokens=9, min_new_tokens=9, num_beams=1, do_sample=False,
                                        output_scores=True, return_dict_in_generate=True))
    assert torch.equal(generated[0].sequences, generated[1].sequences)
    for step, (scores, reference_scores) in enumerate(zip(generated[0].scores, generated[1].scores)):
        torch.testing.assert_close(scores, reference_scores, atol=1e-4, rtol=0, msg=f"step {step}")
