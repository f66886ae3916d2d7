"""Training-step and decoding time of every preset on a CUDA GPU, relative to `transformer_abs` and to a
same-size `MarianMTModel`, measured in one run (the GPU twin of benchmarks/speed.py's time and decode parts).

    python benchmarks/gpu_speed.py [--lengths 32 64 128 256] [--tokens-per-batch 4096] [--rounds 10]
        [--presets ...] [--output benchmarks/results/gpu_speed.json]
    python benchmarks/gpu_speed.py --tables-from benchmarks/results/gpu_speed*.json   # tables into RESULTS.md
    python benchmarks/gpu_speed.py --profile transformer_abs transformer_rel [--compile] [--lengths 128] [--tokens-per-batch 32768]

Model, random batches and syntax features as benchmarks/speed.py (the issue-6 recipe size). Every system is built
in one process and timed in interleaved rounds (one AdamW step of each system per round, the order rotating, the
GPU synchronized after each); a cell is the median over rounds of the per-round ratio. Training runs in fp32 (TF32
off) and in bf16 autocast; decoding (fp32) is 32 sentences × 30 new tokens, greedy and beam 4. The recipe step is
one AdamW step of `transformer_abs` on the KFTT recipe's typical batch (64 sentences, source 16 / target 14
subwords): its time bounds from below what one update of a KFTT budget run costs there.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import speed
from common import SIZE, describe_size, machine, write_json
from results_md import write_section
from speed import BASELINE, DEFAULT_PRESETS, MARIAN, _batch, _build, _interleaved, _median_ratio, _parse_size

PRECISIONS = ("fp32", "bf16")


def _synchronized(function, device):
    import torch

    def call():
        function()
        if device == "cuda":
            torch.cuda.synchronize()

    return call


def _training_step(model, batch, bf16, device):
    """One AdamW step on `batch` (on the model's device), fp32 or under bf16 autocast, the GPU synchronized after it."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return _synchronized(speed._training_step(model, optimizer, batch, bf16, device), device)


def _on(batch, device):
    return {name: value.to(device) for name, value in batch.items()}


def measure_train(systems, lengths, tokens_per_batch, rounds, size=SIZE, device="cuda"):
    """{precision: {system: {n: {"step_s": [...], "tokens": source + target tokens}}}}."""
    built = {system: _build(system, size) for system in systems}
    results = {precision: {system: {} for system in systems} for precision in PRECISIONS}
    for precision in PRECISIONS:
        for length in lengths:
            sentences = max(1, tokens_per_batch // length)
            steps = {}
            for system, (model, config) in built.items():
                model.to(device).train()
                steps[system] = _training_step(model, _on(_batch(config, sentences, length), device),
                                               precision == "bf16", device)
                steps[system]()  # warm-up: kernels chosen, optimizer state made
            for system, seconds in _interleaved(steps, rounds).items():
                results[precision][system][length] = {"step_s": seconds, "tokens": 2 * sentences * length}
            print(f"timed {precision} n={length}", file=sys.stderr, flush=True)
    return results


def measure_decode(systems, rounds, size=SIZE, device="cuda"):
    """{system: {"beam1_s": [...], "beam4_s": [...]}}: 32 sentences × 30 new tokens, fp32."""
    import torch

    built = {system: _build(system, size) for system in systems}
    decode = {system: {} for system in systems}
    with torch.no_grad():
        for beams in (1, 4):
            calls = {}
            for system, (model, config) in built.items():
                model.to(device).eval()
                inputs = _on({k: v for k, v in _batch(config, 32, 30, seed=1).items()
                              if k not in ("labels", "target_heads")}, device)
                calls[system] = _synchronized(lambda model=model, inputs=inputs: model.generate(
                    **inputs, num_beams=beams, max_new_tokens=30, min_new_tokens=30), device)
                calls[system]()  # warm-up
            for system, seconds in _interleaved(calls, rounds).items():
                decode[system][f"beam{beams}_s"] = seconds
    return decode


def measure_recipe_step(rounds, size=SIZE, device="cuda"):
    """Seconds of one AdamW step of transformer_abs on the KFTT recipe's typical batch, fp32 and bf16."""
    model, config = _build(BASELINE, size)
    model.to(device).train()
    batch = _on(_batch(config, 64, 16, target_length=14), device)
    steps = {precision: _training_step(model, batch, precision == "bf16", device) for precision in PRECISIONS}
    for step in steps.values():
        step()
    return _interleaved(steps, rounds)


def profile_steps(systems, length, tokens_per_batch, steps=5, top=15, compiled=False, size=SIZE, device="cuda"):
    """`torch.profiler` over `steps` training steps of each system (fp32, then bf16 autocast; with `compiled`, each
    also under `torch.compile`): per step the wall time, the GPU's busy time (its kernels' time), the host's self CPU
    time and the number of kernels, and the operators and kernels that take the most GPU time (on a CPU, a smoke run:
    the host's time and operators only)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sort_by = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    for precision in PRECISIONS:
        for system in systems:
            for compile_model in (False, True) if compiled else (False,):
                model, config = _build(system, size)
                model.to(device).train()
                batch = _on(_batch(config, max(1, tokens_per_batch // length), length), device)
                step = _training_step(torch.compile(model) if compile_model else model, batch, precision == "bf16",
                                      device)
                try:
                    for _ in range(3):
                        step()
                except Exception as err:  # noqa: BLE001 - a preset that does not compile is reported, not fatal
                    print(f"\n## {system} compiled, {precision}: does not run: {type(err).__name__}: {err}"[:2000])
                    torch._dynamo.reset()
                    continue
                with profile(activities=activities) as prof:
                    started = time.perf_counter()
                    for _ in range(steps):
                        step()
                    wall = (time.perf_counter() - started) / steps
                events = prof.key_averages()
                kernels = [event for event in events if event.device_type == DeviceType.CUDA]
                gpu = sum(event.self_device_time_total for event in kernels) / steps / 1e3
                cpu = sum(event.self_cpu_time_total for event in events) / steps / 1e3
                print(f"\n## {system}{' compiled' if compile_model else ''}, {precision}, n={length}, {tokens_per_batch} "
                      f"tokens: {wall * 1e3:.1f} ms a step; GPU busy {gpu:.1f} ms, host self CPU {cpu:.1f} ms, "
                      f"{sum(event.count for event in kernels) / steps:.0f} kernels a step")
                print(events.table(sort_by=sort_by, row_limit=top, max_name_column_width=60))
                del model, step
                torch._dynamo.reset()
                if device == "cuda":
                    torch.cuda.empty_cache()


def format_tables(results):
    train, decode, settings = results["train"], results["decode"], results["settings"]
    lengths, systems = settings["lengths"], [MARIAN] + settings["presets"]
    lines = ["| system | " + " | ".join(f"{p} n={n} ×abs / ×Marian" for p in PRECISIONS for n in lengths) + " |",
             "|---|" + "---|" * (len(PRECISIONS) * len(lengths))]
    for system in systems:
        cells = []
        for precision in PRECISIONS:
            table = train[precision]
            cells += [f"{_median_ratio(table[system][str(n)]['step_s'], table[BASELINE][str(n)]['step_s']):.2f} / "
                      f"{_median_ratio(table[system][str(n)]['step_s'], table[MARIAN][str(n)]['step_s']):.2f}"
                      for n in lengths]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "Absolute figures of the baselines (medians):"]
    for system in (MARIAN, BASELINE):
        for precision in PRECISIONS:
            rows = train[precision][system]
            lines.append(f"- {system}, {precision}: " + ", ".join(
                f"n={n}: {rows[str(n)]['tokens'] / statistics.median(rows[str(n)]['step_s']):,.0f} tokens/s "
                f"({statistics.median(rows[str(n)]['step_s']) * 1000:.1f} ms/step)" for n in lengths))
    lines += ["", "| system | beam-4 decode ×Marian | ×abs | greedy ×Marian | ×abs | beam-4 s (median) |",
              "|---|---|---|---|---|---|"]
    for system in systems:
        d = decode[system]
        lines.append(f"| {system} | {_median_ratio(d['beam4_s'], decode[MARIAN]['beam4_s']):.2f} | "
                     f"{_median_ratio(d['beam4_s'], decode[BASELINE]['beam4_s']):.2f} | "
                     f"{_median_ratio(d['beam1_s'], decode[MARIAN]['beam1_s']):.2f} | "
                     f"{_median_ratio(d['beam1_s'], decode[BASELINE]['beam1_s']):.2f} | "
                     f"{statistics.median(d['beam4_s']):.2f} |")
    recipe = {precision: statistics.median(seconds) for precision, seconds in results["recipe_step_s"].items()}
    lines += ["", "One AdamW step of transformer_abs on the KFTT recipe's typical batch (64 sentences, 16 / 14 subwords): "
              + ", ".join(f"{precision} {seconds * 1000:.1f} ms" for precision, seconds in recipe.items())
              + f"; 25,392 such steps (the `transformer_abs@4B` budget) take at least "
              f"{25392 * min(recipe.values()) / 60:.1f} min before any evaluation or translation."]
    return "\n".join(lines)


def write_results_md(runs, path):
    """RESULTS.md's "Speed on a GPU" section: the tables of each run (`runs`: [(JSON path, results)])."""
    parts = ["## Speed on a GPU", "",
             f"Model of the issue-6 recipe size ({describe_size(SIZE)}); training: one AdamW step on a batch of "
             "T // n sentences with source = target length n, timed in interleaved rounds in one process, the GPU "
             "synchronized after each step (cells: median over rounds of the step time's ratio to `transformer_abs` / "
             "to a same-size `MarianMTModel`, < 1 is faster), fp32 with TF32 off and bf16 autocast; decoding: 32 "
             "sentences × 30 new tokens, fp32. Random ids, trees and distances, untrained models. Tables written by "
             "`python benchmarks/gpu_speed.py --tables-from " + " ".join(str(json_path) for json_path, _ in runs) + "`."]
    for json_path, results in runs:
        settings = results["settings"]
        parts += ["", f"### T = {settings['tokens_per_batch']:,} tokens per batch", "",
                  f"Measured on {settings['date']} by `{settings['command']}` on {settings['gpu']} (PyTorch "
                  f"{settings['torch']}, CUDA {settings['cuda']}), {settings['rounds']} rounds; raw figures in "
                  f"`{json_path}`.", "", format_tables(results)]
    write_section(path, "gpu-speed", "\n".join(parts))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--tokens-per-batch", type=int, default=4096, help="batch of this // n sentences at length n")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved timed rounds")
    parser.add_argument("--presets", nargs="+", default=DEFAULT_PRESETS)
    parser.add_argument("--output", default="benchmarks/results/gpu_speed.json")
    parser.add_argument("--tables-from", nargs="+", help="write RESULTS.md's tables from these JSONs (no GPU needed)")
    parser.add_argument("--results-md", default="model_cards/RESULTS.md")
    parser.add_argument("--profile", nargs="+", metavar="PRESET", help="profile these presets' steps (at the first "
                        "--lengths) instead of timing")
    parser.add_argument("--compile", action="store_true", help="--profile: each preset also under torch.compile")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a smoke run of the same code")
    parser.add_argument("--size", default=None, help="model size overrides, key=value,... (tests)")
    args = parser.parse_args(argv)
    if args.tables_from:
        runs = [(path, json.loads(Path(path).read_text())) for path in args.tables_from]
        write_results_md(runs, args.results_md)
        return runs

    import torch

    size, device = _parse_size(args.size), args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_speed.py: no CUDA GPU here (torch.cuda.is_available() is False)")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    if args.profile:
        return profile_steps(args.profile, args.lengths[0], args.tokens_per_batch, compiled=args.compile, size=size,
                             device=device)
    presets = list(dict.fromkeys([BASELINE] + args.presets))
    systems = [MARIAN] + presets
    started = time.perf_counter()
    results = {
        "settings": {"lengths": args.lengths, "tokens_per_batch": args.tokens_per_batch, "rounds": args.rounds,
                     "presets": presets, "size": size, "device": device, "date": time.strftime("%Y-%m-%d"),
                     "command": "python benchmarks/gpu_speed.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                     **machine(device)},
        "train": measure_train(systems, args.lengths, args.tokens_per_batch, args.rounds, size, device),
        "decode": measure_decode(systems, max(3, args.rounds // 2), size, device),
        "recipe_step_s": measure_recipe_step(args.rounds * 3, size, device),
    }
    results["settings"]["seconds"] = round(time.perf_counter() - started, 1)
    write_json(args.output, results)
    print(format_tables(json.loads(Path(args.output).read_text())))  # string keys, as --tables-from reads them
    return results


if __name__ == "__main__":
    main()
