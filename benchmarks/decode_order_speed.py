"""Translation in length-sorted batches against batches of consecutive sentences (issue 46: the final translations of
the quality runs, and the Trainer's evaluation under a token budget, now batch sentences of similar length).

    python benchmarks/decode_order_speed.py --model RUN_OR_CHECKPOINT_DIR [--recipe benchmarks/recipes/kftt.ja-en.json]
        [--sentences 256] [--beams 1,4] [--batch-size 64] [--rounds 2] [--threads 1]

The first `--sentences` dev sentences of the recipe are translated by the model (no parser: a model that reads
trees at inference is refused) in `--batch-size` batches two ways, in interleaved rounds in one process:
consecutive sentences (corpus order, as the runner batched before) and sorted by length, longest first
(`quality_lib.translation.translate`). A batch decodes until its longest output ends, so on a corpus of varied
lengths sorting saves the steps that short sentences spend waiting. Prints and writes
`benchmarks/results/decode_order_speed.json`: seconds per pass, the ratio consecutive / sorted, and how many
translations differ between the two (batch composition changes only padding, so few or none should).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality_lib.corpus import Corpus  # noqa: E402
from quality_lib.recipes import REPO, load_recipe  # noqa: E402
from quality_lib.runner import device_description, load_saved_model  # noqa: E402
from quality_lib.translation import translate  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a trained run dir or checkpoint-N of the recipe")
    parser.add_argument("--recipe", default=str(REPO / "benchmarks" / "recipes" / "kftt.ja-en.json"))
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "quality")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--beams", default="1,4")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "decode_order_speed.json")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe)
    corpus = Corpus(recipe, args.runs_dir)
    model, tokenizer = load_saved_model(args.model, corpus, "cpu")
    if model.config.needs_parser_at_inference:
        raise SystemExit(f"{args.model}: a {model.config.preset} model reads trees at inference; give a model that "
                         "does not (e.g. transformer_abs or transformer_rel)")
    sources = corpus.texts["dev"][0][: args.sentences]
    limits = recipe["max_target_length"], recipe["max_source_length"]

    def consecutive(beams):  # each call sorts only within its own batch: the batches of corpus order
        return [hyp for i in range(0, len(sources), args.batch_size)
                for hyp in translate(model, tokenizer, sources[i: i + args.batch_size], None, beams, *limits,
                                     args.batch_size)]

    def length_sorted(beams):
        return translate(model, tokenizer, sources, None, beams, *limits, args.batch_size)

    result = {"recipe": recipe["name"], "model": str(args.model), "sentences": len(sources),
              "batch_size": args.batch_size, "device": device_description("cpu"), "threads": args.threads,
              "beams": {}}
    for beams in [int(b) for b in args.beams.split(",")]:
        seconds = {"consecutive": [], "sorted": []}
        outputs = {}
        for round_index in range(args.rounds):
            order = ["consecutive", "sorted"] if round_index % 2 == 0 else ["sorted", "consecutive"]
            for name in order:
                start = time.perf_counter()
                outputs[name] = (consecutive if name == "consecutive" else length_sorted)(beams)
                seconds[name].append(time.perf_counter() - start)
        entry = {name: round(statistics.median(values), 2) for name, values in seconds.items()}
        entry["ratio_consecutive_over_sorted"] = round(entry["consecutive"] / entry["sorted"], 2)
        entry["translations_that_differ"] = sum(a != b for a, b in zip(outputs["consecutive"], outputs["sorted"]))
        result["beams"][str(beams)] = entry
        print(f"beam {beams}: consecutive batches {entry['consecutive']:.1f} s, length-sorted {entry['sorted']:.1f} s "
              f"(x{entry['ratio_consecutive_over_sorted']:.2f}); {entry['translations_that_differ']} of "
              f"{len(sources)} translations differ", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
