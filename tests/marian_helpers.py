"""A tiny MarianMT checkpoint and random source trees, shared by the converter's tests (tests/hub) and the syntax
learning rate's (tests/training)."""

import torch
from transformers import MarianConfig, MarianMTModel

from training_helpers import TINY

VOCAB_SIZE, PAD = 120, 119


def make_marian(directory, vocab_size=VOCAB_SIZE, pad=PAD, seed=0, **overrides) -> MarianMTModel:
    """A tiny opus-like MarianMTModel (swish, scaled embeddings, tied) with random layer norms and
    final_logits_bias, so that every mapped weight matters; saved to `directory`."""
    torch.manual_seed(seed)
    settings = dict(vocab_size=vocab_size, d_model=TINY["d_model"], encoder_layers=2, decoder_layers=2,
                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                    activation_function="swish", scale_embedding=True, max_position_embeddings=64, dropout=0.0,
                    pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0)
    model = MarianMTModel(MarianConfig(**{**settings, **overrides}))
    with torch.no_grad():
        model.final_logits_bias.normal_()
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:
                parameter.normal_(1.0, 0.5)
    model.generation_config.bad_words_ids = [[pad]]  # as opus-mt: never generate padding
    model.save_pretrained(directory)
    return model.eval()


def random_trees(lengths, width):
    """source_heads (B, width): a random tree over the first length-1 tokens of each row (eos and padding -100)."""
    generator = torch.Generator().manual_seed(1)
    heads = torch.full((len(lengths), width), -100)
    for row, length in enumerate(lengths):
        heads[row, 0] = 0
        for i in range(1, length - 1):
            heads[row, i] = torch.randint(0, i, (1,), generator=generator).item()
    return heads
