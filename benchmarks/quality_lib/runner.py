"""Runs: train one (preset, seed) of a recipe, then translate and score it (`translation`) as selected and as the
average of its last checkpoints; evaluate saved checkpoints; the blind test set of finished runs."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from transformers import TrainerCallback

from hf_syntax_mt.training.checkpoint_averaging import average_checkpoints, last_checkpoints

from .corpus import Corpus, alignment_report, check_parser_installed, parser_label
from .recipes import REPO, grid_runs, load_recipe, run_config, run_settings
from .translation import (
    blind_path,
    dev_feature_batches,
    evaluate_sets,
    parse_head_accuracy,
    score,
    translate,
    translate_batch_size,
    translate_blind,
)

AVERAGED_DIR = "averaged"  # the mean of the last `average_last_k` checkpoints, inside the run dir

logger = logging.getLogger("quality")


def run_paths(results_dir: Path, runs_dir: Path, recipe: dict, preset: str, seed: int) -> tuple[Path, Path]:
    return (Path(results_dir) / recipe["name"] / preset / f"seed{seed}.json",
            Path(runs_dir) / recipe["name"] / preset / f"seed{seed}")


def device_description(device: str) -> str:
    """The machine a run trained on: the GPU's name, or the CPU's model name (marked when it has avx512_bf16,
    which makes bf16 autocast pay)."""
    import torch

    if device == "cuda":
        return f"cuda: {torch.cuda.get_device_name()}"
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    name = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")),
                platform.processor() or "unknown")
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    return f"cpu: {name}" + (" (avx512_bf16)" if "avx512_bf16" in flags else "")


def _git_commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def parse_extra_evals(items: Sequence[str]) -> dict[str, tuple[Path, Path]]:
    """`name=src_path,tgt_path` -> {name: (src, tgt)}."""
    out = {}
    for item in items or ():
        name, sep, paths = item.partition("=")
        parts = paths.split(",")
        if not sep or not name or len(parts) != 2 or name in ("dev", "tune"):
            raise ValueError(f"--extra-eval {item!r}: expected name=src_path,tgt_path (name other than 'dev' and "
                             "'tune')")
        out[name] = (Path(parts[0]), Path(parts[1]))
    return out


def record_parser(model, corpus: Corpus, run_dir: Path) -> None:
    """Record in the run's saved config the source parser (with its settings) that made the parse caches the
    run trained on, where it lacks it: `train` records it from the pre-parsed annotator's `made_by`, but runs
    saved before that recorded none, and without it `pipeline("syntax-translation", model=run_dir)` has no
    parser to build. Gold CoNLL-U files name no parser."""
    config = model.config
    parser = corpus.parser_settings("source")
    if not parser or not config.needs_source_parse:
        return
    if config.parser != parser:
        config.parser = parser
        config.save_pretrained(run_dir)


def run_arguments(corpus: Corpus, preset: str, seed: int, args, run_dir: Path, training: dict):
    """`(ModelArguments, DataArguments, SyntaxMTTrainingArguments)` of one run: the recipe's model and
    training settings for `preset` (`training`, with the command line's --max-steps / --bf16 applied) and its
    data files, trained into `run_dir`."""
    from hf_syntax_mt.training.run import DataArguments, ModelArguments, SyntaxMTTrainingArguments

    recipe = corpus.recipe
    base_preset, overrides, _ = run_settings(recipe, preset)
    cap_a, cap_b = recipe.get("length_cap") or (0, 0)  # a recipe without one evaluates as it always did
    training_args = SyntaxMTTrainingArguments(output_dir=str(run_dir), seed=seed, use_cpu=args.device == "cpu",
                                              report_to="none", disable_tqdm=True, generation_max_length_a=cap_a,
                                              generation_max_length_b=cap_b, **training)
    model_args = ModelArguments(preset=base_preset, config_overrides=",".join(f"{k}={v!r}" for k, v in overrides.items()),
                                vocab_size=recipe["vocab_size"],
                                distance_source=overrides.get("distance_source", recipe.get("distance_source", "auto")))
    data_args = DataArguments(
        source_lang=recipe["source_lang"], target_lang=recipe["target_lang"],
        train_file=str(corpus.paths["train"][0]), validation_file=str(corpus.paths[corpus.selection_split][0]),
        max_source_length=recipe["max_source_length"], max_target_length=recipe["max_target_length"],
        bleu_tokenize=recipe["bleu_tokenize"], cache_dir=str(Path(args.runs_dir) / "feature_cache"),
        source_spacing=corpus.source_spacing, max_eval_samples=recipe.get("eval_sentences"),
    )
    return model_args, data_args, training_args


def warn_if_eval_order_differs(trainer_bleu: Optional[float], direct_bleu: float, validation, limit: int,
                               tokenizer, references: Sequence[str], split: str = "dev") -> None:
    """The eval-order check: a direct greedy pass over the split the Trainer evaluated on (`split`: tune, else dev)
    must give the Trainer's greedy BLEU; warn if not. The Trainer's references are the labels read back by the
    tokenizer, the direct pass's the split's lines, so the warning names the references that differ: those cut at
    `limit` target tokens and those the tokenizer's normalization changes (e.g. NFKC turns full-width digits into
    ASCII ones)."""
    if trainer_bleu is None or abs(trainer_bleu - direct_bleu) <= 0.01:
        return
    if validation is None:  # trained in other processes (--processes): their features did not come back
        logger.warning("Trainer %s BLEU %.2f != direct greedy generate %.2f: check the eval order and the references",
                       split, trainer_bleu, direct_bleu)
        return
    labels = [list(ids) for ids in validation["labels"]]  # a datasets Column reads as a list of lists
    truncated = sum(len(ids) >= limit for ids in labels)
    read_back = tokenizer.batch_decode(labels, skip_special_tokens=True)
    changed = sum(" ".join(a.split()) != " ".join(b.split()) for a, b in zip(read_back, references))
    notes = ([f"{truncated} of {len(labels)} {split} references fill max_target_length={limit} tokens and are scored "
              "cut there"] if truncated else []) + \
        ([f"{changed} of {len(labels)} {split} references read back from their tokens as other text (the tokenizer's "
          "normalization)"] if changed else [])
    if notes:
        logger.warning("Trainer %s BLEU %.2f != direct greedy generate %.2f; the Trainer's references differ from the "
                       "%s lines: %s", split, trainer_bleu, direct_bleu, split, "; ".join(notes))
    else:
        logger.warning("Trainer %s BLEU %.2f != direct greedy generate %.2f on the same references: check the eval "
                       "order", split, trainer_bleu, direct_bleu)


class RunInterrupted(Exception):
    """A run stopped by SIGINT / SIGTERM after saving a checkpoint (`hf_syntax_mt.training.interrupt`): the runner writes
    no result for it and stops; the same command resumes it."""

    def __init__(self, signal_number: int, preset: str, seed: int, run_dir: Path):
        super().__init__(f"{preset} seed {seed} interrupted: checkpoint saved in {run_dir}; rerun the same command "
                         "to resume")
        self.signal_number = signal_number


def train_one(corpus: Corpus, preset: str, seed: int, args, continued_from: Optional[str] = None) -> dict:
    """Train one (preset, seed) with the recipe (from its last checkpoint, if any), then translate dev with the
    final beam. `continued_from`: the archived result of the same run, stopped earlier before its schedule ended."""
    from transformers.trainer_utils import get_last_checkpoint

    recipe = corpus.recipe
    result_path, run_dir = run_paths(args.results_dir, args.runs_dir, recipe, preset, seed)
    base_preset, overrides, training = run_settings(recipe, preset)
    config = run_config(recipe, preset)
    tokenizer = corpus.tokenizer
    annotator, target_annotator = corpus.annotators(config)
    if args.max_steps:
        training["max_steps"] = args.max_steps
    if args.bf16 is not None:
        training["bf16"] = args.bf16
    if recipe.get("average_last_k"):
        keep_checkpoints_for_averaging(training, recipe["average_last_k"])
    model_args, data_args, training_args = run_arguments(corpus, preset, seed, args, run_dir, training)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "quality_run.json").write_text(json.dumps({"recipe": recipe["name"], "preset": preset, "seed": seed}))
    command = args.command
    checkpoint = get_last_checkpoint(str(run_dir))  # train() resumes from it
    resumed_step = int(checkpoint.rsplit("-", 1)[1]) if checkpoint else 0
    logger.info("training %s seed %d on %s -> %s", preset, seed, recipe["name"], run_dir)
    start = time.time()
    callbacks, deadline = training_callbacks(recipe, args)
    trained = train_run(corpus, args, model_args, data_args, training_args, annotator, target_annotator,
                        callbacks, command)
    processes = record_training_process(run_dir, start, resumed_step, trained.global_step, args)
    if trained.interrupted_by is not None:  # Ctrl-C / SIGTERM: a checkpoint was saved; no result for a partial run
        raise RunInterrupted(trained.interrupted_by, preset, seed, run_dir)
    metrics, model = trained.metrics, trained.model
    steps_per_epoch = trained.steps_per_epoch  # fixed-size or token-budget batches
    epochs_done = trained.global_step / steps_per_epoch
    stopped_after_epoch = deadline.stopped_after_epoch if deadline else None
    if deadline and trained.processes > 1 and trained.global_step < training_args.max_steps:  # the callback ran there
        stopped_after_epoch = round(epochs_done)
    selection = corpus.selection_split
    direct_greedy = direct_greedy_score(model, tokenizer, corpus)
    # The check above runs the model as the Trainer evaluated it: with `--bf16`/"bf16" accelerate wraps
    # `forward` in bf16 autocast. The final decode runs it as users load it (fp32, no wrapper), the
    # same as `--evaluate-only` on the saved run.
    model = trained.unwrapped_model
    record_parser(model, corpus, run_dir)
    parse_accuracy = parse_head_accuracy(model, dev_feature_batches(corpus, model, tokenizer))
    prefix = result_path.with_suffix("")
    splits = {split: tuple(corpus.paths[split]) for split in ("dev", "tune") if split in corpus.paths}
    evals = evaluate_sets(model, tokenizer, corpus, {**splits, **parse_extra_evals(args.extra_eval)}, prefix,
                          recipe["final_num_beams"])
    blind = translate_blind(model, tokenizer, corpus, prefix)
    history = evaluation_history(trained.log_history)
    out = {
        "preset": preset, "variant_of": base_preset if base_preset != preset else None,
        "seed": seed, "corpus": recipe["corpus"], "recipe": recipe["name"],
        "recipe_file": os.path.relpath(recipe["_path"], REPO), "direction": f"{recipe['source_lang']}-{recipe['target_lang']}",
        "source_parser": parser_label(recipe.get("source_parser")) if annotator else None,
        "target_parser": parser_label(recipe.get("target_parser")) if target_annotator else None,
        "config_overrides": overrides, "training_overrides": {k: v for k, v in training.items()
                                                              if recipe["training"].get(k) != v},
        "train_pairs": len(corpus.texts["train"][0]),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": trained.global_step, "epochs": round(epochs_done, 2),
        "planned_epochs": training.get("num_train_epochs"),
        "stopped_by_deadline_after_epoch": stopped_after_epoch,
        "best_checkpoint": os.path.basename(trained.best_model_checkpoint or "") or None,
        "resumed_from_step": resumed_step or None,  # runtime and tokens/s still cover the whole run (its checkpoints
        # count the training seconds behind them: hf_syntax_mt.training.progress)
        "training_processes": processes,  # every process that trained the run: its steps, wall time and machine
        "training_wall_seconds_all_processes": round(sum(p["wall_seconds"] for p in processes), 1),
        "continued_from": continued_from,
        "train_runtime_seconds": round(metrics.get("train_runtime", 0.0), 1),
        "wall_time_seconds": round(time.time() - start, 1),  # up to the selected model's translations
        "train_tokens_per_second": round(trained.train_tokens * epochs_done
                                         / max(metrics.get("train_runtime", 1e-9), 1e-9)),
        "final_train_loss": metrics.get("train_loss"),
        # the Trainer's greedy evaluations are on the selection split: "tune_..." or "dev_..."
        "selection_split": selection,
        f"{selection}_greedy_bleu_trainer": metrics.get("eval_bleu"),
        f"{selection}_greedy_bleu_direct": direct_greedy["bleu"],
        f"{selection}_greedy_bleu_best_epoch": best_evaluation_bleu(history),
        f"{selection}_bleu_by_eval": history, "dev_parse_head_accuracy": parse_accuracy,
        # the selected checkpoint (best greedy BLEU on the selection split) and the mean of the last k checkpoints
        "dev": evals.pop("dev"), "tune": evals.pop("tune", None), "extra": evals, "test": blind,
        "averaged_checkpoints": None, "dev_averaged": None, "tune_averaged": None, "extra_averaged": None,
        "test_averaged": None,  # filled by add_averaged_model below
        "bf16": bool(training.get("bf16")), "threads": trained.threads, "processes": trained.processes,
        "device": device_description(args.device),
        "git_commit": _git_commit(), "run_dir": str(run_dir), "command": command,
    }
    warn_if_eval_order_differs(metrics.get("eval_bleu"), direct_greedy["bleu"], trained.validation,
                               recipe["max_target_length"], tokenizer,
                               corpus.texts[selection][1][: recipe.get("eval_sentences")], selection)
    write_result(result_path, out)  # the selected model's figures are kept even if the averaging is cut off
    if recipe.get("average_last_k"):
        out = add_averaged_model(corpus, run_dir, result_path, out, args.device)
    logger.info("wrote %s: dev BLEU %.2f (beam %d)%s", result_path, out["dev"]["bleu"], recipe["final_num_beams"],
                f", averaged model {out['dev_averaged']['bleu']:.2f}" if out["dev_averaged"] else "")
    return out


@dataclass
class TrainedRun:
    """What a run's training left, from one process (`train`) or from `--processes N` (`train_in_processes`)."""
    model: Any  # fp32, as the Trainer evaluated it (bf16 autocast wrapper kept)
    unwrapped_model: Any  # fp32, as users load it
    metrics: dict
    global_step: int
    steps_per_epoch: int
    train_tokens: int  # source + target subwords of the training set
    log_history: list
    best_model_checkpoint: Optional[str]
    interrupted_by: Optional[int]
    validation: Any  # the evaluated features (None from other processes: then only the check's warning is shorter)
    processes: int
    threads: int


def train_run(corpus: Corpus, args, model_args, data_args, training_args, annotator, target_annotator, callbacks,
              command) -> TrainedRun:
    """Train in this process, or with `--processes N` in N data-parallel processes of one thread each
    (`hf_syntax_mt.training.data_parallel`, on the same batches), whose model is read back from the run dir."""
    import torch

    from hf_syntax_mt.training.run import train

    kwargs = dict(tokenizer=corpus.tokenizer, annotator=annotator, target_annotator=target_annotator,
                  raw_datasets=corpus.raw_datasets(), callbacks=callbacks or None, command=command)
    processes = getattr(args, "processes", 1) or 1
    if processes == 1:
        result = train(model_args, data_args, training_args, **kwargs)
        trainer, features = result.trainer, result.datasets["train"]
        model = trainer.model.float()
        return TrainedRun(model, trainer.accelerator.unwrap_model(model, keep_fp32_wrapper=False), result.metrics,
                          trainer.state.global_step, len(trainer.get_train_dataloader()),
                          sum(map(len, features["input_ids"])) + sum(map(len, features["labels"])),
                          trainer.state.log_history, trainer.state.best_model_checkpoint, result.interrupted_by,
                          result.datasets["validation"], 1, torch.get_num_threads())
    from hf_syntax_mt.training.run import train_in_processes

    summary = train_in_processes(processes, model_args, data_args, training_args, threads=1, **kwargs)
    model = None
    if summary["interrupted_by"] is None:
        model, _ = load_saved_model(Path(training_args.output_dir), corpus, args.device)
    return TrainedRun(model, model, summary["metrics"], summary["global_step"], summary["steps_per_epoch"],
                      summary["train_tokens"], summary["log_history"], summary["best_model_checkpoint"],
                      summary["interrupted_by"], None, summary["processes"], summary["threads"])


def training_callbacks(recipe: dict, args) -> tuple[list, Optional[TrainingDeadline]]:
    """The recipe's early stopping and, with `--stop-training-by` / `--stop-training-after-epoch`, the deadline
    (returned too: the result records where it stopped the run)."""
    stop_by, after_epoch = getattr(args, "stop_training_by", None), getattr(args, "stop_training_after_epoch", None)
    deadline = TrainingDeadline(stop_by, after_epoch) if stop_by or after_epoch else None
    return (early_stopping_callbacks(recipe) or []) + ([deadline] if deadline else []), deadline


def direct_greedy_score(model, tokenizer, corpus: Corpus) -> dict:
    """BLEU of a direct greedy pass over the split the Trainer evaluated on (tune, else dev), for
    `warn_if_eval_order_differs`; the parser's trees feed a model that reads them, a self-parsing one too (as the
    Trainer's collator does)."""
    recipe, selection = corpus.recipe, corpus.selection_split
    config = model.config
    sources, references = corpus.texts[selection]
    parses = (corpus.parses(sources, "source", corpus.paths[selection][0])
              if config.needs_parser_at_inference or config.self_parsing else None)
    count = recipe.get("eval_sentences") or len(sources)  # the Trainer evaluates the first `eval_sentences`
    greedy = translate(model, tokenizer, sources[:count], parses[:count] if parses else None, 1,
                       recipe["max_target_length"], recipe["max_source_length"], translate_batch_size(recipe),
                       recipe.get("length_cap"))
    return score(greedy, references[:count], recipe["bleu_tokenize"])


def evaluation_history(log_history: list) -> list[dict]:
    """The Trainer's greedy evaluations during training (its `state.log_history`): epoch, step, BLEU and chrF of
    each."""
    return [{"epoch": round(h["epoch"], 2), "step": h["step"], "bleu": h["eval_bleu"], "chrf": h.get("eval_chrf")}
            for h in log_history if "eval_bleu" in h]


def best_evaluation_bleu(history: list[dict]) -> Optional[float]:
    """max_e BLEU_e over the evaluations during training (`evaluation_history`), the last one included: the
    Trainer no longer evaluates the kept checkpoint again at the end, so the last entry is an epoch's."""
    return max((h["bleu"] for h in history), default=None)


def record_training_process(run_dir: Path, start: float, from_step: int, to_step: int, args) -> list[dict]:
    """Append this process's share of the training (steps, wall time from the start of its data preparation to
    the end of its training, threads, device) to `<run_dir>/training_processes.jsonl` and return every process's
    record: a run interrupted, resumed or continued in a later session keeps its whole cost."""
    import torch

    path = run_dir / "training_processes.jsonl"
    record = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(start)), "from_step": from_step,
              "to_step": to_step, "wall_seconds": round(time.time() - start, 1), "threads": torch.get_num_threads(),
              "processes": getattr(args, "processes", 1) or 1,
              "device": device_description(args.device), "git_commit": _git_commit()}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_result(result_path: Path, out: dict) -> None:
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def add_averaged_model(corpus: Corpus, run_dir: Path, result_path: Path, out: dict, device: str) -> dict:
    """Evaluate the average of the run's last `average_last_k` checkpoints (`evaluate_averaged`) and add it to the
    result `out` (written to `result_path`) with the wall time of this step, which `wall_time_seconds` leaves out.
    A run stopped before its schedule (early stopping, a deadline) with fewer checkpoints averages those it saved."""
    start = time.time()
    k, saved = corpus.recipe["average_last_k"], sum(1 for p in run_dir.glob("checkpoint-*") if p.is_dir())
    planned = out.get("planned_epochs")
    if saved < k and (out.get("stopped_by_deadline_after_epoch") or (planned and out["epochs"] < planned)):
        logger.warning("%s seed %d stopped after %s of %s epochs with %d checkpoints: averaging those, not %d",
                       out["preset"], out["seed"], out["epochs"], planned, saved, k)
        k = saved
    splits = {split: tuple(corpus.paths[split]) for split in ("dev", "tune") if split in corpus.paths}
    evals, blind, averaged_from = evaluate_averaged(corpus, run_dir, splits, result_path.with_suffix(""), device, k)
    out = {**out, "averaged_checkpoints": averaged_from, "dev_averaged": evals.pop("dev", None),
           "tune_averaged": evals.pop("tune", None), "extra_averaged": evals or None, "test_averaged": blind,
           "averaged_model_wall_seconds": round(time.time() - start, 1)}
    write_result(result_path, out)
    return out


def keep_checkpoints_for_averaging(training: dict, k: int) -> None:
    """Raise the run's `save_total_limit` where it would delete one of the last k checkpoints before they are
    averaged: the Trainer keeps the most recent ones and, with `load_best_model_at_end`, also the best one,
    which may be older than the last k, so k + 1 then."""
    from dataclasses import fields

    from hf_syntax_mt.training.run import SyntaxMTTrainingArguments

    defaults = {f.name: f.default for f in fields(SyntaxMTTrainingArguments)}
    limit = training.get("save_total_limit", defaults["save_total_limit"])
    needed = k + 1 if training.get("load_best_model_at_end", defaults["load_best_model_at_end"]) else k
    if limit is not None and limit < needed:
        logger.info("average_last_k=%d: save_total_limit raised from %d to %d so that the last %d checkpoints are "
                    "kept", k, limit, needed, k)
        training["save_total_limit"] = needed


class TrainingDeadline(TrainerCallback):
    """Stop training at an epoch's end when the next epoch would end past `stop_by` (a Unix time), or after epoch
    `after_epoch`, so that a run on a machine with a hard time limit finishes as usual (that epoch's evaluation and
    checkpoint, then the selected and averaged models' translations) instead of being killed and lost. The next
    epoch is assumed to take 1.5 times the longest epoch so far (training plus the evaluation before it);
    `stopped_after_epoch` records where it stopped (None: the schedule ended first), since a run cut short is not on
    the recipe's schedule (`run --continue-stopped` trains it on)."""

    def __init__(self, stop_by: Optional[float] = None, after_epoch: Optional[int] = None):
        self.stop_by = float(stop_by) if stop_by else None
        self.after_epoch, self.stopped_after_epoch = after_epoch, None
        self._last, self._longest = None, 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = time.time()

    def on_epoch_end(self, args, state, control, **kwargs):
        now = time.time()
        self._longest, self._last = max(self._longest, now - self._last), now
        if control.should_training_stop:
            return control
        if self.after_epoch is not None and round(state.epoch) >= self.after_epoch:
            logger.warning("stopping after epoch %d, as asked", round(state.epoch))
        elif self.stop_by is not None and now + 1.5 * self._longest > self.stop_by:
            logger.warning("stopping after epoch %d: another epoch (%.0f s so far at most) would end past the deadline "
                           "(in %.0f s)", round(state.epoch), self._longest, self.stop_by - now)
        else:
            return control
        control.should_training_stop = True
        self.stopped_after_epoch = round(state.epoch)
        return control


def early_stopping_callbacks(recipe: dict) -> Optional[list]:
    """`EarlyStoppingCallback` on the selection metric for a recipe with `early_stopping_patience`: training stops
    after that many evaluations (on tune, else dev) without a better score."""
    if not recipe.get("early_stopping_patience"):
        return None
    from transformers import EarlyStoppingCallback

    return [EarlyStoppingCallback(early_stopping_patience=recipe["early_stopping_patience"])]


def evaluate_averaged(corpus: Corpus, run_dir: Path, splits: dict, prefix: Path, device: str,
                      k: Optional[int] = None):
    """Average the run's last `k` (default `average_last_k`) checkpoints into `<run_dir>/averaged` (a model that
    no split chose) and translate `splits` (dev, tune) and the blind test set with it as the selected model's are,
    the files marked ".averaged". Returns (evaluations by split, blind translation, names of the checkpoints averaged)."""
    k = k or corpus.recipe["average_last_k"]
    try:
        checkpoints = last_checkpoints(run_dir, k)
    except ValueError as error:
        raise ValueError(f"recipe {corpus.recipe['name']}: average_last_k={k}: {error}; lower average_last_k or "
                         "save more checkpoints (a longer run or more frequent saves)") from None
    folder = average_checkpoints(checkpoints, run_dir / AVERAGED_DIR, overwrite=True)  # the run's own, redone
    logger.info("averaged %s -> %s", ", ".join(p.name for p in checkpoints), folder)
    model, tokenizer = load_saved_model(folder, corpus, device)
    record_parser(model, corpus, folder)
    num_beams = corpus.recipe["final_num_beams"]
    evals = evaluate_sets(model, tokenizer, corpus, splits, prefix, num_beams, ".averaged")
    blind = translate_blind(model, tokenizer, corpus, prefix, ".averaged")
    return evals, blind, [p.name for p in checkpoints]


def load_saved_model(checkpoint: Path, corpus: Corpus, device: str):
    """(model in fp32 on `device`, tokenizer) of a run dir or checkpoint; the tokenizer saved with it (or in the
    run dir above a checkpoint-N), else the recipe's."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_syntax_mt  # noqa: F401  (registers the Auto classes)

    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).float().to(device)
    tok_dir = next((d for d in (checkpoint, checkpoint.parent) if (d / "tokenizer.json").is_file()), None)
    return model, AutoTokenizer.from_pretrained(tok_dir) if tok_dir else corpus.tokenizer


def evaluate_only(corpus: Corpus, checkpoint: Path, args) -> dict:
    """Score an existing checkpoint (or run dir) on dev + `--extra-eval` sets; if it is a run of this
    runner, the scores are merged into that run's result JSON (`extra`; its averaged model's, where it reports
    one, into `extra_averaged`), and its blind test set is translated when dev is (or when its translation is
    missing)."""
    checkpoint = Path(checkpoint)
    model, tokenizer = load_saved_model(checkpoint, corpus, args.device)
    info_file = checkpoint / "quality_run.json"  # a run dir of this runner (its best model), not a checkpoint-N
    info_file = info_file if info_file.is_file() else None
    sets = parse_extra_evals(args.extra_eval)
    if info_file is None or not sets:
        sets = {"dev": tuple(corpus.paths["dev"]), **sets}
    if info_file is not None:
        info = json.loads(info_file.read_text())
        record_parser(model, corpus, checkpoint)  # runs saved before the runner recorded it
        result_path, _ = run_paths(args.results_dir, args.runs_dir, corpus.recipe, info["preset"], info["seed"])
        prefix = result_path.with_suffix("")
        evals = evaluate_sets(model, tokenizer, corpus, sets, prefix, corpus.recipe["final_num_beams"])
        blind = None
        if "dev" in sets or not blind_path(prefix, corpus.recipe["final_num_beams"]).is_file():
            blind = translate_blind(model, tokenizer, corpus, prefix)
        if result_path.is_file():
            out = json.loads(result_path.read_text())
            if blind is not None:
                out["test"] = blind
            for name, value in evals.items():
                if name == "dev":
                    out["dev"] = value
                else:
                    out.setdefault("extra", {})[name] = value
            parse_accuracy = parse_head_accuracy(model, dev_feature_batches(corpus, model, tokenizer))
            if parse_accuracy is not None:
                out["dev_parse_head_accuracy"] = parse_accuracy
            if out.get("averaged_checkpoints") and (checkpoint / AVERAGED_DIR / "config.json").is_file():
                averaged, _ = load_saved_model(checkpoint / AVERAGED_DIR, corpus, args.device)
                for name, value in evaluate_sets(averaged, tokenizer, corpus, sets, prefix,
                                                 corpus.recipe["final_num_beams"], ".averaged").items():
                    if name == "dev":
                        out["dev_averaged"] = value
                    else:
                        out["extra_averaged"] = {**(out.get("extra_averaged") or {}), name: value}
            out.setdefault("evaluate_only_commands", []).append(args.command)
            result_path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return evals
    slug = checkpoint.resolve().as_posix().strip("/").replace("/", "_")
    prefix = Path(args.results_dir) / corpus.recipe["name"] / "evaluate_only" / slug
    evals = evaluate_sets(model, tokenizer, corpus, sets, prefix, corpus.recipe["final_num_beams"])
    Path(f"{prefix}.json").write_text(json.dumps({"checkpoint": str(checkpoint), "preset": model.config.preset,
                                                  "evals": evals, "command": args.command}, indent=1) + "\n")
    return evals


def blind_command(args) -> list[dict]:
    """Write the missing blind test translations: every finished run of the recipes (narrowed by `--presets` /
    `--seeds`) whose result has none and whose saved model is still in the runs dir, and, for a run reported with
    an averaged model (`averaged_checkpoints`), that model's (`.test.averaged`) from `<run_dir>/averaged`; the runs
    whose model is gone are listed."""
    import torch

    torch.set_num_threads(args.threads)
    presets = set(args.presets.split(",")) if args.presets else None
    seeds = {int(s) for s in args.seeds.split(",")} if args.seeds else None
    written = []
    for recipe_path in args.recipe:
        recipe = load_recipe(recipe_path)
        if not recipe.get("test_source"):
            logger.info("%s: the recipe has no blind test set (test_source)", recipe["name"])
            continue
        corpus = Corpus(recipe, args.runs_dir, args.train_limit, args.dev_limit)
        no_model = []
        for result_path in sorted((Path(args.results_dir) / recipe["name"]).glob("*/seed*.json")):
            out = json.loads(result_path.read_text())
            if (presets and out["preset"] not in presets) or (seeds and out["seed"] not in seeds):
                continue
            prefix = result_path.with_suffix("")
            _, run_dir = run_paths(args.results_dir, args.runs_dir, recipe, out["preset"], out["seed"])
            missing = [(key, label, model_dir) for key, label, model_dir in
                       (("test", "", run_dir), ("test_averaged", ".averaged", run_dir / AVERAGED_DIR))
                       if (key == "test" or out.get("averaged_checkpoints"))
                       and not (out.get(key) and blind_path(prefix, recipe["final_num_beams"], label).is_file())]
            for key, label, model_dir in missing:
                if not (model_dir / "config.json").is_file():
                    no_model.append(f"{out['preset']} seed {out['seed']}{label}")
                    continue
                logger.info("%s seed %d: translating the blind test set with %s", out["preset"], out["seed"], model_dir)
                model, tokenizer = load_saved_model(model_dir, corpus, args.device)
                record_parser(model, corpus, model_dir)
                out[key] = translate_blind(model, tokenizer, corpus, prefix, label)
            if not any(out.get(key) for key, _, _ in missing):
                continue
            out.setdefault("evaluate_only_commands", []).append(args.command)
            result_path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            written.append(out)
        if no_model:
            logger.warning("%s: no saved model in %s for %d runs without a blind translation: %s", recipe["name"],
                           Path(args.runs_dir) / recipe["name"], len(no_model), ", ".join(no_model))
    return written


def run(args) -> list[dict]:
    import torch

    torch.set_num_threads(args.threads)
    out = []
    for recipe_path in args.recipe:
        recipe = load_recipe(recipe_path)
        corpus = Corpus(recipe, args.runs_dir, args.train_limit, args.dev_limit)
        if args.evaluate_only:
            out.append(evaluate_only(corpus, Path(args.evaluate_only), args))
            continue
        pairs = grid_runs(recipe, args.presets, args.seeds)
        for name in dict.fromkeys(preset for preset, _ in pairs):
            run_config(recipe, name)  # a misspelt --presets fails now, not after the runs before it
        out += [r for preset, seed in pairs if (r := run_one(corpus, preset, seed, args)) is not None]
    return out


def run_one(corpus: Corpus, preset: str, seed: int, args) -> Optional[dict]:
    """Train one (preset, seed) unless its result exists (then only missing extra sets are scored; a run that a
    stop flag ended early trains on with `--continue-stopped`) or another process holds its lock."""
    result_path, run_dir = run_paths(args.results_dir, args.runs_dir, corpus.recipe, preset, seed)
    continued_from = None
    done = json.loads(result_path.read_text()) if result_path.is_file() else None
    stopped = done and done.get("stopped_by_deadline_after_epoch")
    if stopped and getattr(args, "continue_stopped", False):
        if not any(run_dir.glob("checkpoint-*")):
            logger.error("%s seed %d: cannot continue the run stopped after epoch %d: its checkpoints "
                         "are not in %s (trained on another machine?); its result %s is kept", preset, seed,
                         stopped, run_dir, result_path)
            return done
        continued_from, done = archive_stopped_result(result_path, done), None
        logger.info("%s seed %d: stopped after epoch %d before its schedule ended; training on from its last "
                    "checkpoint (the stopped result is kept in %s)", preset, seed, stopped, continued_from)
    if done is not None:
        if stopped:
            logger.info("%s seed %d: stopped after epoch %d of %s; --continue-stopped trains it on",
                        preset, seed, stopped, done.get("planned_epochs"))
        missing = {k: v for k, v in parse_extra_evals(args.extra_eval).items() if k not in done.get("extra", {})}
        if corpus.recipe.get("average_last_k") and done.get("averaged_checkpoints") is None and \
                any(run_dir.glob("checkpoint-*")):  # stopped between the selected and the averaged translations
            logger.info("%s seed %d: finished but for its averaged model; averaging now", preset, seed)
            done = add_averaged_model(corpus, run_dir, result_path, done, args.device)
        if missing and not (run_dir / "config.json").is_file():
            logger.error("%s seed %d: cannot score the extra sets %s: the result %s exists but not its model %s "
                         "(trained on another machine?); copy that run dir here or pass its --runs-dir, or delete the "
                         "result file to retrain", preset, seed, sorted(missing), result_path, run_dir)
        elif missing:
            logger.info("%s seed %d: finished; scoring the missing extra sets %s", preset, seed, sorted(missing))
            sub = argparse.Namespace(**{**vars(args), "extra_eval": [f"{k}={v[0]},{v[1]}" for k, v in missing.items()]})
            evaluate_only(corpus, run_dir, sub)
        else:
            logger.info("%s seed %d: finished (%s), skipped", preset, seed, result_path)
        return json.loads(result_path.read_text())
    lock = acquire_lock(run_dir)
    if lock is None:
        logger.warning("%s seed %d: another process is training it (%s), skipped", preset, seed, run_dir)
        return None
    try:
        return train_one(corpus, preset, seed, args, continued_from)
    finally:
        lock.unlink(missing_ok=True)


def archive_stopped_result(result_path: Path, out: dict) -> str:
    """Move the result of a run stopped before its schedule ended, and the translations it names, to
    `<preset>/stopped/seed<k>.after_epoch<N>.*` (the result's paths rewritten to match) before the run trains on
    and writes its result again. Returns the archived result's path, relative to the repository."""
    prefix, epoch = f"seed{out['seed']}.", out["stopped_by_deadline_after_epoch"]
    folder = result_path.parent / "stopped"
    folder.mkdir(exist_ok=True)
    moved = {}
    for path in sorted(result_path.parent.glob(prefix + "*")):
        if path.is_file():
            target = folder / path.name.replace(prefix, f"{prefix}after_epoch{epoch}.", 1)
            path.replace(target)
            moved[os.path.relpath(path, REPO)] = os.path.relpath(target, REPO)

    def renamed(value):
        if isinstance(value, dict):
            return {key: renamed(item) for key, item in value.items()}
        if isinstance(value, list):
            return [renamed(item) for item in value]
        return moved.get(value, value) if isinstance(value, str) else value

    archived = folder / f"{prefix}after_epoch{epoch}.json"
    write_result(archived, renamed(out))
    return os.path.relpath(archived, REPO)


def acquire_lock(run_dir: Path) -> Optional[Path]:
    """`run_dir/.lock` holding our pid, or None if a live process holds it (a stale lock is taken over)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / ".lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or 0)
                os.kill(pid, 0)
                return None
            except (ValueError, ProcessLookupError, FileNotFoundError):
                lock.unlink(missing_ok=True)
                continue
            except PermissionError:
                return None
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return lock
    return None


def parse_command(args) -> None:
    """Fill the parse caches of a recipe (train + dev + tune, source and target parsers; the blind test source)
    and check the word/subword alignment on dev."""
    for recipe_path in args.recipe:
        recipe = load_recipe(recipe_path)
        for side in ("source", "target"):  # every parser first: not a missing one after the other side's parse
            if recipe.get(f"{side}_parser"):
                check_parser_installed(recipe[f"{side}_parser"])
        corpus = Corpus(recipe, args.runs_dir, args.train_limit, args.dev_limit)
        blind = corpus.blind_lines_parsed()
        if blind and recipe.get("source_parser"):
            corpus.parses(blind[1], "source", blind[0])
        for side, k in (("source", 0), ("target", 1)):
            if not recipe.get(f"{side}_parser"):
                continue
            for split in [name for name in ("dev", "tune", "train") if name in corpus.texts]:
                start = time.time()
                annotations = corpus.parses(corpus.texts[split][k], side, corpus.paths[split][k])
                logger.info("%s %s %s: %d parses ready in %.0f s", recipe["name"], split, side, len(annotations),
                            time.time() - start)
            report = alignment_report(corpus.parses(corpus.texts["dev"][k], side, corpus.paths["dev"][k]), corpus.tokenizer)
            print(json.dumps({"recipe": recipe["name"], "side": side, "dev_alignment": report}))

