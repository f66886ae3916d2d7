"""Small shared builders for the model tests (tiny configs, random trees and features)."""

import random
from typing import Optional

import torch

from hf_syntax_mt import PRESETS, SyntaxMTConfig
from hf_syntax_mt.features.synthetic import random_dependency_tree

TINY = dict(
    vocab_size=40,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    dropout=0.0,
    max_position_embeddings=256,
)

# "My father bought a red car ." (SPEC §3): My→father, father→bought, bought=root, a→car, red→car,
# car→bought, .→bought
EXAMPLE_HEADS = [1, 2, 2, 5, 5, 2, 2]


def tiny_config(preset="transformer_abs", **overrides):
    return SyntaxMTConfig.from_preset(preset, **{**TINY, **overrides})


def random_batch(lengths, seed=0, vocab_size=40, eos_token_id=1, pad_token_id=0):
    """Padded ids, mask, source_heads (eos and padding -100), source_distances (2000 at eos/padding)."""
    rng = random.Random(seed)
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), pad_token_id)
    attention_mask = torch.zeros(len(lengths), width, dtype=torch.long)
    source_heads = torch.full((len(lengths), width), -100)
    source_distances = torch.full((len(lengths), width), 2000.0)
    for row, length in enumerate(lengths):
        words = length - 1
        input_ids[row, :words] = torch.tensor([rng.randrange(3, vocab_size) for _ in range(words)])
        input_ids[row, words] = eos_token_id
        attention_mask[row, :length] = 1
        source_heads[row, :words] = torch.tensor(random_dependency_tree(words, rng))
        source_distances[row, : words - 1] = torch.tensor([float(rng.randint(1, 6)) for _ in range(words - 1)])
    return dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        source_heads=source_heads,
        source_distances=source_distances,
    )


def syntax_kwargs(config, batch):
    """The syntax features a config consumes (in generate and forward)."""
    kwargs = {}
    if config.needs_source_heads:
        kwargs["source_heads"] = batch["source_heads"]
    if config.needs_source_distances:
        kwargs["source_distances"] = batch["source_distances"]
    return kwargs


ALL_PRESETS = list(PRESETS)


def compiled_and_eager(model, inputs: dict, targets: Optional[dict] = None, backend: str = "inductor"):
    """[(eager), (torch.compile(model, backend))] of one pass: without `targets` the logits under no_grad, with them
    (loss, {parameter name: gradient}) of a forward and backward pass. Dynamo's caches are reset before and after."""
    results = []
    torch._dynamo.reset()
    try:
        for run in (model, torch.compile(model, backend=backend)):
            if targets is None:
                with torch.no_grad():
                    results.append(run(**inputs).logits)
                continue
            model.zero_grad(set_to_none=True)
            loss = run(**inputs, **targets).loss
            loss.backward()
            results.append((loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()
                                            if p.grad is not None}))
    finally:
        torch._dynamo.reset()
    return results


def tiny_model_inputs_targets(preset, **overrides):
    """(a tiny model in eval mode, init_std 0.1, seed 0; its inputs for a padded batch of 3; labels, and target trees
    where the preset trains a decoder parse head), the case of the precision and GPU tests."""
    from hf_syntax_mt import SyntaxMTForConditionalGeneration

    config = tiny_config(preset, init_std=0.1, **overrides)
    torch.manual_seed(0)
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([7, 5, 6], seed=1)
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **syntax_kwargs(config, batch))
    targets = dict(labels=batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100))
    if config.needs_target_heads:  # the source trees serve as target trees: same rows, same shapes
        targets["target_heads"] = batch["source_heads"]
    return model, inputs, targets
