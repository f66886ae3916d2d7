"""A source-relative cap on the translation length, as NMT toolkits offer it (fairseq's `--max-len-a/--max-len-b`,
Marian's `--max-length-factor`): sentence i generates at most

    cap_i = max(1, floor(a * n_i + b))

subwords before its `</s>`, where n_i is the number of tokens its encoder reads (`attention_mask` row sum, `</s>`
included). Unlike fairseq, which caps by the longest source of the batch, each sentence has its own cap, so a
translation does not depend on the sentences batched with it. An untrained or early model that repeats itself stops
near the source's length instead of running to `max_length`.

    from transformers import LogitsProcessorList
    cap = SourceLengthCapLogitsProcessor(batch["attention_mask"], a=1.5, b=10, eos_token_id=model.config.eos_token_id)
    model.generate(**batch, num_beams=4, logits_processor=LogitsProcessorList([cap]))

The pipeline and `hf-syntax-mt translate` take `max_length_a` / `max_length_b` (`--max-length-a/-b`) and build it.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Optional

import torch
from transformers import LogitsProcessor, LogitsProcessorList


def check_length_cap(a: Optional[float], b: Optional[float]) -> tuple[float, float]:
    """(a, b) with a missing one as 0; a clear ValueError for a negative, non-finite or non-number value, or for
    both missing or zero (no cap)."""
    values = {}
    for name, value in (("max_length_a", a), ("max_length_b", b)):
        if value is None:
            value = 0
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}={value!r}: the length cap's {name[-1]} (cap = a * source tokens + b) must be a "
                             "number >= 0")
        values[name] = float(value)
    if values["max_length_a"] == 0 and values["max_length_b"] == 0:
        raise ValueError("max_length_a=0 and max_length_b=0: the length cap (a * source tokens + b) would be 0; give "
                         "a > 0 (e.g. 1.5) and/or b > 0")
    return values["max_length_a"], values["max_length_b"]


class SourceLengthCapLogitsProcessor(LogitsProcessor):
    """Forces `</s>` on every row whose sentence has generated its cap_i = max(1, floor(a * n_i + b)) subwords.

    Args:
        attention_mask: (batch, source length) mask of the encoder input; n_i is its row sum.
        a, b: the cap's slope and offset (`check_length_cap`).
        eos_token_id: the token forced at the cap.
        decoder_start_length: tokens `input_ids` holds before the first generated one (1: the decoder start).

    Rows of `input_ids` are the batch's sentences each repeated k times in a row (beams, returned sequences),
    as `generate` expands them; k is read from the row count.
    """

    def __init__(self, attention_mask: torch.Tensor, a: Optional[float] = None, b: Optional[float] = None, *,
                 eos_token_id: int, decoder_start_length: int = 1):
        a, b = check_length_cap(a, b)
        if attention_mask.dim() != 2:
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}: expected (batch, source length)")
        lengths = attention_mask.sum(-1).double()
        # the epsilon keeps a product such as 0.3 * 10 = 2.9999999999999996 at 3
        self.caps = torch.floor(lengths * a + b + 1e-9).long().clamp(min=1)
        self.eos_token_id = int(eos_token_id)
        self.decoder_start_length = decoder_start_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows, sentences = input_ids.shape[0], self.caps.shape[0]
        if rows % sentences:
            raise ValueError(f"{rows} generated rows for {sentences} source sentences: the length cap was built for "
                             "another batch")
        caps = self.caps.to(input_ids.device).repeat_interleave(rows // sentences)
        at_cap = caps <= input_ids.shape[1] - self.decoder_start_length
        not_eos = torch.ones(scores.shape[-1], dtype=torch.bool, device=scores.device)
        not_eos[self.eos_token_id] = False
        return scores.masked_fill(at_cap[:, None] & not_eos, -math.inf)


def with_length_cap(generate_kwargs: dict, attention_mask: torch.Tensor, a: Optional[float], b: Optional[float], *,
                    eos_token_id: int) -> dict:
    """`generate_kwargs` with this batch's `SourceLengthCapLogitsProcessor` after its own `logits_processor`s."""
    cap = SourceLengthCapLogitsProcessor(attention_mask, a, b, eos_token_id=eos_token_id)
    return {**generate_kwargs, "logits_processor": LogitsProcessorList([*(generate_kwargs.get("logits_processor") or []),
                                                                        cap])}


__all__ = ["SourceLengthCapLogitsProcessor", "check_length_cap", "with_length_cap"]
