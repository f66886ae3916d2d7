"""Recipes (one JSON file per corpus and direction), their runs, and the corpus files they name."""

from __future__ import annotations

import difflib
import gzip
import hashlib
import json
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
BASELINE = "transformer_abs"
DEP_BASELINE = "transformer_rel"


def load_recipe(path) -> dict:
    """Read a recipe; data paths are relative to the recipe file's repository root (or absolute)."""
    path = Path(path).resolve()
    recipe = json.loads(path.read_text(encoding="utf-8"))
    for key in ("name", "source_lang", "target_lang", "data", "model", "training"):
        if key not in recipe:
            raise ValueError(f"recipe {path}: missing key {key!r}")
    base = Path(recipe.get("base_dir", path.parents[2] if path.parent.name == "recipes" else path.parent))
    if not base.is_absolute():
        base = (path.parent / base).resolve()
    from hf_syntax_mt.configuration_syntax_mt import PRESETS

    for name, variant in recipe.get("variants", {}).items():
        if name in PRESETS or "+" in name or "preset" not in variant:
            raise ValueError(f"recipe {path}: variant {name!r} needs its own name (not a preset or combination) "
                             "and a 'preset' key naming the preset it changes")
        unknown = set(variant) - {"preset", "model", "training"}
        if unknown:
            raise ValueError(f"recipe {path}: variant {name!r} has unknown keys {sorted(unknown)} "
                             "(allowed: preset, model, training)")
    recipe["_path"] = str(path)
    recipe["_base"] = str(base)
    check_training_settings(recipe)
    check_selection_settings(recipe)
    named = recipe.get("presets", []) + [p for block in recipe.get("grid", []) for p in block["presets"]]
    compared = [name for pair in recipe.get("comparisons", []) for name in pair]
    if any(len(pair) != 2 for pair in recipe.get("comparisons", [])):
        raise ValueError(f"recipe {path}: comparisons are [system, baseline] pairs of run names")
    for name in dict.fromkeys(named + list(recipe.get("variants", {})) + compared):
        run_config(recipe, name)
    buckets = recipe.get("length_buckets")
    if buckets is not None and not (isinstance(buckets, list) and buckets and all(isinstance(e, int) and e > 0 for e in buckets)
                                    and buckets == sorted(set(buckets))):
        raise ValueError(f"recipe {path}: length_buckets={buckets!r}; expected increasing positive subword counts, "
                         "e.g. [10, 20, 40]")
    for key, what in (("train_pairs", "a positive number of training pairs"),
                      ("translate_batch_size", "a positive number of sentences per generate call")):
        value = recipe.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise ValueError(f"recipe {path}: {key}={value!r}; expected {what}")
    return recipe


def check_training_settings(recipe: dict):
    """Refuse `training` keys (of the recipe or a variant) that are no `SyntaxMTTrainingArguments` field."""
    from dataclasses import fields

    from hf_syntax_mt.training.run import SyntaxMTTrainingArguments

    known = {f.name for f in fields(SyntaxMTTrainingArguments)}
    parts = [("training", recipe["training"])] + [(f"variant {name!r} training", v.get("training", {}))
                                                  for name, v in recipe.get("variants", {}).items()]
    for where, training in parts:
        for key in training:
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"recipe {recipe['_path']}: {where}: unknown training argument {key!r}{hint}")


def check_selection_settings(recipe: dict):
    """The keys that choose and report models: `data.tune` ([source, target] files the Trainer evaluates on to
    pick the checkpoint, so that dev reports a split no choice was made on), `average_last_k` (also report the
    mean of the last k checkpoints) and `early_stopping_patience` (stop after that many evaluations without a
    better score on the selection split)."""
    where = f"recipe {recipe['_path']}"
    tune = recipe["data"].get("tune")
    if tune is not None and not (isinstance(tune, list) and len(tune) == 2 and all(isinstance(p, str) for p in tune)):
        raise ValueError(f"{where}: data.tune={tune!r}; expected a [source, target] pair of files like data.dev")
    for key in ("average_last_k", "early_stopping_patience"):
        value = recipe.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise ValueError(f"{where}: {key}={value!r}; expected a positive integer")
    if recipe.get("early_stopping_patience"):
        for name in [None, *recipe.get("variants", {})]:
            training = run_settings(recipe, name)[2] if name else recipe["training"]
            if training.get("load_best_model_at_end") is False or training.get("eval_strategy") == "no":
                raise ValueError(f"{where}: early_stopping_patience needs evaluations and the best model kept, but "
                                 f"{'variant ' + repr(name) if name else 'the recipe'}'s training sets "
                                 "load_best_model_at_end=false or eval_strategy='no'")


def run_settings(recipe: dict, name: str) -> tuple[str, dict, dict]:
    """(preset, model overrides, training arguments) of a run name: a preset (or combination) with the
    recipe's `model` and `training`, or a named variant with its own changes on top of them."""
    variant = recipe.get("variants", {}).get(name, {})
    return (variant.get("preset", name), {**recipe["model"], **variant.get("model", {})},
            {**recipe["training"], **variant.get("training", {})})


def run_config(recipe: dict, name: str):
    """The model config of run `name` (a preset, a '+' combination or a variant) under the recipe;
    a bad name or setting raises a ValueError naming the recipe and the run."""
    from hf_syntax_mt.configuration_syntax_mt import SyntaxMTConfig

    base_preset, overrides, _ = run_settings(recipe, name)
    try:
        return SyntaxMTConfig.from_preset(base_preset, **overrides)
    except ValueError as error:
        raise ValueError(f"recipe {recipe['_path']}: run {name!r}: {error}") from None


def _variant_of(variants: dict, preset: str, model: dict, training: dict, besides: str) -> Optional[str]:
    """The variant (other than `besides`) of `preset` whose model and training changes are exactly these."""
    return next((other for other, v in variants.items() if other != besides and v["preset"] == preset
                 and v.get("model", {}) == model and v.get("training", {}) == training), None)


def same_change_baseline(variants: dict, name: str) -> Optional[str]:
    """The variant of `transformer_abs` with exactly the model and training changes of variant `name`."""
    variant = variants[name]
    return _variant_of(variants, BASELINE, variant.get("model", {}), variant.get("training", {}), besides=name)


BUDGET_SETTINGS = ("max_steps", "num_train_epochs")


def budget_control(variants: dict, name: str, baseline: str) -> Optional[str]:
    """The run that `name` is measured against where a table says "Δ vs `baseline`": the baseline itself, but for a
    variant that changes the training budget (`BUDGET_SETTINGS`) the variant of the baseline with that budget and
    no other change, or None where the recipe has none, so that no Δ mixes the budget with the method."""
    budget = {k: v for k, v in variants.get(name, {}).get("training", {}).items() if k in BUDGET_SETTINGS}
    return _variant_of(variants, baseline, {}, budget, besides=name) if budget else baseline


def resolve(recipe: dict, p: str) -> Path:
    p = Path(p)
    return p if p.is_absolute() else Path(recipe["_base"]) / p


def read_lines(path: Path) -> list[str]:
    """One sentence a line, lines ended by "\n" (or "\r\n") only, as `wc -l` counts them: Unicode line and
    paragraph separators inside a sentence do not split it (a blind translation keeps one line per source
    line); `.gz` files are decompressed."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_pair(src: Path, tgt: Path, limit: Optional[int] = None) -> tuple[list[str], list[str]]:
    source, target = read_lines(src), read_lines(tgt)
    if len(source) != len(target):
        raise ValueError(f"{src} has {len(source)} lines but {tgt} has {len(target)}")
    if limit is not None:
        source, target = source[:limit], target[:limit]
    return source, target


def text_sha(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def grid_runs(recipe: dict, presets: Optional[str] = None, seeds: Optional[str] = None) -> list[tuple[str, int]]:
    """(preset, seed) pairs in launch order: the given presets × seeds, or the recipe's `grid`
    (a list of {presets, seeds} blocks, e.g. every preset with seed 1, then seeds 2 and 3 for some)."""
    if presets is None and seeds is None:
        blocks = recipe.get("grid") or [{"presets": recipe["presets"], "seeds": [1]}]
        pairs = [(p, int(s)) for block in blocks for s in block["seeds"] for p in block["presets"]]
        return list(dict.fromkeys(pairs))
    names = presets.split(",") if presets else recipe["presets"]
    return [(p, int(s)) for p in names for s in (seeds or "1").split(",")]

