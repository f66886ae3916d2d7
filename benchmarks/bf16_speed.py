"""bf16 autocast against fp32: training-step time at the issue-6 recipe's size on a typical ja–en
batch (64 sentences, source 16 / target 14 subwords), interleaved rounds in one process.

    python benchmarks/bf16_speed.py [--rounds 12] [--presets transformer_abs transformer_rel]

Prints each mode's median step time and the median over rounds of the fp32/bf16 ratio (> 1: bf16 faster).
"""

import argparse
import statistics

import torch

import speed
from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--presets", nargs="+", default=["transformer_abs", "transformer_rel"])
    args = parser.parse_args()
    torch.set_num_threads(2)
    for preset in args.presets:
        steps = {}
        for mode in ("fp32", "bf16"):
            config = SyntaxMTConfig.from_preset(preset, **speed.SIZE)
            torch.manual_seed(0)
            model = SyntaxMTForConditionalGeneration(config).train()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            batch = speed._batch(config, 64, 16)
            batch["labels"] = batch["labels"][:, :14]
            step = speed._training_step(model, optimizer, batch, bf16=mode == "bf16")
            step()  # warm-up
            steps[mode] = step
        times = speed._interleaved(steps, args.rounds)
        print(f"{preset}: fp32 {statistics.median(times['fp32']) * 1000:.0f} ms, bf16 {statistics.median(times['bf16']) * 1000:.0f} ms, "
              f"fp32/bf16 {speed._median_ratio(times['fp32'], times['bf16']):.2f}")


if __name__ == "__main__":
    main()
