"""bf16 autocast against fp32, and under bf16 the explicit attention path (`attn_implementation="eager"`)
against fused SDPA (the default): training-step time at the issue-6 recipe's size on a typical ja–en
batch (64 sentences, source 16 / target 14 subwords), interleaved rounds in one process.

    python benchmarks/bf16_speed.py [--rounds 12] [--presets transformer_abs transformer_rel] [--threads 2]

Prints each mode's median step time and the medians over rounds of the fp32/bf16 and bf16/bf16-eager
ratios (> 1: the second faster).
"""

import argparse
import statistics

import torch

import speed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--presets", nargs="+", default=["transformer_abs", "transformer_rel"])
    parser.add_argument("--threads", type=int, default=2, help="torch threads (1: a run beside another one)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for preset in args.presets:
        steps = {mode: speed.recipe_training_step(preset, bf16=mode != "fp32",
                                                  attn_implementation="eager" if mode == "bf16-eager" else "sdpa")
                 for mode in ("fp32", "bf16", "bf16-eager")}
        times = speed._interleaved(steps, args.rounds)
        print(f"{preset}: " + ", ".join(f"{mode} {statistics.median(times[mode]) * 1000:.0f} ms" for mode in steps)
              + f", fp32/bf16 {speed._median_ratio(times['fp32'], times['bf16']):.2f}"
              + f", bf16/bf16-eager {speed._median_ratio(times['bf16'], times['bf16-eager']):.2f}")


if __name__ == "__main__":
    main()
