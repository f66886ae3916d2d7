"""What a GPU user runs, on a GPU (skipped without one; run on lent machines by
`scripts/device_quality.sh checks`).

- fp32 on the GPU is the CPU's function: for every preset and both attention implementations, the same
  weights give the CPU's logits and loss (≤ 1e-4, TF32 off) and gradients (≤ 1e-4 of the largest), and
  greedy and beam `generate` give the CPU's tokens.
- bf16 (weights, and fp32 under autocast) on the GPU: logits within 0.05 of the CPU's fp32 (the bound of
  tests/model/test_precision.py), finite nonzero gradients, `generate` runs.
- `torch.compile` (inductor, Triton kernels) gives the eager logits on the GPU, and a compiled training step the
  eager loss and gradients; FlexAttention trains the key-only presets with the explicit path's loss and gradients.
- `train` (Seq2SeqTrainer) picks the GPU when `use_cpu` is off, and its losses are the CPU run's; the
  pipeline with `device=0` gives the CPU pipeline's translations and scores.
"""

import copy

import pytest
import torch
from transformers import pipeline

import hf_syntax_mt.inference.pipeline  # noqa: F401  (registers "syntax-translation")
from hf_syntax_mt.syntax import PreParsedAnnotator, read_conllu
from hf_syntax_mt.training.run import train
from model_helpers import ALL_PRESETS, compiled_and_eager, tiny_model_inputs_targets
from training_helpers import scratch_dir, synthetic_corpus, tiny_args, trained_model

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def no_tf32():
    """fp32 matmuls and convolutions in full fp32 (TF32 would round their inputs to 10 mantissa bits)."""
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


def _on(device, tensors):
    return {name: value.to(device) for name, value in tensors.items()}


def _step(model, inputs, targets):
    """(logits, loss, {name: gradient}) of one forward and backward pass in train mode (dropout is 0)."""
    model.train()
    model.zero_grad(set_to_none=True)
    outputs = model(**inputs, **targets)
    outputs.loss.backward()
    model.eval()
    gradients = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    return outputs.logits, outputs.loss, gradients


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_fp32_on_the_gpu_is_the_cpu_function(preset, attn_implementation):
    cpu_model, inputs, targets = tiny_model_inputs_targets(preset)
    cpu_model.set_attn_implementation(attn_implementation)
    gpu_model = copy.deepcopy(cpu_model).to(CUDA)
    cpu_logits, cpu_loss, cpu_gradients = _step(cpu_model, inputs, targets)
    gpu_logits, gpu_loss, gpu_gradients = _step(gpu_model, _on(CUDA, inputs), _on(CUDA, targets))
    torch.testing.assert_close(gpu_logits.cpu(), cpu_logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(gpu_loss.cpu(), cpu_loss, atol=1e-4, rtol=0)
    assert gpu_gradients.keys() == cpu_gradients.keys()
    largest = max(g.abs().max().item() for g in cpu_gradients.values())
    for name, gradient in cpu_gradients.items():
        torch.testing.assert_close(gpu_gradients[name].cpu(), gradient, atol=1e-4 * largest, rtol=0, msg=name)
    for generate in ({"max_new_tokens": 6}, {"max_new_tokens": 6, "num_beams": 3, "num_return_sequences": 2}):
        with torch.no_grad():
            expected = cpu_model.generate(**inputs, **generate)
            got = gpu_model.generate(**_on(CUDA, inputs), **generate)
        assert torch.equal(got.cpu(), expected), generate


@pytest.mark.parametrize("how", ["weights", "autocast"])
@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_bf16_on_the_gpu_stays_close_to_fp32(preset, how):
    reference, inputs, targets = tiny_model_inputs_targets(preset)
    with torch.no_grad():
        expected = reference(**inputs, **targets).logits
    for attn_implementation in ("sdpa", "eager"):
        model = copy.deepcopy(reference).to(CUDA)
        model.set_attn_implementation(attn_implementation)
        if how == "weights":
            model.to(torch.bfloat16)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=how == "autocast"):
            logits, loss, gradients = _step(model, _on(CUDA, inputs), _on(CUDA, targets))
            with torch.no_grad():
                generated = model.generate(**_on(CUDA, inputs), max_new_tokens=5, num_beams=2)
        assert logits.dtype == torch.bfloat16 and torch.isfinite(loss)
        torch.testing.assert_close(logits.float().cpu(), expected, atol=0.05, rtol=0)
        assert gradients and all(torch.isfinite(g).all() for g in gradients.values())
        assert sum(g.float().abs().sum() for g in gradients.values()) > 0
        assert generated.shape[0] == inputs["input_ids"].shape[0] and (generated < model.config.vocab_size).all()


@pytest.mark.parametrize("preset", ["transformer_abs", "transformer_dep_rel", "transformer_sla"])
def test_torch_compile_on_the_gpu_gives_the_eager_logits(preset):
    model, inputs, _ = tiny_model_inputs_targets(preset, encoder_layers=1, decoder_layers=1)
    model.to(CUDA)
    inputs = _on(CUDA, inputs)
    inputs["decoder_input_ids"] = inputs["input_ids"]
    expected, compiled = compiled_and_eager(model, inputs)
    torch.testing.assert_close(compiled, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("preset", ["transformer_abs", "transformer_dep_labeled_rel"])
def test_torch_compile_trains_on_the_gpu_with_the_eager_loss_and_gradients(preset):
    """A compiled training step (inductor, Triton kernels) with label smoothing gives the eager loss and gradients
    (the package's label-smoothed cross-entropy and the relation terms run as plain ops under torch.compile)."""
    model, inputs, targets = tiny_model_inputs_targets(preset, encoder_layers=1, decoder_layers=1, label_smoothing=0.1)
    model.to(CUDA).train()
    (eager_loss, eager), (compiled_loss, compiled) = compiled_and_eager(model, _on(CUDA, inputs), _on(CUDA, targets))
    torch.testing.assert_close(compiled_loss, eager_loss, atol=1e-4, rtol=1e-4)
    for name, gradient in eager.items():
        torch.testing.assert_close(compiled[name], gradient, atol=1e-4, rtol=1e-3, msg=name)


@pytest.mark.parametrize("preset", ["transformer_rel", "transformer_dep_labeled_rel", "transformer_dep_rel+transformer_dbsa"])
def test_flex_attention_trains_the_key_only_presets_with_the_eager_loss_and_gradients(preset):
    """FlexAttention (compiled; the key term read at the pairs' ids inside its score_mod) in a training step of a
    key-only preset gives the explicit path's loss and gradients, the relation tables' included (issue 107, item 3:
    FlexAttention has no backward on the CPU, so this is its only check)."""
    keys_only = dict(relative_value_term=False, dependency_value_term=False)
    results = {}
    for implementation in ("eager", "flex_attention"):
        model, inputs, targets = tiny_model_inputs_targets(preset, attn_implementation=implementation, **keys_only)
        model.to(CUDA)
        results[implementation] = _step(model, _on(CUDA, inputs), _on(CUDA, targets))
    (eager_logits, eager_loss, eager), (logits, loss, gradients) = results["eager"], results["flex_attention"]
    torch.testing.assert_close(loss, eager_loss, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits, eager_logits, atol=1e-4, rtol=1e-4)
    assert gradients.keys() == eager.keys() and any("relations" in name for name in gradients)
    for name, gradient in eager.items():
        torch.testing.assert_close(gradients[name], gradient, atol=1e-4, rtol=1e-3, msg=name)


def _losses(result):
    return [entry["loss"] for entry in result.trainer.state.log_history if "loss" in entry]


def test_training_and_the_pipeline_on_the_gpu_match_the_cpu():
    preset = "transformer_dep_rel+transformer_dbsa+transformer_sla"
    runs = {}
    for device, use_cpu in (("cpu", True), ("cuda", False)):
        runs[device] = train(*tiny_args(scratch_dir(f"gpu-check-{device}"), preset, use_cpu=use_cpu))
    trained_on = next(runs["cuda"].trainer.model.parameters()).device
    assert runs["cuda"].trainer.args.device.type == "cuda" and trained_on.type == "cuda"
    assert len(_losses(runs["cuda"])) == 2
    assert _losses(runs["cuda"]) == pytest.approx(_losses(runs["cpu"]), rel=1e-3)

    data = synthetic_corpus()
    sources = (data / "dev.src").read_text().splitlines()
    annotations = read_conllu(data / "dev.src.conllu", trees=(data / "dev.src.tree").read_text().splitlines())
    outputs = {}
    for device, index in (("cpu", -1), ("cuda", 0)):
        translate = pipeline("syntax-translation", model=runs["cpu"].output_dir, device=index,
                             annotator=PreParsedAnnotator(annotations))
        assert translate.model.device.type == device
        outputs[device] = translate(sources, batch_size=4, num_beams=3, max_new_tokens=8, return_scores=True)
    assert [o["translation_text"] for o in outputs["cuda"]] == [o["translation_text"] for o in outputs["cpu"]]
    for got, expected in zip(outputs["cuda"], outputs["cpu"]):
        assert got["log_probability"] == pytest.approx(expected["log_probability"], abs=1e-3)
        assert got["score"] == pytest.approx(expected["score"], abs=1e-3)


def test_translate_command_on_the_gpu_writes_the_cpu_lines(capsys):
    """`hf-syntax-mt translate` runs on the GPU by default where there is one, and writes what --device cpu writes."""
    from hf_syntax_mt.cli import main

    out, _ = trained_model("transformer_abs")
    infile = scratch_dir("gpu-cli") / "in.txt"
    infile.write_text("\n".join((synthetic_corpus() / "dev.src").read_text().splitlines()) + "\n")
    written = {}
    for device in ("cpu", "cuda", None):
        capsys.readouterr()
        assert main(["translate", "--model", str(out), "--beams", "3", "--max-new-tokens", "8", "--scores",
                     *(["--device", device] if device else []), str(infile)]) == 0
        written[device] = capsys.readouterr().out.splitlines()
    texts = {device: [line.split(" ||| ")[1] for line in lines] for device, lines in written.items()}
    assert texts["cuda"] == texts["cpu"] == texts[None] and len(texts["cpu"]) == 6
    for gpu_line, cpu_line in zip(written["cuda"], written["cpu"]):
        assert float(gpu_line.split(" ||| ")[-1]) == pytest.approx(float(cpu_line.split(" ||| ")[-1]), abs=1e-3)


def test_the_app_translates_and_draws_attention_on_the_gpu(tmp_path):
    """The web page's models on the GPU (`hf-syntax-mt app --device cuda`, the default where there is one): the CPU's
    translations and scores, and an attention heatmap drawn from the GPU's probabilities."""
    from hf_syntax_mt.app import Translator, sentence_views, translate_all

    out, _ = trained_model("transformer_abs")
    sentences = (synthetic_corpus() / "dev.src").read_text().splitlines()[:3]
    rows = {}
    for device in ("cpu", "cuda"):
        translator = Translator.load(str(out), device)
        assert translator.pipeline.model.device.type == device
        rows[device], _ = translate_all([translator], sentences, beams=2, max_new_tokens=8, scores=True)
    assert [row[2] for row in rows["cuda"]] == [row[2] for row in rows["cpu"]]
    assert [float(row[3]) for row in rows["cuda"]] == pytest.approx([float(row[3]) for row in rows["cpu"]], abs=2e-3)
    assert Translator.load(str(out)).pipeline.model.device.type == "cuda"  # the default where there is a GPU
    _, heatmap, said = sentence_views(translator, sentences[0], tmp_path, heatmap="attention")
    assert heatmap.stat().st_size > 1000 and "layer 1, head 0" in said
