"""What the relation presets cost beside `transformer_abs`, before and after a change of the relation path (issue 91):
backend operations of a training step and of greedy decoding (`op_count.py` JSONs) beside the CPU step time and peak
memory (`speed.py` JSONs, each measured in one run with abs), as ratios to abs.

    python benchmarks/relation_cost.py --ops BEFORE.json AFTER.json --speed BEFORE.json AFTER.json
        [--labels before after] [--note TEXT] [--results-md model_cards/RESULTS.md]

A cell reads "before → after". Step time: the median over interleaved rounds of the per-round ratio to abs (the
speed benchmark's); memory: peak resident set of one step, each system alone in a subprocess. Only ratios measured in
the same run are compared; the two runs should share the machine's conditions (the note says which).
"""

import argparse
import json
import sys
from pathlib import Path

from results_md import write_section
from speed import BASELINE, _median_ratio

SECTION = "relation-cost"


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", nargs=2, required=True, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--speed", nargs=2, required=True, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--labels", nargs=2, default=["before", "after"])
    parser.add_argument("--systems", nargs="+", help="rows, in order (default: every system of the after counts)")
    parser.add_argument("--note", default="", help="how and where it was measured, written under the table")
    parser.add_argument("--results-md", default="", help="write the section there ('' to print only)")
    args = parser.parse_args(argv)
    lines, absolute = tables([_load(p) for p in args.ops], [_load(p) for p in args.speed], args.labels, args.systems)
    body = "\n".join(["## What the relation terms cost: operations, CPU time, memory (issue 91)", "", *lines, "",
                      "; ".join(absolute) + ".", *([""] + [args.note] if args.note else [])])
    print(body)
    if args.results_md:
        write_section(args.results_md, SECTION, body)
    return lines


if __name__ == "__main__":
    sys.exit(main() and 0)
