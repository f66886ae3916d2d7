"""Training tokens/s of one process with N threads against N data-parallel processes with 1 thread each
(`hf-syntax-mt-train --processes N`), on the KFTT recipe's model and batches.

    python benchmarks/processes_speed.py [--processes 2] [--max-steps 30] [--pairs 3000] [--rounds 1]
        [--output benchmarks/results/processes_speed.json]

Both configurations run the project's training (`hf_syntax_mt.training.run.train`, the Trainer) through
`hf_syntax_mt.training.run.train_in_processes` (the launcher behind `--processes`): 1 process x N torch threads
(this process), then N processes x 1 thread (DDP over gloo, each 2,048-token batch split between the processes),
`--rounds` times in turn. The model
is the KFTT recipe's (transformer_abs, d_model 256, 3+3 layers, 4 heads, ffn 1024, joint BPE 8k, dropout and label
smoothing 0.1), trained in fp32 (bf16 is emulated, and slow, on a CPU without AVX512-BF16 / AMX), for `--max-steps`
token-budget batches of 2,048 padded positions from the first `--pairs` KFTT training pairs within the recipe's
limits (../shared/data/kftt), or from generated text where KFTT is absent. Tokens/s counts source + target
subwords, as the quality runner does: the training set's tokens x the epochs trained / the Trainer's train_runtime
(the training loop only: start-up, tokenizer and features are left out). The CPU model, core count, torch threads
and the load average before and after are printed with the figures: other jobs on the machine change them a lot
(threads suffer most: each waits for the slowest at every operation).
"""

import argparse
import gzip
import itertools
import json
import os
import statistics
import tempfile
from pathlib import Path

import speed

REPO = Path(__file__).resolve().parents[1]
MODEL = dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=1024, decoder_ffn_dim=1024, dropout=0.1, label_smoothing=0.1, attn_implementation="eager")


def write_pairs(prefix: Path, pairs: int, kftt: Path) -> str:
    """`prefix.ja` / `prefix.en`: the first `pairs` KFTT training pairs within the recipe's limits (Japanese
    <= 200 characters, English <= 100 words), else generated pairs; returns where they came from."""
    if (kftt / "train.ja.gz").is_file():
        with gzip.open(kftt / "train.ja.gz", "rt", encoding="utf-8") as ja, \
                gzip.open(kftt / "train.en.gz", "rt", encoding="utf-8") as en:
            kept = ((j.strip(), e.strip()) for j, e in zip(ja, en)
                    if j.strip() and e.strip() and len(j.strip()) <= 200 and len(e.split()) <= 100)
            chosen = list(itertools.islice(kept, pairs))
        source = f"KFTT train, first {len(chosen)} pairs"
    else:
        from hf_syntax_mt.features.synthetic import generate_synthetic_corpus

        chosen = [(example.source, example.target) for example in generate_synthetic_corpus(pairs, seed=0)]
        source = f"generated text ({pairs} pairs; KFTT not found at {kftt})"
    prefix.with_suffix(".ja").write_text("".join(j + "\n" for j, _ in chosen), encoding="utf-8")
    prefix.with_suffix(".en").write_text("".join(e + "\n" for _, e in chosen), encoding="utf-8")
    return source


def train_and_time(settings: dict, processes: int, threads: int) -> dict:
    """One timed training run in `processes` processes x `threads` threads (`train_in_processes`)."""
    from hf_syntax_mt.training.run import (
        DataArguments,
        ModelArguments,
        SyntaxMTTrainingArguments,
        cpu_has_native_bf16,
        train_in_processes,
    )

    model_args = ModelArguments(preset="transformer_abs", vocab_size=8000,
                                config_overrides=",".join(f"{k}={v!r}" for k, v in MODEL.items()))
    data_args = DataArguments(source_lang="ja", target_lang="en", train_file=settings["train_file"],
                              max_source_length=192, max_target_length=256, cache_dir=settings["cache_dir"])
    training_args = SyntaxMTTrainingArguments(
        output_dir=settings["output_dir"], overwrite_output_dir=True, max_steps=settings["max_steps"],
        max_tokens_per_batch=2048, learning_rate=7e-4, adam_beta2=0.98, lr_scheduler_type="inverse_sqrt",
        warmup_steps=800, bf16=cpu_has_native_bf16(), save_strategy="no", eval_strategy="no",
        load_best_model_at_end=False, logging_steps=10_000, report_to="none", disable_tqdm=True, use_cpu=True, seed=1,
    )
    run = train_in_processes(processes, model_args, data_args, training_args, threads=threads)
    runtime = run["metrics"]["train_runtime"]
    return {"tokens_per_second": round(run["train_tokens"] * run["global_step"] / run["steps_per_epoch"] / runtime),
            "train_runtime_seconds": round(runtime, 2), "steps": run["global_step"],
            "threads_per_process": run["threads"], "processes": run["processes"], "bf16": training_args.bf16}


def main(argv=None) -> dict:
    from hf_syntax_mt.training.data_parallel import available_cores

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=available_cores(),
                        help="N: 1 process x N threads against N processes x 1 thread (default: the cores)")
    parser.add_argument("--max-steps", type=int, default=30, help="timed training steps per run")
    parser.add_argument("--pairs", type=int, default=3000, help="training pairs (tokenizer and batches)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each configuration, in turn")
    parser.add_argument("--kftt", type=Path, default=REPO.parent / "shared" / "data" / "kftt",
                        help="folder of KFTT's train.ja.gz / train.en.gz (generated text where absent)")
    parser.add_argument("--output", default="", help="write the results as JSON there ('' to skip)")
    args = parser.parse_args(argv)
    if min(args.max_steps, args.pairs, args.rounds) < 1 or not 2 <= args.processes <= available_cores():
        parser.error(f"--max-steps, --pairs and --rounds must be >= 1, --processes 2 to {available_cores()}")
    n = args.processes
    configurations = {f"1 process x {n} threads": (1, n), f"{n} processes x 1 thread": (n, 1)}
    results = {"cpu": speed._cpu_name(), "cores": available_cores(), "load_average_before": os.getloadavg(),
               "max_steps": args.max_steps, "max_tokens_per_batch": 2048, "runs": {name: [] for name in configurations}}
    with tempfile.TemporaryDirectory(prefix="processes_speed_") as tmp:
        results["data"] = write_pairs(Path(tmp) / "train", args.pairs, args.kftt)
        settings = {"train_file": str(Path(tmp) / "train"), "cache_dir": str(Path(tmp) / "cache"),
                    "max_steps": args.max_steps}
        for _ in range(args.rounds):
            for name, (processes, threads) in configurations.items():
                run = train_and_time({**settings, "output_dir": str(Path(tmp) / name.replace(" ", "_"))}, processes,
                                     threads)
                results["runs"][name].append(run)
                print(f"{name}: {run['tokens_per_second']} tokens/s ({run['steps']} steps in "
                      f"{run['train_runtime_seconds']} s)", flush=True)
    results["load_average_after"] = os.getloadavg()
    rates = {name: statistics.median(run["tokens_per_second"] for run in runs) for name, runs in results["runs"].items()}
    threads_rate, processes_rate = rates.values()
    results["tokens_per_second"] = rates
    results["processes_over_threads"] = round(processes_rate / threads_rate, 2)
    bf16 = any(run["bf16"] for runs in results["runs"].values() for run in runs)
    print(f"CPU: {results['cpu']} ({results['cores']} cores); data: {results['data']}; {'bf16' if bf16 else 'fp32'}")
    print(f"load average before {results['load_average_before'][0]:.2f}, after {results['load_average_after'][0]:.2f}")
    for name, rate in rates.items():
        print(f"  {name}: {rate:.0f} tokens/s")
    print(f"  {n} processes / {n} threads: {results['processes_over_threads']:.2f}x")
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
