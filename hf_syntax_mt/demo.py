"""The embedded demo (`hf-syntax-mt demo`): syntax-aware vs. plain Transformer, offline, in minutes.

1. writes the synthetic corpus (`hf_syntax_mt.features.synthetic`): English-like sources with gold
   dependency + constituency trees; targets are the head-final linearisation of the tree, so
   word order depends on the syntax;
2. trains each preset with the same small model, tokenizer and step budget through
   `hf_syntax_mt.training.run.train` on the gold trees (`*.src.conllu` / `*.src.tree`, written next to
   the text), recording the grammar's own parser (`--parser synthetic_grammar`) in each model's config, so
   the models translate raw text like any other (pipeline, `translate`, the page);
3. prints dev BLEU / chrF (greedy) per preset, translates the dev set with
   `pipeline("syntax-translation", model=dir)`, passing the pre-parsed annotations as users with
   pre-parsed data would (`annotator=PreParsedAnnotator.from_conllu(...)`), and shows the first dev
   sentences that the presets translate differently, with their reference;
4. says where the models are and the commands that use them next (translate, the page, the pipeline).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from .training.threads import THREADS_HELP, set_torch_threads

DEMO_PRESETS = ("transformer_abs", "transformer_dep_rel")
DEMO_MODEL = dict(
    d_model=128,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=256,
    decoder_ffn_dim=256,
    dropout=0.1,
)


class DemoInterrupted(Exception):
    """Ctrl-C / SIGTERM stopped a preset's training at a checkpoint; `signal_number` is the signal."""

    def __init__(self, signal_number: int):
        super().__init__(f"interrupted by signal {signal_number}")
        self.signal_number = signal_number


def _progress_callback(preset: str, stream):
    """A `TrainerCallback` printing one line at each training log (step, loss, seconds) to `stream`, so the
    demo shows its progress by default while the Trainer's own log dicts stay hidden."""
    from transformers import TrainerCallback

    class DemoProgress(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.time()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                print(f"  {preset}: step {state.global_step}/{state.max_steps}  loss {float(logs['loss']):.3f}  "
                      f"({time.time() - self.start:.0f} s)", file=stream, flush=True)

    return DemoProgress()


def run_demo(
    out_dir="syntax_mt_demo",
    presets: Sequence[str] = DEMO_PRESETS,
    n_train: int = 20000,
    n_dev: int = 500,
    max_steps: int = 1200,
    batch_size: int = 48,
    learning_rate: float = 1.5e-3,
    warmup_steps: int = 200,
    vocab_size: int = 1000,
    model: Optional[dict] = None,
    samples: int = 3,
    seed: int = 0,
    verbose: bool = False,
    threads: Optional[int] = None,
) -> dict:
    """Run the demo; returns `{preset: {"bleu", "chrf", "train_seconds", "output_dir"}}`. `threads`: torch's
    CPU threads (default: $HF_SYNTAX_MT_THREADS, else torch's own). Ctrl-C / SIGTERM during a training saves a
    checkpoint and raises `DemoInterrupted`; the same call then resumes from it (other corpus settings start anew)."""
    import torch
    from transformers import logging as hf_logging
    from transformers import pipeline

    from .features.joint_bpe import add_lowercasing, clear_call_state, lowercases
    from .features.synthetic import write_synthetic_corpus
    from .features.training_data import preparsed_annotator
    from .inference import pipeline as _registers_task  # noqa: F401  (registers "syntax-translation")
    from .syntax import GrammarAnnotator, PreParsedAnnotator
    from .training.run import DataArguments, ModelArguments, SyntaxMTTrainingArguments, train

    set_torch_threads(threads)
    if not verbose:
        import logging

        logging.getLogger("sacrebleu").setLevel(logging.ERROR)  # the synthetic text is tokenized on purpose
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        import datasets

        datasets.disable_progress_bars()
    out_dir = Path(out_dir)
    data_dir = out_dir / "data"
    start = time.time()
    corpus_settings = {"n_train": n_train, "n_dev": n_dev, "seed": seed}
    settings_file = data_dir / "corpus_settings.json"
    corpus_changed = not settings_file.is_file() or json.loads(settings_file.read_text()) != corpus_settings
    if corpus_changed:
        write_synthetic_corpus(data_dir, n_train=n_train, n_dev=n_dev, n_test=0, seed=seed)
        settings_file.write_text(json.dumps(corpus_settings))
    print(f"synthetic corpus: {n_train} train / {n_dev} dev pairs in {data_dir}  (e.g.)")
    dev_src = (data_dir / "dev.src").read_text(encoding="utf-8").splitlines()
    dev_tgt = (data_dir / "dev.tgt").read_text(encoding="utf-8").splitlines()
    print(f"  source: {dev_src[0]}\n  target: {dev_tgt[0]}")
    overrides = ",".join(f"{k}={v}" for k, v in {**DEMO_MODEL, **(model or {})}.items())
    # the gold trees, recorded as made by the grammar's parser: the models then parse new text themselves
    gold = [a for split in ("train", "dev") for a in preparsed_annotator(data_dir / split, "src").annotations]
    parses = PreParsedAnnotator(gold, made_by=GrammarAnnotator().to_dict())
    results = {}
    tokenizer = None
    for preset in presets:
        run_dir = out_dir / preset.replace("+", "-")
        model_args = ModelArguments(preset=preset, config_overrides=overrides, vocab_size=vocab_size, parser="preparsed")
        data_args = DataArguments(
            train_file=str(data_dir / "train"), validation_file=str(data_dir / "dev"),
            max_source_length=64, max_target_length=64, cache_dir=str(out_dir / "cache"),
        )
        # a checkpoint in run_dir is the one an interrupt left (the demo saves none): the same command resumes it
        resume = not corpus_changed and any(run_dir.glob("checkpoint-*"))
        training_args = SyntaxMTTrainingArguments(
            output_dir=str(run_dir), max_steps=max_steps, per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=100, learning_rate=learning_rate, warmup_steps=warmup_steps,
            eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
            logging_steps=max(1, max_steps // 6),
            seed=seed, use_cpu=True, disable_tqdm=not verbose, dataloader_num_workers=0,
            overwrite_output_dir=not resume,
        )
        t0 = time.time()
        print(f"training {preset} ({max_steps} steps)", flush=True)
        progress = _progress_callback(preset, sys.stdout)  # the stream before the redirect below
        with contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO()):  # the Trainer's log dicts
            result = train(model_args, data_args, training_args, tokenizer=tokenizer, annotator=parses,
                           callbacks=[progress], command=f"hf-syntax-mt demo (preset {preset})")
        if result.interrupted_by is not None:  # training logged where it stopped and how to resume
            raise DemoInterrupted(result.interrupted_by)
        tokenizer = result.trainer.processing_class  # one shared tokenizer for a fair comparison
        if not lowercases(tokenizer):  # the corpus is lowercase: read "The Dog" as "the dog", not unknown capitals
            add_lowercasing(tokenizer)
            clear_call_state(tokenizer)
            tokenizer.save_pretrained(run_dir)
        results[preset] = {
            "bleu": result.metrics.get("eval_bleu"),
            "chrf": result.metrics.get("eval_chrf"),
            "train_seconds": round(time.time() - t0, 1),
            "output_dir": str(run_dir),
        }
        print(f"{preset:<28} dev BLEU {results[preset]['bleu']:6.2f}  chrF {results[preset]['chrf']:6.2f}  "
              f"({results[preset]['train_seconds']:.0f} s)")

    trees = (data_dir / "dev.src.tree").read_text(encoding="utf-8").splitlines()
    annotator = PreParsedAnnotator.from_conllu(data_dir / "dev.src.conllu", trees=trees)
    translations = {}
    for preset in presets:
        translate = pipeline("syntax-translation", model=results[preset]["output_dir"], annotator=annotator)
        translations[preset] = [out["translation_text"] for out in translate(dev_src, batch_size=100)]
    differ = [k for k in range(len(dev_src)) if len({translations[p][k] for p in presets}) > 1]
    shown = differ if len(presets) > 1 else list(range(len(dev_src)))
    if len(presets) > 1:
        print(f"\nthe presets translate {len(differ)} of {len(dev_src)} dev sentences differently; the first "
              f"{min(samples, len(differ))} (greedy, through pipeline('syntax-translation'); = marks the reference):")
    else:
        print("\nsample translations through pipeline('syntax-translation') (= marks the reference):")
    for k in shown[:samples]:
        print(f"  source:    {dev_src[k]}\n  reference: {dev_tgt[k]}")
        for preset in presets:
            mark = "=" if translations[preset][k] == dev_tgt[k] else " "
            print(f"  {preset:<28}{mark} {translations[preset][k]}")
    (out_dir / "demo_results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"\ntotal {time.time() - start:.0f} s on {torch.get_num_threads()} threads; results in {out_dir}/demo_results.json")
    print(next_steps([results[preset]["output_dir"] for preset in presets], dev_src[0]))
    return results


def next_steps(models: Sequence[str], sentence: str) -> str:
    """Where the demo's models are and the commands that use them (the last model translates; the page shows the
    last two side by side)."""
    model, shown = shlex.quote(models[-1]), " ".join(f"--model {shlex.quote(m)}" for m in models[-2:])
    call = (f"import hf_syntax_mt; from transformers import pipeline; print(pipeline(\"syntax-translation\", "
            f"model={json.dumps(models[-1], ensure_ascii=False)})([{json.dumps(sentence, ensure_ascii=False)}]))")
    return "\n".join([
        "models: " + ", ".join(models) + " (they translate raw sentences of the demo's grammar)",
        "next:",
        f"  echo {shlex.quote(sentence)} | hf-syntax-mt translate --model {model}",
        f"  hf-syntax-mt app {shown}    # then open http://127.0.0.1:7860",
        f"  python -c {shlex.quote(call)}",
    ])


def main(argv: Optional[Sequence[str]] = None) -> dict:
    parser = argparse.ArgumentParser(prog="hf-syntax-mt demo", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="syntax_mt_demo", help="output directory (corpus, models, results)")
    parser.add_argument("--presets", default=",".join(DEMO_PRESETS), help="comma-separated presets to compare")
    parser.add_argument("--n-train", type=int, default=20000)
    parser.add_argument("--n-dev", type=int, default=500)
    parser.add_argument("--max-steps", type=int, default=1200)
    parser.add_argument("--batch-size", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="show progress bars and training logs")
    parser.add_argument("--threads", type=int, help=THREADS_HELP)


def run_from_args(args) -> dict:
    return run_demo(out_dir=args.out, presets=[p for p in args.presets.split(",") if p], n_train=args.n_train,
                    n_dev=args.n_dev, max_steps=args.max_steps, batch_size=args.batch_size, seed=args.seed,
                    verbose=args.verbose, threads=args.threads)


if __name__ == "__main__":
    main()
