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

`--path gpu` counts the path a CUDA device takes, on the CPU (issue 107): attention chosen as on CUDA (a key term
that learns stays in fused attention), dropout as `F.dropout`, and every fused attention call one kernel forward and
one backward (`FusedKernel`: CUDA's memory-efficient kernel learns its float mask); `--path gpu-flex` the same with
`attn_implementation="flex_attention"` (one compiled FlexAttention kernel each way, the key term read in its
score_mod). `--collator-ids` gives the training batch the relation ids the data collator makes on the host
(`SourceRelationIds`; the decoding batch too, as the pipeline makes them), so the step counts no walk up the trees; `--collator-rate` times what making them costs the
collator (sentences a second, 1 thread: a timing, unlike the counts).
"""

import argparse
import collections
import contextlib
import statistics
import sys
import time
import types
from pathlib import Path

import torch
from torch.nn import functional as F
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


PATHS = ("cpu", "gpu", "gpu-flex")


class OperationCounter(TorchDispatchMode):
    """Counts the ATen operations dispatched to a backend, by name (`aten.add.Tensor` -> `add`), views left out;
    nothing while `paused()`."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()
        self._paused = False

    @contextlib.contextmanager
    def paused(self):
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in VIEWS and not self._paused:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


class FusedKernel(torch.autograd.Function):
    """One fused attention kernel each way, as a GPU runs it: `compute` (its explicit equivalent) runs with the
    counter paused, and the call counts as `fused_attention` forward and `fused_attention_backward` backward."""

    @staticmethod
    def forward(ctx, counter, compute, *inputs):
        counter.counts["fused_attention"] += 1
        with counter.paused(), torch.enable_grad():
            leaves = [x.detach().requires_grad_() if x.is_floating_point() else x for x in inputs]
            output = compute(*leaves)
        ctx.counter, ctx.leaves, ctx.output = counter, leaves, output
        return output.detach()

    @staticmethod
    def backward(ctx, grad):
        ctx.counter.counts["fused_attention_backward"] += 1
        floating = [x for x in ctx.leaves if x.is_floating_point()]
        with ctx.counter.paused():
            grads = iter(torch.autograd.grad(ctx.output, floating, grad, allow_unused=True))
        return (None, None, *[next(grads) if x.is_floating_point() else None for x in ctx.leaves])


def _explicit_attention(query, key, value, bias=None, dropout_p=0.0):
    scores = query @ key.transpose(-1, -2)
    if bias is not None:
        scores = scores + bias
    return F.dropout(scores.softmax(-1), dropout_p) @ value


@contextlib.contextmanager
def gpu_path(counter):
    """The package's choices as on a CUDA device while counting on the CPU (see the module's docstring)."""
    from hf_syntax_mt import attention_functions, modeling_syntax_mt
    from hf_syntax_mt.relation_attention import RelationScores

    def fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, scale=None):
        inputs = (query, key, value) if attn_mask is None else (query, key, value, attn_mask)
        return FusedKernel.apply(counter, lambda q, k, v, *mask: _explicit_attention(q, k, v, *mask, dropout_p=dropout_p),
                                 *inputs)

    def fused_flex(query, key, value, score_mod):
        cells = dict(zip(score_mod.__code__.co_freevars, (cell.cell_contents for cell in score_mod.__closure__)))
        scores, log_mask, blocked = cells["relation_scores"], cells["log_mask"], cells["blocked"]

        def compute(q, k, v, *per_relation):
            bias = torch.zeros(()) if not per_relation else RelationScores(
                per_relation[0], scores.ids).dense()
            if log_mask is not None:
                bias = bias + log_mask[:, None]
            if blocked is not None:
                bias = bias.masked_fill(blocked, torch.finfo(q.dtype).min)
            return _explicit_attention(q, k, v, bias)

        extra = (scores.per_relation,) if scores is not None else ()
        return FusedKernel.apply(counter, compute, query, key, value, *extra)

    choose = modeling_syntax_mt.choose_attention
    saved = (choose, modeling_syntax_mt.dropout, attention_functions.dropout, attention_functions.F,
             attention_functions._flex, attention_functions._learned_on_cpu)
    attention_functions._learned_on_cpu = lambda per_relation: False  # CUDA's kernel learns the mask itself
    modeling_syntax_mt.choose_attention = lambda *args: choose(*args[:5], torch.device("cuda"), args[6])
    modeling_syntax_mt.dropout = attention_functions.dropout = lambda x, p, training=True: F.dropout(x, p, training)
    attention_functions.F = types.SimpleNamespace(scaled_dot_product_attention=fused_sdpa)
    attention_functions._flex = fused_flex
    try:
        yield
    finally:
        (modeling_syntax_mt.choose_attention, modeling_syntax_mt.dropout, attention_functions.dropout,
         attention_functions.F, attention_functions._flex, attention_functions._learned_on_cpu) = saved


@contextlib.contextmanager
def counting(path):
    """An `OperationCounter` over the path `path` (one of `PATHS`)."""
    with OperationCounter() as counter:
        with gpu_path(counter) if path != "cpu" else contextlib.nullcontext():
            yield counter


def build(system, path="cpu"):
    """The model of `system` at the recipe size (`speed._build`: `<preset>@keys` has key-only relation terms), with
    FlexAttention on the `gpu-flex` path."""
    model, config = _build(system, SIZE)
    if path == "gpu-flex" and system != MARIAN:
        model.set_attn_implementation("flex_attention")
    return model, config


def training_step_counts(system, length, tokens, path="cpu", collator_ids=False):
    """Operations of one forward, backward and fused AdamW step, counted after one step untimed (lazy state)."""
    model, config = build(system, path)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    batch = _batch(config, max(1, tokens // length), length)
    if collator_ids and system != MARIAN:
        from hf_syntax_mt.relation_attention import SourceRelationIds

        batch = SourceRelationIds(config)(batch)

    def step():
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    with counting(path) as counter:
        step()
    return counter.counts


def decoding_counts(system, sentences, source_length, new_tokens, path="cpu", collator_ids=False):
    """Operations of greedy `generate` with exactly `new_tokens` new tokens (the relation ids made with the batch,
    as the pipeline makes them, with `collator_ids`)."""
    model, config = build(system, path)
    model.eval()
    batch = _batch(config, sentences, source_length)
    batch.pop("labels")
    batch.pop("target_heads", None)
    if collator_ids:
        from hf_syntax_mt.relation_attention import SourceRelationIds

        batch = SourceRelationIds(config)(batch)
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=1, do_sample=False)
    with torch.no_grad():
        model.generate(**batch, **kwargs)
        with counting(path) as counter:
            model.generate(**batch, **kwargs)
    return counter.counts


def collator_rate(system, length, tokens, rounds=20):
    """Sentences a second of `SourceRelationIds` (the collator's last step, on the host, 1 thread) on batches of
    `tokens` // `length` sentences of `length` tokens with random trees: the median of `rounds` timed batches."""
    from hf_syntax_mt.relation_attention import SourceRelationIds

    _, config = _build(system, SIZE)
    make_ids = SourceRelationIds(config)
    batches = [_batch(config, max(1, tokens // length), length, seed=seed) for seed in range(rounds)]
    times = []
    for batch in batches:
        start = time.perf_counter()
        make_ids(batch)
        times.append(time.perf_counter() - start)
    return len(batches[0]["input_ids"]) / statistics.median(times)


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
    parser.add_argument("--path", choices=PATHS, default="cpu",
                        help="count the CPU's path, or a CUDA device's (with SDPA or FlexAttention) on the CPU")
    parser.add_argument("--collator-ids", action="store_true",
                        help="the training batch carries the relation ids the data collator makes")
    parser.add_argument("--collator-rate", action="store_true",
                        help="also time the collator's relation ids (sentences a second, 1 thread)")
    parser.add_argument("--output", type=Path, help="JSON of the counts per system and operation")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    train = {s: training_step_counts(s, args.length, args.tokens, args.path, args.collator_ids) for s in args.presets}
    decode = {s: decoding_counts(s, args.decode_sentences, args.decode_source, args.decode_new, args.path,
                                 args.collator_ids) for s in args.presets if s != MARIAN}
    references = [BASELINE, MARIAN]
    where = f"{args.path} path" + (", collator-made relation ids" if args.collator_ids else "")
    print("\n".join(ratio_table(train, f"training step (n = {args.length}, {args.tokens:,} tokens, fused AdamW; "
                                       f"{where})", references)))
    print()
    print("\n".join(ratio_table(decode, f"greedy generate ({args.decode_sentences} × {args.decode_source} tokens, "
                                        f"{args.decode_new} new; {where})", references)))
    rates = {}
    if args.collator_rate:
        rates = {s: collator_rate(s, args.length, args.tokens) for s in args.presets
                 if s != MARIAN and _build(s, SIZE)[1].dependency_relations}
        for system, rate in rates.items():
            print(f"\n{system}: the collator makes the relation ids of {rate:,.0f} sentences a second "
                  f"(n = {args.length}, batches of {args.tokens:,} tokens, 1 thread)")
    if args.top:
        for system, count in train.items():
            print(f"\n{system}, training step: " + ", ".join(f"{n} {c}" for n, c in count.most_common(args.top)))
    if args.output:
        write_json(args.output, {
            "settings": {k: v for k, v in vars(args).items() if k != "output"},
            "machine": machine(),
            "training_step": {s: dict(c) for s, c in train.items()},
            "decoding": {s: dict(c) for s, c in decode.items()},
            **({"collator_sentences_per_second": rates} if rates else {}),
        })
    return train, decode


if __name__ == "__main__":
    sys.exit(main() and 0)
