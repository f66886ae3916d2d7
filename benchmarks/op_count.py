"""Backend operations of one training step and of greedy decoding, per preset, as ratios to `transformer_abs` and to a
same-size `MarianMTModel` (issue 91). A GPU step of these small models waits on the host, which launches one kernel per
operation: the count, not the arithmetic, bounds it there.

    python benchmarks/op_count.py [--presets transformer_abs transformer_rel ...] [--length 64] [--tokens 4096]
        [--decode-sentences 16] [--decode-source 32] [--decode-new 20] [--top 12] [--output FILE.json]

Counted with a `TorchDispatchMode`: every ATen operation that reaches a backend kernel, forward, backward and the
optimizer, on the CPU; views (`view`, `_unsafe_view`, `expand`, `transpose`, `t`, `slice`, `select`, `unsqueeze`,
`squeeze`, `permute`, `as_strided`, `alias`, `diagonal`, `unbind`, `split`, ...) and `detach` are left out (they launch
nothing). Training: one step of the recipe size (`common.SIZE`: d_model 256, 3+3 layers, 4 heads) on `--tokens` //
`--length` sentences of source and target length `--length`, random trees and distances, `torch.optim.AdamW(fused=True)`
(the Trainer's default optimizer, `adamw_torch_fused`). Decoding: `generate` greedy, `--decode-sentences` sentences of
`--decode-source` tokens, exactly `--decode-new` new tokens. The counts are deterministic: a ratio printed in one run
compares like with like on any machine.
"""

import argparse
import collections
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from common import SIZE, machine, write_json
from speed import BASELINE, MARIAN, _batch, _build

VIEWS = {
    "view", "_unsafe_view", "expand", "transpose", "t", "slice", "select", "unsqueeze", "squeeze", "permute",
    "as_strided", "alias", "diagonal", "unbind", "split", "split_with_sizes", "chunk", "narrow", "view_as",
    "reshape", "expand_as", "detach", "lift_fresh", "_reshape_alias", "unfold", "flatten", "movedim", "T", "real",
}
DEFAULT_PRESETS = ["transformer_abs", "transformer_rel", "transformer_dep_rel", "transformer_dep_labeled_rel",
                   "transformer_dep_labeled_rel@keys", "transformer_sla", "transformer_dbsa", MARIAN]


class OperationCounter(TorchDispatchMode):
    """Counts the ATen operations dispatched to a backend, by name (`aten.add.Tensor` -> `add`), views left out."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in VIEWS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def build(system):
    """The model of `system` at the recipe size (`speed._build`: `<preset>@keys` has key-only relation terms)."""
    return _build(system, SIZE)


def training_step_counts(system, length, tokens):
    """Operations of one forward, backward and fused AdamW step, counted after one step untimed (lazy state)."""
    model, config = build(system)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batch = _batch(config, max(1, tokens // length), length)

    def step():
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    with OperationCounter() as counter:
        step()
    return counter.counts


def decoding_counts(system, sentences, source_length, new_tokens):
    """Operations of greedy `generate` with exactly `new_tokens` new tokens."""
    model, config = build(system)
    model.eval()
    batch = _batch(config, sentences, source_length)
    batch.pop("labels")
    batch.pop("target_heads", None)
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=1, do_sample=False)
    with torch.no_grad():
        model.generate(**batch, **kwargs)
        with OperationCounter() as counter:
            model.generate(**batch, **kwargs)
    return counter.counts


def ratio_table(counts, title, reference_names):
    """Markdown: per system its total and the ratios to each reference present."""
    references = [name for name in reference_names if name in counts]
    lines = [f"| {title} | operations | " + " | ".join(f"× {name}" for name in references) + " |",
             "|---|---|" + "---|" * len(references)]
    for system, count in counts.items():
        total = sum(count.values())
        cells = [f"{total / sum(counts[reference].values()):.2f}" for reference in references]
        lines.append(f"| {system} | {total:,} | " + " | ".join(cells) + " |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=DEFAULT_PRESETS)
    parser.add_argument("--length", type=int, default=64, help="source and target length of the training batch")
    parser.add_argument("--tokens", type=int, default=4096, help="source tokens of the training batch")
    parser.add_argument("--decode-sentences", type=int, default=16)
    parser.add_argument("--decode-source", type=int, default=32)
    parser.add_argument("--decode-new", type=int, default=20)
    parser.add_argument("--top", type=int, default=0, help="also print each system's N most frequent operations")
    parser.add_argument("--output", type=Path, help="JSON of the counts per system and operation")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    train = {s: training_step_counts(s, args.length, args.tokens) for s in args.presets}
    decode = {s: decoding_counts(s, args.decode_sentences, args.decode_source, args.decode_new)
              for s in args.presets if s != MARIAN}
    references = [BASELINE, MARIAN]
    print("\n".join(ratio_table(train, f"training step (n = {args.length}, {args.tokens:,} tokens, fused AdamW)",
                                references)))
    print()
    print("\n".join(ratio_table(decode, f"greedy generate ({args.decode_sentences} × {args.decode_source} tokens, "
                                        f"{args.decode_new} new)", references)))
    if args.top:
        for system, count in train.items():
            print(f"\n{system}, training step: " + ", ".join(f"{n} {c}" for n, c in count.most_common(args.top)))
    if args.output:
        write_json(args.output, {
            "settings": {k: v for k, v in vars(args).items() if k != "output"},
            "machine": machine(),
            "training_step": {s: dict(c) for s, c in train.items()},
            "decoding": {s: dict(c) for s, c in decode.items()},
        })
    return train, decode


if __name__ == "__main__":
    sys.exit(main() and 0)
