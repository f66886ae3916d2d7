"""The fast training operators against the `torch.nn.functional` path they replace (hf_syntax_mt.fast_ops)."""

import math

import pytest
import torch
import torch.nn.functional as F

from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration
from hf_syntax_mt.fast_ops import dropout, label_smoothed_cross_entropy


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_loss_and_gradient_equal_functional(epsilon, dtype):
    torch.manual_seed(0)
    logits = (torch.randn(90, 300) * 4).to(dtype).requires_grad_()
    labels = torch.randint(0, 300, (90,))
    labels[::7] = -100
    reference = F.cross_entropy(logits.float(), labels, ignore_index=-100, label_smoothing=epsilon)
    (reference_gradient,) = torch.autograd.grad(reference * 3.0, logits)
    loss = label_smoothed_cross_entropy(logits, labels, epsilon, -100)
    (gradient,) = torch.autograd.grad(loss * 3.0, logits)
    assert gradient.dtype == dtype
    torch.testing.assert_close(loss, reference, rtol=1e-6, atol=1e-6)
    tolerance = 1e-7 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(gradient.float(), reference_gradient.float(), rtol=tolerance, atol=tolerance)
    assert torch.all(gradient[labels == -100] == 0)


def test_cross_entropy_without_kept_rows_is_nan_as_functional():
    logits = torch.randn(3, 5, requires_grad=True)
    labels = torch.full((3,), -100)
    assert math.isnan(F.cross_entropy(logits, labels).item())
    assert math.isnan(label_smoothed_cross_entropy(logits, labels, 0.1).item())


def test_dropout_keeps_the_distribution():
    torch.manual_seed(0)
    x = torch.rand(1_000_000) + 0.5
    for p in (0.1, 0.3):
        y = dropout(x, p, training=True)
        kept = y != 0
        p_rounded = round(p * 65536) / 65536
        rate = 1 - kept.float().mean().item()
        sigma = math.sqrt(p_rounded * (1 - p_rounded) / x.numel())
        assert abs(rate - p_rounded) < 5 * sigma, (p, rate)
        torch.testing.assert_close(y[kept], x[kept] / (1 - p_rounded))  # inverted dropout: E[y] = x
        assert abs(y.sum().item() / x.sum().item() - 1) < 5e-3
    # neighbouring elements are independent: the four 16-bit slices of one random integer do not agree
    masks = (dropout(torch.ones(400_000), 0.5) != 0).view(-1, 4).float()
    assert abs(torch.corrcoef(masks.T)[0, 1].item()) < 0.01


def test_dropout_gradient_is_the_mask_scaled_and_seeded_runs_repeat():
    x = torch.randn(64, 33, requires_grad=True)
    torch.manual_seed(3)
    y = dropout(x, 0.2)
    (gradient,) = torch.autograd.grad(y.sum(), x)
    scale = 65536 / (65536 - round(0.2 * 65536))
    torch.testing.assert_close(gradient, (y != 0).float() * scale)
    torch.manual_seed(3)
    torch.testing.assert_close(dropout(x, 0.2), y)
    assert dropout(x, 0.2, training=False) is x and dropout(x, 0.0) is x
    assert torch.all(dropout(x, 1.0) == 0)


def test_model_loss_and_gradients_equal_the_functional_path():
    """The model's loss (bias folded into the output projection, fused label-smoothed CE) against
    lm_head(h) + final_logits_bias and F.cross_entropy, the path before the fast operators, on the same weights."""
    config = SyntaxMTConfig.from_preset("transformer_dep_labeled_rel", vocab_size=97, d_model=32, encoder_layers=2,
                                        decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                        encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0, attention_dropout=0.0,
                                        activation_dropout=0.0, label_smoothing=0.1, pad_token_id=0,
                                        eos_token_id=1, decoder_start_token_id=0)
    torch.manual_seed(0)
    model = SyntaxMTForConditionalGeneration(config)
    model.final_logits_bias.normal_()
    model.train()
    input_ids = torch.randint(3, 97, (3, 9))
    labels = torch.randint(3, 97, (3, 7))
    labels[0, 5:] = -100
    heads = torch.tensor([[1, 1, 1, 2, 2, 4, 4, 6, -100]] * 3)
    outputs = model(input_ids=input_ids, labels=labels, source_heads=heads, output_hidden_states=True)
    names, parameters = zip(*model.named_parameters())
    fast = dict(zip(names, torch.autograd.grad(outputs.loss, parameters, allow_unused=True)))
    outputs = model(input_ids=input_ids, labels=labels, source_heads=heads, output_hidden_states=True)
    logits = model.lm_head(outputs.decoder_hidden_states[-1]) + model.final_logits_bias
    torch.testing.assert_close(outputs.logits, logits, rtol=1e-5, atol=1e-5)
    reference = F.cross_entropy(logits.view(-1, 97).float(), labels.view(-1), ignore_index=-100, label_smoothing=0.1)
    torch.testing.assert_close(outputs.loss, reference, rtol=1e-6, atol=1e-6)
    reference_gradients = torch.autograd.grad(reference, parameters, allow_unused=True)
    for name, gradient in zip(names, reference_gradients):
        if gradient is None:
            assert fast[name] is None, name
        else:
            torch.testing.assert_close(fast[name], gradient, rtol=1e-5, atol=1e-6, msg=name)
