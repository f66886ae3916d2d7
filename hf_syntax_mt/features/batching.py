"""Token-budget batching: batches filled up to a number of padded positions, as NMT toolkits batch
(fairseq `--max-tokens`, OpenNMT-py `batch_type: tokens`, Marian `--mini-batch-words`).

The size of a batch is what it costs after padding: its number of sentences times the longest side of
its longest pair,

    padded_tokens(batch) = len(batch) · max_{i ∈ batch} max(source_length_i, target_length_i)

(fairseq's `batch_by_size` counts the same with `num_tokens = max(src, tgt)`), kept ≤ `max_tokens`.
A pair longer than the budget on its own gets a batch of its own: nothing is dropped.

Training (`shuffle=True`): every epoch a permutation seeded by (seed, epoch) breaks ties, a stable sort by
length (then by the source length, `secondary_lengths`, so that each side is padded little, not only the
longer one) puts similar pairs together, batches are filled greedily in that order, and the batch order is
shuffled with the same generator. The batch boundaries depend only on the sorted lengths, so every epoch
has the same number of batches (the learning-rate schedule counts updates as usual), and the batches of an
epoch are a function of (seed, epoch) alone: a resumed run skips into the very batches it stopped in.
Under data parallelism (`num_replicas` > 1) the epoch's batch list is extended by repeating its first
batches to a multiple of `num_replicas` and process `rank` takes batches rank, rank + num_replicas, ...:
every process gets distinct batches and the same number of them. With `split_batches` (accelerate's
`split_batches=True`, which `hf-syntax-mt-train --processes N` sets) each batch is instead split between the
processes: process `rank` takes its pairs rank, rank + num_replicas, ... (the batch is sorted by length, so the
parts are alike), and the N processes together train on exactly the one-process batches. A batch of fewer pairs
than processes gives the processes without a pair of their own one of its pairs again.

Evaluation and prediction (`shuffle=False`, a fixed order): evaluation's batches hold pairs sorted by length,
longest first (`longest_first`; its metrics are corpus-level), prediction's consecutive pairs in corpus order, so
the predictions come back in the order of the references. Under data parallelism these one-process batches are
dealt out whole: process `rank` takes batches rank, rank + num_replicas, ..., so that step k's batches, gathered in
process order, are the one-process batches k · num_replicas, k · num_replicas + 1, ... in their order. A process
left without a batch at the last step gets a batch of one pair (the last one) to keep in step (`pads_last_batch`):
its outputs are to be dropped.
"""

from __future__ import annotations

import random
from typing import Iterator, Optional, Sequence

from torch.utils.data import Sampler


def padded_tokens(lengths: Sequence[int], batch: Sequence[int]) -> int:
    """len(batch) · max length in the batch: the positions the batch occupies after padding."""
    return len(batch) * max((lengths[i] for i in batch), default=0)


def fill_batches(order: Sequence[int], lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Cut `order` into consecutive batches whose padded size stays ≤ `max_tokens` (a pair longer than the
    budget alone makes a batch of its own)."""
    batches, batch, longest = [], [], 0
    for index in order:
        length = lengths[index]
        if batch and (len(batch) + 1) * max(longest, length) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(index)
        longest = max(longest, length)
    if batch:
        batches.append(batch)
    return batches


def padding_share(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """The share of the padded positions of `batches` that are padding (0 = none)."""
    padded = sum(padded_tokens(lengths, batch) for batch in batches)
    real = sum(lengths[i] for batch in batches for i in batch)
    return 1.0 - real / padded if padded else 0.0


def pair_lengths(source_lengths: Sequence[int], target_lengths: Optional[Sequence[int]] = None) -> list[int]:
    """max(source_length, target_length) per pair (the source length alone when there are no targets)."""
    if target_lengths is None:
        return list(source_lengths)
    if len(target_lengths) != len(source_lengths):
        raise ValueError(f"{len(source_lengths)} source lengths but {len(target_lengths)} target lengths")
    return [max(s, t) for s, t in zip(source_lengths, target_lengths)]


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Batches of dataset indices holding at most `max_tokens` padded positions (see the module docstring).

    Args:
        lengths: max(source, target) length of every pair, in subwords (`pair_lengths`).
        max_tokens: the budget of padded positions per batch (per process under data parallelism).
        shuffle: training order (length-sorted batches in a seeded random order, new each epoch) if True;
            else a fixed order: consecutive pairs in corpus order (prediction, whose outputs are written in
            order), or with `longest_first` the pairs sorted by length, longest first (evaluation: a batch of
            similar lengths generates as many steps as its own longest pair needs).
        seed: the seed of the training order; epoch e uses (seed, e).
        secondary_lengths: a second sort key for pairs of one length (the source lengths), optional.
        num_replicas, rank: data-parallel processes and this process's index.
        split_batches: split each training batch between the `num_replicas` processes (`max_tokens` is then the
            budget of all of them together), instead of giving each process whole batches of its own.
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, *, shuffle: bool = True, seed: int = 0,
                 num_replicas: int = 1, rank: int = 0, secondary_lengths: Optional[Sequence[int]] = None,
                 longest_first: bool = False, split_batches: bool = False):
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ValueError(f"max_tokens_per_batch={max_tokens!r}: expected a positive number of tokens")
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} of {num_replicas} data-parallel processes is not a valid process")
        if any(length < 0 for length in lengths):
            raise ValueError("sequence lengths must be >= 0")
        if not shuffle and split_batches:
            raise ValueError("split_batches splits training batches; fixed-order (shuffle=False) batches are dealt "
                             "out whole between the processes")
        if longest_first and shuffle:
            raise ValueError("longest_first orders the fixed (shuffle=False) batches of evaluation")
        if secondary_lengths is not None and len(secondary_lengths) != len(lengths):
            raise ValueError(f"{len(lengths)} lengths but {len(secondary_lengths)} secondary lengths")
        self.lengths = list(lengths)
        self.sort_keys = list(zip(self.lengths, secondary_lengths)) if secondary_lengths is not None else self.lengths
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.longest_first = longest_first
        self.split_batches = split_batches
        self.epoch = 0
        count = len(fill_batches(sorted(range(len(self.lengths)), key=self.sort_keys.__getitem__), self.lengths,
                                 max_tokens) if shuffle else self.epoch_batches(0))
        self._batches_per_process = count if split_batches else -(-count // num_replicas)
        self.pads_last_batch = not shuffle and rank >= count % num_replicas > 0
        self.oversized = sum(length > max_tokens for length in self.lengths)

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose batches `__iter__` yields (the Trainer calls it before each epoch)."""
        self.epoch = epoch

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """All processes' batches of `epoch`, in training order (before the split between processes)."""
        if not self.shuffle:
            order = range(len(self.lengths))
            if self.longest_first:
                order = sorted(order, key=lambda i: -self.lengths[i])  # stable: corpus order within a length
            return fill_batches(order, self.lengths, self.max_tokens)
        generator = random.Random(f"{self.seed}-{epoch}")
        order = list(range(len(self.lengths)))
        generator.shuffle(order)  # ties between equal lengths broken at random, differently each epoch
        order.sort(key=self.sort_keys.__getitem__)  # stable
        batches = fill_batches(order, self.lengths, self.max_tokens)
        generator.shuffle(batches)
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.epoch_batches(self.epoch)
        if self.num_replicas > 1 and self.split_batches:
            return iter(batch[self.rank:: self.num_replicas] or [batch[self.rank % len(batch)]] for batch in batches)
        if self.num_replicas > 1 and not self.shuffle:
            mine = batches[self.rank:: self.num_replicas]
            return iter(mine + [batches[-1][-1:]] if self.pads_last_batch else mine)
        if self.num_replicas > 1 and batches:
            total = self._batches_per_process * self.num_replicas
            batches = [batches[i % len(batches)] for i in range(total)]  # the first ones again, to even the split
            batches = batches[self.rank:: self.num_replicas]
        return iter(batches)

    def __len__(self) -> int:
        return self._batches_per_process


__all__ = ["TokenBudgetBatchSampler", "fill_batches", "pair_lengths", "padded_tokens", "padding_share"]
