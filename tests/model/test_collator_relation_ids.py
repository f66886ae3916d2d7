"""Relation ids made with the batch (issue 107, item 2): the data collator makes the encoder's relation ids on the host
(`SourceRelationIds`), the model reads them in place of the ones it makes from `source_heads`, and computes the same
losses, gradients and translations; ids that do not fit the batch or the configuration are refused by name."""

import pytest
import torch

from hf_syntax_mt import PRESETS, SyntaxMTForConditionalGeneration
from hf_syntax_mt.features.syntax_features import DataCollatorForSyntaxSeq2Seq
from hf_syntax_mt.relation_attention import SourceRelationIds, make_source_relation_ids
from model_helpers import random_batch, syntax_kwargs, tiny_config

TREE_PRESETS = [name for name, preset in PRESETS.items() if preset.get("dependency_relations")]
CASES = [(name, {}) for name in TREE_PRESETS] + [
    ("transformer_dep_labeled_rel", dict(relative_value_term=False, dependency_value_term=False)),  # @keys
    ("transformer_dep_labeled_rel+transformer_sla+transformer_dbsa", {}),
]


def model_and_batch(preset, overrides):
    torch.manual_seed(0)
    config = tiny_config(preset, init_std=0.3, attention_dropout=0.0, dropout=0.0, activation_dropout=0.0, **overrides)
    model = SyntaxMTForConditionalGeneration(config)
    batch = random_batch([9, 6, 12], seed=5)
    labels = torch.randint(3, 40, (3, 7))
    labels[1, 5:] = -100
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels,
                  **syntax_kwargs(config, batch))
    if config.dbsa_decoder_layer:
        inputs["target_heads"] = torch.tensor([[1, 1, 1, 2, 3, 4, -100]] * 3)
    return model, inputs


def loss_and_grads(model, inputs):
    model.zero_grad(set_to_none=True)
    out = model(**inputs)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("preset, overrides", CASES, ids=[c[0] + ("@keys" if c[1] else "") for c in CASES])
def test_collator_made_ids_train_as_the_model_made_ones(preset, overrides):
    model, inputs = model_and_batch(preset, overrides)
    model.train()
    loss, grads = loss_and_grads(model, inputs)
    with_ids = SourceRelationIds(model.config)(dict(inputs))
    assert "source_relation_ids" in with_ids
    if model.config.dependency_relations == "depth" and not model.config.relative_positions:
        assert with_ids["source_key_buckets"].shape[:2] == inputs["input_ids"].shape
    collated_loss, collated_grads = loss_and_grads(model, with_ids)
    torch.testing.assert_close(collated_loss, loss, rtol=0, atol=1e-6)
    assert collated_grads.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(collated_grads[name], grad, rtol=0, atol=1e-6, msg=name)
    other_ids = {**with_ids, "source_relation_ids": with_ids["source_relation_ids"].flip(-1)}  # read, not remade
    assert abs(model(**other_ids).loss.item() - loss.item()) > 1e-4


def test_the_collator_adds_the_ids_of_the_padded_batch_and_generate_reads_them():
    """`DataCollatorForSyntaxSeq2Seq(model_config=...)` pads and then makes the ids of the padded batch; `generate`
    (beam search, as the Trainer's evaluation calls it with the whole batch) translates as with `source_heads`."""
    model, inputs = model_and_batch("transformer_dep_labeled_rel", {})
    model.eval()

    class Tokenizer:  # what DataCollatorForSeq2Seq reads of a tokenizer
        padding_side = "right"
        pad_token_id = 0
        model_input_names = ["input_ids", "attention_mask"]

        def pad(self, features, **kwargs):
            width = max(len(f["input_ids"]) for f in features)
            return {name: torch.tensor([list(f[name]) + [0] * (width - len(f[name])) for f in features])
                    for name in ("input_ids", "attention_mask")}

    rows = []
    for i in range(3):
        length = int(inputs["attention_mask"][i].sum())
        rows.append({"input_ids": inputs["input_ids"][i, :length].tolist(), "attention_mask": [1] * length,
                     "source_heads": inputs["source_heads"][i, :length].tolist()})
    batch = DataCollatorForSyntaxSeq2Seq(Tokenizer(), model_config=model.config)(rows)
    expected = make_source_relation_ids(model.config, inputs["source_heads"])
    assert torch.equal(batch["source_relation_ids"], expected.ids)
    assert "source_relation_ids" not in DataCollatorForSyntaxSeq2Seq(Tokenizer())(rows)  # no config: no ids
    generate = dict(max_new_tokens=5, num_beams=2, do_sample=False)
    with torch.no_grad():
        from_heads = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                    source_heads=batch["source_heads"], **generate)
        from_ids = model.generate(**batch, **generate)
    assert torch.equal(from_heads, from_ids)


def test_configurations_without_tree_relations_or_that_parse_for_themselves_get_no_ids():
    batch = random_batch([5, 4])
    for preset, overrides in [("transformer_rel", {}), ("transformer_sla", {}), ("transformer_dbsa", {}),
                              ("transformer_dep_labeled_rel", dict(self_parsing=True))]:
        assert "source_relation_ids" not in SourceRelationIds(tiny_config(preset, **overrides))(dict(batch)), preset


def test_ids_that_do_not_fit_the_batch_or_the_configuration_are_refused_by_name():
    model, inputs = model_and_batch("transformer_dep_labeled_rel", {})
    ids = SourceRelationIds(model.config)(dict(inputs))["source_relation_ids"]
    with pytest.raises(ValueError, match=r"source_relation_ids has shape \(3, 12, 11\).*\(3, 12, 12\)"):
        model(**{**inputs, "source_relation_ids": ids[:, :, :11]})
    with pytest.raises(ValueError, match="integer relation ids"):
        model(**{**inputs, "source_relation_ids": ids.float()})
    with pytest.raises(ValueError, match="outside the .* relations of this configuration"):
        model(**{**inputs, "source_relation_ids": ids + 10_000})
    depth_model, depth_inputs = model_and_batch("transformer_dep", {})
    with_ids = SourceRelationIds(depth_model.config)(dict(depth_inputs))
    with pytest.raises(ValueError, match="come with source_key_buckets"):
        depth_model(**{**depth_inputs, "source_relation_ids": with_ids["source_relation_ids"]})
