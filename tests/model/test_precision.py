"""Half precision and compilation as a GPU user runs them (issue 23), here on the CPU.

Every preset runs forward, backward and `generate` with its weights in bf16 and in fp16, and in fp32
under `torch.autocast` (bf16 and fp16), with both attention implementations; its logits stay close to
those of the same weights in fp32. Tolerances, for logits of magnitude ≈ 3 (init_std 0.1): bf16 keeps
8 mantissa bits (≈ 0.4 % per rounding) → max |Δlogit| ≤ 0.05; fp16 keeps 11 bits → ≤ 0.01 (observed on
this CPU: ≤ 0.02 and ≤ 0.002). `torch.compile` (inductor, CPU) gives the eager logits (≤ 1e-5) for
transformer_sla (transformer_abs and transformer_dep_rel on a GPU: tests/model/test_cuda.py), and a compiled training
step the eager loss and gradients (transformer_dep_labeled_rel with inductor, transformer_dep_rel+dbsa+sla with aot_eager).
"""

import copy
import shutil

import pytest
import torch

from model_helpers import ALL_PRESETS, compiled_and_eager, tiny_model_inputs_targets

TOLERANCE = {torch.bfloat16: 0.05, torch.float16: 0.01}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@pytest.mark.parametrize("mode", ["bf16 weights", "fp16 weights", "bf16 autocast", "fp16 autocast"])
@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_half_precision_forward_backward_generate(preset, mode):
    reference, inputs, targets = tiny_model_inputs_targets(preset)
    with torch.no_grad():
        expected = reference(**inputs, **targets).logits
    precision, how = mode.split()
    dtype = DTYPES[precision]
    for attn_implementation in ("sdpa", "eager"):
        model = copy.deepcopy(reference)
        model.set_attn_implementation(attn_implementation)
        if how == "weights":
            model.to(dtype)
        with torch.autocast("cpu", dtype=dtype, enabled=how == "autocast"):
            model.train()  # dropout is 0 in the tiny config: same function, with gradients
            outputs = model(**inputs, **targets)
            outputs.loss.backward()
            model.eval()
            generated = model.generate(**inputs, max_new_tokens=5, num_beams=2)
        assert outputs.logits.dtype == dtype
        torch.testing.assert_close(outputs.logits.float(), expected, atol=TOLERANCE[dtype], rtol=0)
        gradients = [p.grad for p in model.parameters() if p.grad is not None]
        assert gradients and all(torch.isfinite(g).all() for g in gradients)
        assert sum(g.abs().sum() for g in gradients) > 0
        assert generated.shape[0] == inputs["input_ids"].shape[0] and (generated < model.config.vocab_size).all()


@pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                    reason="torch.compile's inductor backend needs a C++ compiler on the CPU, and none is installed")
@pytest.mark.parametrize("preset", ["transformer_sla"])
def test_torch_compile_gives_the_eager_logits(preset):
    """Compiles with graph breaks where the syntax features are checked and the tree is walked
    (data-dependent control flow); one layer per stack keeps inductor's compile time down. Relation presets are
    compiled with inductor for training below (their forward included); transformer_abs and transformer_dep_rel's
    forward on a GPU (tests/model/test_cuda.py), which keeps ≈60 s of inductor's C++ builds out of the default run."""
    model, inputs, _ = tiny_model_inputs_targets(preset, encoder_layers=1, decoder_layers=1)
    inputs["decoder_input_ids"] = inputs["input_ids"]
    expected, compiled = compiled_and_eager(model, inputs)
    torch.testing.assert_close(compiled, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("preset, backend", [("transformer_dep_labeled_rel", "inductor"),
                                             ("transformer_dep_rel+transformer_dbsa+transformer_sla", "aot_eager")])
def test_torch_compile_trains_with_the_eager_loss_and_gradients(preset, backend):
    """A compiled training step (forward and backward) gives the eager loss and gradients, for presets with Shaw,
    labeled, depth-bucket, parse-head and SLA terms. Two bugs it caught: dynamo could not trace the relation terms'
    in-place autograd functions (on a GPU: "Output 0 of ApplyTemplateBackward is a view and is being modified
    inplace"), and inductor gave the package's label-smoothed cross-entropy (gradient made in the forward pass)
    gradients up to 0.3 off; under torch.compile both run as plain ops now. `aot_eager` traces forward and backward
    as inductor does, without its C++ build."""
    if backend == "inductor" and shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("torch.compile's inductor backend needs a C++ compiler on the CPU, and none is installed")
    model, inputs, targets = tiny_model_inputs_targets(preset, encoder_layers=1, decoder_layers=1, label_smoothing=0.1)
    model.train()  # dropout is 0 in the tiny config
    (eager_loss, eager), (compiled_loss, compiled) = compiled_and_eager(model, inputs, targets, backend)
    torch.testing.assert_close(compiled_loss, eager_loss, atol=1e-5, rtol=1e-5)
    assert compiled.keys() == eager.keys() and any("relative" in name for name in eager)
    for name, gradient in eager.items():
        torch.testing.assert_close(compiled[name], gradient, atol=1e-5, rtol=1e-4, msg=name)
