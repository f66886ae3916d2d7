"""Does the syntax help a pretrained model? Pretrain a MarianMT model, then fine-tune it three ways.

    python benchmarks/marian_finetune.py run     [--seeds 1,2,3] [--arms marian,dep_rel,dep_labeled_rel] [--threads 2]
    python benchmarks/marian_finetune.py step0                        # converted models before fine-tuning only
    python benchmarks/marian_finetune.py summary                      # results/<name>/summary.md
    python benchmarks/marian_finetune.py run --smoke                  # tiny sizes and steps: checks the pipeline only
    python benchmarks/marian_finetune.py run --syntax-lr-multiplier 10 --results-dir results/marian_finetune_x10

The stand-in for a Hub checkpoint such as Helsinki-NLP/opus-mt-ja-en, built from the ja→en corpus
(small_parallel_enja, Japanese read as natural text: the corpus's spaces next to CJK characters removed):

1. opus-style tokenizers: one SentencePiece unigram model per side (`source.spm` on Japanese, `target.spm`
   on English) and Marian's joint `vocab.json` (`</s>`, `<unk>`, source pieces, target pieces, `<pad>`),
   saved with `MarianTokenizer.save_pretrained`;
2. a `MarianMTModel` of the recipe size (d_model 256, 3+3 layers, 4 heads, FFN 1024; swish and scaled
   embeddings as opus-mt) pretrained from scratch by the recipe (AdamW 7e-4, β2 0.98, 800 warm-up steps
   then inverse-sqrt, label smoothing 0.1, batch 64, `--pretrain-epochs`), saved as a Marian checkpoint;
3. for every arm and seed, `hf_syntax_mt.training.run.train` with `--model_name_or_path <that checkpoint>`:
   `marian` = converted to `transformer_abs` (Marian's function and training path, no syntax: plain Marian
   continued), `dep_rel`, `dep_labeled_rel`; a short schedule (`--finetune-epochs`, peak lr `--finetune-lr`);
   GiNZA parses computed once (cached by `quality.py`'s parse cache) and shared by all runs;
4. each run's last checkpoint (no selection on the dev it reports) translates dev (beam 4, scored) and test.ja
   (beam 4, blind: written, never scored); before fine-tuning, every arm's converted model translates dev too (`step0`, which must equal
   the pretrained Marian's BLEU for these presets), and so do `transformer_dbsa` (its parse heads start as the
   heads they replace: unchanged) and `transformer_sla` (its masks change the function: how far BLEU moves).

A pretrained checkpoint committed under `results/marian_finetune/pretrained/` (weights, config and the
Marian tokenizer files; pretraining takes ~2 h on one CPU core) is fine-tuned as it is, so a later session
needs only the fine-tuning runs. Resumable: the pretrained checkpoint and every finished run (`<results>/<arm>/seed<k>.json`) are skipped,
an interrupted run resumes from its last checkpoint. `summary` reports mean ± std over seeds and a paired
bootstrap (quality.py's: 1,000 samples over dev sentences) of each syntax arm against `marian`.

`--syntax-lr-multiplier X` trains the parameters the conversion adds (relation tables, W_rel) at X times the
fine-tuning lr (`SyntaxMTTrainingArguments.syntax_lr_multiplier`; `marian` has none, so its runs are the same
for every X and shared); each result records its fine-tuning settings
and the RMS of the syntax parameters at the end, and runs with other settings than the defaults keep their
checkpoints apart (`finetune/<arm>-<settings>/`). A result directory holds one setting: a finished result of
another setting is refused, so give each setting its own `--results-dir`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quality  # noqa: E402  (benchmarks/ is on sys.path with this script)
from hf_syntax_mt.syntax import PreParsedAnnotator, apply_source_spacing  # noqa: E402
from quality_lib.corpus import build_parser, parse_cached  # noqa: E402
from quality_lib.runner import device_description  # noqa: E402
from quality_lib.scores import bleu_statistics, paired_bootstrap  # noqa: E402
from quality_lib.translation import score, translate  # noqa: E402
from results_md import write_section  # noqa: E402

logger = logging.getLogger("marian_finetune")

CORPUS = REPO.parent / "shared" / "data" / "small_parallel_enja"
ARMS = {"marian": "transformer_abs", "dep_rel": "transformer_dep_rel", "dep_labeled_rel": "transformer_dep_labeled_rel"}
STEP0_ONLY = {"dbsa": "transformer_dbsa", "sla": "transformer_sla"}  # converted and scored, not fine-tuned
PARSER = {"spacy": "ja_ginza", "disable": ["ner", "morphologizer", "compound_splitter", "bunsetu_recognizer"]}
MODEL = dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=1024, decoder_ffn_dim=1024, activation_function="swish", scale_embedding=True,
             max_position_embeddings=512, dropout=0.1)
SMOKE_MODEL = dict(MODEL, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, encoder_layers=1, decoder_layers=1)
SPM_SIZES = {"source": 4000, "target": 4000}  # a joint vocabulary of ~8k, as the recipe's joint BPE
BLEU_TOKENIZE, BEAMS, MAX_LENGTH = "13a", 4, 128
DEFAULT_RESULTS = REPO / "benchmarks" / "results" / "marian_finetune"
DEFAULT_SETTINGS = {"finetune_lr": 2e-4, "finetune_epochs": 1.0, "syntax_lr_multiplier": 1.0}


def read(path: Path, limit=None) -> list[str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return lines[:limit] if limit else lines


class Corpus:
    """ja (despaced) → en lines and their GiNZA parses (quality.py's cache)."""

    def __init__(self, runs_dir: Path, smoke: bool):
        limits = (400, 20, 10) if smoke else (None, None, None)
        self.paths = {"train": CORPUS / "train.ja", "dev": CORPUS / "dev.ja", "test": CORPUS / "test.ja"}
        self.sources = {split: [apply_source_spacing(t, "despace_cjk") for t in read(path, limit)]
                        for (split, path), limit in zip(self.paths.items(), limits)}
        self.targets = {"train": read(CORPUS / "train.en", limits[0]), "dev": read(CORPUS / "dev.en", limits[1])}
        self.cache_dir = runs_dir / "parse_cache"
        self._parses = {}

    def parses(self, split: str):
        if split not in self._parses:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            self._parses[split] = parse_cached(self.sources[split], PARSER, self.paths[split], self.cache_dir)
        return self._parses[split]

    def write_pairs(self, directory: Path) -> dict:
        """Despaced copies for the training script (`PREFIX.ja` / `PREFIX.en`), under the runs directory."""
        directory.mkdir(parents=True, exist_ok=True)
        for split in ("train", "dev"):
            (directory / f"{split}.ja").write_text("".join(t + "\n" for t in self.sources[split]), encoding="utf-8")
            (directory / f"{split}.en").write_text("".join(t + "\n" for t in self.targets[split]), encoding="utf-8")
        return {split: str(directory / split) for split in ("train", "dev")}


# ---------------------------------------------------------------------------------------------
# Pretraining (the stand-in for a Hub checkpoint)
# ---------------------------------------------------------------------------------------------


def train_sentencepiece_pair(corpus: Corpus, directory: Path, sizes: dict):
    """source.spm / target.spm (unigram, as opus-mt) + Marian's joint vocab.json; returns the MarianTokenizer."""
    from hf_syntax_mt.hub.convert_marian import train_marian_tokenizer

    return train_marian_tokenizer(directory, corpus.sources["train"], corpus.targets["train"], sizes["source"],
                                  sizes["target"], source_coverage=0.9995, num_threads=2, source_lang="ja",
                                  target_lang="en")


def pretrain(corpus: Corpus, directory: Path, args) -> Path:
    """Pretrain a MarianMTModel by the recipe into `directory` (skipped when it holds one)."""
    import datasets
    import torch
    from transformers import (
        DataCollatorForSeq2Seq,
        MarianConfig,
        MarianMTModel,
        Seq2SeqTrainer,
        Seq2SeqTrainingArguments,
    )
    from transformers.trainer_utils import get_last_checkpoint

    from hf_syntax_mt import convert_marian_tokenizer

    if (directory / "model.safetensors").is_file():
        return directory
    if not (directory / "vocab.json").is_file():
        train_sentencepiece_pair(corpus, directory, {"source": 1000, "target": 300} if args.smoke else SPM_SIZES)
    tokenizer = convert_marian_tokenizer(directory)  # the same ids as MarianTokenizer (tests/hub/test_convert_marian.py), faster
    torch.manual_seed(0)
    config = MarianConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                          decoder_start_token_id=tokenizer.pad_token_id, forced_eos_token_id=tokenizer.eos_token_id,
                          **(SMOKE_MODEL if args.smoke else MODEL))
    model = MarianMTModel(config)
    model.generation_config.bad_words_ids = [[tokenizer.pad_token_id]]
    data = datasets.Dataset.from_dict({"source": corpus.sources["train"], "target": corpus.targets["train"]})
    data = data.map(lambda b: tokenizer(b["source"], text_target=b["target"], truncation=True, max_length=MAX_LENGTH),
                    batched=True, remove_columns=["source", "target"])
    checkpoints = directory / "checkpoints"
    training_args = Seq2SeqTrainingArguments(
        output_dir=str(checkpoints), per_device_train_batch_size=64, learning_rate=7e-4, adam_beta2=0.98,
        lr_scheduler_type="inverse_sqrt", warmup_steps=5 if args.smoke else 800, label_smoothing_factor=0.1,
        num_train_epochs=args.pretrain_epochs, max_steps=30 if args.smoke else -1, save_strategy="epoch",
        save_total_limit=1, logging_steps=50, seed=0, use_cpu=True, report_to=[], disable_tqdm=True,
    )
    trainer = Seq2SeqTrainer(model=model, args=training_args, train_dataset=data, processing_class=tokenizer,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model))
    trainer.train(resume_from_checkpoint=get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None)
    model.save_pretrained(directory)
    return directory


def marian_dev_bleu(pretrained: Path, corpus: Corpus) -> dict:
    """The pretrained Marian itself on dev (beam 4), through its own MarianTokenizer."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tokenizer = MarianTokenizer.from_pretrained(pretrained)
    model = MarianMTModel.from_pretrained(pretrained).eval()
    hyps = []
    for i in range(0, len(corpus.sources["dev"]), 64):
        batch = tokenizer(corpus.sources["dev"][i: i + 64], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**batch, num_beams=BEAMS, max_length=MAX_LENGTH)
        hyps += [h.strip() for h in tokenizer.batch_decode(out, skip_special_tokens=True)]
    return {**score(hyps, corpus.targets["dev"], BLEU_TOKENIZE), "hypotheses": hyps}


# ---------------------------------------------------------------------------------------------
# Fine-tuning runs
# ---------------------------------------------------------------------------------------------


def translate_sets(model, tokenizer, corpus: Corpus, prefix: Path) -> dict:
    """dev (scored) and test.ja (blind) with beam 4; hypotheses written next to `prefix`."""
    needs_parse = model.config.needs_parser_at_inference
    result = {}
    for split in ("dev", "test"):
        hyps = translate(model, tokenizer, corpus.sources[split], corpus.parses(split) if needs_parse else None,
                                 BEAMS, MAX_LENGTH, MAX_LENGTH)
        path = Path(f"{prefix}.{split}.beam{BEAMS}.txt")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        result[split] = {"hypotheses": os.path.relpath(path, REPO), "sentences": len(hyps)}
        if split == "dev":
            result[split].update(score(hyps, corpus.targets["dev"], BLEU_TOKENIZE))
    return result


def step0(arm: str, pretrained: Path, corpus: Corpus, results_dir: Path) -> dict:
    """The converted model before fine-tuning (dev only)."""
    from hf_syntax_mt import SyntaxMTForConditionalGeneration, convert_marian_tokenizer

    path = results_dir / arm / "step0.json"
    if path.is_file():
        return json.loads(path.read_text())
    preset = {**ARMS, **STEP0_ONLY}[arm]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = SyntaxMTForConditionalGeneration.from_marian(pretrained, preset=preset)
    model.config.source_spacing = "despace_cjk"
    tokenizer = convert_marian_tokenizer(pretrained)
    needs_parse = model.config.needs_parser_at_inference
    hyps = translate(model, tokenizer, corpus.sources["dev"], corpus.parses("dev") if needs_parse else None,
                             BEAMS, MAX_LENGTH, MAX_LENGTH)
    result = {"arm": arm, "preset": preset, **score(hyps, corpus.targets["dev"], BLEU_TOKENIZE),
              "conversion_warnings": [str(w.message) for w in caught if "LayerDrop" not in str(w.message)]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def finetune(arm: str, seed: int, pretrained: Path, corpus: Corpus, files: dict, args) -> dict:
    """One arm × seed with `hf_syntax_mt.training.run.train` from the Marian checkpoint."""
    from hf_syntax_mt.training.run import DataArguments, ModelArguments, SyntaxMTTrainingArguments, train

    result_path = args.results_dir / arm / f"seed{seed}.json"
    preset = ARMS[arm]
    settings = finetune_settings(args, preset)
    if result_path.is_file():
        result = json.loads(result_path.read_text())
        recorded = {key: result.get(key, DEFAULT_SETTINGS[key]) for key in settings}
        if recorded != settings:
            raise ValueError(f"{result_path} was fine-tuned with {recorded}, not {settings}: give this setting "
                             "its own --results-dir")
        logger.info("%s seed %d: done (%s)", arm, seed, result_path)
        return result
    needs_parse = preset != "transformer_abs"
    model_args = ModelArguments(model_name_or_path=str(pretrained), preset=preset,
                                config_overrides="label_smoothing=0.1,attn_implementation=eager",
                                parser="preparsed" if needs_parse else "none")
    data_args = DataArguments(train_file=files["train"], validation_file=files["dev"], source_lang="ja", target_lang="en",
                              max_source_length=MAX_LENGTH, max_target_length=MAX_LENGTH, source_spacing="despace_cjk",
                              cache_dir=str(args.runs_dir / "features"))
    output_dir = args.runs_dir / "finetune" / (arm + settings_tag(settings)) / f"seed{seed}"
    training_args = SyntaxMTTrainingArguments(
        output_dir=str(output_dir), seed=seed, per_device_train_batch_size=64, per_device_eval_batch_size=64,
        learning_rate=args.finetune_lr, warmup_steps=2 if args.smoke else 200, num_train_epochs=args.finetune_epochs,
        max_steps=6 if args.smoke else -1, eval_strategy="steps" if args.smoke else "epoch", eval_steps=3,
        save_strategy="steps" if args.smoke else "epoch", save_steps=3, generation_num_beams=1, logging_steps=50,
        use_cpu=True, report_to=[], disable_tqdm=True, syntax_lr_multiplier=settings["syntax_lr_multiplier"],
        load_best_model_at_end=False,  # report the last model: a checkpoint picked on dev would flatter dev
    )
    annotator = None
    if needs_parse:
        annotator = PreParsedAnnotator(corpus.parses("train") + corpus.parses("dev"),
                                       made_by=build_parser(PARSER, check_installed=False).to_dict())
    start = time.time()
    trained = train(model_args, data_args, training_args, annotator=annotator,
                    command=" ".join([sys.executable, *sys.argv]))
    model, tokenizer = trained.trainer.model, trained.trainer.processing_class
    result = {"arm": arm, "preset": preset, "seed": seed, "pretrained": os.path.relpath(pretrained, REPO),
              "train_seconds": round(time.time() - start, 1), "device": device_description("cpu"),
              "threads": args.threads, **settings, "reported_model": "last", "parameter_rms": parameter_rms(model),
              "greedy_dev_bleu_history": [e["eval_bleu"] for e in trained.trainer.state.log_history if "eval_bleu" in e],
              **translate_sets(model, tokenizer, corpus, args.results_dir / arm / f"seed{seed}")}
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(result, indent=1) + "\n")
    logger.info("%s seed %d: dev BLEU %.2f", arm, seed, result["dev"]["bleu"])
    return result


def finetune_settings(args, preset: str) -> dict:
    """The fine-tuning settings a result records (and its run directory is named by, where not the defaults);
    plain Marian has no syntax parameters, so the multiplier does not apply to it (its runs are shared)."""
    multiplier = args.syntax_lr_multiplier if preset != "transformer_abs" else None
    return {"finetune_lr": args.finetune_lr, "finetune_epochs": args.finetune_epochs,
            "syntax_lr_multiplier": DEFAULT_SETTINGS["syntax_lr_multiplier"] if multiplier is None else multiplier}


def settings_tag(settings: dict) -> str:
    """'' for the default settings, else e.g. '-finetune_epochs3-syntax_lr_multiplier10'."""
    return "".join(f"-{key}{value:g}" for key, value in settings.items() if value != DEFAULT_SETTINGS[key])


def parameter_rms(model) -> dict:
    """Root mean square of the relation tables, of W_rel and (for scale) of the encoder's key projections."""
    import torch

    def rms(names):
        values = [parameter.detach().float().flatten() for name, parameter in model.named_parameters() if name in names]
        return round(float(torch.cat(values).pow(2).mean().sqrt()), 6) if values else None

    syntax = model.syntax_parameter_names()
    return {"relation_tables": rms({n for n in syntax if ".relations.relative." in n or ".relations.dependency." in n}),
            "w_rel": rms({n for n in syntax if ".relations.combine." in n}),
            "encoder_k_proj": rms({n for n, _ in model.named_parameters()
                                   if n.startswith("model.encoder.layers.") and n.endswith("self_attn.k_proj.weight")})}


def run(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    corpus = Corpus(args.runs_dir, args.smoke)
    pretrained = args.pretrained if args.pretrained else pretrain(corpus, args.runs_dir / "pretrained", args)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    reference = args.results_dir / "pretrained.json"
    if not reference.is_file():
        scores = marian_dev_bleu(pretrained, corpus)
        reference.write_text(json.dumps({k: v for k, v in scores.items() if k != "hypotheses"}, indent=1) + "\n")
    arms = args.arms.split(",")
    for arm in [*arms, *STEP0_ONLY]:
        logger.info("%s before fine-tuning: %s", arm, step0(arm, pretrained, corpus, args.results_dir))
    if args.command == "step0":
        return
    files = corpus.write_pairs(args.runs_dir / "data")
    for seed in [int(s) for s in args.seeds.split(",")]:
        for arm in arms:
            finetune(arm, seed, pretrained, corpus, files, args)


def summary(args) -> str:
    """Mean ± std of dev BLEU per arm and the paired bootstrap of each syntax arm against `marian`."""
    corpus_refs = read(CORPUS / "dev.en", 20 if args.smoke else None)
    lines = [f"# Fine-tuning a pretrained Marian ({args.results_dir.name})", ""]
    pretrained = args.results_dir / "pretrained.json"
    if pretrained.is_file():
        lines.append(f"Pretrained Marian, dev beam {BEAMS}: BLEU {json.loads(pretrained.read_text())['bleu']:.2f}")
    lines += ["", "| arm | preset | step 0 BLEU | dev BLEU (beam 4) | seeds | Δ vs marian [95% CI] | p |", "|---|---|---|---|---|---|---|"]
    stats = {}
    for arm, preset in ARMS.items():
        folder = args.results_dir / arm
        if arm == "marian" and not any(folder.glob("seed*.json")) and args.baseline_dir:
            folder = baseline_folder(args)
        runs = sorted(folder.glob("seed*.json"))
        if not runs:
            continue
        results = [json.loads(p.read_text()) for p in runs]
        stats[arm] = {r["seed"]: bleu_statistics(read(REPO / r["dev"]["hypotheses"]), corpus_refs, BLEU_TOKENIZE)
                      for r in results}
        bleus = [r["dev"]["bleu"] for r in results]
        step0_path = folder / "step0.json"
        zero = f"{json.loads(step0_path.read_text())['bleu']:.2f}" if step0_path.is_file() else "–"
        delta = p_value = "–"
        if arm != "marian" and "marian" in stats:
            seeds = sorted(set(stats[arm]) & set(stats["marian"]))
            if seeds:
                test = paired_bootstrap([stats[arm][s] for s in seeds], [stats["marian"][s] for s in seeds],
                                                tokenize=BLEU_TOKENIZE)
                delta = f"{test['delta']:+.2f} [{test['ci95'][0]:+.2f}, {test['ci95'][1]:+.2f}]"
                p_value = f"{test['p_value']:.3f}"
        std = float(np.std(bleus, ddof=1)) if len(bleus) > 1 else 0.0
        arm_label = arm if folder.parent == args.results_dir else f"{arm} ({os.path.relpath(folder.parent, REPO)})"
        lines.append(f"| {arm_label} | {preset} | {zero} | {np.mean(bleus):.2f} ± {std:.2f} | "
                     f"{','.join(str(r['seed']) for r in results)} | {delta} | {p_value} |")
    for arm, preset in STEP0_ONLY.items():
        step0_path = args.results_dir / arm / "step0.json"
        if step0_path.is_file():
            lines.append(f"| {arm} (converted only) | {preset} | {json.loads(step0_path.read_text())['bleu']:.2f} "
                         "| not fine-tuned | – | – | – |")
    text = "\n".join(lines) + "\n"
    (args.results_dir / "summary.md").write_text(text, encoding="utf-8")
    if not args.smoke and args.results_dir == DEFAULT_RESULTS:
        write_section(REPO / "model_cards" / "RESULTS.md", "marian-finetune", results_section(text, args.results_dir))
    return text


def baseline_folder(args) -> Path:
    """`<baseline_dir>/marian`: plain Marian's runs, which every `--syntax-lr-multiplier` shares, refused if they were
    fine-tuned with another lr or schedule than this results dir's syntax arms."""
    def schedules(paths):  # results written before the settings were recorded used the defaults
        return {tuple(json.loads(p.read_text()).get(key, DEFAULT_SETTINGS[key]) for key in ("finetune_lr", "finetune_epochs"))
                for p in paths}

    folder = args.baseline_dir.resolve() / "marian"
    theirs, ours = schedules(folder.glob("seed*.json")), schedules(args.results_dir.glob("*/seed*.json"))
    if not theirs:
        raise ValueError(f"--baseline-dir {args.baseline_dir}: no marian/seed*.json there")
    if ours and theirs != ours:
        raise ValueError(f"--baseline-dir {args.baseline_dir}: plain Marian was fine-tuned with (lr, epochs) {sorted(theirs)}, "
                         f"the runs of {args.results_dir} with {sorted(ours)}")
    return folder


def results_section(table: str, results_dir: Path) -> str:
    """The RESULTS.md section: how the runs were made, then the summary table."""
    runs = [json.loads(p.read_text()) for p in sorted(results_dir.glob("*/seed*.json"))]
    devices = sorted({f"{r['device']}, {r['threads']} threads" for r in runs if "device" in r})
    seconds = [r["train_seconds"] for r in runs]
    how = (f"Generated by `python benchmarks/marian_finetune.py summary` from `{os.path.relpath(results_dir, REPO)}/` "
           "(runs: `python benchmarks/marian_finetune.py run --seeds 1,2,3`). A recipe-size MarianMT (d 256, 3+3 layers, "
           "opus-style SentencePiece models) pretrained from scratch on the ja→en corpus stands in for a Hub "
           "checkpoint; each arm fine-tunes that same checkpoint for one epoch (peak lr 2e-4, 200 warm-up steps, "
           "label smoothing 0.1, GiNZA trees); `step 0` is the converted model before fine-tuning. Dev BLEU "
           "(sacreBLEU 13a, beam 4) after fine-tuning; Δ is the paired bootstrap "
           "(1,000 samples) against plain Marian over the common seeds. Blind test.ja translations lie beside each "
           "result JSON, never scored.")
    if devices:
        how += f" Trained on {'; '.join(devices)}, fp32"
        how += f", {min(seconds) / 60:.0f}–{max(seconds) / 60:.0f} min a run." if seconds else "."
    return "## Fine-tuning a pretrained Marian\n\n" + how + "\n\n" + table.split("\n", 2)[2].strip()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run", "step0", "summary"])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--pretrain-epochs", type=float, default=8)
    parser.add_argument("--finetune-epochs", type=float, default=DEFAULT_SETTINGS["finetune_epochs"])
    parser.add_argument("--finetune-lr", type=float, default=DEFAULT_SETTINGS["finetune_lr"])
    parser.add_argument("--syntax-lr-multiplier", type=float, default=None,
                        help="learning rate of the parameters the conversion adds (relation tables, W_rel) as a "
                             "multiple of --finetune-lr (default: 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pretrained", type=Path, default=None,
                        help="fine-tune this Marian checkpoint instead of pretraining one (default: "
                             "<results-dir>/pretrained, else results/marian_finetune/pretrained, when it holds a model; "
                             "else pretrain into the runs dir)")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 400 pairs, a few steps: checks the pipeline")
    parser.add_argument("--runs-dir", type=Path, default=None, help="checkpoints, parses, features (gitignored)")
    parser.add_argument("--results-dir", type=Path, default=None)
    parser.add_argument("--baseline-dir", type=Path, default=None,
                        help="summary: compare with the plain Marian runs of this results dir when --results-dir has "
                             "none (they are shared by every --syntax-lr-multiplier; same lr and epochs required)")
    args = parser.parse_args(argv)
    if args.baseline_dir is not None and not (args.baseline_dir / "marian").is_dir():
        parser.error(f"--baseline-dir {args.baseline_dir}: no marian/ folder of plain-Marian results there")
    name = "marian_finetune_smoke" if args.smoke else "marian_finetune"
    args.runs_dir = (args.runs_dir or quality.DEFAULT_RUNS.parent / name).resolve()
    args.results_dir = (args.results_dir or (args.runs_dir / "results" if args.smoke else DEFAULT_RESULTS)).resolve()
    if args.pretrained is None and not args.smoke:  # the checkpoint a session pretrained and committed
        args.pretrained = next((d / "pretrained" for d in (args.results_dir, DEFAULT_RESULTS)
                                if (d / "pretrained" / "model.safetensors").is_file()), None)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command in ("run", "step0"):
        run(args)
    print(summary(args))


if __name__ == "__main__":
    main()
