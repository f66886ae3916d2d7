"""Two training operators that compute what their `torch.nn.functional` counterparts compute with fewer passes
over memory on a CPU: dropout with a cheaper random mask, and label-smoothed cross-entropy whose gradient is made
in the forward pass. On the KFTT recipe's step (`benchmarks/step_profile.py`) the vocabulary softmax with label
smoothing and the dropout masks were ~22% of a bf16 step on an Intel Xeon with AMX and ~11% of an fp32 step on an AVX2
AMD EPYC.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

MASK_BITS = 16  # dropout draws one 16-bit random integer an element
HUGE_PAGES_ENV = "THP_MEM_ALLOC_ENABLE"


def use_huge_pages_for_large_tensors() -> None:
    """Let PyTorch's CPU allocator back tensors of 2 MB and more with transparent huge pages (`THP_MEM_ALLOC_ENABLE=1`)
    unless the environment says otherwise. A training step allocates its largest tensors (the logits and their
    gradient, B × m × V floats) anew every step, and the kernel faults them in 4 kB page by page: filling a fresh
    61 MB tensor took 46 ms against 5 ms for a reused one, 11 ms with huge pages (AMD EPYC, 1 thread). PyTorch reads the
    variable at its first large allocation, so call this before building the model. Training entry points call it;
    `THP_MEM_ALLOC_ENABLE=0` turns it off."""
    os.environ.setdefault(HUGE_PAGES_ENV, "1")


def dropout(hidden_states: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Inverted dropout: y = x · m / (1 − p'), m ~ Bernoulli(1 − p') per element.

    On a CPU the mask comes from 16-bit slices of 64-bit random integers (one draw of the generator for four
    elements, against one float draw an element in `F.dropout`), so the drop rate is p rounded to a multiple of
    2⁻¹⁶ (p' = round(p · 65536) / 65536; 0.1 → 0.1000061) and the scale is 1 / (1 − p'), which keeps
    E[y] = x exactly. Elsewhere (CUDA, ...) it is `F.dropout`, whose kernels are fused already.
    """
    if not training or p == 0.0:
        return hidden_states
    if hidden_states.device.type != "cpu" or p >= 1.0:
        return F.dropout(hidden_states, p, training)
    dropped = round(p * (1 << MASK_BITS))
    count = hidden_states.numel()
    random_bits = torch.randint(-(1 << 63), (1 << 63) - 1, ((count + 3) // 4,), dtype=torch.int64)
    kept = random_bits.view(torch.int16)[:count].view(hidden_states.shape) >= dropped - (1 << (MASK_BITS - 1))
    scale = (1 << MASK_BITS) / ((1 << MASK_BITS) - dropped)
    return torch.where(kept, hidden_states, 0.0).mul_(scale)


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    """loss = mean over kept rows i of −Σ_v q_iv log softmax(x_i)_v, q_i = (1 − ε) onehot(y_i) + ε / V;
    ∂loss/∂x_i = (softmax(x_i) − q_i) / N, made in the forward pass from the log-probabilities' buffer."""

    @staticmethod
    def forward(ctx, logits, labels, epsilon, ignore_index):
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        kept = labels != ignore_index
        rows = kept.nonzero().squeeze(-1)
        targets = labels[rows]
        count = rows.numel()
        vocab_size = logits.shape[-1]
        target_log_probs = log_probs[rows, targets]
        loss = -(1.0 - epsilon) * target_log_probs.sum()
        if epsilon:
            loss = loss - epsilon / vocab_size * log_probs.sum(-1)[rows].sum()
        loss = loss / count
        gradient = log_probs.exp_()  # softmax, in the buffer of the log-probabilities
        if epsilon:
            gradient.sub_(epsilon / vocab_size)
        gradient.index_put_((rows, targets), torch.tensor(-(1.0 - epsilon)), accumulate=True)
        if count < labels.numel():
            gradient[~kept] = 0.0
        ctx.save_for_backward(gradient)
        ctx.count, ctx.dtype = count, logits.dtype
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        (gradient,) = ctx.saved_tensors
        return gradient.mul(grad_loss / ctx.count).to(ctx.dtype), None, None, None


def label_smoothed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, epsilon: float = 0.0,
                                 ignore_index: int = -100) -> torch.Tensor:
    """`F.cross_entropy(logits.float(), labels, ignore_index=ignore_index, label_smoothing=epsilon)` (mean over the
    rows whose label is not `ignore_index`; NaN when there is none, as there), for logits (N, V) and labels (N,).

    The gradient is softmax − q, computed once in the forward pass into the buffer of the log-probabilities, instead
    of autograd's log-softmax, NLL and smoothing backward passes and the sum of their two gradients. Under
    torch.compile it is `F.cross_entropy`, which inductor fuses: inductor got the in-forward gradient wrong (up to
    0.3 off on a tiny model; tests/model/test_precision.py).
    """
    if not torch.is_grad_enabled() or not logits.requires_grad or torch.compiler.is_compiling():
        return F.cross_entropy(logits.float(), labels, ignore_index=ignore_index, label_smoothing=epsilon)
    return _LabelSmoothedCrossEntropy.apply(logits, labels, float(epsilon), ignore_index)
