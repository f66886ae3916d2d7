"""Does a model translate text as users write it? Dev BLEU through `pipeline("syntax-translation")`
on the corpus's segmented source lines and on the same lines with every space removed (natural
Japanese), for each model directory given.

    python benchmarks/natural_input.py --source ../shared/data/small_parallel_enja/dev.ja \
        --reference ../shared/data/small_parallel_enja/dev.en --model RUN_DIR [--model RUN_DIR ...] \
        [--parser ja_ginza --parser-disable ner,morphologizer,compound_splitter,bunsetu_recognizer] \
        [--output benchmarks/results/natural_input.json]

A model that records no parser (e.g. a run trained on pre-parsed caches by an older runner) gets the
`--parser` spaCy pipeline. Prints one JSON line per model and input, and appends them to `--output`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(argv=None):
    import sacrebleu
    from transformers import AutoConfig, pipeline

    import hf_syntax_mt  # noqa: F401  (registers the pipeline)
    from hf_syntax_mt.syntax import SpacyAnnotator

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--parser", default=None, help="spaCy pipeline for models whose config records none")
    parser.add_argument("--parser-disable", default="")
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)

    segmented = Path(args.source).read_text(encoding="utf-8").split("\n")
    references = Path(args.reference).read_text(encoding="utf-8").split("\n")
    if segmented and segmented[-1] == "":
        segmented, references = segmented[:-1], references[:-1]
    inputs = {"segmented": segmented, "spaces removed": [line.replace(" ", "") for line in segmented]}
    rows = []
    for model_dir in args.model:
        config = AutoConfig.from_pretrained(model_dir)
        annotator = None
        if config.needs_parser_at_inference and not config.parser:
            if not args.parser:
                raise SystemExit(f"{model_dir} records no parser and needs one: pass --parser")
            annotator = SpacyAnnotator(args.parser, disable=[c for c in args.parser_disable.split(",") if c])
        translate = pipeline("syntax-translation", model=model_dir, annotator=annotator)
        for name, lines in inputs.items():
            start = time.time()
            out = translate(lines, num_beams=args.beams, batch_size=args.batch_size)
            hyps = [o["translation_text"] for o in out]
            row = {"model": model_dir, "preset": config.preset, "source_spacing": config.source_spacing,
                   "input": name, "sentences": len(lines), "num_beams": args.beams,
                   "bleu": round(sacrebleu.corpus_bleu(hyps, [references]).score, 2),
                   "chrf": round(sacrebleu.corpus_chrf(hyps, [references]).score, 2),
                   "errors": sum("error" in o for o in out), "seconds": round(time.time() - start, 1)}
            print(json.dumps(row, ensure_ascii=False), flush=True)
            rows.append(row)
    if args.output:
        with open(args.output, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


if __name__ == "__main__":
    main()
