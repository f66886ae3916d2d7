"""Activation checkpointing (`model.activation_checkpointing_enable()`, `--activation_checkpointing` in
training) against the plain model: peak memory and time of one training step at the issue-6 recipe size,
per preset and length n (source = target = n, batch 16), measured as `speed.py` measures them.

    python benchmarks/checkpointing_speed.py [--presets transformer_abs ...] [--lengths 256] [--rounds 3] [--threads 2]

Memory: each (preset, mode) alone in a subprocess (`speed.py`'s memory worker); time: both modes of a
preset in one process, interleaved rounds. Prints the plain and checkpointed figures and the ratios
checkpointed / plain (memory < 1: less; time > 1: slower).
"""

import argparse
import statistics
import sys

import torch

import speed

DEFAULT_PRESETS = ["transformer_abs", "transformer_dep_labeled_rel+transformer_dbsa+transformer_sla"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=DEFAULT_PRESETS)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [str(n) for n in args.lengths]
    print(f"batch {args.batch_size}, source = target length n, {args.rounds} interleaved rounds, {args.threads} threads")
    for preset in args.presets:
        systems = [preset, preset + speed.CHECKPOINTED]
        memory = {}
        for system in systems:
            command = [sys.executable, speed.__file__, "--worker", "memory", "--system", system,
                       "--batch-size", str(args.batch_size), "--lengths", *lengths]
            memory[system] = speed._worker_output(command, speed._worker_environment("memory"))
        for n in args.lengths:
            steps = {}
            for system in systems:
                model, config = speed._build(system, speed.SIZE)
                model.train()
                steps[system] = speed._training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-4),
                                                     speed._batch(config, args.batch_size, n))
                steps[system]()  # warm-up
            times = speed._interleaved(steps, args.rounds)
            plain, checkpointed = (memory[s][str(n)] for s in systems)
            print(f"{preset} n={n}: memory {plain:.0f} MB -> {checkpointed:.0f} MB (x{checkpointed / plain:.2f}), "
                  f"step {statistics.median(times[systems[0]]) * 1000:.0f} ms -> "
                  f"{statistics.median(times[systems[1]]) * 1000:.0f} ms "
                  f"(x{speed._median_ratio(times[systems[1]], times[systems[0]]):.2f})", flush=True)


if __name__ == "__main__":
    main()
