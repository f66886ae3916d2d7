"""The scores behind the summary: per-sentence BLEU statistics, the paired bootstrap over seeds, and the runs'
results as the summary and the findings read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .recipes import REPO, read_lines, resolve

BOOTSTRAP_SAMPLES = 1000


def bleu_statistics(hyps: Sequence[str], refs: Sequence[str], tokenize: str) -> np.ndarray:
    """Per-sentence BLEU sufficient statistics (sacrebleu): (N, 2 + 2·4) = lengths, matches, totals."""
    from sacrebleu.metrics import BLEU

    # force=True: no "looks tokenized" warning for every set (the statistics are the same)
    return np.asarray(BLEU(tokenize=tokenize, force=True)._extract_corpus_statistics(list(hyps), [list(refs)]),
                      dtype=np.int64)


def bleu_from_statistics(stats: np.ndarray, tokenize: str = "13a") -> float:
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=tokenize)._compute_score_from_stats(stats.tolist()).score


def paired_bootstrap(system: Sequence[np.ndarray], baseline: Sequence[np.ndarray], samples: int = BOOTSTRAP_SAMPLES,
                     seed: int = 12345, tokenize: str = "13a") -> dict:
    """Paired bootstrap resampling over sentences (Koehn 2004) for systems with several seeds.

    `system` / `baseline`: per-seed statistics from `bleu_statistics` (same sentences). For each of
    `samples` resamplings idx (N sentences with replacement, shared by both systems),
    Δ_b = mean_seeds BLEU(system[idx]) − mean_seeds BLEU(baseline[idx]).
    Returns the observed Δ, p = #{Δ_b ≤ 0} / samples and the 2.5/97.5 percentiles of Δ_b."""
    n = len(system[0])
    if any(len(s) != n for s in list(system) + list(baseline)):
        raise ValueError("paired bootstrap needs the same sentences for every system and seed")
    rng = np.random.default_rng(seed)
    deltas = np.empty(samples)
    for b in range(samples):
        idx = rng.integers(0, n, size=n)
        sys_score = np.mean([bleu_from_statistics(s[idx].sum(0), tokenize) for s in system])
        base_score = np.mean([bleu_from_statistics(s[idx].sum(0), tokenize) for s in baseline])
        deltas[b] = sys_score - base_score
    observed = np.mean([bleu_from_statistics(s.sum(0), tokenize) for s in system]) - \
        np.mean([bleu_from_statistics(s.sum(0), tokenize) for s in baseline])
    return {"delta": float(observed), "p_value": float(np.mean(deltas <= 0)),
            "ci95": [float(np.percentile(deltas, 2.5)), float(np.percentile(deltas, 97.5))], "samples": samples,
            "deltas": deltas}


def load_runs(recipe: dict, results_dir: Path) -> tuple[list[dict], dict[str, list[dict]]]:
    """The recipe's result files, as a list and by run name."""
    runs = [json.loads(p.read_text()) for p in sorted((Path(results_dir) / recipe["name"]).glob("*/seed*.json"))]
    by_preset: dict[str, list[dict]] = {}
    for r in runs:
        by_preset.setdefault(r["preset"], []).append(r)
    return runs, by_preset


def dev_statistics(recipe: dict, by_preset: dict, dev_limit: int) -> dict[str, dict[int, np.ndarray]]:
    """{run name: {seed: per-sentence BLEU statistics of its dev hypotheses}}."""
    refs = read_lines(resolve(recipe, recipe["data"]["dev"][1]))[:dev_limit]
    return {p: {r["seed"]: bleu_statistics(read_lines(REPO / r["dev"]["hypotheses"]), refs, recipe["bleu_tokenize"])
                for r in rs} for p, rs in by_preset.items()}


def compare_runs(stats: dict, system: str, base: str, tokenize: str, sentences=None) -> Optional[dict]:
    """Paired bootstrap of `system` against `base` on the seeds both have run (None if there are none), over
    all dev sentences or the `sentences` given (indices); the result names the seeds."""
    seeds = sorted(set(stats.get(system, {})) & set(stats.get(base, {})))
    if not seeds:
        return None
    pick = slice(None) if sentences is None else sentences
    return {**paired_bootstrap([stats[system][s][pick] for s in seeds], [stats[base][s][pick] for s in seeds],
                               tokenize=tokenize), "seeds": seeds}


def train_pairs(recipe: dict, run: dict) -> int:
    """The number of pairs the run trained on (older results do not record it: then the recipe's)."""
    return run.get("train_pairs") or recipe.get("train_pairs") or len(read_lines(resolve(recipe, recipe["data"]["train"][0])))
