"""Summary: mean ± std over seeds, paired bootstrap, the RESULTS.md tables and the bar charts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from results_md import marked, write_section  # benchmarks/ is on sys.path (the script's folder)

from .findings import (
    FOREST_PLOT,
    MEASURED_RESULTS,
    collect,
    forest_rows,
    load_external,
    readme_section,
    results_section,
    write_measured_results,
)
from .recipes import (
    BASELINE,
    BUDGET_SETTINGS,
    DEP_BASELINE,
    REPO,
    budget_control,
    grid_runs,
    load_recipe,
    read_lines,
    resolve,
    run_settings,
    same_change_baseline,
)
from .scores import (
    BOOTSTRAP_SAMPLES,
    bleu_from_statistics,
    bleu_statistics,
    compare_runs,
    dev_statistics,
    load_runs,
    paired_bootstrap,
    train_pairs,
)

RESULTS_MD = REPO / "model_cards" / "RESULTS.md"
RECIPES_DIR = REPO / "benchmarks" / "recipes"


def _fmt_mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"


def summarize_recipe(recipe: dict, results_dir: Path, chart_dir: Path) -> str:
    """The Markdown section of one recipe (and its PNG charts)."""
    runs, by_preset = load_runs(recipe, results_dir)
    lines = [f"### {recipe['name']} ({recipe['source_lang']}→{recipe['target_lang']})", ""]
    finished = {(r["preset"], r["seed"]) for r in runs}
    missing = [(p, s) for p, s in grid_runs(recipe) if (p, s) not in finished]
    todo = []
    if missing:
        todo = ["Not finished yet (the grid resumes with "
                f"`python benchmarks/quality.py run --recipe {os.path.relpath(recipe['_path'], REPO)}`): "
                + ", ".join(f"{p} seed {s}" for p, s in missing) + ".", ""]
    if not runs:
        return "\n".join(lines + ["No finished runs yet.", ""] + todo)
    dev_limit = runs[0]["dev"]["sentences"]
    tokenize = recipe["bleu_tokenize"]
    order = [p for p in recipe.get("presets", []) if p in by_preset] + sorted(set(by_preset) - set(recipe.get("presets", [])))
    stats = dev_statistics(recipe, by_preset, dev_limit)

    def compare(system, base):
        return compare_runs(stats, system, base, tokenize)

    variants = recipe.get("variants", {})
    tests = {}
    for p in order:
        for base in (BASELINE, DEP_BASELINE):
            if not (base == DEP_BASELINE and "dep" not in p):
                tests[(p, base)] = _against_control(variants, stats, p, tokenize, base=base)
    lines += main_table_lines(recipe, runs, order, by_preset, tests, dev_limit)
    lines += device_lines(runs)
    lines += averaged_lines(recipe, order, by_preset, dev_limit)
    lines += variant_lines(recipe.get("variants", {}), order, compare)
    lines += comparison_lines(recipe, stats, tokenize)
    if not recipe.get("length_buckets"):  # the subword buckets replace thirds by words (unspaced Japanese has none)
        sources = read_lines(resolve(recipe, recipe["data"]["dev"][0]))[:dev_limit]
        lines += length_thirds_lines(order, stats, sources, tokenize, variants)
    lines += length_bucket_lines(recipe, results_dir, order, by_preset, stats, dev_limit, chart_dir)
    lines += data_size_lines(recipe, results_dir, chart_dir)
    lines += budget_lines(recipe, by_preset, load_external(results_dir), chart_dir)
    lines += learning_curve_lines(order, by_preset)
    lines += parse_head_lines(order, by_preset)
    lines += self_parsing_lines(recipe, order, by_preset, stats, dev_limit)
    lines += extra_set_lines(recipe, runs, order, by_preset)
    chart = plot_chart(recipe, order, by_preset, chart_dir)
    lines += ["", f"![dev BLEU per preset]({os.path.relpath(chart, RESULTS_MD.parent)})", "", "Commands:", "", "```"]
    lines += [r["command"] for p in order for r in sorted(by_preset[p], key=lambda r: r["seed"]) if r.get("command")]
    lines += ["```", ""] + todo
    return "\n".join(lines)


def variant_lines(variants: dict, order: list[str], compare) -> list[str]:
    """Each recipe variant (a preset with changed settings) against the preset it changes and against the baseline
    with the same changes."""
    lines = []
    for p in (p for p in order if p in variants):
        changes = [f"{k}={v}" for part in ("model", "training") for k, v in variants[p].get(part, {}).items()]
        lines += ["", f"Variant `{p}`: `{variants[p]['preset']}` with {', '.join(changes) or 'no changes'} (recipe `variants`)."]
        for base, what in ((variants[p]["preset"], "the preset it changes"),
                           (same_change_baseline(variants, p), "the baseline with the same changes")):
            t = compare(p, base)
            if t:
                lines.append(f"Against `{base}` ({what}): {t['delta']:+.2f} "
                             f"[{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}], p = {t['p_value']:.3f}.")
    return lines


def _resumed_mark(run: dict) -> str:
    """‡ for a resumed run whose runtime covers its last process only (results written before the runner kept
    `training_processes`), ↻ for one whose runtime covers all of its training."""
    return "↻" if "training_processes" in run else "‡"


def main_table_lines(recipe: dict, runs: list[dict], order: list[str], by_preset: dict, tests: dict,
                     dev_limit: int) -> list[str]:
    """The recipe's main table: dev BLEU / chrF mean ± std over seeds, Δ against abs and rel with the paired
    bootstrap's interval and p, steps and wall-clock cost, and the footnotes its marks (§ ∥ ‡ ¶ †) call for."""
    tokenize = recipe["bleu_tokenize"]
    lines = [
        f"Dev set: {dev_limit} sentences; beam {recipe['final_num_beams']}, the saved model in fp32 (the checkpoint "
        "with the best greedy BLEU on the run's selection split: the recipe's tune set, else dev); "
        f"BLEU (sacrebleu, tokenize={tokenize}) and chrF. "
        f"Paired bootstrap: {BOOTSTRAP_SAMPLES} samples, p = share of samples where the preset does not beat the baseline, "
        "on the seeds both have run (each system scored as the mean over those seeds).",
        "",
        "| preset | seeds | dev BLEU | dev chrF | Δ vs abs [95% CI] | p vs abs | Δ vs rel [95% CI] | p vs rel | steps | train h | tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    other_precision = False
    for p in order:
        rs = by_preset[p]
        preset_bf16 = bool(run_settings(recipe, p)[2].get("bf16"))
        seeds = []
        for r in sorted(rs, key=lambda r: r["seed"]):
            mark = "†" if r.get("bf16", False) != preset_bf16 else ""
            other_precision |= bool(mark)
            seeds.append(f"{r['seed']}{mark}")
        cells = [p, ",".join(seeds),
                 _fmt_mean_std([r["dev"]["bleu"] for r in rs]), _fmt_mean_std([r["dev"]["chrf"] for r in rs])]
        for base in (BASELINE, DEP_BASELINE):
            t = tests.get((p, base))
            cells += [_delta_cell(t, base), f"{t['p_value']:.3f}"] if t else ["–", "–"]
        in_processes = any((r.get("processes") or 1) > 1 for r in rs)
        marks = ("∥" if in_processes else "§" if any(r.get("threads", 2) != 2 for r in rs) else "") + \
            "".join(sorted({_resumed_mark(r) for r in rs if r.get("resumed_from_step")}))
        stopped_mark = "¶" if any(r.get("stopped_by_deadline_after_epoch") for r in rs) else ""
        cells += [f"{rs[0]['steps']}{stopped_mark}", f"{np.mean([r['train_runtime_seconds'] for r in rs]) / 3600:.2f}{marks}",
                  f"{np.mean([r['train_tokens_per_second'] for r in rs]):.0f}{marks}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Train h and tokens/s are wall-clock figures of a shared 2-core machine (other jobs ran at times); "
              "`benchmarks/speed.py` compares speed properly. ‡ resumed from a checkpoint by a runner that did not "
              "record each training process yet: the figures cover the last process only. ↻ resumed from a "
              "checkpoint: the figures cover the training of every process (the checkpoints carry the seconds "
              "behind them; the result's `training_processes` lists the processes it recorded). § trained with a "
              "torch thread count other than 2 (`--threads`; 1 when two runs shared the 2 cores, which gives ≈1.3× "
              "the throughput of one 2-thread run, each run slower)."]
    if any(budget_control(recipe.get("variants", {}), p, BASELINE) != BASELINE for p in order):
        lines[-1] += (" A variant that changes the training budget (" + ", ".join(f"`{k}`" for k in BUDGET_SETTINGS) +
                      ") is measured against the baseline's variant with the same budget, named in its cell, and "
                      "left out (–) where the recipe has none: no Δ mixes the budget with the method.")
    if any((r.get("processes") or 1) > 1 for r in runs):
        lines[-1] += (" ∥ trained by data-parallel processes (`--processes N`, one torch thread each), on the cores of "
                      "one machine: " + ", ".join(sorted({f"{r['processes']} processes" for r in runs
                                                          if (r.get("processes") or 1) > 1})) + ".")
    stopped = [r for r in runs if r.get("stopped_by_deadline_after_epoch")]
    if stopped:
        lines[-1] += (" ¶ training was stopped (`--stop-training-by` / `--stop-training-after-epoch`) before the "
                      "recipe's schedule ended, so these figures are provisional: " + ", ".join(
                          f"{r['preset']} seed {r['seed']} after epoch {r['stopped_by_deadline_after_epoch']} of "
                          f"{r.get('planned_epochs')}" for r in stopped) +
                      f"; `python benchmarks/quality.py run --recipe {os.path.relpath(recipe['_path'], REPO)} "
                      "--continue-stopped` trains them on.")
    if other_precision:
        lines[-1] += (" † seed trained in the other precision than its recipe's `bf16` setting (fp32 or bf16 autocast, "
                      "`--no-bf16` / `--bf16`; e.g. fp32 on a CPU without native bf16, where autocast is far slower); "
                      "every final decode runs the saved model in fp32.")
    return lines


def parse_head_lines(order: list[str], by_preset: dict) -> list[str]:
    """The parse-head accuracy table of the presets that recorded one (DBSA heads, a self-parsing model's parser)."""
    parsing = [p for p in order if any(r.get("dev_parse_head_accuracy") for r in by_preset[p])]
    if not parsing:
        return []
    sides = ("source", "target", "self_parse", "self_parse_tree")
    lines = ["", "Parse heads on dev: % of the subwords the parse loss scores whose predicted head is the "
             "parser's head (DBSA source/target heads by argmax, the decoder on the teacher-forced reference; "
             "a self-parsing model's own parser by argmax and by the tree it decodes; mean over the seeds "
             "that recorded it):", "",
             "| preset | DBSA source | DBSA target | own parser (argmax) | own parser (tree) |", "|---|---|---|---|---|"]
    for p in parsing:
        accs = [r["dev_parse_head_accuracy"] for r in by_preset[p] if r.get("dev_parse_head_accuracy")]
        lines.append(f"| {p} | " + " | ".join(
            f"{np.mean([a[side] for a in accs if side in a]):.2f}" if any(side in a for a in accs) else "–"
            for side in sides) + " |")
    return lines


def extra_set_lines(recipe: dict, runs: list[dict], order: list[str], by_preset: dict) -> list[str]:
    """One table per extra evaluation set (`run --extra-eval`): BLEU / chrF mean ± std over the seeds scored on it."""
    lines = []
    for name in sorted({k for r in runs for k in r.get("extra", {})}):
        lines += ["", f"Extra evaluation set `{name}` (beam {recipe['final_num_beams']}):", "",
                  "| preset | seeds | BLEU | chrF |", "|---|---|---|---|"]
        for p in order:
            rs = sorted((r for r in by_preset[p] if name in r.get("extra", {})), key=lambda r: r["seed"])
            if rs:
                lines.append(f"| {p} | {','.join(str(r['seed']) for r in rs)} | {_fmt_mean_std([r['extra'][name]['bleu'] for r in rs])} | "
                             f"{_fmt_mean_std([r['extra'][name]['chrf'] for r in rs])} |")
    return lines


def averaged_lines(recipe: dict, order: list[str], by_preset: dict, dev_limit: int) -> list[str]:
    """Runs with `average_last_k` (issue 46): dev BLEU / chrF of the selected checkpoint (best greedy BLEU on the
    selection split) beside the mean of the last k checkpoints, mean ± std over seeds, and each preset's paired
    bootstrap against abs computed on the averaged models' dev hypotheses, then the recipe's `comparisons` on those
    same hypotheses; the text states that the conclusions use the averaged models, which no split chose."""
    runs = {p: sorted((r for r in by_preset[p] if r.get("dev_averaged")), key=lambda r: r["seed"]) for p in order}
    runs = {p: rs for p, rs in runs.items() if rs}
    if not runs:
        return []
    refs = read_lines(resolve(recipe, recipe["data"]["dev"][1]))[:dev_limit]
    tokenize = recipe["bleu_tokenize"]
    stats = {p: {r["seed"]: bleu_statistics(read_lines(REPO / r["dev_averaged"]["hypotheses"]), refs, tokenize)
                 for r in rs} for p, rs in runs.items()}
    splits = sorted({r.get("selection_split", "dev") for rs in runs.values() for r in rs})
    lines = ["", f"Selected vs averaged models on dev (beam {recipe['final_num_beams']}): the checkpoint with the best "
             "greedy BLEU on the selection split, and the mean of the weights of the run's last k checkpoints "
             "(`average_last_k`); mean ± std over the seeds that have both. Δ vs abs [95% CI] and p: paired bootstrap "
             "on the averaged models' dev hypotheses, against abs's averaged models (seeds both have run).", "",
             "| preset | seeds | selected on | k | dev BLEU selected | dev BLEU averaged | dev chrF selected | "
             "dev chrF averaged | averaged: Δ vs abs [95% CI] | p vs abs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p, rs in runs.items():
        t = _against_control(recipe.get("variants", {}), stats, p, tokenize)
        cells = [p, ",".join(str(r["seed"]) for r in rs),
                 "/".join(sorted({r.get("selection_split", "dev") for r in rs})),
                 "/".join(str(k) for k in sorted({len(r["averaged_checkpoints"]) for r in rs}))]
        for metric in ("bleu", "chrf"):
            cells += [_fmt_mean_std([r["dev"][metric] for r in rs]), _fmt_mean_std([r["dev_averaged"][metric] for r in rs])]
        cells += [_delta_cell(t, BASELINE), f"{t['p_value']:.3f}"] if t else ["–", "–"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += comparison_lines(recipe, stats, tokenize, "The recipe's comparisons on the averaged models' dev "
                              "hypotheses (paired bootstrap on the seeds both have run):")
    lines += ["", "The conclusions use the averaged models (averaged: no selection on any split; k is fixed by the "
              "recipe before training). " + ("The selected checkpoints of runs selected on dev were chosen on the "
                                             "split they are scored on, so their dev figures are biased upward."
                                             if "dev" in splits else
                                             "The selected checkpoints were chosen on tune, not on dev.")]
    return lines


def self_parsing_lines(recipe: dict, order: list[str], by_preset: dict, stats: dict, dev_limit: int) -> list[str]:
    """Self-parsing runs (issue 26): one model decoding with its own trees against the same model fed the
    parser's trees (`dev_parser_fed`), paired bootstrap per seed set; the preset without self-parsing is
    compared in the main table."""
    runs = {p: [r for r in by_preset[p] if "dev_parser_fed" in r.get("extra", {})] for p in order}
    runs = {p: rs for p, rs in runs.items() if rs}
    if not runs:
        return []
    refs = read_lines(resolve(recipe, recipe["data"]["dev"][1]))[:dev_limit]
    tokenize = recipe["bleu_tokenize"]
    lines = ["", "Self-parsing models, dev BLEU of one model decoding with the tree it parses itself against the "
             "same model fed the parser's trees (paired bootstrap, own − fed):", "",
             "| preset | seeds | own trees | parser's trees | Δ [95% CI] | p |", "|---|---|---|---|---|---|"]
    for p, rs in runs.items():
        seeds = sorted(r["seed"] for r in rs)
        fed = [bleu_statistics(read_lines(REPO / r["extra"]["dev_parser_fed"]["hypotheses"]), refs, tokenize)
               for r in sorted(rs, key=lambda r: r["seed"])]
        t = paired_bootstrap([stats[p][s] for s in seeds], fed, tokenize=tokenize)
        lines.append(f"| {p} | {','.join(map(str, seeds))} | {_fmt_mean_std([r['dev']['bleu'] for r in rs])} | "
                     f"{_fmt_mean_std([r['extra']['dev_parser_fed']['bleu'] for r in rs])} | {t['delta']:+.2f} "
                     f"[{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}] | {t['p_value']:.3f} |")
    return lines


def _fmt_test(t: Optional[dict]) -> str:
    return f"{_delta_cell(t, BASELINE)}, p {t['p_value']:.3f}" if t else "–"


def _against_control(variants: dict, stats: dict, p: str, tokenize: str, sentences=None,
                     base: str = BASELINE) -> Optional[dict]:
    """Paired bootstrap of run `p` against `base`, or against the variant of `base` with p's training budget
    (`budget_control`), named in the result as its "control"; None for `base` itself, a budget no variant of
    `base` shares, or no seeds in common."""
    control = budget_control(variants, p, base)
    if p == base or control is None:
        return None
    t = compare_runs(stats, p, control, tokenize, sentences)
    return {**t, "control": control} if t else None


def _delta_cell(t: dict, base: str) -> str:
    """Δ [95% CI], naming the run measured against where it is not the column's `base`."""
    control = t.get("control", base)
    named = f" vs `{control}`" if control != base else ""
    return f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}]{named}"


def device_lines(runs: list[dict]) -> list[str]:
    """The machines the runs recorded (`device`; runs before it was recorded are left out), so that a
    comparison across kinds of machine shows."""
    devices: dict[str, list[str]] = {}
    for r in sorted(runs, key=lambda r: (r["preset"], r["seed"])):
        if r.get("device"):
            devices.setdefault(r["device"], []).append(f"{r['preset']} {r['seed']}")
    if not devices:
        return []
    if len(devices) == 1:
        ((device, names),) = devices.items()
        return ["", f"Machine recorded by {len(names)} runs: {device}."]
    return ["", "Machines recorded by the runs (run name and seed):"] + \
        [f"- {device}: {', '.join(names)}" for device, names in devices.items()]


def comparison_lines(recipe: dict, stats: dict, tokenize: str,
                     heading: str = "The recipe's comparisons (paired bootstrap on the seeds both have run):") -> list[str]:
    """The recipe's own `comparisons` ([system, baseline] pairs, e.g. an ablation against its full model or a
    combination against its parts) that have runs on both sides."""
    pairs = [(a, b) for a, b in recipe.get("comparisons", []) if a in stats and b in stats]
    if not pairs:
        return []
    lines = ["", heading, "",
             "| system | baseline | seeds | Δ [95% CI], p |", "|---|---|---|---|"]
    for system, base in pairs:
        t = compare_runs(stats, system, base, tokenize)
        lines.append(f"| {system} | {base} | {','.join(map(str, t['seeds'])) if t else '–'} | {_fmt_test(t)} |")
    return lines


def length_thirds_lines(order: list[str], stats: dict, sources: list[str], tokenize: str,
                        variants: dict) -> list[str]:
    """Where in the sentence: dev BLEU on the short, middle and long third of the dev sentences (by the number of
    whitespace-separated source words; ties in corpus order), from the stored hypotheses, with each preset's
    paired bootstrap against abs on that third."""
    lengths = np.array([len(s.split()) for s in sources])
    thirds = np.array_split(np.argsort(lengths, kind="stable"), 3)
    header = [f"{name}: {lengths[idx].min()}–{lengths[idx].max()} words ({len(idx)})"
              for name, idx in zip(("short", "middle", "long"), thirds)]
    lines = ["", "Where in the sentence: dev BLEU (mean over seeds) on thirds of the dev set by source length "
             "(whitespace-separated source words; sorted by length, ties in corpus order, cut into three equal parts, "
             "so a boundary length can fall in two thirds), and Δ vs abs [95% CI], p from the paired bootstrap on "
             "that third (seeds both have run):", "",
             "| preset | " + " | ".join(f"{h} | Δ vs abs" for h in header) + " |", "|---|" + "---|---|" * 3]
    for p in order:
        cells = []
        for idx in thirds:
            bleu = np.mean([bleu_from_statistics(s[idx].sum(0), tokenize) for s in stats[p].values()])
            cells += [f"{bleu:.2f}", _fmt_test(_against_control(variants, stats, p, tokenize, idx))]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def length_buckets(lengths: Sequence[int], edges: Sequence[int]) -> list[tuple[str, np.ndarray]]:
    """(label, sentence indices) of the buckets ≤e_1, e_1+1–e_2, …, >e_last of `lengths`; empty buckets dropped."""
    lengths = np.asarray(lengths)
    bounds = [0, *edges, None]
    out = []
    for low, high in zip(bounds[:-1], bounds[1:]):
        idx = np.flatnonzero((lengths > low) & (lengths <= high if high is not None else True))
        label = f"≤{high}" if low == 0 else f"{low + 1}–{high}" if high is not None else f">{low}"
        if len(idx):
            out.append((label, idx))
    return out


def length_bucket_lines(recipe: dict, results_dir: Path, order: list[str], by_preset: dict, stats: dict,
                        dev_limit: int, chart_dir: Path) -> list[str]:
    """Where in the sentence, by a recipe's `length_buckets` (source subwords of the recipe's tokenizer, as
    `benchmarks/corpus_stats.py` records them for dev): dev BLEU per bucket and Δ vs abs [95% CI] from the paired
    bootstrap on that bucket, on the averaged models' hypotheses where every run of both presets has them (the
    models the conclusions use), else on the selected checkpoints'; and a chart of the Δs."""
    edges = recipe.get("length_buckets")
    stats_file = Path(results_dir) / recipe["name"] / "corpus_stats.json"
    if not edges or not stats_file.is_file():
        return []
    lengths = json.loads(stats_file.read_text())["dev_source_subwords"][:dev_limit]
    averaged = all(r.get("dev_averaged") for rs in by_preset.values() for r in rs)
    if averaged:
        refs = read_lines(resolve(recipe, recipe["data"]["dev"][1]))[:dev_limit]
        stats = {p: {r["seed"]: bleu_statistics(read_lines(REPO / r["dev_averaged"]["hypotheses"]), refs,
                                                recipe["bleu_tokenize"]) for r in rs} for p, rs in by_preset.items()}
    buckets = length_buckets(lengths, edges)
    tokenize = recipe["bleu_tokenize"]
    lines = ["", f"Where in the sentence, by source length in subwords (the recipe's tokenizer): dev BLEU of the "
             f"{'averaged models' if averaged else 'selected checkpoints'} (mean over seeds) per bucket, and Δ vs abs "
             "[95% CI], p from the paired bootstrap on that bucket (seeds both have run):", "",
             "| preset | " + " | ".join(f"{label} ({len(idx)}) | Δ vs abs" for label, idx in buckets) + " |",
             "|---|" + "---|---|" * len(buckets)]
    deltas = {}
    for p in order:
        cells = []
        for label, idx in buckets:
            bleu = np.mean([bleu_from_statistics(seed_stats[idx].sum(0), tokenize) for seed_stats in stats[p].values()])
            test = _against_control(recipe.get("variants", {}), stats, p, tokenize, idx)
            if test:
                series = p.replace("transformer_", "") + (f" − {test['control'].replace('transformer_', '')}"
                                                          if test["control"] != BASELINE else "")
                deltas.setdefault(series, []).append((label, test))
            cells += [f"{bleu:.2f}", _fmt_test(test)]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    if deltas:
        chart = plot_length_chart(recipe, deltas, chart_dir)
        lines += ["", f"![Δ dev BLEU vs abs by source length]({os.path.relpath(chart, RESULTS_MD.parent)})"]
    return lines


def plot_length_chart(recipe: dict, deltas: dict[str, list[tuple[str, dict]]], chart_dir: Path) -> Path:
    """Δ dev BLEU vs abs per length bucket, one marker series per preset (named with the run it is measured
    against where that is not abs), 95% CI as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    labels = [label for label, _ in next(iter(deltas.values()))]
    width = 0.8 / len(deltas)
    for k, (p, tests) in enumerate(deltas.items()):
        xs = [labels.index(label) - 0.4 + width * (k + 0.5) for label, _ in tests]
        ys = [t["delta"] for _, t in tests]
        errors = [[t["delta"] - t["ci95"][0] for _, t in tests], [t["ci95"][1] - t["delta"] for _, t in tests]]
        ax.errorbar(xs, ys, yerr=errors, fmt="o", capsize=3, label=p)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(labels)), [f"{label} subwords" for label in labels], fontsize=8)
    ax.set_ylabel("Δ dev BLEU vs abs (95% CI)")
    ax.set_title(f"{recipe['name']}: where in the sentence the syntax pays", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    return save_chart(fig, chart_dir / f"quality_{recipe['name']}_length.png")


def subset_recipes(recipe: dict) -> list[dict]:
    """The recipes beside this one that train on a subset of its training data (`"subset_of": <its name>`)."""
    paths = sorted(Path(recipe["_path"]).parent.glob("*.json"))
    return [load_recipe(path) for path in paths
            if json.loads(path.read_text(encoding="utf-8")).get("subset_of") == recipe["name"]]


def data_size_lines(recipe: dict, results_dir: Path, chart_dir: Path) -> list[str]:
    """Δ dev BLEU against abs by the number of training pairs: this recipe and its subset recipes, for the run
    names the subset recipes train; a table and a chart once a subset recipe has results."""
    subsets = subset_recipes(recipe)
    names = list(dict.fromkeys(p for r in subsets for p in r.get("presets", []) if p != BASELINE))
    points: dict[str, dict[int, dict]] = {name: {} for name in names}
    sizes = []
    loaded = {r["name"]: load_runs(r, results_dir) for r in subsets + [recipe]}
    for r in subsets + [recipe]:
        runs, by_preset = loaded[r["name"]]
        if BASELINE not in by_preset or not set(by_preset) & set(names) or (r is recipe and not sizes):
            continue
        pairs = train_pairs(r, by_preset[BASELINE][0])
        stats = dev_statistics(r, {p: rs for p, rs in by_preset.items() if p in names or p == BASELINE},
                               runs[0]["dev"]["sentences"])
        sizes.append(pairs)
        for name in names:
            if name in stats:
                points[name][pairs] = compare_runs(stats, name, BASELINE, r["bleu_tokenize"])
    if not sizes:
        return []
    sizes = sorted(sizes)
    lines = ["", "By training-set size: Δ dev BLEU vs abs [95% CI] (paired bootstrap; the seeds both have run in "
             "parentheses), trained on the first N pairs of the training data (recipes "
             + ", ".join(f"`{r['name']}`" for r in subsets) + f" and `{recipe['name']}`):", "",
             "| preset | " + " | ".join(f"{n:,} pairs" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for name in names:
        cells = [_fmt_point(points[name].get(n)) for n in sizes]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    chart = plot_data_size_chart(recipe, points, sizes, chart_dir)
    return lines + ["", f"![Δ dev BLEU vs abs by training pairs]({os.path.relpath(chart, RESULTS_MD.parent)})"] \
        + subset_run_lines([(r, loaded[r["name"]][0]) for r in subsets])


def subset_run_lines(subsets: list[tuple[dict, list[dict]]]) -> list[str]:
    """Markdown table of every subset run (given as (recipe, its runs) pairs): dev BLEU / chrF (final beam) and
    its best greedy epoch, one column per training-set size and seed that has a run."""
    cells: dict[str, dict[tuple[int, int], str]] = {}
    columns, beams = set(), set()
    for r, runs in subsets:
        for run in runs:
            beams.add(run["dev"]["num_beams"])
            history = training_evaluations(run)
            best = max(history, key=lambda h: h["bleu"])["epoch"] if history else None
            column = (train_pairs(r, run), run["seed"])
            columns.add(column)
            cells.setdefault(run["preset"], {})[column] = (
                f"{run['dev']['bleu']:.2f} / {run['dev']['chrf']:.2f}" + (f" ({best:g})" if best is not None else ""))
    if not cells:
        return []
    columns = sorted(columns)
    names = list(dict.fromkeys([p for r, _ in subsets for p in r.get("presets", []) if p in cells] + sorted(cells)))
    lines = ["", f"Each subset run: dev BLEU / chrF (beam {', '.join(map(str, sorted(beams)))}), its best greedy "
             "epoch in parentheses (· not run):", "",
             "| preset | " + " | ".join(f"{n:,} pairs, seed {s}" for n, s in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(cells[name].get(c, "·") for c in columns) + " |")
    return lines


def _fmt_point(t: Optional[dict]) -> str:
    if not t:
        return "–"
    return f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}] ({','.join(map(str, t['seeds']))})"


def plot_data_size_chart(recipe: dict, points: dict, sizes: list[int], chart_dir: Path) -> Path:
    """One line per run name: Δ vs abs with its 95% interval at each size (log x; the lines are set slightly
    apart sideways so that the intervals do not hide each other)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    drawn = [name for name in points if points[name]]
    for k, name in enumerate(drawn):
        xs = [n for n in sizes if points[name].get(n)]
        ts = [points[name][n] for n in xs]
        shift = 2 ** (0.04 * (k - (len(drawn) - 1) / 2))
        deltas = np.array([t["delta"] for t in ts])
        errors = np.array([[t["delta"] - t["ci95"][0] for t in ts], [t["ci95"][1] - t["delta"] for t in ts]])
        ax.errorbar([x * shift for x in xs], deltas, yerr=errors, marker="o", markersize=4, capsize=3, linewidth=1.2,
                    linestyle="--" if "@flat" in name else "-", label=name.replace("transformer_", ""))
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("training pairs (first N of the corpus)")
    ax.set_ylabel("Δ dev BLEU vs abs (95% CI)")
    ax.set_title(f"{recipe['name']}: where the syntax pays, by data size", fontsize=9)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return save_chart(fig, chart_dir / f"quality_{recipe['name']}_data_size.png")


def budget_points(recipe: dict, by_preset: dict, external: list[dict]) -> dict[str, list[dict]]:
    """{base preset: [{name, updates, hours, dev, test}]} for every preset trained at two or more budgets (the
    preset and its variants that change only the training budget, `BUDGET_SETTINGS`), ordered by updates: dev BLEU
    of the selected checkpoints and their training hours averaged over the seeds, test BLEU (selected, mean over the
    seeds scored) where the recipe's held-out test was scored outside the project (None elsewhere)."""
    variants = recipe.get("variants", {})
    test = {}
    for figures in external:
        if figures["recipe"] == recipe["name"] and figures["split"] == "test":
            for score in figures.get("scores", []):
                by_seed = score.get("bleu_by_seed")
                test[score["system"]] = float(np.mean(by_seed)) if by_seed else score.get("bleu_mean")
    groups: dict[str, list[dict]] = {}
    for name, runs in by_preset.items():
        variant = variants.get(name, {})
        if variant and (set(variant) - {"preset", "training"} or set(variant.get("training", {})) - set(BUDGET_SETTINGS)):
            continue  # a variant that changes more than the budget
        groups.setdefault(variant.get("preset", name), []).append({
            "name": name, "updates": int(np.mean([r["steps"] for r in runs])),
            "hours": float(np.mean([r["train_runtime_seconds"] for r in runs])) / 3600,
            "dev": float(np.mean([r["dev"]["bleu"] for r in runs])), "test": test.get(name)})
    return {base: sorted(points, key=lambda p: p["updates"]) for base, points in groups.items() if len(points) > 1}


BUDGET_CHART = "quality_{}_budget.png"
"""The chart of BLEU by training budget of a recipe (by its name), beside RESULTS.md and in the model cards."""


def budget_lines(recipe: dict, by_preset: dict, external: list[dict], chart_dir: Path) -> list[str]:
    """BLEU by training budget: a table and a chart (against updates and against training hours) for the presets
    trained at several budgets; [] where none is."""
    points = budget_points(recipe, by_preset, external)
    if not points:
        return []
    lines = ["", "By training budget (selected checkpoints, mean over seeds; test‡ where scored outside the project; "
             "hours: training on this project's 2-core CPUs, 2 processes):", "",
             "| run | updates | training hours | dev BLEU | test‡ BLEU |", "|---|---|---|---|---|"]
    for runs in points.values():
        for p in runs:
            test = "–" if p["test"] is None else f"{p['test']:.2f}"
            lines.append(f"| {p['name']} | {p['updates']:,} | {p['hours']:.2f} | {p['dev']:.2f} | {test} |")
    chart = plot_budget_chart(recipe, points, chart_dir)
    return lines + ["", f"![BLEU by training budget]({os.path.relpath(chart, RESULTS_MD.parent)})"]


def plot_budget_chart(recipe: dict, points: dict[str, list[dict]], chart_dir: Path) -> Path:
    """Two panels, BLEU against training updates and against training hours: one colour a preset, dev solid,
    test dashed where scored."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8), sharey=True)
    for k, (base, runs) in enumerate(points.items()):
        colour = f"C{k}"
        for ax, x in zip(axes, ("updates", "hours")):
            ax.plot([p[x] for p in runs], [p["dev"] for p in runs], marker="o", color=colour,
                    label=f"{base.replace('transformer_', '')} dev")
            scored = [p for p in runs if p["test"] is not None]
            if scored:
                ax.plot([p[x] for p in scored], [p["test"] for p in scored], marker="s", linestyle="--", color=colour,
                        label=f"{base.replace('transformer_', '')} test‡")
    updates = sorted({p["updates"] for runs in points.values() for p in runs})
    axes[0].set_xticks(updates, [f"{u:,}" for u in updates])
    axes[0].set_xlabel("training updates")
    axes[1].set_xlabel("training hours (2-core CPU)")
    axes[0].set_ylabel("BLEU (beam 4, selected checkpoint)")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{recipe['name']}: BLEU by training budget", fontsize=9)
    return save_chart(fig, chart_dir / BUDGET_CHART.format(recipe["name"]))


def save_chart(fig, path: Path) -> Path:
    """Lay out, write (120 dpi) and close a chart; returns its path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def training_evaluations(run: dict) -> list[dict]:
    """The run's per-epoch greedy evaluations on its selection split (`<split>_bleu_by_eval`: tune, else dev;
    dev for results before a tune split existed); a final evaluation of the kept checkpoint (runs before the
    Trainer stopped decoding dev again after loading the best checkpoint) comes last, at the step of the
    evaluation before it, and is left out."""
    history = run.get(f"{run.get('selection_split', 'dev')}_bleu_by_eval", [])
    if len(history) > 1 and history[-1]["step"] == history[-2]["step"]:
        history = history[:-1]
    return history


def learning_curve_lines(order: list[str], by_preset: dict) -> list[str]:
    """Markdown tables of the greedy BLEU at each evaluation during training, mean over seeds: one table per split
    the runs evaluated on (`selection_split`, dev for older results), named in its heading."""
    lines = []
    for split in ("dev", "tune"):
        runs = {p: [r for r in by_preset[p] if r.get("selection_split", "dev") == split] for p in order}
        lines += split_learning_curve_lines(split, [p for p in order if runs[p]], runs)
    return lines


def split_learning_curve_lines(split: str, order: list[str], by_preset: dict) -> list[str]:
    """Markdown table of the greedy BLEU on `split` at each evaluation during training, mean over seeds.

    Read from each run's `<split>_bleu_by_eval` (`training_evaluations`). The best preset of each column is bold."""
    curves = {p: {} for p in order}
    for p in order:
        for r in by_preset[p]:
            for h in training_evaluations(r):
                curves[p].setdefault(h["epoch"], []).append(h["bleu"])
    epochs = sorted({e for curve in curves.values() for e in curve})
    if not epochs:
        return []
    means = {p: {e: float(np.mean(v)) for e, v in curves[p].items()} for p in order}
    best = {e: max(m[e] for m in means.values() if e in m) for e in epochs}
    lines = ["", f"Greedy {split} BLEU at each evaluation during training, as the Trainer scored it (under bf16 "
             "autocast when the run trains in bf16; mean over seeds; bold: best preset at that point; the run keeps the "
             "checkpoint with the best of its row):", "",
             "| preset | " + " | ".join(f"epoch {e:g}" for e in epochs) + " |", "|---|" + "---|" * len(epochs)]
    for p in order:
        cells = [("**{:.2f}**" if means[p][e] == best[e] else "{:.2f}").format(means[p][e]) if e in means[p] else "–"
                 for e in epochs]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def plot_chart(recipe: dict, order: list[str], by_preset: dict, chart_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    means = [np.mean([r["dev"]["bleu"] for r in by_preset[p]]) for p in order]
    stds = [np.std([r["dev"]["bleu"] for r in by_preset[p]], ddof=1) if len(by_preset[p]) > 1 else 0.0 for p in order]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(order) + 1), 3.6))
    ax.bar(range(len(order)), means, yerr=stds, capsize=4, color="#4a7ab5")
    ax.set_xticks(range(len(order)), [p.replace("transformer_", "").replace("+", "+\n") for p in order],
                  rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"dev BLEU (beam {recipe['final_num_beams']})")
    ax.set_ylim(max(0.0, min(means) - 3 * max(stds + [1.0])), max(means) + 2 * max(stds + [0.5]))
    ax.set_title(f"{recipe['name']}: mean ± std over seeds", fontsize=9)
    return save_chart(fig, chart_dir / f"quality_{recipe['name']}.png")


RECIPE_PART = re.compile(r"(<!-- quality:([^ ]+?):begin -->.*?<!-- quality:\2:end -->)", re.S)


def summary(args) -> str:
    """Print and write the quality section of model_cards/RESULTS.md. Each recipe has its own marked part of
    it, so a summary of some recipes keeps the others' tables (and the file's other sections). Then the
    findings of every recipe beside the first one (`findings.py`): RESULTS.md's summary at its top with the
    forest plot, and, for the repository's RESULTS.md (or where `--readme` / `--measured-results` say), the
    README's "which preset" table and the package's `measured_results.py` that model cards cite."""
    old = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
    parts = {name: text for text, name in RECIPE_PART.findall(old)}  # the file's recipes, in its order
    if not args.recipe:
        args.recipe = [RECIPES_DIR / f"{name}.json" for name in parts]
        missing = [str(path) for path in args.recipe if not path.is_file()]
        if not args.recipe or missing:
            raise SystemExit(f"summary: give --recipe (no recipe file for the sections of {args.output}: "
                             f"{', '.join(missing) or 'it has none'})")
    for recipe_file in args.recipe:
        recipe = load_recipe(recipe_file)
        parts[recipe["name"]] = marked(f"quality:{recipe['name']}",
                                       summarize_recipe(recipe, args.results_dir, args.output.parent))
    body = "\n".join(["## Dev BLEU: what the syntax buys", "",
                      "Generated by `python benchmarks/quality.py summary` from `benchmarks/results/`.", "",
                      "\n\n".join(parts.values())])
    section = write_section(args.output, "quality", body)
    print(section)
    write_findings(args)
    return section


def write_findings(args) -> dict:
    """Write the findings of the recipes in the folder of `args.recipe[0]` (see `summary`)."""
    from hf_syntax_mt.inference.plotting import plot_forest

    readme, measured = getattr(args, "readme", None), getattr(args, "measured_results", None)
    if Path(args.output).resolve() == RESULTS_MD.resolve():
        readme, measured = readme or REPO / "README.md", measured or MEASURED_RESULTS
    found = collect(sorted(Path(args.recipe[0]).resolve().parent.glob("*.json")), args.results_dir)
    chart = None
    if found["rows"]:
        chart = plot_forest(forest_rows(found), Path(args.output).parent / FOREST_PLOT,
                            title="Δ BLEU against each method's control (95% CI); ◆ held-out test, scored outside the "
                                  "project; ○ dev")
    write_section(args.output, "findings", results_section(found, chart, Path(args.output)), at_top=True)
    if readme:
        write_section(readme, "findings", readme_section(found), create=False)
    if measured:
        charts = {}
        for path in sorted(Path(args.recipe[0]).resolve().parent.glob("*.json")):
            chart = Path(args.output).parent / BUDGET_CHART.format(json.loads(path.read_text())["name"])
            if chart.is_file():
                recipe = load_recipe(path)
                presets = budget_points(recipe, load_runs(recipe, args.results_dir)[1], load_external(args.results_dir))
                charts[recipe["name"]] = (chart, sorted(presets))
        write_measured_results(found, measured, charts)
    return found

