"""What the syntax buys: a resumable dev-BLEU runner over presets × seeds, and its summary.

    python benchmarks/quality.py parse   --recipe R                  # parse caches + alignment check
    python benchmarks/quality.py run     --recipe R --presets A,B --seeds 1,2,3 [--extra-eval name=src,tgt] [--processes 2]
    python benchmarks/quality.py run     --recipe R --evaluate-only RUN_DIR_OR_CHECKPOINT --extra-eval ...
    python benchmarks/quality.py blind   --recipe R [--presets A,B --seeds 1,2]   # missing blind translations (selected, averaged)
    python benchmarks/quality.py summary [--recipe R ...]   # model_cards/RESULTS.md + PNG (other recipes kept; default:
                                                         # every recipe it holds), its summary, the README's preset table
    python benchmarks/quality.py carry   --recipe R [--recipe R2 ...] --to DIR   # data, parses, tokenizer for a bare machine

A recipe (`benchmarks/recipes/*.json`, one per corpus and direction) fixes the data, the parsers,
the model size (`model`: config overrides on every preset), the training arguments (`training`:
`SyntaxMTTrainingArguments` fields) and the final beam size. Named variants (`variants`:
{"transformer_dbsa@layer2": {"preset": "transformer_dbsa", "model": {...}, "training": {...}}})
change a preset's config or training on top of that and run, skip, resume and summarize under their
own name like any preset. `comparisons` lists extra [system, baseline] pairs for the summary;
`train_pairs: N` trains on the first N pairs of the training files (a low-resource point whose
`subset_of` names the full recipe, whose summary then shows Δ vs abs by training pairs).
For every (preset, seed):

1. one joint BPE tokenizer per recipe, trained once on train source + target and reused;
2. parses: computed once per (text file, parser) and cached as JSON lines under
   `<runs>/parse_cache/` (keyed by the sha256 of the text and the parser's name/version/settings;
   a record `<cache>.json` beside each lets a machine without the parser, e.g. a GPU machine that
   `scripts/device_quality.sh` prepares, train on parses made elsewhere);
   every run gets them through a `PreParsedAnnotator`, so no run parses again and the
   `datasets` feature cache of `add_syntax_features` is shared by all runs of a preset family;
3. `hf_syntax_mt.training.run.train` (greedy BLEU each epoch on the selection split picks the checkpoint: the
   recipe's `data.tune` where it has one, else dev; `early_stopping_patience` stops after that many
   evaluations without a better score there);
4. the best model translates dev (and every `--extra-eval` set) with beam `final_num_beams`
   by a direct `generate` loop in corpus order, scored with sacrebleu; a direct greedy pass is
   compared with the Trainer's greedy dev BLEU (the group_by_length eval-order bug check); the
   recipe's blind test source (`test_source`, whose references the project does not have) is
   translated the same way into `seed<k>.test.beam<k>.txt`, never scored; the saved config records
   the source parser of the parse caches (`config.parser`), so the run dir loads in the pipeline;
   With `average_last_k`, the mean of the last k checkpoints (`hf_syntax_mt.average_checkpoints`, into
   `<run dir>/averaged`; `save_total_limit` is raised to keep them) is a second model that no split chose: it
   translates dev, tune and the blind test set too (`seed<k>.dev.averaged.beam<k>.txt`, ...), recorded as
   `dev_averaged`, `tune_averaged`, `test_averaged` beside the selected model's `dev`, `tune`, `test`;
5. `results/<recipe>/<preset>/seed<k>.json` + hypothesis files; checkpoints stay in
   `<runs>/<recipe>/<preset>/seed<k>` (never in the repository). A run whose JSON exists is
   skipped; an interrupted run resumes from its last checkpoint.

Pre-tokenized Japanese (small_parallel_enja is KyTea-segmented with spaces): GiNZA parses the text
with the spaces removed (natural Japanese, which it was trained on; on spaced text Sudachi follows
the KyTea cuts and the parses get worse), and each word's span is mapped back into the spaced
text (`hf_syntax_mt.syntax.DespacedSpacyAnnotator`). A GiNZA word may then cover a space (KyTea
`送 っ` = Sudachi `送っ`): its subwords all belong to that word, as the alignment rule in
`hf_syntax_mt.syntax` says; `parse` prints how many parser words got no subword of their own.
A recipe's `source_spacing` (`hf_syntax_mt.syntax.spacing`, recorded in every run's config) says
what source text the models read: "segmented" (the corpus's spaces kept: runs comparable with the
earlier grid, but the models need segmented input), or "despace_cjk" (the source lines lose the
spaces next to CJK characters as they are read, before the tokenizer is trained and the text is
parsed: models for natural text; `split_cjk_scripts` cuts the joint BPE at script changes).

Summary statistics: mean ± sample std over seeds; paired bootstrap resampling (Koehn 2004) over
dev sentences with 1,000 samples: in each sample every system's score is the mean over its seeds
of corpus BLEU on the resampled sentences; p = fraction of samples where the preset does not beat
the baseline (one-sided), with the 95% interval of the difference. The same on each third of dev by
source length (where in the sentence a method gains).

The code lives in `benchmarks/quality_lib/`: `recipes.py` (recipes, their runs, corpus files), `corpus.py`
(parsers, parse caches, tokenizer), `runner.py` (training, selected and averaged models), `translation.py`
(translation, scoring, the blind test set), `summary.py` (statistics,
RESULTS.md tables, charts) and `carry.py` (what a GPU machine without the parsers needs); this script is the
command line.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

from hf_syntax_mt.training.command_line import positive_int
from quality_lib.carry import carry_command
from quality_lib.recipes import REPO
from quality_lib.runner import RunInterrupted, blind_command, parse_command, run
from quality_lib.summary import RECIPES_DIR, RESULTS_MD, summary

DEFAULT_RUNS = Path(os.environ.get("HF_SYNTAX_MT_RUNS", REPO / "runs" / "quality"))  # gitignored
DEFAULT_RESULTS = REPO / "benchmarks" / "results"


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def build_parser_cli() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command_name", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--recipe", action="append", required=True, help="Recipe JSON (repeatable)")
    common.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS, help="Checkpoints, tokenizers, parse caches")
    common.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS, help="Result JSON + hypotheses")
    common.add_argument("--train-limit", type=int, default=None, help="Use the first N training pairs (probes)")
    common.add_argument("--dev-limit", type=int, default=None, help="Use the first N dev pairs (probes)")
    p_run = sub.add_parser("run", parents=[common], help="Train/evaluate presets × seeds (finished runs are skipped)")
    p_run.add_argument("--presets", default=None, help="Comma-separated presets (default: the recipe's presets)")
    p_run.add_argument("--seeds", default=None, help="Comma-separated seeds (default 1; without --presets and --seeds: the recipe's grid)")
    p_run.add_argument("--extra-eval", action="append", default=[], metavar="NAME=SRC,TGT", help="Extra eval set")
    p_run.add_argument("--evaluate-only", default=None, metavar="CHECKPOINT", help="Score a checkpoint, no training")
    p_run.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                       help="bf16 autocast for training, or fp32 with --no-bf16 (default: the recipe's setting); "
                            "a CPU without native bf16 (AVX512-BF16 / AMX) runs autocast far slower than fp32")
    p_run.add_argument("--max-steps", type=int, default=None, help="Stop after N steps (probes)")
    p_run.add_argument("--threads", type=int, default=2, help="torch threads (with --processes: of the translations)")
    p_run.add_argument("--processes", type=positive_int, default=1,
                       help="Train with N data-parallel CPU processes of one thread each on the recipe's batches "
                            "(hf_syntax_mt.training.data_parallel; faster than N threads on a multi-core CPU)")
    p_run.add_argument("--stop-training-by", type=float, default=None, metavar="UNIX_TIME",
                       help="End training at the last epoch that ends before this time (a lent machine's limit), "
                            "then finish the run as usual; the result records the epoch it stopped after")
    p_run.add_argument("--stop-training-after-epoch", type=positive_int, default=None, metavar="N",
                       help="End training after epoch N (the schedule unchanged: runs of several presets stopped at the "
                            "same epoch compare at equal training), then finish the run as usual, recorded as "
                            "--stop-training-by records it")
    p_run.add_argument("--continue-stopped", action="store_true",
                       help="Train on the runs that --stop-training-by / --stop-training-after-epoch stopped before "
                            "their schedule ended, "
                            "from their last checkpoint (the stopped result and its translations move to "
                            "<preset>/stopped/seed<k>.after_epoch<N>.*), and write their results again")
    p_run.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                       help="Train and translate on the CPU or the GPU (the result records which machine)")
    p_blind = sub.add_parser("blind", parents=[common], help="Translate the blind test set with every finished run "
                             "(its selected model, and its averaged model where it reports one) that has no such "
                             "translation yet and whose saved model exists")
    p_blind.add_argument("--presets", default=None, help="Comma-separated run names (default: all)")
    p_blind.add_argument("--seeds", default=None, help="Comma-separated seeds (default: all)")
    p_blind.add_argument("--threads", type=int, default=2, help="torch threads")
    p_blind.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="Translate on the CPU or the GPU")
    p_parse = sub.add_parser("parse", parents=[common], help="Fill the parse caches and check the alignment")
    p_parse.set_defaults()
    p_sum = sub.add_parser("summary", help="Write model_cards/RESULTS.md and the bar charts")
    p_sum.add_argument("--recipe", action="append", default=None,
                       help="Recipe JSON (repeatable; default: the recipes whose sections --output holds, in "
                            f"{os.path.relpath(RECIPES_DIR, REPO)}/)")
    p_sum.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS, help="Not used by summary (accepted with the others)")
    p_sum.add_argument("--results-dir", type=Path, default=DEFAULT_RESULTS, help="Result JSON + hypotheses")
    p_sum.add_argument("--output", type=Path, default=RESULTS_MD)
    p_sum.add_argument("--readme", type=Path, default=None,
                       help="README whose findings markers get the \"which preset\" table (default: the repository's "
                            "README.md when --output is the repository's RESULTS.md)")
    p_sum.add_argument("--measured-results", type=Path, default=None,
                       help="Python module of the findings for model cards (default: hf_syntax_mt/hub/measured_results.py "
                            "when --output is the repository's RESULTS.md)")
    p_carry = sub.add_parser("carry", parents=[common], help="Copy the recipes' corpus files, source parse caches and "
                             "tokenizer into a folder for a machine without the parsers (scripts/device_quality.sh)")
    p_carry.add_argument("--to", type=Path, required=True, help="The folder to fill (.devcarry for device_quality.sh)")
    return parser


def main(argv: Optional[list[str]] = None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser_cli().parse_args(argv)
    args.command = "python benchmarks/quality.py " + " ".join(shlex.quote(a) for a in argv)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # the Trainer prints its logs; keep them live under nohup
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO,
                        handlers=[logging.StreamHandler(sys.stdout)], force=True)
    if args.command_name == "run":
        try:
            return run(args)
        except RunInterrupted as interrupted:
            logging.getLogger("quality").warning("%s", interrupted)
            raise SystemExit(128 + interrupted.signal_number) from None
    if args.command_name == "parse":
        return parse_command(args)
    if args.command_name == "blind":
        return blind_command(args)
    if args.command_name == "carry":
        return carry_command(args)
    return summary(args)


if __name__ == "__main__":
    main()
