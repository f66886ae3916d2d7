"""The findings: for every method and corpus, Δ BLEU [95% CI] against the method's control on the strongest
evidence there is, the verdict it gives, and what the method costs; written as the summary of RESULTS.md (a
table and a forest plot), the README's "which preset" table and the figures a model card cites
(`hf_syntax_mt/hub/measured_results.py`).

Every figure comes from the result files: the paired bootstrap of the dev hypotheses in
`benchmarks/results/<recipe>/<run>/seed<k>.*` (the selected checkpoints, as in each corpus's main table), the
held-out test figures scored outside the project (`benchmarks/results/external_scores.json`, which replace the
dev figures of their recipe) and the training step times of `benchmarks/results/speed.json`."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from .recipes import BASELINE, REPO, load_recipe
from .scores import compare_runs, dev_statistics, load_runs, train_pairs

EXTERNAL_SCORES = "external_scores.json"
SPEED_RESULTS = "speed.json"
MEASURED_RESULTS = REPO / "hf_syntax_mt" / "hub" / "measured_results.py"
FOREST_PLOT = "findings_forest.png"
BUDGET_TABLE_HEADING = "The budget runs' held-out test, every comparison scored outside the project"


@dataclass(frozen=True)
class Method:
    """One method and the control it is judged against: `pairs` are (system, control) run names, the first
    pair that a recipe has runs of on both sides is that recipe's row."""

    name: str
    paper: str
    pairs: tuple[tuple[str, str], ...]


METHODS = (
    Method("relative positions", "Shaw et al. 2018", (("transformer_rel", "transformer_abs"),)),
    Method("dependency relative depth", "Omote et al. 2019", (("transformer_dep_rel", "transformer_rel"),)),
    Method("labeled tree relations", "SPEC §4 (seed 002)", (("transformer_dep_labeled_rel", "transformer_rel"),)),
    Method("labeled tree relations + relative positions", "SPEC §4 (seed 002)",
           (("transformer_dep_labeled_rel", "transformer_abs"),)),
    Method("labeled tree relations + relative positions in the attention logits only (key-only)", "SPEC §4 (seed 002)",
           (("transformer_dep_labeled_rel@keys", "transformer_abs"),)),
    Method("syntax-guided localized attention", "Hou/Zhu et al. 2022",
           (("transformer_sla", "transformer_sla@flat"), ("transformer_sla", "transformer_abs"))),
    Method("DBSA, the SPEC's setting (parse heads on the top layer in the 6-epoch runs, on layer 2 of 3 in the KFTT "
           "budget run)", "Deguchi et al. 2019",
           (("transformer_dbsa", "transformer_abs"), ("transformer_dbsa_enc", "transformer_abs"))),
    Method("DBSA, the authors' setting", "Deguchi et al. 2019", (("transformer_dbsa@authors", "transformer_abs"),)),
    Method("self-parsing (the model's own trees)", "this package",
           (("transformer_dep_labeled_rel@self", "transformer_dep_labeled_rel"),
            ("transformer_dep_rel@self", "transformer_dep_rel"))),
)

CORPUS_NAMES = {"kftt": "KFTT", "small_parallel_enja": "small_parallel_enja", "multi30k_task1": "Multi30k"}
REGIME_NOTES = {"kftt": "long Wikipedia sentences", "small_parallel_enja": "short sentences",
                "multi30k_task1": "image captions"}
TEST_MARK = "test‡"
VERDICTS = {"pays": "pays", "no_clear_difference": "no clear difference", "hurts": "hurts"}


def regime(recipe: dict, pairs: int) -> str:
    """A recipe's regime in words: corpus, direction, training pairs, kind of sentence."""
    corpus = recipe.get("corpus") or recipe["name"].split(".")[0]
    note = REGIME_NOTES.get(corpus)
    return (f"{CORPUS_NAMES.get(corpus, corpus)} {recipe['source_lang']}→{recipe['target_lang']}, {pairs / 1000:g}k "
            "pairs" + (f" ({note})" if note else ""))


def compact_regimes(rows: list[dict], shown: tuple[str, str]) -> str:
    """The rows' regimes in few words: one entry per corpus and direction (and for runs trained to a budget), its
    training sizes joined by /; an entry measured on another pair than the `shown` (system, control) names it, so
    that a cell never reads as the row's comparison when it is not."""
    sizes: dict[tuple[str, bool, str], list[int]] = {}
    for r in rows:
        other = ", ".join(([f"`{r['system']}`"] if r["system"] != shown[0] else [])
                          + ([f"vs `{r['control']}`"] if r["control"] != shown[1] else []))
        key = (r["regime"].split(",")[0], r.get("trained_to_budget", False), other)
        sizes.setdefault(key, []).append(r["train_pairs"])
    entries = []
    for (name, budget, other), ns in sizes.items():
        notes = "; ".join(note for note in ("budget runs" if budget else "", other) if note)
        sizes_text = "/".join(f"{n / 1000:g}k" for n in sorted(set(ns)))
        entries.append(f"{name} {sizes_text}" + (f" ({notes})" if notes else ""))
    return "; ".join(entries) or "–"


def load_external(results_dir: Path) -> list[dict]:
    """The sets of figures scored outside the project (`external_scores.json` in the results folder: one set per
    recipe and provenance; [] if absent)."""
    path = Path(results_dir) / EXTERNAL_SCORES
    if not path.is_file():
        return []
    sets = json.loads(path.read_text(encoding="utf-8")).get("sets")
    if not isinstance(sets, list):
        raise ValueError(f"{path}: expected a list of figure sets under 'sets'")
    for k, figures in enumerate(sets):
        for key in ("provenance", "issue", "recipe", "split", "comparisons"):
            if key not in figures:
                raise ValueError(f"{path}: set {k} has no key {key!r}")
    return sets


def verdict(ci95: list[float]) -> str:
    """pays / hurts when the 95% interval lies above / below zero, else no clear difference."""
    return "pays" if ci95[0] > 0 else "hurts" if ci95[1] < 0 else "no clear difference"


def recipe_rows(recipe: dict, results_dir: Path, external: list[dict]) -> list[dict]:
    """The recipe's row for every method it has runs of on both sides of a pair: the held-out test figure
    scored outside when a set of `external` has the pair for this recipe, else the paired bootstrap on dev."""
    runs, by_preset = load_runs(recipe, results_dir)
    chosen = []
    for method in METHODS:
        pair = next(((s, c) for s, c in method.pairs if s in by_preset and c in by_preset
                     and {r["seed"] for r in by_preset[s]} & {r["seed"] for r in by_preset[c]}), None)
        if pair:
            chosen.append((method, pair))
    if not chosen:
        return []
    outside = {(c["system"], c["baseline"]): (figures, c) for figures in external if figures["recipe"] == recipe["name"]
               for c in figures["comparisons"]}
    needed = {name for _, pair in chosen if pair not in outside for name in pair}
    stats = dev_statistics(recipe, {p: by_preset[p] for p in needed}, runs[0]["dev"]["sentences"]) if needed else {}
    variants = recipe.get("variants", {})
    rows = []
    for method, (system, control) in chosen:
        row = {"method": method.name, "paper": method.paper, "system": system, "control": control,
               "preset": variants.get(system, {}).get("preset", system),
               "variant_settings": {name: variants.get(name, {}).get("model", {}) for name in (system, control)},
               "recipe": recipe["name"], "direction": f"{recipe['source_lang']}-{recipe['target_lang']}",
               "train_pairs": train_pairs(recipe, by_preset[system][0]),
               "cost_ratio": tokens_per_second_ratio(by_preset, system)}
        row["regime"] = regime(recipe, row["train_pairs"])
        row["trained_to_budget"] = trained_to_budget(recipe)
        if (system, control) in outside:
            figures, figure = outside[(system, control)]
            row.update(evidence=figures["split"], scored_outside=True, issue=figures["issue"], seeds=figure["seeds"],
                       sentences=figures.get("sentences"), delta=figure["delta"], ci95=list(figure["ci95"]),
                       averaged=figure.get("averaged"), budget=figures.get("budget"))
        else:
            t = compare_runs(stats, system, control, recipe["bleu_tokenize"])
            row.update(evidence="dev", scored_outside=False, issue=None, seeds=t["seeds"],
                       sentences=runs[0]["dev"]["sentences"],
                       delta=round(t["delta"], 2), ci95=[round(x, 2) for x in t["ci95"]])
        row["verdict"] = verdict(row["ci95"])
        rows.append(row)
    return rows


def trained_to_budget(recipe: dict) -> bool:
    """Whether the recipe's runs train to the end of their schedule: a fixed number of updates with the learning
    rate decayed linearly to zero there and no early stopping (a budget recipe), not stopped on the way."""
    training = recipe["training"]
    return ("max_steps" in training and training.get("lr_scheduler_type") == "linear"
            and not recipe.get("early_stopping_patience"))


def tokens_per_second_ratio(by_preset: dict, system: str) -> Optional[float]:
    """Training cost ×abs from the runs themselves: abs's mean training tokens/s over the system's."""
    if BASELINE not in by_preset or system not in by_preset:
        return None
    rate = {p: np.mean([r["train_tokens_per_second"] for r in by_preset[p]]) for p in (BASELINE, system)}
    return round(float(rate[BASELINE] / rate[system]), 2)


def step_time_ratios(results_dir: Path) -> dict[str, list[float]]:
    """Training step time ×abs per preset and sequence length, median over `benchmarks/speed.py`'s rounds."""
    path = Path(results_dir) / SPEED_RESULTS
    if not path.is_file():
        return {}
    train = json.loads(path.read_text(encoding="utf-8"))["results"]["time"]["train"]
    if BASELINE not in train:
        return {}
    base = {n: np.median(v["step_s"]) for n, v in train[BASELINE].items()}
    ratios = {}
    for preset, times in train.items():
        lengths = sorted((n for n in times if n in base), key=int)
        ratios[preset] = [round(float(np.median(times[n]["step_s"]) / base[n]), 2) for n in lengths]
    return ratios


def cost_text(system: str, speed: dict, rows: list[dict]) -> str:
    """Training cost ×abs: `speed.py`'s step-time range over its lengths where it measured the preset, else the
    quality runs' tokens/s ratio (a shared machine's wall clock: noisy), marked "runs"."""
    if speed.get(system):
        low, high = min(speed[system]), max(speed[system])
        return f"{low:.2f}" if low == high else f"{low:.2f}–{high:.2f}"
    ratios = [r["cost_ratio"] for r in rows if r["system"] == system and r["cost_ratio"]]
    return f"{ratios[0]:.2f} (runs)" if ratios else "–"


def strongest(rows: list[dict]) -> dict:
    """The row of the strongest evidence: a held-out test scored outside, then runs trained to the end of their
    schedule (a budget recipe) over runs stopped on the way, then the most seeds, then the largest dev set."""
    return max(rows, key=lambda r: (r["scored_outside"], r["trained_to_budget"], len(r["seeds"]), r["sentences"] or 0))


def fmt_delta(row: dict) -> str:
    """Δ [95% CI], and the averaged models' figure where the external scores give one."""
    text = f"{row['delta']:+.2f} [{row['ci95'][0]:+.2f}, {row['ci95'][1]:+.2f}]"
    averaged = row.get("averaged")
    if averaged:
        ci = f" [{averaged['ci95'][0]:+.2f}, {averaged['ci95'][1]:+.2f}]" if "ci95" in averaged else ""
        text += f" (averaged models {averaged['delta']:+.2f}{ci})"
    return text


def evidence_text(row: dict) -> str:
    """Which split, which training (the external set's `budget`, where it names one) and which seeds."""
    seeds = f"seed{'s' if len(row['seeds']) > 1 else ''} {','.join(map(str, row['seeds']))}"
    budget = f", {row['budget']}" if row.get("budget") else ""
    return f"{TEST_MARK if row['scored_outside'] else 'dev'}{budget}, {seeds}"


def has_runs(recipe_file: Path, results_dir: Path) -> bool:
    """Whether the recipe has result files (read before the recipe is checked, so that a recipe being written
    that has no runs yet does not stop the summary)."""
    name = json.loads(Path(recipe_file).read_text(encoding="utf-8")).get("name", "")
    return bool(name) and any((Path(results_dir) / name).glob("*/seed*.json"))


def collect(recipe_files: list[Path], results_dir: Path) -> dict:
    """The rows of every recipe with runs (by method, then the held-out test first, corpus and training size), the
    per-method summary, and the provenance and scores of the external file."""
    external = load_external(results_dir)
    order = [m.name for m in METHODS]
    with_runs = [path for path in recipe_files if has_runs(path, results_dir)]
    rows = sorted((row for path in with_runs for row in recipe_rows(load_recipe(path), results_dir, external)),
                  key=lambda r: (order.index(r["method"]), not r["scored_outside"], r["recipe"].split(".")[0],
                                 -r["train_pairs"], r["direction"]))
    speed = step_time_ratios(results_dir)
    methods = []
    for method in METHODS:
        mine = [r for r in rows if r["method"] == method.name]
        if not mine:
            continue
        best = strongest(mine)
        methods.append({
            "method": method.name, "paper": method.paper, "system": best["system"], "control": best["control"],
            "strongest": {k: best.get(k) for k in ("recipe", "regime", "evidence", "scored_outside", "budget", "seeds",
                                                   "delta", "ci95")},
            **{key: compact_regimes([r for r in mine if r["verdict"] == name], (best["system"], best["control"]))
               for key, name in VERDICTS.items()},
            "train_cost_x_abs": cost_text(best["system"], speed, rows),
        })
    shown = {r["issue"] for r in rows if r["scored_outside"]}
    budget_recipes = {r["recipe"] for r in rows if r["scored_outside"] and r["trained_to_budget"]}
    return {"rows": rows, "methods": methods,
            "external_provenance": {f["issue"]: f["provenance"] for f in external if f["issue"] in shown},
            "external_scores": [dict(score, recipe=f["recipe"], split=f["split"], issue=f["issue"]) for f in external
                                if f["issue"] in shown for score in f.get("scores", [])
                                if "bleu_mean" in score or "bleu_by_seed" in score],
            "external_comparisons": [dict(c, recipe=f["recipe"], split=f["split"], issue=f["issue"]) for f in external
                                     if f["recipe"] in budget_recipes for c in f["comparisons"]]}


def _short(regime_text: str) -> str:
    return regime_text.split(" (")[0]


def which_preset_lines(findings: dict) -> list[str]:
    """The "which preset" table: one line per method."""
    lines = ["| method (preset) | paper | control | Δ BLEU [95% CI], strongest evidence | pays | "
             "no clear difference | hurts | train step ×abs |", "|---|---|---|---|---|---|---|---|"]
    for m in findings["methods"]:
        s = m["strongest"]
        cells = [f"{m['method']} (`{m['system']}`)", m["paper"], f"`{m['control']}`",
                 f"{s['delta']:+.2f} [{s['ci95'][0]:+.2f}, {s['ci95'][1]:+.2f}] "
                 f"({evidence_text(s)}, {_short(s['regime'])})"]
        cells += [m[key] for key in VERDICTS]
        cells.append(m["train_cost_x_abs"])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def table_notes(findings: dict) -> list[str]:
    """The footnotes of the summary table: each set of held-out figures' provenance (with its absolute scores),
    then how the dev figures, the verdicts and the cost were made."""
    outside = " ".join(
        provenance + "".join(f" `{s['system']}` on {s['recipe']}'s held-out {s['split']}: {score_text(s)}."
                             for s in findings.get("external_scores", []) if s["issue"] == issue)
        for issue, provenance in findings["external_provenance"].items())
    return [f"{TEST_MARK} {outside}" if outside else "",
            "Dev: paired bootstrap (1,000 samples) of the selected checkpoints' dev translations on the seeds both "
            "have run, as in each corpus's table below. Pays / hurts: the 95% interval lies above / below zero. "
            "Train step ×abs: `benchmarks/speed.py`'s training step time against `transformer_abs` over n = 32–512 "
            "(recipe-size model, batch 16, 1 thread); \"runs\" where it did not measure the preset: the quality "
            "runs' training tokens/s against abs's on the same recipe, a shared machine's wall clock."]


def score_text(score: dict) -> str:
    """A system's held-out BLEU: mean ± std over its seeds, or per seed (selected; averaged models after '/')."""
    seeds = f"seed{'s' if len(score['seeds']) > 1 else ''} {','.join(map(str, score['seeds']))}"
    if "bleu_mean" in score:
        return f"{score['bleu_mean']:.2f} ± {score['bleu_std']:.2f} BLEU ({seeds})"
    text = ", ".join(f"{b:.2f}" for b in score["bleu_by_seed"])
    averaged = (score.get("averaged") or {}).get("bleu_by_seed")
    if averaged:
        text += " / averaged " + ", ".join(f"{b:.2f}" for b in averaged)
    return f"{text} BLEU ({seeds})"


def budget_comparison_lines(findings: dict) -> list[str]:
    """Every comparison of the held-out sets scored on budget runs (the method rows and the budget study's pairs
    across budgets), selected and averaged models."""
    lines = ["| recipe | system − baseline | seeds | Δ selected [95% CI] | Δ averaged [95% CI] |", "|---|---|---|---|---|"]
    for c in findings.get("external_comparisons", []):
        averaged = c.get("averaged") or {}
        lines.append(f"| {c['recipe']} ({c['split']}‡) | `{c['system']}` − `{c['baseline']}` | "
                     f"{','.join(map(str, c['seeds']))} | {c['delta']:+.2f} [{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}] | "
                     + (f"{averaged['delta']:+.2f} [{averaged['ci95'][0]:+.2f}, {averaged['ci95'][1]:+.2f}]"
                        if "ci95" in averaged else "–") + " |")
    return lines


def row_lines(findings: dict) -> list[str]:
    """Every method × corpus row (the forest plot's rows)."""
    lines = ["| method | system − control | regime | evidence | Δ BLEU [95% CI] | verdict |",
             "|---|---|---|---|---|---|"]
    for r in findings["rows"]:
        lines.append(f"| {r['method']} | `{r['system']}` − `{r['control']}` | {r['regime']} | {evidence_text(r)} | "
                     f"{fmt_delta(r)} | {r['verdict']} |")
    return lines


def forest_rows(findings: dict) -> list[dict]:
    """The forest plot's rows, one block per method headed by its first pair (system − control); a row whose
    pair differs from its block's names its own."""
    def pair(r):
        return f"{r['system'].replace('transformer_', '')} − {r['control'].replace('transformer_', '')}"

    heads = {}
    for r in findings["rows"]:
        heads.setdefault(r["method"], pair(r))
    return [{"group": f"{r['method']}: {heads[r['method']]}", "delta": r["delta"], "ci95": r["ci95"],
             "label": f"{r['regime'].split(',')[0]} {r['train_pairs'] / 1000:g}k "
                      f"({'test' if r['scored_outside'] else 'dev'})"
                      + ("" if pair(r) == heads[r["method"]] else f", {pair(r)}"),
             "highlight": r["scored_outside"]} for r in findings["rows"]]


def results_section(findings: dict, chart: Optional[Path], results_md: Path) -> str:
    import os

    if not findings["rows"]:
        return "## Summary\n\nNo method has finished runs of both it and its control yet."
    lines = ["## Summary: which method pays, where, and at what cost", "",
             "Generated by `python benchmarks/quality.py summary` from `benchmarks/results/`; the per-corpus "
             "sections below give every run.", ""]
    lines += which_preset_lines(findings) + [""]
    lines += [part for note in table_notes(findings) if note for part in (note, "")]
    if chart is not None:
        lines += [f"![Δ BLEU with 95% CI per method against its control, one row per corpus]"
                  f"({os.path.relpath(chart, results_md.parent)})", ""]
    lines += ["Every method × corpus:", ""] + row_lines(findings)
    if findings.get("external_comparisons"):
        lines += ["", BUDGET_TABLE_HEADING + " (the budget study's pairs across budgets included):", ""] + budget_comparison_lines(findings)
    return "\n".join(lines)


def readme_section(findings: dict) -> str:
    return "\n".join(which_preset_lines(findings) + [""] + [
        f"{TEST_MARK} held-out test, scored outside the project (paired bootstrap, 1,000 samples); dev "
        "elsewhere. Train step ×abs: `benchmarks/speed.py` over n = 32–512; \"runs\": the quality runs' training "
        "tokens/s. Every row per corpus and the forest plot: [RESULTS.md](model_cards/RESULTS.md)."])


BUDGET_CHART_PREFIX = "budget_"


def write_measured_results(findings: dict, path: Path, budget_charts: Optional[dict] = None) -> Path:
    """The rows as a Python module in the package, for the model card (`hf_syntax_mt.hub.model_card`; each row
    names its run's preset; `VARIANT_SETTINGS` has the model settings each recipe variant among the rows' systems and
    controls changes, which the card matches a model's config against), and the
    charts of BLEU by training budget ({recipe: (png, the presets it draws)}) copied into the card's templates as
    `budget_<recipe>.png` (`BUDGET_CHARTS`: a card with a row of that recipe and of a preset it draws shows it); an
    older copy of a chart no longer made is removed."""
    keys = ("method", "paper", "system", "control", "preset", "recipe", "direction", "regime", "train_pairs",
            "evidence", "scored_outside", "issue", "seeds", "delta", "ci95", "verdict")
    rows = [{**{k: r[k] for k in keys}, **({"budget": r["budget"]} if r.get("budget") else {})} for r in findings["rows"]]
    settings = {name: model for r in findings["rows"] for name, model in r.get("variant_settings", {}).items() if model}
    path = Path(path)
    templates = path.parent / "templates"
    charts = {recipe: {"chart": f"{BUDGET_CHART_PREFIX}{recipe}.png", "presets": list(budget_charts[recipe][1])}
              for recipe in sorted(budget_charts or {})}
    for old in templates.glob(f"{BUDGET_CHART_PREFIX}*.png"):
        if old.name not in {c["chart"] for c in charts.values()}:
            old.unlink()
    for recipe, chart in charts.items():
        shutil.copyfile(budget_charts[recipe][0], templates / chart["chart"])
    text = ('"""What each preset measured in this project (the summary of model_cards/RESULTS.md): generated by '
            '`python benchmarks/quality.py summary`, do not edit."""\n\n'
            f"EXTERNAL_PROVENANCE = {findings['external_provenance']!r}\n\n"
            f"BUDGET_CHARTS = {charts!r}\n\n"
            f"VARIANT_SETTINGS = {dict(sorted(settings.items()))!r}\n\n"
            "ROWS = [\n" + "".join(f"    {row!r},\n" for row in rows) + "]\n")
    path.write_text(text, encoding="utf-8")
    return path
