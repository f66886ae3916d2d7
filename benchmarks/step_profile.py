"""Where a training step goes: `torch.profiler` over a few AdamW steps of the KFTT recipe's model, the
self CPU time of every operator grouped by kind, and the step's time as a multiple of its matrix products.

    python benchmarks/step_profile.py [--presets transformer_abs transformer_dbsa] [--batch 40 --length 48]
                                      [--steps 3] [--rounds 6] [--threads 1] [--bf16] [--attn eager]
                                      [--dropout 0.1] [--label-smoothing 0.1] [--top 12] [--no-huge-pages]

Each preset's step is profiled twice in one process: with the `torch.nn.functional` dropout and cross-entropy
(`functional`: the path before `hf_syntax_mt.fast_ops`) and with the package's (`fast`), then both are timed in
interleaved rounds (median CPU time of the thread a step, so another process on the machine inflates neither).
Transparent huge pages for large tensors (`fast_ops.use_huge_pages_for_large_tensors`, what training turns on) hold
for the whole process: `--no-huge-pages` runs without them (compare two runs).

The ratio `step / matmul` is the profiled self CPU time of everything in the step over that of the matrix
products (`aten::mm`, `addmm`, `bmm`, `baddbmm`, `linear`'s kernels and their mkldnn forms): 1.0 would be a step
that is all matrix work. The model is the recipes' (`common.SIZE`: d_model 256, 3+3 layers, 8k vocabulary; the
KFTT recipe's dropout, label smoothing and attention by default), on random ids and trees of the given shape
(40 × 48 tokens ≈ its 2,048-token batches).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

import hf_syntax_mt.modeling_syntax_mt as modeling
import speed
from common import SIZE, cpu_name
from hf_syntax_mt import fast_ops

MATMUL = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation",
          "mkldnn::_linear_pointwise", "aten::mkldnn_linear", "aten::_mkldnn_matmul"}
KINDS = [  # (kind, operator names or prefixes), first match wins
    ("matrix products", MATMUL),
    ("copies and casts", {"aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone"}),
    ("dropout masks", {"aten::bernoulli_", "aten::native_dropout", "aten::uniform_", "aten::random_"}),
    ("vocabulary softmax / loss", {"aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_forward",
                                   "aten::nll_loss_backward", "aten::exp_"}),  # exp_: fast_ops' softmax of the loss
    ("attention softmax", {"aten::_softmax", "aten::_softmax_backward_data"}),
    ("optimizer", {"aten::_fused_adamw_", "aten::_foreach_mul_", "aten::_foreach_add_", "aten::_foreach_addcmul_",
                   "aten::_foreach_lerp_", "aten::_foreach_sqrt", "aten::_foreach_div_", "aten::_foreach_addcdiv_",
                   "aten::_foreach_add", "aten::_foreach_mul", "aten::_foreach_div", "aten::_foreach_sub_"}),
    ("elementwise (add, mul, fill, ...)", {"aten::add", "aten::add_", "aten::mul", "aten::mul_", "aten::fill_",
                                           "aten::zero_", "aten::masked_fill", "aten::masked_fill_", "aten::where",
                                           "aten::relu", "aten::threshold_backward", "aten::gelu",
                                           "aten::gelu_backward", "aten::sum", "aten::native_layer_norm",
                                           "aten::native_layer_norm_backward", "aten::embedding_dense_backward",
                                           "aten::sub", "aten::div", "aten::exp", "aten::sqrt", "aten::scatter_"}),
]


def functional_cross_entropy(logits, labels, epsilon, ignore_index):
    return F.cross_entropy(logits.float(), labels, ignore_index=ignore_index, label_smoothing=epsilon)


OPS = {"functional": (F.dropout, functional_cross_entropy),
       "fast": (fast_ops.dropout, fast_ops.label_smoothed_cross_entropy)}


def use_ops(name: str) -> None:
    """Make the model file call the named dropout and cross-entropy."""
    modeling.dropout, modeling.label_smoothed_cross_entropy = OPS[name]


def training_step(preset: str, args):
    model, config = speed._build(preset, {**SIZE, "dropout": args.dropout, "label_smoothing": args.label_smoothing,
                                          "attn_implementation": args.attn})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = speed._training_step(model, optimizer, speed._batch(config, args.batch, args.length), bf16=args.bf16)
    step()
    return step


def profile_step(step, args) -> dict:
    """Self CPU microseconds a step by operator kind, averaged over `args.steps` profiled steps."""
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    by_kind, by_op = defaultdict(float), defaultdict(lambda: [0.0, 0])
    for event in prof.key_averages():
        if event.self_cpu_time_total <= 0:
            continue
        kind = next((k for k, names in KINDS if event.key in names), "other")
        by_kind[kind] += event.self_cpu_time_total / args.steps
        by_op[event.key][0] += event.self_cpu_time_total / args.steps
        by_op[event.key][1] += event.count // args.steps
    return {"by_kind": dict(by_kind), "by_op": {k: tuple(v) for k, v in by_op.items()}}


def timed_rounds(steps: dict, rounds: int) -> dict:
    """Median thread CPU seconds a step per ops name, the names interleaved round by round."""
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            use_ops(name)
            start = time.thread_time()
            step()
            times[name].append(time.thread_time() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def print_profile(preset: str, result: dict, top: int) -> float:
    by_kind, by_op = result["by_kind"], result["by_op"]
    total = sum(by_kind.values())
    ratio = total / by_kind.get("matrix products", float("nan"))
    print(f"\n{preset}: {total / 1000:.0f} ms of self CPU time a step, {ratio:.2f}x its matrix products")
    print("| where the step goes | share | ms |\n|---|---|---|")
    for kind, micros in sorted(by_kind.items(), key=lambda item: -item[1]):
        print(f"| {kind} | {micros / total:.1%} | {micros / 1000:.1f} |")
    print(f"top {top} operators (ms a step, calls a step):")
    for name, (micros, calls) in sorted(by_op.items(), key=lambda item: -item[1][0])[:top]:
        print(f"  {name:40s} {micros / 1000:7.1f} {calls:6d}")
    return ratio


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=["transformer_abs", "transformer_dep_labeled_rel",
                                                          "transformer_sla", "transformer_dbsa"])
    parser.add_argument("--batch", type=int, default=40)
    parser.add_argument("--length", type=int, default=48)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (pays only where the CPU has native bf16)")
    parser.add_argument("--attn", default="eager", help="attn_implementation")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--huge-pages", action=argparse.BooleanOptionalAction, default=True,
                        help="transparent huge pages for tensors >= 2 MB (THP_MEM_ALLOC_ENABLE), as training uses")
    args = parser.parse_args(argv)
    os.environ[fast_ops.HUGE_PAGES_ENV] = "1" if args.huge_pages else "0"  # before the first large tensor
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_name()}; torch {torch.__version__}, {args.threads} thread(s), "
          f"{'bf16 autocast' if args.bf16 else 'fp32'}, attn {args.attn}, dropout {args.dropout}, "
          f"label smoothing {args.label_smoothing}, huge pages {args.huge_pages}, batch {args.batch} x {args.length}, {args.steps} profiled steps")
    ratios, speedups = {}, {}
    for preset in args.presets:
        steps = {}
        for name in OPS:
            use_ops(name)
            steps[name] = training_step(preset, args)
            ratios[preset, name] = print_profile(f"{preset} ({name})", profile_step(steps[name], args), args.top)
        seconds = timed_rounds(steps, args.rounds)
        speedups[preset] = seconds["functional"] / seconds["fast"]
        print(f"{preset}: functional {seconds['functional'] * 1000:.0f} ms, fast {seconds['fast'] * 1000:.0f} ms "
              f"a step (thread CPU time, median of {args.rounds}): {speedups[preset]:.2f}x")
    print("\n| preset | step / matrix products, functional | fast | step time functional / fast |\n|---|---|---|---|")
    for preset in args.presets:
        print(f"| {preset} | {ratios[preset, 'functional']:.2f}x | {ratios[preset, 'fast']:.2f}x | "
              f"{speedups[preset]:.2f}x |")


if __name__ == "__main__":
    main()
