"""Training steps per second with 1 and 2 torch threads, on an idle machine and with one core busy.

    python benchmarks/threads_speed.py [--steps 10] [--rounds 3] [--threads 1 2] [--preset transformer_abs]
        [--output benchmarks/results/threads_speed.json]

The recipe-size model (d_model 256, 3+3 layers, 4 heads, ffn 1024, vocab 8000: `speed.SIZE`) trains with AdamW
on a batch of 32 sentences x 30 subwords (source and target). Everything runs in this one process: for each
load (none added, then one busy-loop process that keeps a core busy) the thread counts are timed in interleaved
rounds of `--steps` steps, so that the machine's drift hits them alike; steps/s is the median over rounds.
The ratios printed are steps/s relative to 1 thread under the same load, and with the busy core to
without it. Run it on an otherwise idle machine (the load average before is printed and saved).

What it shows is what `--threads` / `HF_SYNTAX_MT_THREADS` are for: torch's threads wait for each other
at every operation, so a core taken by another job holds all of them back.
"""

import argparse
import json
import multiprocessing
import os
import statistics
import time
from pathlib import Path

import speed


def busy_loop() -> None:
    """Keeps one core busy until terminated (the other job of a shared machine)."""
    while True:
        pass


def steps_per_second(step, steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start)


def measure(step, thread_counts, steps: int, rounds: int) -> dict:
    """{threads: median steps/s over `rounds` interleaved rounds}; one warm-up step per count first."""
    import torch

    rates = {threads: [] for threads in thread_counts}
    for threads in thread_counts:
        torch.set_num_threads(threads)
        step()
    for round_number in range(rounds):
        order = thread_counts[round_number % len(thread_counts):] + thread_counts[:round_number % len(thread_counts)]
        for threads in order:
            torch.set_num_threads(threads)
            rates[threads].append(steps_per_second(step, steps))
    return {threads: statistics.median(values) for threads, values in rates.items()}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="transformer_abs")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts to compare")
    parser.add_argument("--steps", type=int, default=10, help="training steps per timing")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds per load")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=30, help="source and target subwords per sentence")
    parser.add_argument("--output", default="", help="write the results as JSON there ('' to skip)")
    args = parser.parse_args(argv)
    if min(args.threads + [args.steps, args.rounds, args.batch_size, args.length]) < 1:
        parser.error("--threads, --steps, --rounds, --batch-size and --length must be >= 1")
    import torch

    torch.manual_seed(0)
    model, config = speed._build(args.preset, speed.SIZE)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = speed._training_step(model, optimizer, speed._batch(config, args.batch_size, args.length))
    results = {"preset": args.preset, "batch": f"{args.batch_size}x{args.length}", "cores": os.cpu_count(),
               "load_average_before": round(os.getloadavg()[0], 2), "steps": args.steps, "rounds": args.rounds,
               "steps_per_second": {}}
    for load in ("no extra load", "one core busy"):
        hog = None
        if load != "no extra load":
            hog = multiprocessing.get_context("spawn").Process(target=busy_loop, daemon=True)
            hog.start()
            time.sleep(0.5)
        try:
            results["steps_per_second"][load] = measure(step, args.threads, args.steps, args.rounds)
        finally:
            if hog is not None:
                hog.terminate()
                hog.join()
    print(f"{args.preset}, batch {results['batch']}, {results['cores']} cores (load average "
          f"{results['load_average_before']} before: other jobs count as load too), median of {args.rounds} rounds "
          f"of {args.steps} steps")
    print(f"{'load':<15}" + "".join(f"{f'{n} thread(s)':>14}" for n in args.threads) + "   vs 1 thread")
    rates = results["steps_per_second"]
    for load, by_threads in rates.items():
        base = by_threads.get(1, by_threads[args.threads[0]])
        ratios = "  ".join(f"{n}: {rate / base:.2f}x" for n, rate in by_threads.items())
        print(f"{load:<15}" + "".join(f"{rate:>10.2f} st/s" for rate in by_threads.values()) + f"   {ratios}")
    for n in args.threads:
        slowdown = rates["one core busy"][n] / rates["no extra load"][n]
        print(f"{n} thread(s): with one core busy, {slowdown:.2f}x the speed without")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
