"""What the relation presets cost beside `transformer_abs`, before and after a change of the relation path (issue 91):
backend operations of a training step and of greedy decoding (`op_count.py` JSONs) beside the CPU step time and peak
memory (`speed.py` JSONs, each measured in one run with abs), as ratios to abs.

    python benchmarks/relation_cost.py --ops BEFORE.json AFTER.json --speed BEFORE.json AFTER.json
        [--labels before after] [--note TEXT] [--results-md model_cards/RESULTS.md]
        [--paths "GPU path=GPU.json" "GPU path, FlexAttention=FLEX.json" ...] [--paths-note TEXT]
        [--budget-runs benchmarks/results/kftt.ja-en.budget --gpu benchmarks/results/gpu_speed.json]

A cell reads "before → after". Step time: the median over interleaved rounds of the per-round ratio to abs (the
speed benchmark's); memory: peak resident set of one step, each system alone in a subprocess. Only ratios measured in
the same run are compared; the two runs should share the machine's conditions (the note says which). `--paths` adds
a table of the after code's counts on other paths (issue 107: the path a GPU takes, counted on the CPU; relation ids
made by the data collator), one column a JSON.

With `--budget-runs`, a second table gives each budget run's cost (issue 91, item 6): its updates and training hours
on this project's CPU (the run's own `train_runtime_seconds`, all its sessions), and the GPU minutes the same updates
take at the step times `--gpu` measured (fp32, abs's median step at n = 64 times the preset's median ratio there).
"""

import argparse
import json
import sys
from pathlib import Path

from results_md import write_section
from speed import BASELINE, _median_ratio

SECTION = "relation-cost"
GPU_LENGTH = "64"


def _load(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def operation_ratios(ops, part):
    """{system: total operations / abs's} of one op_count JSON part ('training_step' or 'decoding')."""
    counts = {system: sum(table.values()) for system, table in ops[part].items()}
    return {system: total / counts[BASELINE] for system, total in counts.items()}, counts


def step_time_ratios(speed):
    """{system: {n: median per-round step time ratio to abs}} of a speed.py JSON."""
    train = speed["results"]["time"]["train"]
    return {system: {int(n): _median_ratio(cell["step_s"], train[BASELINE][n]["step_s"])
                     for n, cell in lengths.items() if n in train[BASELINE]}
            for system, lengths in train.items()}


def memory_ratios(speed):
    """{system: {n: peak memory / abs's}} of a speed.py JSON."""
    memory = speed["results"]["memory"]
    return {system: {int(n): mb / memory[BASELINE][n] for n, mb in lengths.items() if n in memory[BASELINE]}
            for system, lengths in memory.items()}


def _pair(before, after, digits=2):
    cells = [f"{value:.{digits}f}" if value is not None else "–" for value in (before, after)]
    return " → ".join(cells)


def tables(ops, speeds, labels, systems=None):
    """Markdown lines: operations, CPU step time and memory, each cell `labels[0] → labels[1]` as ratios to abs."""
    train = [operation_ratios(o, "training_step") for o in ops]
    decode = [operation_ratios(o, "decoding") for o in ops]
    times = [step_time_ratios(s) for s in speeds]
    memories = [memory_ratios(s) for s in speeds]
    systems = systems or list(train[1][0])
    lengths = sorted(set().union(*(cells.keys() for cells in times[1].values())))
    memory_lengths = sorted(set().union(*(cells.keys() for cells in memories[1].values())))
    lines = [f"| system | training-step operations ×abs ({labels[0]} → {labels[1]}) | greedy-decoding operations ×abs | "
             + " | ".join(f"n={n} step time ×abs" for n in lengths) + " | "
             + " | ".join(f"n={n} memory ×abs" for n in memory_lengths) + " |",
             "|---|---|---|" + "---|" * (len(lengths) + len(memory_lengths))]
    for system in systems:
        cells = [_pair(train[0][0].get(system), train[1][0].get(system)),
                 _pair(decode[0][0].get(system), decode[1][0].get(system))]
        cells += [_pair(times[0].get(system, {}).get(n), times[1].get(system, {}).get(n)) for n in lengths]
        cells += [_pair(memories[0].get(system, {}).get(n), memories[1].get(system, {}).get(n)) for n in memory_lengths]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    absolute = [f"abs: {train[i][1][BASELINE]:,} operations a training step, {decode[i][1][BASELINE]:,} a greedy "
                f"decoding ({labels[i]})" for i in (0, 1)]
    return lines, absolute


def path_table(labelled_ops, systems=None):
    """Markdown lines: per system its training-step and greedy-decoding operations as ratios to abs, one column pair
    per (label, op_count JSON) — other paths of the same code (`op_count.py --path`, `--collator-ids`)."""
    train = {label: operation_ratios(ops, "training_step")[0] for label, ops in labelled_ops}
    decode = {label: operation_ratios(ops, "decoding")[0] for label, ops in labelled_ops}
    systems = systems or list(next(iter(train.values())))
    lines = ["| system | " + " | ".join(f"training step ×abs, {label}" for label in train) + " | "
             + " | ".join(f"decoding ×abs, {label}" for label in decode) + " |",
             "|---|" + "---|" * (2 * len(train))]
    for system in systems:
        cells = [f"{train[label][system]:.2f}" if system in train[label] else "–" for label in train]
        cells += [f"{decode[label][system]:.2f}" if system in decode[label] else "–" for label in decode]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return lines


def budget_costs(runs_dir, gpu):
    """Markdown lines: per budget run (preset, seed) its updates, CPU hours, s/update, and GPU minutes at the
    measured ratio (– where the GPU benchmark has no such preset)."""
    train = gpu["train"]["fp32"]
    abs_steps = train[BASELINE][GPU_LENGTH]["step_s"]
    abs_step = sorted(abs_steps)[len(abs_steps) // 2]
    lines = [f"| run | seed | updates | CPU hours | CPU s / update | GPU step ×abs (fp32, n = {GPU_LENGTH}) | "
             f"GPU minutes |", "|---|---|---|---|---|---|---|"]
    for path in sorted(Path(runs_dir).glob("*/seed*.json")):
        run = _load(path)
        preset = run.get("variant_of") or run["preset"]
        ratio = _median_ratio(train[preset][GPU_LENGTH]["step_s"], abs_steps) if preset in train else None
        gpu_minutes = f"{run['steps'] * abs_step * ratio / 60:.1f}" if ratio is not None else "–"
        lines.append(f"| {path.parent.name} | {run['seed']} | {run['steps']:,} | {run['train_runtime_seconds'] / 3600:.2f} | "
                     f"{run['train_runtime_seconds'] / run['steps']:.2f} | "
                     f"{f'{ratio:.2f}' if ratio is not None else '–'} | {gpu_minutes} |")
    return lines, abs_step


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs=2, required=True, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--speed", nargs=2, required=True, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--labels", nargs=2, default=["before", "after"])
    parser.add_argument("--systems", nargs="+", help="rows, in order (default: every system of the after counts)")
    parser.add_argument("--note", default="", help="how and where it was measured, written under the table")
    parser.add_argument("--paths", nargs="+", default=[], metavar="LABEL=OPS.json",
                        help="a second table: the after code's operations on other paths (op_count --path, --collator-ids)")
    parser.add_argument("--paths-note", default="", help="written under the paths table")
    parser.add_argument("--title", default="What the relation terms cost: operations, CPU time, memory (issue 91)")
    parser.add_argument("--results-md", default="", help="write the section there ('' to print only)")
    parser.add_argument("--budget-runs", help="a quality runner's results folder of budget runs (<variant>/seed<k>.json)")
    parser.add_argument("--gpu", help="gpu_speed.py JSON whose fp32 step times price the budget runs")
    parser.add_argument("--budget-note", default="", help="written under the budget table")
    args = parser.parse_args(argv)
    lines, absolute = tables([_load(p) for p in args.ops], [_load(p) for p in args.speed], args.labels, args.systems)
    body = [f"## {args.title}", "", *lines, "",
            "; ".join(absolute) + ".", *([""] + [args.note] if args.note else [])]
    if args.paths:
        labelled = [(label, _load(path)) for label, path in (item.split("=", 1) for item in args.paths)]
        paths = path_table(labelled, args.systems)
        body += ["", "### The same code on other paths", "", *paths, *([""] + [args.paths_note] if args.paths_note else [])]
        lines = lines + paths
    if args.budget_runs:
        budget, abs_step = budget_costs(args.budget_runs, _load(args.gpu))
        body += ["", "### The budget runs' compute", "", *budget, "",
                 f"GPU minutes: updates × {abs_step * 1000:.1f} ms (abs's median fp32 step at n = {GPU_LENGTH}, 4,096 "
                 f"tokens, `{args.gpu}`) × the preset's ratio there, training only; CPU hours: the run's training time "
                 "on this project's 2-core machines (2 processes), summed over its sessions.",
                 *([""] + [args.budget_note] if args.budget_note else [])]
        lines = lines + budget
    body = "\n".join(body)
    print(body)
    if args.results_md:
        write_section(args.results_md, SECTION, body)
    return lines


if __name__ == "__main__":
    sys.exit(main() and 0)
