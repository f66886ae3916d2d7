"""Activation (gradient) checkpointing: the layers recompute their activations in the backward pass and
give the loss and gradients of the plain model, dropout included (its RNG state is replayed)."""

import copy

import pytest
import torch

from hf_syntax_mt import SyntaxMTForConditionalGeneration
from hf_syntax_mt.training.run import train
from model_helpers import random_batch, tiny_config
from training_helpers import scratch_dir, tiny_args, trained_model

EVERYTHING = "transformer_dep_labeled_rel+transformer_dbsa+transformer_sla"


def _training_batch(config):
    batch = random_batch([7, 5], seed=4, vocab_size=config.vocab_size)
    batch["labels"] = torch.tensor([[5, 6, 7, 8, 1], [9, 10, 1, -100, -100]])
    batch["target_heads"] = torch.tensor([[1, 1, 1, 2, -100], [1, 1, -100, -100, -100]])
    return batch


def _count_calls(module):
    calls = []
    module.register_forward_hook(lambda *args: calls.append(1))
    return calls


def test_checkpointed_layers_give_the_same_loss_and_gradients():
    torch.manual_seed(0)
    config = tiny_config(EVERYTHING, dropout=0.1, dbsa_encoder_layer=2, dbsa_decoder_layer=2, sla_layers=[1])
    plain = SyntaxMTForConditionalGeneration(config).train()
    checkpointed = copy.deepcopy(plain)
    checkpointed.activation_checkpointing_enable()
    assert all(layer.gradient_checkpointing for layer in checkpointed.model.encoder.layers)
    assert all(layer.gradient_checkpointing for layer in checkpointed.model.decoder.layers)
    batch = _training_batch(config)
    outputs = {}
    for name, model in (("plain", plain), ("checkpointed", checkpointed)):
        calls = _count_calls(model.model.encoder.layers[0].feed_forward)
        torch.manual_seed(7)  # the same dropout masks in both models
        out = model(**batch)
        out.loss.backward()
        outputs[name] = (out, len(calls))
    (plain_out, plain_calls), (checkpointed_out, checkpointed_calls) = outputs["plain"], outputs["checkpointed"]
    assert (plain_calls, checkpointed_calls) == (1, 2)  # the checkpointed layer ran again in the backward pass
    for name in ("loss", "token_loss", "encoder_parse_loss", "decoder_parse_loss"):
        torch.testing.assert_close(getattr(checkpointed_out, name), getattr(plain_out, name), rtol=0, atol=1e-6)
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_checkpointing_turns_the_decoder_cache_off_in_training():
    config = tiny_config("transformer_rel")
    model = SyntaxMTForConditionalGeneration(config).train()
    model.activation_checkpointing_enable()
    batch = random_batch([6, 4], seed=1)
    decoder_input_ids = torch.tensor([[0, 5, 6], [0, 7, 8]])
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                decoder_input_ids=decoder_input_ids, use_cache=True)
    assert out.cache is None
    model.activation_checkpointing_disable()
    reference = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      decoder_input_ids=decoder_input_ids, use_cache=False)
    torch.testing.assert_close(out.logits, reference.logits)

    filled = model.eval()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          decoder_input_ids=decoder_input_ids[:, :2], use_cache=True).cache
    model.train().activation_checkpointing_enable()
    with pytest.raises(ValueError, match="cannot continue a filled decoder `cache`"):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
              decoder_input_ids=decoder_input_ids[:, 2:], cache=filled, use_cache=True)


def test_trainer_with_activation_checkpointing_follows_the_plain_run():
    """`--activation_checkpointing` in the training script: the same logged losses as without it."""
    _, plain = trained_model()  # transformer_dep_rel+transformer_dbsa+transformer_sla, shared with other tests
    preset = plain.trainer.model.config.preset
    result = train(*tiny_args(scratch_dir("checkpointing"), preset, activation_checkpointing=True))
    model = result.trainer.model
    assert all(layer.gradient_checkpointing for layer in model.model.encoder.layers)

    def losses(run):
        return [h["loss"] for h in run.trainer.state.log_history if "loss" in h and "eval_loss" not in h]

    assert losses(plain)  # something to compare
    assert losses(result) == pytest.approx(losses(plain), rel=1e-5)
