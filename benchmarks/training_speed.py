"""Seconds per 1,000 updates of the KFTT recipe, today's settings against the fast ones, on one machine in one go.

    python benchmarks/training_speed.py [--updates 1000] [--preset transformer_abs] [--cores 2]
                                        [--runs-dir DIR] [--out FILE.json] [--only before|after]
                                        [--data-parallel-as-before] [--no-bf16]

Two settings train the same preset on the same data (the recipes' 50,000-pair sample, tokenizer and 2,048-token
batches), each in a fresh process, for `--updates` updates, then evaluate once as their recipe does:

- `before`: `benchmarks/recipes/kftt.ja-en.json` as its runs trained: one process with `--cores` threads, the
  `torch.nn.functional` dropout and cross-entropy, no huge pages; greedy evaluation of all of tune with no
  source-relative cap, every 1,058 updates (an epoch).
- `after`: `benchmarks/recipes/kftt.ja-en.budget.json`: `--cores` data-parallel processes with one thread each
  (`hf_syntax_mt.training.data_parallel`), `hf_syntax_mt.fast_ops` and huge pages for large tensors; greedy evaluation of
  the first 500 tune sentences capped at 1.5 n + 10 subwords, every 1,058 updates.

seconds per 1,000 updates = training seconds / updates × 1,000 + one evaluation's seconds × 1,000 / 1,058, the
evaluation counted at the share of it that 1,000 updates pay (the evaluation is the one `train()` makes of its
validation set after training: all of tune before, its first 500 sentences after). The evaluation's cost depends on
how long the young model's translations are, so compare the two settings at the same `--updates`. Training tokens/s
count the padded positions of both sides of the one-process batches. `--only SETTING` runs one setting and prints
its figures (a setting measured on another day is no baseline: compare settings of one run).
`--data-parallel-as-before` runs `after`'s processes as they ran before issue 73's change, to measure it: evaluation
in the Trainer's sharded fixed-size batches (not the one-process token-budget batches dealt out whole), and DDP
searching for unused parameters after each forward pass. `--no-bf16` trains in fp32 (as the KFTT campaign's runs do)
where the recipe would use bf16 on a CPU with native bf16.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPES = {"before": HERE / "recipes" / "kftt.ja-en.json", "after": HERE / "recipes" / "kftt.ja-en.budget.json"}
EVAL_INTERVAL = 1058  # updates between evaluations in both recipes (an epoch of the 6-epoch recipe)


def child_settings(setting: str, cores: int) -> dict:
    """Processes, threads, ops and huge pages of a setting."""
    if setting == "before":
        return {"processes": 1, "threads": cores, "ops": "functional", "huge_pages": "0"}
    return {"processes": cores, "threads": 1, "ops": "fast", "huge_pages": "1"}


def train_and_time(setting: str, updates: int, preset: str, runs_dir: str,
                   data_parallel_as_before: bool = False, bf16: bool = True) -> dict:
    """In one process (or rank 0 of the data-parallel ones): train `updates` updates with the setting's recipe,
    then evaluate once (`train()`'s evaluation after training), timed."""
    import torch

    sys.path.insert(0, str(HERE))
    from hf_syntax_mt.training.run import train
    from quality_lib.corpus import Corpus
    from quality_lib.recipes import load_recipe, run_settings
    from quality_lib.runner import run_arguments

    recipe = load_recipe(RECIPES[setting])
    corpus = Corpus(recipe, Path(runs_dir))
    _, _, training = run_settings(recipe, preset)
    for key in ("num_train_epochs", "save_last_checkpoints", "save_last_span", "save_steps", "eval_steps"):
        training.pop(key, None)
    training.update(max_steps=updates, eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
                    logging_steps=max(1, updates // 10), bf16=bf16 and bool(training.get("bf16")) and _native_bf16())
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # the processes split the one-process batches between them
        training["accelerator_config"] = {"split_batches": True}
        if data_parallel_as_before:
            training["ddp_find_unused_parameters"] = True
            _evaluate_in_sharded_batches()
    (Path(runs_dir) / "training_speed").mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{setting}_", dir=Path(runs_dir) / "training_speed"))
    args = argparse.Namespace(device="cpu", runs_dir=runs_dir)
    model_args, data_args, training_args = run_arguments(corpus, preset, 1, args, run_dir, training)
    result = train(model_args, data_args, training_args, tokenizer=corpus.tokenizer, raw_datasets=corpus.raw_datasets())
    trainer = result.trainer
    if not trainer.is_world_process_zero():
        return {}
    history = trainer.state.log_history
    train_seconds = next(h["train_runtime"] for h in history if "train_runtime" in h)
    evaluation = next(h for h in reversed(history) if "eval_runtime" in h)  # train()'s evaluation after training
    features = result.datasets["train"]
    return {"setting": setting, "recipe": recipe["name"], "preset": preset, "updates": updates,
            "train_seconds": round(train_seconds, 1),
            "tokens_per_update": padded_tokens_per_update(features, training_args.max_tokens_per_batch),
            "eval_sentences": len(result.datasets["validation"]), "eval_seconds": round(evaluation["eval_runtime"], 1),
            "eval_mean_output_subwords": evaluation.get("eval_gen_len"), "bf16": training_args.bf16,
            "threads": torch.get_num_threads()}


def _evaluate_in_sharded_batches() -> None:
    """Data-parallel evaluation as before issue 73's change: the Trainer's fixed-size batches, split between the
    processes, instead of the token-budget batches."""
    from hf_syntax_mt.training.trainer import SyntaxMTSeq2SeqTrainer

    token_batches = SyntaxMTSeq2SeqTrainer._fixed_order_token_dataloader
    SyntaxMTSeq2SeqTrainer._fixed_order_token_dataloader = (
        lambda self, *args, **kwargs: None if self.args.world_size > 1 else token_batches(self, *args, **kwargs))


def padded_tokens_per_update(features, max_tokens: int) -> float:
    """Mean padded positions (both sides) of one epoch's one-process token-budget batches: the batches every setting
    trains on (split between the processes or not)."""
    from hf_syntax_mt.features.batching import TokenBudgetBatchSampler, pair_lengths

    sources, targets = [len(x) for x in features["input_ids"]], [len(y) for y in features["labels"]]
    batches = list(TokenBudgetBatchSampler(pair_lengths(sources, targets), max_tokens, seed=1))
    return sum(len(b) * (max(sources[i] for i in b) + max(targets[i] for i in b)) for b in batches) / len(batches)


def _native_bf16() -> bool:
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def child_main(args) -> None:
    settings = child_settings(args.child, args.cores)
    os.environ["THP_MEM_ALLOC_ENABLE"] = settings["huge_pages"]  # before the first large tensor
    import torch

    if settings["ops"] == "functional":
        import step_profile

        step_profile.use_ops("functional")
    call = (args.child, args.updates, args.preset, args.runs_dir, args.data_parallel_as_before, not args.no_bf16)
    if settings["processes"] > 1:
        from hf_syntax_mt.training.data_parallel import launch

        out = launch(train_and_time, *call, processes=settings["processes"], threads=settings["threads"])
    else:
        torch.set_num_threads(settings["threads"])
        out = train_and_time(*call)
    out.update(processes=settings["processes"], threads_per_process=settings["threads"], ops=settings["ops"],
               huge_pages=settings["huge_pages"] == "1",
               data_parallel_as_before=settings["processes"] > 1 and args.data_parallel_as_before)
    Path(args.child_out).write_text(json.dumps(out))


def per_thousand(result: dict) -> dict:
    train = result["train_seconds"] / result["updates"] * 1000
    evaluation = result["eval_seconds"] * 1000 / EVAL_INTERVAL
    return {"seconds_per_1000_updates": train + evaluation, "evaluation_share": evaluation / (train + evaluation),
            "train_tokens_per_second": result["tokens_per_update"] * result["updates"] / result["train_seconds"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--preset", default="transformer_abs")
    parser.add_argument("--cores", type=int, default=2, help="threads of `before`, processes of `after`")
    parser.add_argument("--only", choices=("before", "after"), help="run one setting only")
    parser.add_argument("--runs-dir", default=str(HERE.parent / "runs" / "quality"))
    parser.add_argument("--out", type=Path, default=None, help="also write the figures to this JSON file")
    parser.add_argument("--data-parallel-as-before", action="store_true",
                        help="processes as before issue 73: sharded fixed-size evaluation batches, DDP's search for "
                             "unused parameters")
    parser.add_argument("--no-bf16", action="store_true", help="fp32 even where the CPU has native bf16")
    parser.add_argument("--child", choices=("before", "after"), help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args)
    sys.path.insert(0, str(HERE))
    import speed

    results = {}
    for setting in [args.only] if args.only else ["before", "after"]:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            out = f.name
        command = [sys.executable, __file__, "--child", setting, "--child-out", out, "--updates", str(args.updates),
                   "--preset", args.preset, "--cores", str(args.cores), "--runs-dir", args.runs_dir,
                   *["--data-parallel-as-before"] * args.data_parallel_as_before, *["--no-bf16"] * args.no_bf16]
        subprocess.run(command, check=True, cwd=HERE)
        result = json.loads(Path(out).read_text())
        results[setting] = {**result, **per_thousand(result)}
    load = os.getloadavg()
    print(f"\nCPU: {speed._cpu_name()}; {args.preset}, {args.updates} updates a setting, "
          f"load average after the runs {load[0]:.1f}")
    print("| setting | processes x threads | train s / 1,000 updates | eval s (sentences, mean output) | "
          "s / 1,000 updates with evaluation | evaluation share | train tokens/s |\n|---|---|---|---|---|---|---|")
    for name, r in results.items():
        precision = "bf16" if r["bf16"] else "fp32"
        print(f"| {name} ({r['recipe']}, {precision}) | {r['processes']} x {r['threads_per_process']} | "
              f"{r['train_seconds'] / r['updates'] * 1000:.0f} | {r['eval_seconds']:.0f} ({r['eval_sentences']}"
              f", {r['eval_mean_output_subwords']}) | {r['seconds_per_1000_updates']:.0f} | "
              f"{r['evaluation_share']:.1%} | {r['train_tokens_per_second']:.0f} |")
    ratio = None
    if len(results) == 2:
        ratio = results["before"]["seconds_per_1000_updates"] / results["after"]["seconds_per_1000_updates"]
        print(f"before / after, seconds per 1,000 updates with evaluation: {ratio:.2f}x")
    if args.out:
        args.out.write_text(json.dumps({"cpu": speed._cpu_name(), "load_average": load, "results": results,
                                        "ratio": ratio, "command": " ".join(sys.argv)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
