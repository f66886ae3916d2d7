"""Token-budget batches against fixed 64-sentence batches on a recipe's training sample (issue 47, item 1).

    python benchmarks/token_batching_speed.py [--recipe benchmarks/recipes/kftt.ja-en.json] [--budget 2048]
        [--batch-size 64] [--steps 12] [--rounds 3] [--threads 1] [--bf16 | --no-bf16]

On the recipe's training pairs (its `train_sample` when it has one), tokenized by the recipe's tokenizer:
1. the padding share of one epoch of each batching (fixed: random batches of `--batch-size` pairs, each side
   padded to its longest sentence; token budget: `hf_syntax_mt.features.batching` at `--budget` padded positions);
2. training speed in one process: a recipe-size `transformer_abs` (the recipe's model settings) trains on
   batches drawn at random from each batching's epoch, in interleaved rounds of `--steps` steps (warm-up steps
   excluded); real (non-padding) source + target tokens per second, and the ratio token budget / fixed;
3. the wall time of one epoch with each batching: its number of batches × its median step time.
Writes `benchmarks/results/token_batching_speed.json` (with the CPU and threads) and prints the figures.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, write_json  # noqa: E402
from hf_syntax_mt.features.batching import TokenBudgetBatchSampler, padding_share, pair_lengths  # noqa: E402
from quality_lib.corpus import Corpus  # noqa: E402
from quality_lib.recipes import REPO, load_recipe  # noqa: E402


def padded_positions(batches, source_lengths, target_lengths):
    """(real, padded) source + target positions of `batches`, each side padded to its own longest sentence."""
    real = padded = 0
    for batch in batches:
        for lengths in (source_lengths, target_lengths):
            real += sum(lengths[i] for i in batch)
            padded += len(batch) * max(lengths[i] for i in batch)
    return real, padded


def fixed_batches(count, batch_size, seed):
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return [order[i: i + batch_size] for i in range(0, count, batch_size)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=str(REPO / "benchmarks" / "recipes" / "kftt.ja-en.json"))
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "quality")
    parser.add_argument("--budget", type=int, default=None, help="default: the recipe's max_tokens_per_batch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=12, help="timed steps per batching and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                        help="bf16 autocast (default: the recipe's setting)")
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "token_batching_speed.json")
    args = parser.parse_args(argv)

    import torch

    from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration

    torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe)
    budget = args.budget or recipe["training"]["max_tokens_per_batch"]
    bf16 = recipe["training"].get("bf16", False) if args.bf16 is None else args.bf16
    corpus = Corpus(recipe, args.runs_dir)
    tokenizer = corpus.tokenizer
    sources, targets = corpus.texts["train"]
    cut = dict(truncation=True, max_length=recipe["max_source_length"])
    source_ids = tokenizer(sources, **cut)["input_ids"]
    target_ids = tokenizer(text_target=targets, **cut)["input_ids"]
    source_lengths, target_lengths = [len(x) for x in source_ids], [len(x) for x in target_ids]
    lengths = pair_lengths(source_lengths, target_lengths)

    epochs = {"fixed": fixed_batches(len(lengths), args.batch_size, seed=1),
              "token_budget": TokenBudgetBatchSampler(lengths, budget, seed=1,
                                                    secondary_lengths=source_lengths).epoch_batches(0)}
    result = {"recipe": recipe["name"], "pairs": len(lengths), "budget": budget, "batch_size": args.batch_size,
              "machine": machine(), "threads": args.threads, "bf16": bf16, "batchings": {}}
    for name, batches in epochs.items():
        real, padded = padded_positions(batches, source_lengths, target_lengths)
        result["batchings"][name] = {
            "batches_per_epoch": len(batches), "real_tokens_per_epoch": real,
            "padding_share": round(1 - real / padded, 4),
            "padding_share_of_budget": round(padding_share(lengths, batches), 4),  # max(src, tgt) x pairs
            "pairs_per_batch_mean": round(len(lengths) / len(batches), 1),
        }

    pad = tokenizer.pad_token_id
    config = SyntaxMTConfig.from_preset("transformer_abs", vocab_size=len(tokenizer), pad_token_id=pad,
                                        eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=pad,
                                        **{k: v for k, v in recipe["model"].items()})

    def make_batch(indices):
        width_s = max(source_lengths[i] for i in indices)
        width_t = max(target_lengths[i] for i in indices)
        input_ids = torch.full((len(indices), width_s), pad)
        labels = torch.full((len(indices), width_t), -100)
        for row, i in enumerate(indices):
            input_ids[row, : source_lengths[i]] = torch.tensor(source_ids[i])
            labels[row, : target_lengths[i]] = torch.tensor(target_ids[i])
        return {"input_ids": input_ids, "attention_mask": (input_ids != pad).long(), "labels": labels}

    trainers = {}
    for name in epochs:
        torch.manual_seed(0)
        model = SyntaxMTForConditionalGeneration(config).train()
        trainers[name] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    rng = random.Random(2)
    times = {name: [] for name in epochs}
    tokens = {name: [] for name in epochs}
    for round_index in range(args.rounds + 1):  # round 0 warms up
        order = list(epochs) if round_index % 2 == 0 else list(epochs)[::-1]
        for name in order:
            model, optimizer = trainers[name]
            for _ in range(args.steps if round_index else 2):
                indices = rng.choice(epochs[name])
                batch = make_batch(indices)
                start = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    loss = model(**batch).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if round_index:
                    times[name].append(time.perf_counter() - start)
                    tokens[name].append(sum(source_lengths[i] + target_lengths[i] for i in indices))
    epoch_seconds = {}
    for name in epochs:
        entry = result["batchings"][name]
        entry["real_tokens_per_second"] = round(sum(tokens[name]) / sum(times[name]))
        entry["median_step_seconds"] = round(statistics.median(times[name]), 4)
        epoch_seconds[name] = entry["real_tokens_per_epoch"] * sum(times[name]) / sum(tokens[name])
        entry["epoch_seconds"] = round(epoch_seconds[name])
    fixed, budgeted = result["batchings"]["fixed"], result["batchings"]["token_budget"]
    result["tokens_per_second_ratio"] = round(budgeted["real_tokens_per_second"] / fixed["real_tokens_per_second"], 2)
    result["epoch_time_ratio"] = round(epoch_seconds["token_budget"] / epoch_seconds["fixed"], 2)  # unrounded
    write_json(args.output, result)
    for name, entry in result["batchings"].items():
        print(f"{name:>12}: {entry['batches_per_epoch']} batches ({entry['pairs_per_batch_mean']} pairs each), padding "
              f"{100 * entry['padding_share']:.1f}%, {entry['real_tokens_per_second']} real tokens/s, one epoch "
              f"≈ {entry['epoch_seconds'] / 60:.1f} min")
    print(f"token budget / fixed: real tokens/s ×{result['tokens_per_second_ratio']}, epoch time "
          f"×{result['epoch_time_ratio']} ({result['machine']['cpu']}, {args.threads} thread(s), bf16 {bf16})")


if __name__ == "__main__":
    main()
