"""Two training runs side by side with 1 torch thread each against one run with 2 threads: aggregate
training steps/s on the 2-core machine, at the issue-6 recipe's size on a typical ja–en batch
(64 sentences, source 16 / target 14 subwords, bf16 autocast as the recipe trains).

    python benchmarks/lanes_speed.py [--rounds 3] [--steps 30] [--presets transformer_abs transformer_dep_rel]

Each round times one 2-thread worker alone, then two 1-thread workers started together (each in its own
process, warm-up steps excluded); the order of the two setups alternates between rounds. Prints each
setup's aggregate steps/s and the median over rounds of the ratio two-lanes / one-run (> 1: lanes faster).
This is how the quality grid chose to run two runs at once (`quality.py run --threads 1`).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time


def worker(preset, threads, steps):
    """Time `steps` training steps after 3 warm-up steps; print steps/s."""
    import torch

    import speed

    torch.set_num_threads(threads)
    step = speed.recipe_training_step(preset, bf16=True)
    for _ in range(2):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    print(steps / (time.perf_counter() - start))


def run_workers(preset, threads, count, steps):
    """Start `count` workers with `threads` threads each at once; return their summed steps/s."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, __file__, "--worker", preset, str(threads), str(steps)]
    processes = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) for _ in range(count)]
    outputs = [p.communicate()[0] for p in processes]
    if any(p.returncode for p in processes):
        raise RuntimeError(f"a {preset} worker failed (exit codes {[p.returncode for p in processes]})")
    return sum(float(out.strip().splitlines()[-1]) for out in outputs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--presets", nargs="+", default=["transformer_abs", "transformer_dep_rel"])
    parser.add_argument("--worker", nargs=3, metavar=("PRESET", "THREADS", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        preset, threads, steps = args.worker
        return worker(preset, int(threads), int(steps))
    for preset in args.presets:
        one_run, lanes = [], []
        for round_index in range(args.rounds):
            setups = [(one_run, 2, 1), (lanes, 1, 2)]
            for rates, threads, count in setups[:: 1 if round_index % 2 == 0 else -1]:
                rates.append(run_workers(preset, threads, count, args.steps))
        ratio = statistics.median(b / a for a, b in zip(one_run, lanes))
        print(f"{preset}: one 2-thread run {statistics.median(one_run):.2f} steps/s, two 1-thread runs "
              f"{statistics.median(lanes):.2f} steps/s together, two-lanes / one-run {ratio:.2f}")


if __name__ == "__main__":
    main()
