"""The data a recipe trains and reports on: sizes and length distributions, and how the parser's words
and the recipe's subwords agree (issue 46: the KFTT recipe's training sample and its tokenizer).

    python benchmarks/corpus_stats.py --recipe benchmarks/recipes/kftt.ja-en.json

For the training pairs (the recipe's `train_sample` when it has one), tune, dev and the blind test source:
pairs, source characters, target words, source / target subwords (mean, median, 90th / 99th percentile,
max) and the lines longer than the recipe's max_source_length / max_target_length (they would be cut).
With a source parser: `alignment_report` on dev (the share of the parser's words that get no subword of
their own, whose dependents are re-attached, and of subwords that cross a word boundary).
Also every dev source's length in subwords without </s> (`dev_source_subwords`, for the summary's
`length_buckets`).
Writes `benchmarks/results/<recipe>/corpus_stats.json` and prints it (without that list).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_json  # noqa: E402
from quality_lib.corpus import Corpus, alignment_report  # noqa: E402
from quality_lib.recipes import REPO, load_recipe, read_pair, resolve  # noqa: E402


def distribution(values: list[int]) -> dict:
    ordered = sorted(values)

    def percentile(q):
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"mean": round(statistics.fmean(ordered), 1), "median": percentile(0.5), "p90": percentile(0.9),
            "p99": percentile(0.99), "max": ordered[-1]}


def split_stats(sources, targets, tokenizer, recipe) -> dict:
    source_subwords = [len(ids) for ids in tokenizer(sources)["input_ids"]]
    out = {"pairs": len(sources), "source_characters": distribution([len(s) for s in sources]),
           "source_subwords": distribution(source_subwords),
           "source_lines_over_max_source_length": sum(n > recipe["max_source_length"] for n in source_subwords)}
    if targets is not None:
        target_subwords = [len(ids) for ids in tokenizer(text_target=targets)["input_ids"]]
        out.update(target_words=distribution([len(t.split()) for t in targets]),
                   target_subwords=distribution(target_subwords),
                   target_lines_over_max_target_length=sum(n > recipe["max_target_length"] for n in target_subwords))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "quality")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args(argv)
    recipe = load_recipe(args.recipe)
    corpus = Corpus(recipe, args.runs_dir)
    tokenizer = corpus.tokenizer
    stats = {"recipe": recipe["name"], "train_sample": recipe.get("train_sample"), "vocab_size": len(tokenizer),
             "splits": {"train": split_stats(*corpus.texts["train"], tokenizer, recipe)}}
    for split in ("tune", "dev"):
        if split in recipe["data"]:
            sources, targets = read_pair(*(resolve(recipe, p) for p in recipe["data"][split]))
            stats["splits"][split] = split_stats(corpus.prepare_sources(sources), targets, tokenizer, recipe)
    dev_sources = corpus.texts["dev"][0]
    stats["dev_source_subwords"] = [len(ids) for ids in tokenizer(dev_sources, add_special_tokens=False)["input_ids"]]
    blind = corpus.blind_sources()
    if blind is not None:
        stats["splits"]["test (blind, source only)"] = split_stats(blind[1], None, tokenizer, recipe)
    if recipe.get("source_parser"):
        report = alignment_report(corpus.parses(corpus.texts["dev"][0], "source", corpus.paths["dev"][0]), tokenizer)
        report["words_without_subword_share"] = round(report["words_without_subword"] / report["words"], 4)
        report["subwords_crossing_words_share"] = round(report["subwords_crossing_words"] / report["subwords"], 4)
        stats["dev_alignment"] = report
    path = args.results_dir / recipe["name"] / "corpus_stats.json"
    write_json(path, stats)
    print(json.dumps({k: v for k, v in stats.items() if k != "dev_source_subwords"}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
