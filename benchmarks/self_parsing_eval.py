"""How well a self-parsing model parses (issue 26, SPEC §9): agreement with the recipe's parser on dev, and UAS on
the gold Japanese PUD treebank beside GiNZA's own (`benchmarks/results/ginza_pud_uas.json`).

    python benchmarks/self_parsing_eval.py --recipe benchmarks/recipes/small_parallel_enja.ja-en.json \
        --model $HF_SYNTAX_MT_RUNS/small_parallel_enja.ja-en/transformer_dep_rel@self/seed1

- dev, subword level: the share of subwords whose decoded head (the model's maximum spanning tree) is GiNZA's
  head projected to subwords (SPEC §5), the tree the relation terms read in training;
- dev, word level: UAS of the model's word trees (`hf_syntax_mt.inference.model_parsing`, on GiNZA's words) against GiNZA;
- PUD: UAS against the gold trees, on the gold words (spaced as the model reads its source), and the seconds
  the model takes to parse them;
- pipeline: dev sentences/s through `pipeline("syntax-translation")` (beam 4, batch 32) of the model reading its
  own trees against the same weights without the parse module given the recipe's parser (`annotator=`), timed in
  alternating rounds.
Writes benchmarks/results/self_parsing/<recipe>.<preset>.seed<k>.json and the "self-parsing" section of
model_cards/RESULTS.md (a table of every JSON there).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_json  # noqa: E402
from quality_lib.corpus import Corpus, build_parser, parser_label  # noqa: E402  (puts the repository's hf_syntax_mt first on sys.path)
from quality_lib.recipes import load_recipe  # noqa: E402
from results_md import write_section  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results" / "self_parsing"
PUD = REPO.parent / "shared" / "data" / "ud_pud" / "ja_pud-ud-test.conllu"


def subword_agreement(model, tokenizer, annotations, batch_size: int = 64) -> float:
    """% of tree subwords whose decoded head equals the parser's projected head."""
    import torch

    from hf_syntax_mt.features.syntax_features import SyntaxFeatureProcessor
    from hf_syntax_mt.syntax import PreParsedAnnotator

    processor = SyntaxFeatureProcessor(tokenizer, PreParsedAnnotator(annotations), needs_source_heads=True,
                                       max_source_length=model.config.max_position_embeddings)
    correct = total = 0
    for i in range(0, len(annotations), batch_size):
        batch = processor(annotations=annotations[i: i + batch_size], return_tensors="pt")
        with torch.no_grad():
            predicted = model.predict_heads(batch["input_ids"], batch["attention_mask"])["source_heads"]
        gold = batch["source_heads"]
        scored = gold != -100
        correct += int((predicted == gold)[scored].sum())
        total += int(scored.sum())
    return round(100 * correct / max(total, 1), 2)


def pipeline_throughput(model, tokenizer, texts, parser, rounds: int) -> dict:
    """Sentences/s of raw text -> translation, own trees vs `parser`'s, in alternating rounds (median). The
    parser-fed model is the same model without its parse module: the preset's model with an external parser."""
    import copy
    import statistics

    from transformers import pipeline

    fed = copy.deepcopy(model)
    fed.get_encoder().source_parser = None  # fed the parser's trees, the parse module's output would go unused
    systems = {"own_parser": pipeline("syntax-translation", model=model, tokenizer=tokenizer),
               "external_parser": pipeline("syntax-translation", model=fed, tokenizer=tokenizer, annotator=parser)}
    for translate in systems.values():
        translate(texts[:32], batch_size=32, num_beams=4, max_new_tokens=2)  # warm-up, loads the parser
    seconds = {name: [] for name in systems}
    for r in range(rounds):
        for name in (list(systems) if r % 2 == 0 else list(systems)[::-1]):
            start = time.perf_counter()
            systems[name](texts, batch_size=32, num_beams=4)
            seconds[name].append(time.perf_counter() - start)
    out = {name: {"sentences_per_s": round(len(texts) / statistics.median(times), 2), "seconds": [round(t, 2) for t in times]}
           for name, times in seconds.items()}
    out["speedup"] = round(statistics.median(a / b for a, b in zip(seconds["external_parser"], seconds["own_parser"])), 2)
    out.update(sentences=len(texts), batch_size=32, num_beams=4)
    return out


def results_section(results_dir: Path = RESULTS_DIR) -> str:
    """Markdown: one row per evaluated model (every JSON in `results_dir`)."""
    rows = []
    for path in sorted(results_dir.glob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        pud, pipe = r.get("pud") or {}, r.get("pipeline") or {}
        rows.append(
            f"| `{Path(r['model']).parent.name}/{Path(r['model']).name}` ({r['recipe']}) | {r['dev_subword_agreement']:.2f} | "
            f"{r['dev_word_agreement_uas']:.2f} | {pud.get('uas', float('nan')):.2f} | "
            f"{pud.get('ginza_uas_gold_tokenization', float('nan')):.2f} | "
            f"{pipe.get('own_parser', {}).get('sentences_per_s', float('nan')):.2f} / "
            f"{pipe.get('external_parser', {}).get('sentences_per_s', float('nan')):.2f} | {pipe.get('speedup', float('nan')):.2f} |")
    return "\n".join([
        "## The model as its own parser", "",
        "Generated by `benchmarks/self_parsing_eval.py` (commands in each JSON under `benchmarks/results/self_parsing/`). "
        "Dev agreement with the recipe's parser (GiNZA), in %: subwords whose decoded head is GiNZA's head projected to "
        "subwords (SPEC §5), and the UAS of the model's word trees on GiNZA's words; Japanese PUD (1,000 sentences, "
        "Wikipedia: out of domain for small_parallel_enja, in domain for KFTT): UAS on the gold words against the "
        "gold trees, beside GiNZA's own UAS on the gold words (`benchmarks/ginza_pud_uas.py` at cfbcf39, a retired "
        "script: benchmarks/README.md); pipeline: dev "
        "sentences/s (beam 4, batch 32) of the model reading its own trees / the same weights without the parse "
        "module given GiNZA, and their ratio.", "",
        "| model | dev subword agreement | dev word UAS vs GiNZA | PUD UAS | GiNZA PUD UAS | pipeline sent/s own / GiNZA | speed-up |",
        "|---|---|---|---|---|---|---|", *rows])


def main(argv=None):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_syntax_mt.inference.model_parsing import parse_with_model
    from hf_syntax_mt.syntax import PreParsedAnnotator, attachment_scores, read_conllu

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True)
    parser.add_argument("--model", required=True, help="a self-parsing run directory")
    parser.add_argument("--runs-dir", default=os.environ.get("HF_SYNTAX_MT_RUNS", str(REPO / "runs")))
    parser.add_argument("--pud", default=str(PUD))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--pipeline-sentences", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3, help="alternating timed rounds of the pipeline comparison")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    recipe = load_recipe(args.recipe)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    if not getattr(model.config, "self_parsing", False):
        raise SystemExit(f"{args.model} is not a self-parsing model (config.self_parsing is False)")
    corpus = Corpus(recipe, Path(args.runs_dir))
    dev_texts = corpus.texts["dev"][0]
    spec = recipe["source_parser"]
    parses = corpus.parses(dev_texts, "source", corpus.paths["dev"][0])
    result = {"model": args.model, "recipe": recipe["name"], "parser": parser_label(spec),
              "parser_settings": corpus.parser_settings("source"),
              "dev_sentences": len(parses), "dev_subword_agreement": subword_agreement(model, tokenizer, parses)}
    own = parse_with_model(model, tokenizer, [a.text for a in parses], words=[a.words for a in parses],
                           spans=[a.spans for a in parses])  # the parser's words may cover a space of the text
    result["dev_word_agreement_uas"] = round(100 * attachment_scores(parses, own)["uas"], 2)

    if Path(args.pud).is_file():
        gold = read_conllu(args.pud)
        spaced = model.config.source_spacing == "segmented"  # the model read space-segmented Japanese in training
        texts = [" ".join(a.words) if spaced else a.text for a in gold]
        start = time.perf_counter()
        parsed = parse_with_model(model, tokenizer, texts, words=[a.words for a in gold])
        seconds = time.perf_counter() - start
        scores = attachment_scores(gold, parsed)  # words aligned by span, whitespace ignored
        ginza_file = REPO / "benchmarks" / "results" / "ginza_pud_uas.json"
        reference = json.loads(ginza_file.read_text())["gold_tokenization"] if ginza_file.is_file() else None
        result["pud"] = {"sentences": len(gold), "input": "gold words joined by spaces" if spaced else "gold text",
                         "uas": round(100 * scores["uas"], 2), "aligned": round(100 * scores["aligned"], 2),
                         "seconds": round(seconds, 1),
                         "ginza_uas_gold_tokenization": round(100 * reference["uas"], 2) if reference else None}
    else:
        result["pud"] = None
        print(f"no {args.pud}: PUD UAS skipped", file=sys.stderr)
    # the recipe's parser, or for a recipe of gold CoNLL-U trees those trees
    external = PreParsedAnnotator(parses) if "conllu_suffix" in spec else build_parser(spec)
    result["pipeline"] = pipeline_throughput(model, tokenizer, dev_texts[: args.pipeline_sentences], external,
                                             args.rounds)
    result.update(threads=torch.get_num_threads(), machine=machine(),
                  command="python benchmarks/self_parsing_eval.py " + " ".join(sys.argv[1:] if argv is None else argv))
    run = json.loads((Path(args.model) / "quality_run.json").read_text()) if (Path(args.model) / "quality_run.json").is_file() else {}
    out = Path(args.out) if args.out else (REPO / "benchmarks" / "results" / "self_parsing" /
                                           f"{recipe['name']}.{run.get('preset', 'model')}.seed{run.get('seed', 0)}.json")
    write_json(out, result)
    print(json.dumps(result, indent=1, ensure_ascii=False))
    if out.parent == RESULTS_DIR:
        write_section(REPO / "model_cards" / "RESULTS.md", "self-parsing", results_section())


if __name__ == "__main__":
    main()
