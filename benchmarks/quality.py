"""What the syntax buys: a resumable dev-BLEU runner over presets × seeds, and its summary.

    python benchmarks/quality.py parse   --recipe R                  # parse caches + alignment check
    python benchmarks/quality.py run     --recipe R --presets A,B --seeds 1,2,3 [--extra-eval name=src,tgt]
    python benchmarks/quality.py run     --recipe R --evaluate-only RUN_DIR_OR_CHECKPOINT --extra-eval ...
    python benchmarks/quality.py summary --recipe R [--recipe R2 ...]   # model_cards/RESULTS.md + PNG (other recipes kept)

A recipe (`benchmarks/recipes/*.json`, one per corpus and direction) fixes the data, the parsers,
the model size (`model`: config overrides on every preset), the training arguments (`training`:
`SyntaxMTTrainingArguments` fields) and the final beam size. Named variants (`variants`:
{"transformer_dbsa@layer2": {"preset": "transformer_dbsa", "model": {...}, "training": {...}}})
change a preset's config or training on top of that and run, skip, resume and summarize under their
own name like any preset. For every (preset, seed):

1. one joint BPE tokenizer per recipe, trained once on train source + target and reused;
2. parses: computed once per (text file, parser) and cached as JSON lines under
   `<runs>/parse_cache/` (keyed by the sha256 of the text and the parser's name/version/settings);
   every run gets them through a `PreParsedAnnotator`, so no run parses again and the
   `datasets` feature cache of `add_syntax_features` is shared by all runs of a preset family;
3. `hf_syntax_mt.training.train` (greedy dev BLEU each epoch picks the checkpoint);
4. the best model translates dev (and every `--extra-eval` set) with beam `final_num_beams`
   by a direct `generate` loop in corpus order, scored with sacrebleu; a direct greedy pass is
   compared with the Trainer's greedy dev BLEU (the group_by_length eval-order bug check);
5. `results/<recipe>/<preset>/seed<k>.json` + hypothesis files; checkpoints stay in
   `<runs>/<recipe>/<preset>/seed<k>` (never in the repository). A run whose JSON exists is
   skipped; an interrupted run resumes from its last checkpoint.

Pre-tokenized Japanese (small_parallel_enja is KyTea-segmented with spaces): GiNZA parses the text
with the spaces removed (natural Japanese, which it was trained on; on spaced text Sudachi follows
the KyTea cuts and the parses get worse), and each word's span is mapped back into the spaced
text (`DespacedSpacyAnnotator`). A GiNZA word may then cover a space (KyTea `送 っ` = Sudachi
`送っ`): its subwords all belong to that word, as the alignment rule in `hf_syntax_mt.syntax`
says; `parse` prints how many parser words got no subword of their own. A recipe's `source_spacing`
(`hf_syntax_mt.syntax.spacing`, recorded in every run's config) says what source text the models
read: "segmented" (the corpus's spaces kept: runs comparable with the earlier grid, but the models
need segmented input), or "despace_cjk" (the source lines lose the spaces next to CJK characters as
they are read, before the tokenizer is trained and the text is parsed: models for natural text).

Summary statistics: mean ± sample std over seeds; paired bootstrap resampling (Koehn 2004) over
dev sentences with 1,000 samples: in each sample every system's score is the mean over its seeds
of corpus BLEU on the resampled sentences; p = fraction of samples where the preset does not beat
the baseline (one-sided), with the 95% interval of the difference.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import hashlib
import importlib.util
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from results_md import marked, write_section  # noqa: E402  (benchmarks/ is on sys.path with this script)
from hf_syntax_mt.syntax import (  # noqa: E402
    Annotation, Annotator, PreParsedAnnotator, SpacyAnnotator, apply_source_spacing, locate_words, read_conllu,
)

logger = logging.getLogger("quality")

DEFAULT_RUNS = Path(os.environ.get("HF_SYNTAX_MT_RUNS", REPO / "runs" / "quality"))  # gitignored
DEFAULT_RESULTS = REPO / "benchmarks" / "results"
RESULTS_MD = REPO / "model_cards" / "RESULTS.md"
BOOTSTRAP_SAMPLES = 1000
BASELINE = "transformer_abs"
DEP_BASELINE = "transformer_rel"


# ---------------------------------------------------------------------------------------------
# Recipe and corpus
# ---------------------------------------------------------------------------------------------


def load_recipe(path) -> dict:
    """Read a recipe; data paths are relative to the recipe file's repository root (or absolute)."""
    path = Path(path).resolve()
    recipe = json.loads(path.read_text(encoding="utf-8"))
    for key in ("name", "source_lang", "target_lang", "data", "model", "training"):
        if key not in recipe:
            raise ValueError(f"recipe {path}: missing key {key!r}")
    base = Path(recipe.get("base_dir", path.parents[2] if path.parent.name == "recipes" else path.parent))
    if not base.is_absolute():
        base = (path.parent / base).resolve()
    from hf_syntax_mt.configuration_syntax_mt import PRESETS

    for name, variant in recipe.get("variants", {}).items():
        if name in PRESETS or "+" in name or "preset" not in variant:
            raise ValueError(f"recipe {path}: variant {name!r} needs its own name (not a preset or combination) "
                             "and a 'preset' key naming the preset it changes")
        unknown = set(variant) - {"preset", "model", "training"}
        if unknown:
            raise ValueError(f"recipe {path}: variant {name!r} has unknown keys {sorted(unknown)} "
                             "(allowed: preset, model, training)")
    recipe["_path"] = str(path)
    recipe["_base"] = str(base)
    check_training_settings(recipe)
    named = recipe.get("presets", []) + [p for block in recipe.get("grid", []) for p in block["presets"]]
    for name in dict.fromkeys(named + list(recipe.get("variants", {}))):
        run_config(recipe, name)
    return recipe


def check_training_settings(recipe: dict):
    """Refuse `training` keys (of the recipe or a variant) that are no `SyntaxMTTrainingArguments` field."""
    from dataclasses import fields

    from hf_syntax_mt.training import SyntaxMTTrainingArguments

    known = {f.name for f in fields(SyntaxMTTrainingArguments)}
    parts = [("training", recipe["training"])] + [(f"variant {name!r} training", v.get("training", {}))
                                                  for name, v in recipe.get("variants", {}).items()]
    for where, training in parts:
        for key in training:
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"recipe {recipe['_path']}: {where}: unknown training argument {key!r}{hint}")


def run_settings(recipe: dict, name: str) -> tuple[str, dict, dict]:
    """(preset, model overrides, training arguments) of a run name: a preset (or combination) with the
    recipe's `model` and `training`, or a named variant with its own changes on top of them."""
    variant = recipe.get("variants", {}).get(name, {})
    return (variant.get("preset", name), {**recipe["model"], **variant.get("model", {})},
            {**recipe["training"], **variant.get("training", {})})


def run_config(recipe: dict, name: str):
    """The model config of run `name` (a preset, a '+' combination or a variant) under the recipe;
    a bad name or setting raises a ValueError naming the recipe and the run."""
    from hf_syntax_mt.configuration_syntax_mt import SyntaxMTConfig

    base_preset, overrides, _ = run_settings(recipe, name)
    try:
        return SyntaxMTConfig.from_preset(base_preset, **overrides)
    except ValueError as error:
        raise ValueError(f"recipe {recipe['_path']}: run {name!r}: {error}") from None


def same_change_baseline(variants: dict, name: str) -> Optional[str]:
    """The variant of `transformer_abs` with exactly the model and training changes of variant `name`."""
    def changes(variant):
        return variant.get("model", {}), variant.get("training", {})

    return next((other for other, v in variants.items() if v["preset"] == BASELINE and other != name
                 and changes(v) == changes(variants[name])), None)


def resolve(recipe: dict, p: str) -> Path:
    p = Path(p)
    return p if p.is_absolute() else Path(recipe["_base"]) / p


def read_lines(path: Path) -> list[str]:
    """One sentence a line; `.gz` files are decompressed."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def read_pair(src: Path, tgt: Path, limit: Optional[int] = None) -> tuple[list[str], list[str]]:
    source, target = read_lines(src), read_lines(tgt)
    if len(source) != len(target):
        raise ValueError(f"{src} has {len(source)} lines but {tgt} has {len(target)}")
    if limit is not None:
        source, target = source[:limit], target[:limit]
    return source, target


def text_sha(lines: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# Parsers and the parse cache
# ---------------------------------------------------------------------------------------------


class DespacedSpacyAnnotator(Annotator):
    """A spaCy pipeline run on the text with all whitespace removed; word spans are mapped back into
    the original (space-tokenized) text. For pre-segmented Japanese/Chinese, whose orthography has
    no spaces."""

    name = "spacy_despaced"

    def __init__(self, model: str = "ja_ginza", disable: Sequence[str] = (), batch_size: int = 256):
        self.inner = SpacyAnnotator(model, disable=disable, batch_size=batch_size)

    def settings(self) -> dict:
        return self.inner.settings()

    def _fingerprint(self) -> tuple:
        return (type(self).__name__,) + self.inner._fingerprint()

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        keep = [[i for i, c in enumerate(t) if not c.isspace()] for t in texts]
        parsed = self.inner.annotate(["".join(t[i] for i in idx) for t, idx in zip(texts, keep)])
        out = []
        for text, idx, a in zip(texts, keep, parsed):
            spans = [None if s is None else (idx[s[0]], idx[s[1] - 1] + 1) for s in a.spans]
            out.append(Annotation(text, a.words, spans, a.heads, a.deprels, a.sentence_ids, a.trees))
        return out


class PretokenizedSpacyAnnotator(SpacyAnnotator):
    """A spaCy pipeline that keeps the whitespace tokens of pre-tokenized text as its words
    (spaCy's own tokenizer would split e.g. the Stanford token "'t" into "'" + "t")."""

    name = "spacy_pretokenized"

    def _annotate(self, texts: list[str]) -> list[Annotation]:
        from spacy.tokens import Doc

        from hf_syntax_mt.syntax import annotation_from_spacy

        if self._nlp is None:
            self._nlp = self._load()
        docs = (Doc(self._nlp.vocab, words=t.split()) for t in texts)
        out = []
        for text, doc in zip(texts, self._nlp.pipe(docs, batch_size=self.batch_size)):
            a = annotation_from_spacy(doc)  # spans index the single-spaced text: re-locate in `text`
            spans = locate_words(text, a.words)
            out.append(Annotation(text, a.words, spans, a.heads, a.deprels, a.sentence_ids, a.trees))
        return out


def parser_label(spec: Optional[dict]) -> str:
    if not spec:
        return "none"
    if "conllu_suffix" in spec:
        return f"CoNLL-U files (<text>{spec['conllu_suffix']})"
    return spec["spacy"] + (" (on the text without spaces)" if spec.get("despace") else
                            " (pre-tokenized: the words are the space-separated tokens)" if spec.get("pretokenized") else "")


def check_parser_installed(spec: dict) -> None:
    """A clear ImportError naming the pip package of a missing spaCy pipeline."""
    if "spacy" in spec and importlib.util.find_spec(spec["spacy"]) is None:
        package = spec.get("pip", spec["spacy"].replace("_", "-"))
        raise ImportError(
            f"the recipe parses with the spaCy pipeline {spec['spacy']!r}, which is not installed: "
            f"pip install {package}" + (" (a benchmark-only extra, not a dependency of hf_syntax_mt)"
                                        if spec.get("benchmark_only") else "")
        )


def build_parser(spec: dict) -> Annotator:
    check_parser_installed(spec)
    cls = (DespacedSpacyAnnotator if spec.get("despace") else
           PretokenizedSpacyAnnotator if spec.get("pretokenized") else SpacyAnnotator)
    return cls(spec["spacy"], disable=spec.get("disable", ()), batch_size=spec.get("batch_size", 256))


def _to_json(a: Annotation) -> str:
    return json.dumps([a.text, a.words, a.spans, a.heads, a.deprels, a.sentence_ids, a.trees], ensure_ascii=False)


def _from_json(line: str) -> Annotation:
    text, words, spans, heads, deprels, sentence_ids, trees = json.loads(line)
    return Annotation(text, words, [None if s is None else tuple(s) for s in spans], heads, deprels, sentence_ids, trees)


def parse_cached(lines: list[str], spec: dict, text_path: Path, cache_dir: Path, chunk: int = 2000) -> list[Annotation]:
    """Parses of `lines` (one `Annotation` each) from the cache, computing missing ones once.

    CoNLL-U specs read `<text_path><conllu_suffix>` instead (e.g. gold trees of a synthetic corpus).
    The cache file is written chunk by chunk, so an interrupted parse resumes where it stopped."""
    if "conllu_suffix" in spec:
        conllu = Path(f"{text_path}{spec['conllu_suffix']}")
        annotations = read_conllu(conllu)
        if len(annotations) < len(lines):
            raise ValueError(f"{conllu} has {len(annotations)} sentences for {len(lines)} lines of {text_path}")
        return annotations[: len(lines)]
    parser = build_parser(spec)
    key = hashlib.sha256(repr((text_sha(lines), parser._fingerprint())).encode()).hexdigest()[:20]
    path = cache_dir / f"{Path(str(text_path)).name}.{spec['spacy']}.{key}.jsonl.gz"
    tmp = path.with_suffix(".partial")
    done: list[Annotation] = []
    source = path if path.is_file() else tmp
    if source.is_file():
        try:
            with gzip.open(source, "rt", encoding="utf-8") as f:
                for line in f:
                    done.append(_from_json(line))
        except (ValueError, EOFError, OSError):  # a torn end of an interrupted write: keep what parsed
            pass
    if len(done) >= len(lines):
        return done[: len(lines)]
    cache_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with gzip.open(tmp, "wt", encoding="utf-8") as f:  # rewrite the good part, then append chunk by chunk
        f.writelines(_to_json(a) + "\n" for a in done)
    for i in range(len(done), len(lines), chunk):
        batch = parser.annotate(lines[i: i + chunk])
        with gzip.open(tmp, "at", encoding="utf-8") as f:
            f.writelines(_to_json(a) + "\n" for a in batch)
        done.extend(batch)
        logger.info("parsed %d/%d lines of %s with %s (%.0f s)", len(done), len(lines), text_path,
                    spec["spacy"], time.time() - start)
    tmp.replace(path)
    logger.info("parse cache: %s (%d lines, %.0f s)", path, len(lines), time.time() - start)
    return done


def alignment_report(annotations: Sequence[Annotation], tokenizer) -> dict:
    """How parser words and subwords agree: words left without a subword of their own (their
    dependents are re-attached), and subwords that end inside another word than they start in."""
    from hf_syntax_mt.syntax import align_tokens_to_words

    words = orphan = crossing = tokens = 0
    for a in annotations:
        enc = tokenizer(a.text, return_offsets_mapping=True, return_special_tokens_mask=True)
        ids = align_tokens_to_words(a, enc["offset_mapping"], enc["special_tokens_mask"])
        words += len(a.words)
        orphan += len(set(range(len(a.words))) - set(i for i in ids if i is not None))
        char_word = {}
        for w, span in enumerate(a.spans):
            for c in range(*span) if span else ():
                char_word[c] = w
        for (s, e), w in zip(enc["offset_mapping"], ids):
            if w is None:
                continue
            tokens += 1
            last = next((c for c in range(e - 1, s - 1, -1) if not a.text[c].isspace()), None)
            if last is not None and char_word.get(last, w) != w:
                crossing += 1
    return {"sentences": len(annotations), "words": words, "words_without_subword": orphan,
            "subwords": tokens, "subwords_crossing_words": crossing}


# ---------------------------------------------------------------------------------------------
# Corpus context shared by all runs of a recipe
# ---------------------------------------------------------------------------------------------


class Corpus:
    """Texts, tokenizer and parse caches of one recipe (built lazily, once)."""

    def __init__(self, recipe: dict, runs_dir: Path, train_limit: Optional[int] = None, dev_limit: Optional[int] = None):
        self.recipe = recipe
        self.root = Path(runs_dir) / recipe["name"]
        self.parse_dir = Path(runs_dir) / "parse_cache"
        data = recipe["data"]
        self.paths = {split: [resolve(recipe, p) for p in data[split]] for split in ("train", "dev")}
        self.source_spacing = recipe.get("source_spacing", "as_is")
        self.texts = {}
        for split, limit in (("train", train_limit), ("dev", dev_limit)):
            source, target = read_pair(*self.paths[split], limit=limit)
            self.texts[split] = (self.prepare_sources(source), target)
        self._tokenizer = None
        self._parses: dict = {}

    def prepare_sources(self, lines: list[str]) -> list[str]:
        """Source lines as the recipe's models read them (`source_spacing`)."""
        return [apply_source_spacing(line, self.source_spacing) for line in lines]

    @property
    def tokenizer(self):
        """The recipe's joint BPE tokenizer, trained once on train source + target."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            from hf_syntax_mt.tokenization import train_joint_bpe_tokenizer

            src, tgt = self.texts["train"]
            split = self.recipe.get("split_punctuation", False)
            scripts = self.recipe.get("split_cjk_scripts", False)
            path = self.root / (f"tokenizer-{text_sha(src + tgt)[:12]}-{self.recipe['vocab_size']}"
                                f"{'-punct' if split else ''}{'-cjk' if scripts else ''}")
            if (path / "tokenizer.json").is_file():
                self._tokenizer = AutoTokenizer.from_pretrained(path)
            else:
                logger.info("training the joint BPE tokenizer (%d) on %d pairs", self.recipe["vocab_size"], len(src))
                self._tokenizer = train_joint_bpe_tokenizer(src + tgt, vocab_size=self.recipe["vocab_size"],
                                                            split_punctuation=split, split_cjk_scripts=scripts)
                self._tokenizer.save_pretrained(path)
        return self._tokenizer

    def parses(self, lines: list[str], side: str, text_path: Path) -> list[Annotation]:
        spec = self.recipe.get(f"{side}_parser")
        if not spec:
            raise ValueError(
                f"recipe {self.recipe['name']!r} has no {side}_parser, but the preset needs {side} syntax"
                + (" (no German parser ships offline: use transformer_dbsa_enc there)" if side == "target" else "")
            )
        key = (side, str(text_path), len(lines))
        if key not in self._parses:
            self._parses[key] = parse_cached(lines, spec, text_path, self.parse_dir)
        return self._parses[key]

    def annotators(self, config) -> tuple[Optional[PreParsedAnnotator], Optional[PreParsedAnnotator]]:
        """Pre-parsed source / target annotators over train + dev, as the preset needs them."""
        source = target = None
        if config.needs_source_heads or config.needs_source_distances:
            source = PreParsedAnnotator(self.parses(self.texts["train"][0], "source", self.paths["train"][0])
                                        + self.parses(self.texts["dev"][0], "source", self.paths["dev"][0]))
        if config.needs_target_heads:
            target = PreParsedAnnotator(self.parses(self.texts["train"][1], "target", self.paths["train"][1])
                                        + self.parses(self.texts["dev"][1], "target", self.paths["dev"][1]))
        return source, target

    def raw_datasets(self):
        import datasets

        out = {}
        for split, name in (("train", "train"), ("dev", "validation")):
            src, tgt = self.texts[split]
            table = datasets.table.InMemoryTable.from_pydict({"source": src, "target": tgt})
            out[name] = datasets.Dataset(table, fingerprint=datasets.fingerprint.Hasher.hash([split, text_sha(src + tgt)]))
        return datasets.DatasetDict(out)


# ---------------------------------------------------------------------------------------------
# Translation and scoring
# ---------------------------------------------------------------------------------------------


def translate(model, tokenizer, sources: list[str], annotations: Optional[list[Annotation]], num_beams: int,
              max_length: int, max_source_length: int, batch_size: int = 64) -> list[str]:
    """Translate in corpus order with the features the model needs at inference (no target side)."""
    import torch

    from hf_syntax_mt.data import SyntaxFeatureProcessor

    config = model.config
    processor = SyntaxFeatureProcessor(
        tokenizer, None,
        needs_source_heads=config.dependency_relations is not None,
        needs_source_distances=config.needs_source_distances,
        max_source_length=max_source_length, distance_source=config.distance_source,
        source_spacing=config.source_spacing,
    )
    needs_parse = processor.needs_source_parse
    model.eval()
    hyps = []
    for i in range(0, len(sources), batch_size):
        batch = processor(sources[i: i + batch_size],
                          annotations=annotations[i: i + batch_size] if needs_parse else None)
        with torch.no_grad():
            out = model.generate(**batch, num_beams=num_beams, max_length=max_length)
        hyps += [h.strip() for h in tokenizer.batch_decode(out, skip_special_tokens=True)]
    return hyps


def score(hyps: list[str], refs: list[str], tokenize: str) -> dict:
    import sacrebleu

    return {"bleu": round(sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)}


# ---------------------------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------------------------


def run_paths(results_dir: Path, runs_dir: Path, recipe: dict, preset: str, seed: int) -> tuple[Path, Path]:
    return (Path(results_dir) / recipe["name"] / preset / f"seed{seed}.json",
            Path(runs_dir) / recipe["name"] / preset / f"seed{seed}")


def _git_commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def parse_extra_evals(items: Sequence[str]) -> dict[str, tuple[Path, Path]]:
    """`name=src_path,tgt_path` -> {name: (src, tgt)}."""
    out = {}
    for item in items or ():
        name, sep, paths = item.partition("=")
        parts = paths.split(",")
        if not sep or not name or len(parts) != 2 or name == "dev":
            raise ValueError(f"--extra-eval {item!r}: expected name=src_path,tgt_path (name other than 'dev')")
        out[name] = (Path(parts[0]), Path(parts[1]))
    return out


def dev_feature_batches(corpus: Corpus, model, tokenizer, batch_size: int = 64) -> Iterator[dict]:
    """The dev set as padded model inputs with the syntax features the model's config asks for
    (parses from the corpus caches), for `parse_head_accuracy`; built when first iterated."""
    from hf_syntax_mt.data import DataCollatorForSyntaxSeq2Seq, SyntaxFeatureProcessor

    recipe = corpus.recipe
    annotator, target_annotator = corpus.annotators(model.config)
    processor = SyntaxFeatureProcessor.from_config(
        model.config, tokenizer, annotator, target_annotator=target_annotator,
        max_source_length=recipe["max_source_length"], max_target_length=recipe["max_target_length"])
    sources, targets = corpus.texts["dev"]
    features = processor(sources, targets, return_tensors=None)
    rows = [{k: v[i] for k, v in features.items()} for i in range(len(sources))]
    collate = DataCollatorForSyntaxSeq2Seq(tokenizer)
    for i in range(0, len(rows), batch_size):
        yield collate(rows[i:i + batch_size])


def parse_head_accuracy(model, batches) -> Optional[dict]:
    """Dev accuracy (%) of the DBSA parse heads (SPEC §5), per side: the share of the subwords the parse
    loss scores whose argmax head is the parser's head projected to subwords; the decoder reads the
    reference (teacher forcing). None for a model without parse heads."""
    import torch

    from hf_syntax_mt.modeling_syntax_mt import IGNORE_INDEX, shift_target_heads_right

    if not (model.config.dbsa_encoder_layer or model.config.dbsa_decoder_layer):
        return None
    model.eval()
    counts: dict[str, list[int]] = {}
    with torch.no_grad():
        for batch in batches:
            out = model(**batch)
            sides = []
            if out.encoder_parse_logits is not None:
                sides.append(("source", out.encoder_parse_logits,
                              batch["source_heads"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)))
            if out.decoder_parse_logits is not None:
                sides.append(("target", out.decoder_parse_logits, shift_target_heads_right(batch["target_heads"])))
            for side, logits, gold in sides:
                gold = gold[:, : logits.shape[1]]
                scored = gold != IGNORE_INDEX
                count = counts.setdefault(side, [0, 0])
                count[0] += int((logits.argmax(-1) == gold)[scored].sum())
                count[1] += int(scored.sum())
    return {side: round(100 * correct / max(total, 1), 2) for side, (correct, total) in counts.items()}


def evaluate_sets(model, tokenizer, corpus: Corpus, sets: dict, out_prefix: Path, num_beams: int) -> dict:
    """Translate each set `{name: (src_path, tgt_path)}` with beam `num_beams`; write hypotheses
    next to `out_prefix` and return `{name: {bleu, chrf, hypotheses, ...}}`."""
    recipe = corpus.recipe
    results = {}
    for name, (src_path, tgt_path) in sets.items():
        if name == "dev":
            src, refs = corpus.texts["dev"]
        else:
            src, refs = read_pair(src_path, tgt_path)
            src = corpus.prepare_sources(src)
        annotations = None
        if model.config.needs_parser_at_inference:
            annotations = corpus.parses(src, "source", src_path)
        start = time.time()
        hyps = translate(model, tokenizer, src, annotations, num_beams, recipe["max_target_length"],
                         recipe["max_source_length"])
        hyp_path = Path(f"{out_prefix}.{name}.beam{num_beams}.txt")
        hyp_path.parent.mkdir(parents=True, exist_ok=True)
        hyp_path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        results[name] = {**score(hyps, refs, recipe["bleu_tokenize"]), "num_beams": num_beams,
                         "sentences": len(src), "source": str(src_path), "reference": str(tgt_path),
                         "hypotheses": os.path.relpath(hyp_path, REPO),
                         "translate_seconds": round(time.time() - start, 1)}
        logger.info("%s: BLEU %.2f chrF %.2f (beam %d)", name, results[name]["bleu"], results[name]["chrf"], num_beams)
    return results


def train_one(corpus: Corpus, preset: str, seed: int, args) -> dict:
    """Train one (preset, seed) with the recipe, then translate dev with the final beam."""
    import torch

    from hf_syntax_mt.training import DataArguments, ModelArguments, SyntaxMTTrainingArguments, train
    from transformers.trainer_utils import get_last_checkpoint

    recipe = corpus.recipe
    result_path, run_dir = run_paths(args.results_dir, args.runs_dir, recipe, preset, seed)
    base_preset, overrides, training = run_settings(recipe, preset)
    config = run_config(recipe, preset)
    tokenizer = corpus.tokenizer
    annotator, target_annotator = corpus.annotators(config)
    if args.max_steps:
        training["max_steps"] = args.max_steps
    if args.bf16 is not None:
        training["bf16"] = args.bf16
    training_args = SyntaxMTTrainingArguments(output_dir=str(run_dir), seed=seed, use_cpu=True, report_to="none",
                                              disable_tqdm=True, **training)
    model_args = ModelArguments(preset=base_preset, config_overrides=",".join(f"{k}={v!r}" for k, v in overrides.items()),
                                vocab_size=recipe["vocab_size"],
                                distance_source=overrides.get("distance_source", recipe.get("distance_source", "auto")))
    data_args = DataArguments(
        source_lang=recipe["source_lang"], target_lang=recipe["target_lang"],
        train_file=str(corpus.paths["train"][0]), validation_file=str(corpus.paths["dev"][0]),
        max_source_length=recipe["max_source_length"], max_target_length=recipe["max_target_length"],
        bleu_tokenize=recipe["bleu_tokenize"], cache_dir=str(Path(args.runs_dir) / "feature_cache"),
        source_spacing=corpus.source_spacing,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "quality_run.json").write_text(json.dumps({"recipe": recipe["name"], "preset": preset, "seed": seed}))
    command = args.command
    checkpoint = get_last_checkpoint(str(run_dir))  # train() resumes from it
    resumed_step = int(checkpoint.rsplit("-", 1)[1]) if checkpoint else 0
    logger.info("training %s seed %d on %s -> %s", preset, seed, recipe["name"], run_dir)
    start = time.time()
    result = train(model_args, data_args, training_args, tokenizer=tokenizer, annotator=annotator,
                   target_annotator=target_annotator, raw_datasets=corpus.raw_datasets(), command=command)
    trainer, metrics = result.trainer, result.metrics
    model = trainer.model.float()
    state = trainer.state
    train_tokens = sum(len(x) for x in result.datasets["train"]["input_ids"]) + \
        sum(len(x) for x in result.datasets["train"]["labels"])
    steps_per_epoch = -(-len(result.datasets["train"]) // training_args.per_device_train_batch_size)
    epochs_done = state.global_step / steps_per_epoch
    epochs_this_process = (state.global_step - resumed_step) / steps_per_epoch
    # the eval-order check: a direct greedy pass must give the Trainer's greedy dev BLEU
    greedy = translate(model, tokenizer, corpus.texts["dev"][0],
                       corpus.parses(corpus.texts["dev"][0], "source", corpus.paths["dev"][0])
                       if model.config.needs_parser_at_inference else None,
                       1, recipe["max_target_length"], recipe["max_source_length"])
    direct_greedy = score(greedy, corpus.texts["dev"][1], recipe["bleu_tokenize"])
    # The check above runs the model as the Trainer evaluated it: with `--bf16`/"bf16" accelerate wraps
    # `forward` in bf16 autocast. The final decode runs it as users load it (fp32, no wrapper), the
    # same as `--evaluate-only` on the saved run.
    model = trainer.accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    parse_accuracy = parse_head_accuracy(model, dev_feature_batches(corpus, model, tokenizer))
    prefix = result_path.with_suffix("")
    sets = {"dev": (corpus.paths["dev"][0], corpus.paths["dev"][1]), **parse_extra_evals(args.extra_eval)}
    evals = evaluate_sets(model, tokenizer, corpus, sets, prefix, recipe["final_num_beams"])
    history = [{"epoch": round(h["epoch"], 2), "step": h["step"], "bleu": h["eval_bleu"], "chrf": h.get("eval_chrf")}
               for h in state.log_history if "eval_bleu" in h]
    out = {
        "preset": preset, "variant_of": base_preset if base_preset != preset else None,
        "seed": seed, "corpus": recipe["corpus"], "recipe": recipe["name"],
        "recipe_file": os.path.relpath(recipe["_path"], REPO), "direction": f"{recipe['source_lang']}-{recipe['target_lang']}",
        "source_parser": parser_label(recipe.get("source_parser")) if annotator else None,
        "target_parser": parser_label(recipe.get("target_parser")) if target_annotator else None,
        "config_overrides": overrides, "training_overrides": {k: v for k, v in training.items()
                                                              if recipe["training"].get(k) != v},
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": state.global_step, "epochs": round(epochs_done, 2),
        "best_checkpoint": os.path.basename(state.best_model_checkpoint or "") or None,
        "resumed_from_step": resumed_step or None,  # then runtime and tokens/s cover this process only
        "train_runtime_seconds": round(metrics.get("train_runtime", 0.0), 1),
        "wall_time_seconds": round(time.time() - start, 1),
        "train_tokens_per_second": round(train_tokens * epochs_this_process / max(metrics.get("train_runtime", 1e-9), 1e-9)),
        "final_train_loss": metrics.get("train_loss"),
        "dev_greedy_bleu_trainer": metrics.get("eval_bleu"), "dev_greedy_bleu_direct": direct_greedy["bleu"],
        "dev_greedy_bleu_best_epoch": max((h["bleu"] for h in history[:-1]), default=None),
        "dev_bleu_by_eval": history, "dev_parse_head_accuracy": parse_accuracy,
        "dev": evals.pop("dev"), "extra": evals,
        "bf16": bool(training.get("bf16")), "threads": torch.get_num_threads(),
        "git_commit": _git_commit(), "run_dir": str(run_dir), "command": command,
    }
    if out["dev_greedy_bleu_trainer"] is not None and abs(out["dev_greedy_bleu_trainer"] - direct_greedy["bleu"]) > 0.01:
        # the Trainer's references are the labels, cut at max_target_length tokens; the direct pass scores the full lines
        labels, limit = result.datasets["validation"]["labels"], recipe["max_target_length"]
        truncated = sum(len(ids) >= limit for ids in labels)
        cut_note = (f" ({truncated} of {len(labels)} dev references fill max_target_length={limit} tokens: "
                    "the Trainer scores them cut there, the direct pass in full)") if truncated else ""
        logger.warning("Trainer dev BLEU %.2f != direct greedy generate %.2f: check the eval order%s",
                       out["dev_greedy_bleu_trainer"], direct_greedy["bleu"], cut_note)
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    logger.info("wrote %s: dev BLEU %.2f (beam %d)", result_path, out["dev"]["bleu"], recipe["final_num_beams"])
    return out


def evaluate_only(corpus: Corpus, checkpoint: Path, args) -> dict:
    """Score an existing checkpoint (or run dir) on dev + `--extra-eval` sets; if it is a run of this
    runner, the scores are merged into that run's result JSON (`extra`)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_syntax_mt  # noqa: F401  (registers the Auto classes)

    checkpoint = Path(checkpoint)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoint).float()
    tok_dir = next((d for d in (checkpoint, checkpoint.parent) if (d / "tokenizer.json").is_file()), None)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir) if tok_dir else corpus.tokenizer
    info_file = checkpoint / "quality_run.json"  # a run dir of this runner (its best model), not a checkpoint-N
    info_file = info_file if info_file.is_file() else None
    sets = parse_extra_evals(args.extra_eval)
    if info_file is None or not sets:
        sets = {"dev": tuple(corpus.paths["dev"]), **sets}
    if info_file is not None:
        info = json.loads(info_file.read_text())
        result_path, _ = run_paths(args.results_dir, args.runs_dir, corpus.recipe, info["preset"], info["seed"])
        evals = evaluate_sets(model, tokenizer, corpus, sets, result_path.with_suffix(""), corpus.recipe["final_num_beams"])
        if result_path.is_file():
            out = json.loads(result_path.read_text())
            for name, value in evals.items():
                if name == "dev":
                    out["dev"] = value
                else:
                    out.setdefault("extra", {})[name] = value
            parse_accuracy = parse_head_accuracy(model, dev_feature_batches(corpus, model, tokenizer))
            if parse_accuracy is not None:
                out["dev_parse_head_accuracy"] = parse_accuracy
            out.setdefault("evaluate_only_commands", []).append(args.command)
            result_path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return evals
    slug = checkpoint.resolve().as_posix().strip("/").replace("/", "_")
    prefix = Path(args.results_dir) / corpus.recipe["name"] / "evaluate_only" / slug
    evals = evaluate_sets(model, tokenizer, corpus, sets, prefix, corpus.recipe["final_num_beams"])
    Path(f"{prefix}.json").write_text(json.dumps({"checkpoint": str(checkpoint), "preset": model.config.preset,
                                                  "evals": evals, "command": args.command}, indent=1) + "\n")
    return evals


def run(args) -> list[dict]:
    import torch

    torch.set_num_threads(args.threads)
    out = []
    for recipe_path in args.recipe:
        recipe = load_recipe(recipe_path)
        corpus = Corpus(recipe, args.runs_dir, args.train_limit, args.dev_limit)
        if args.evaluate_only:
            out.append(evaluate_only(corpus, Path(args.evaluate_only), args))
            continue
        pairs = grid_runs(recipe, args.presets, args.seeds)
        for name in dict.fromkeys(preset for preset, _ in pairs):
            run_config(recipe, name)  # a misspelt --presets fails now, not after the runs before it
        out += [r for preset, seed in pairs if (r := run_one(corpus, preset, seed, args)) is not None]
    return out


def run_one(corpus: Corpus, preset: str, seed: int, args) -> Optional[dict]:
    """Train one (preset, seed) unless its result exists (then only missing extra sets are scored)
    or another process holds its lock."""
    result_path, run_dir = run_paths(args.results_dir, args.runs_dir, corpus.recipe, preset, seed)
    if result_path.is_file():
        done = json.loads(result_path.read_text())
        missing = {k: v for k, v in parse_extra_evals(args.extra_eval).items() if k not in done.get("extra", {})}
        if missing and not (run_dir / "config.json").is_file():
            logger.error("%s seed %d: cannot score the extra sets %s: the result %s exists but not its model %s "
                         "(trained on another machine?); copy that run dir here or pass its --runs-dir, or delete the "
                         "result file to retrain", preset, seed, sorted(missing), result_path, run_dir)
        elif missing:
            logger.info("%s seed %d: finished; scoring the missing extra sets %s", preset, seed, sorted(missing))
            sub = argparse.Namespace(**{**vars(args), "extra_eval": [f"{k}={v[0]},{v[1]}" for k, v in missing.items()]})
            evaluate_only(corpus, run_dir, sub)
        else:
            logger.info("%s seed %d: finished (%s), skipped", preset, seed, result_path)
        return json.loads(result_path.read_text())
    lock = acquire_lock(run_dir)
    if lock is None:
        logger.warning("%s seed %d: another process is training it (%s), skipped", preset, seed, run_dir)
        return None
    try:
        return train_one(corpus, preset, seed, args)
    finally:
        lock.unlink(missing_ok=True)


def grid_runs(recipe: dict, presets: Optional[str] = None, seeds: Optional[str] = None) -> list[tuple[str, int]]:
    """(preset, seed) pairs in launch order: the given presets × seeds, or the recipe's `grid`
    (a list of {presets, seeds} blocks, e.g. every preset with seed 1, then seeds 2 and 3 for some)."""
    if presets is None and seeds is None:
        blocks = recipe.get("grid") or [{"presets": recipe["presets"], "seeds": [1]}]
        pairs = [(p, int(s)) for block in blocks for s in block["seeds"] for p in block["presets"]]
        return list(dict.fromkeys(pairs))
    names = presets.split(",") if presets else recipe["presets"]
    return [(p, int(s)) for p in names for s in (seeds or "1").split(",")]


def acquire_lock(run_dir: Path) -> Optional[Path]:
    """`run_dir/.lock` holding our pid, or None if a live process holds it (a stale lock is taken over)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / ".lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or 0)
                os.kill(pid, 0)
                return None
            except (ValueError, ProcessLookupError, FileNotFoundError):
                lock.unlink(missing_ok=True)
                continue
            except PermissionError:
                return None
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return lock
    return None


def parse_command(args) -> None:
    """Fill the parse caches of a recipe (train + dev, source and target parsers) and check the
    word/subword alignment on dev."""
    for recipe_path in args.recipe:
        recipe = load_recipe(recipe_path)
        corpus = Corpus(recipe, args.runs_dir, args.train_limit, args.dev_limit)
        for side, k in (("source", 0), ("target", 1)):
            if not recipe.get(f"{side}_parser"):
                continue
            for split in ("dev", "train"):
                start = time.time()
                annotations = corpus.parses(corpus.texts[split][k], side, corpus.paths[split][k])
                logger.info("%s %s %s: %d parses ready in %.0f s", recipe["name"], split, side, len(annotations),
                            time.time() - start)
            report = alignment_report(corpus.parses(corpus.texts["dev"][k], side, corpus.paths["dev"][k]), corpus.tokenizer)
            print(json.dumps({"recipe": recipe["name"], "side": side, "dev_alignment": report}))


# ---------------------------------------------------------------------------------------------
# Summary: mean ± std over seeds, paired bootstrap, RESULTS.md and a bar chart
# ---------------------------------------------------------------------------------------------


def bleu_statistics(hyps: Sequence[str], refs: Sequence[str], tokenize: str) -> np.ndarray:
    """Per-sentence BLEU sufficient statistics (sacrebleu): (N, 2 + 2·4) = lengths, matches, totals."""
    from sacrebleu.metrics import BLEU

    return np.asarray(BLEU(tokenize=tokenize)._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=np.int64)


def bleu_from_statistics(stats: np.ndarray, tokenize: str = "13a") -> float:
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=tokenize)._compute_score_from_stats(stats.tolist()).score


def paired_bootstrap(system: Sequence[np.ndarray], baseline: Sequence[np.ndarray], samples: int = BOOTSTRAP_SAMPLES,
                     seed: int = 12345, tokenize: str = "13a") -> dict:
    """Paired bootstrap resampling over sentences (Koehn 2004) for systems with several seeds.

    `system` / `baseline`: per-seed statistics from `bleu_statistics` (same sentences). For each of
    `samples` resamplings idx (N sentences with replacement, shared by both systems),
    Δ_b = mean_seeds BLEU(system[idx]) − mean_seeds BLEU(baseline[idx]).
    Returns the observed Δ, p = #{Δ_b ≤ 0} / samples and the 2.5/97.5 percentiles of Δ_b."""
    n = len(system[0])
    if any(len(s) != n for s in list(system) + list(baseline)):
        raise ValueError("paired bootstrap needs the same sentences for every system and seed")
    rng = np.random.default_rng(seed)
    deltas = np.empty(samples)
    for b in range(samples):
        idx = rng.integers(0, n, size=n)
        sys_score = np.mean([bleu_from_statistics(s[idx].sum(0), tokenize) for s in system])
        base_score = np.mean([bleu_from_statistics(s[idx].sum(0), tokenize) for s in baseline])
        deltas[b] = sys_score - base_score
    observed = np.mean([bleu_from_statistics(s.sum(0), tokenize) for s in system]) - \
        np.mean([bleu_from_statistics(s.sum(0), tokenize) for s in baseline])
    return {"delta": float(observed), "p_value": float(np.mean(deltas <= 0)),
            "ci95": [float(np.percentile(deltas, 2.5)), float(np.percentile(deltas, 97.5))], "samples": samples,
            "deltas": deltas}


def _fmt_mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"


def summarize_recipe(recipe: dict, results_dir: Path, chart_dir: Path) -> str:
    """The Markdown section of one recipe (and its PNG chart)."""
    folder = Path(results_dir) / recipe["name"]
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*/seed*.json"))]
    lines = [f"### {recipe['name']} ({recipe['source_lang']}→{recipe['target_lang']})", ""]
    finished = {(r["preset"], r["seed"]) for r in runs}
    missing = [(p, s) for p, s in grid_runs(recipe) if (p, s) not in finished]
    todo = []
    if missing:
        todo = ["Not finished yet (the grid resumes with "
                f"`python benchmarks/quality.py run --recipe {os.path.relpath(recipe['_path'], REPO)}`): "
                + ", ".join(f"{p} seed {s}" for p, s in missing) + ".", ""]
    if not runs:
        return "\n".join(lines + ["No finished runs yet.", ""] + todo)
    refs = read_lines(resolve(recipe, recipe["data"]["dev"][1]))
    dev_limit = runs[0]["dev"]["sentences"]
    refs = refs[:dev_limit]
    tokenize = recipe["bleu_tokenize"]
    by_preset: dict[str, list[dict]] = {}
    for r in runs:
        by_preset.setdefault(r["preset"], []).append(r)
    order = [p for p in recipe.get("presets", []) if p in by_preset] + sorted(set(by_preset) - set(recipe.get("presets", [])))
    stats = {p: {r["seed"]: bleu_statistics(read_lines(REPO / r["dev"]["hypotheses"]), refs, tokenize)
                 for r in by_preset[p]} for p in order}

    def compare(system, base):
        """Paired bootstrap of `system` against `base` on the seeds both have run (None if there are none)."""
        seeds = sorted(set(stats[system]) & set(stats.get(base, {})))
        if not seeds:
            return None
        return paired_bootstrap([stats[system][s] for s in seeds], [stats[base][s] for s in seeds], tokenize=tokenize)

    tests = {}
    for p in order:
        for base in (BASELINE, DEP_BASELINE):
            if p != base and not (base == DEP_BASELINE and "dep" not in p):
                tests[(p, base)] = compare(p, base)
    lines += [
        f"Dev set: {dev_limit} sentences; beam {recipe['final_num_beams']}, the saved model in fp32; "
        f"BLEU (sacrebleu, tokenize={tokenize}) and chrF. "
        f"Paired bootstrap: {BOOTSTRAP_SAMPLES} samples, p = share of samples where the preset does not beat the baseline, "
        "on the seeds both have run (each system scored as the mean over those seeds).",
        "",
        "| preset | seeds | dev BLEU | dev chrF | Δ vs abs [95% CI] | p vs abs | Δ vs rel [95% CI] | p vs rel | steps | train h | tokens/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    other_precision = False
    for p in order:
        rs = by_preset[p]
        preset_bf16 = bool(run_settings(recipe, p)[2].get("bf16"))
        seeds = []
        for r in sorted(rs, key=lambda r: r["seed"]):
            mark = "†" if r.get("bf16", False) != preset_bf16 else ""
            other_precision |= bool(mark)
            seeds.append(f"{r['seed']}{mark}")
        cells = [p, ",".join(seeds),
                 _fmt_mean_std([r["dev"]["bleu"] for r in rs]), _fmt_mean_std([r["dev"]["chrf"] for r in rs])]
        for base in (BASELINE, DEP_BASELINE):
            t = tests.get((p, base))
            cells += [f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}]", f"{t['p_value']:.3f}"] if t else ["–", "–"]
        marks = ("§" if any(r.get("threads", 2) != 2 for r in rs) else "") + \
            ("‡" if any(r.get("resumed_from_step") for r in rs) else "")
        cells += [str(rs[0]["steps"]), f"{np.mean([r['train_runtime_seconds'] for r in rs]) / 3600:.2f}{marks}",
                  f"{np.mean([r['train_tokens_per_second'] for r in rs]):.0f}{marks}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Train h and tokens/s are wall-clock figures of a shared 2-core machine (other jobs ran at times); "
              "`benchmarks/speed.py` compares speed properly. ‡ resumed from a checkpoint: the figures cover "
              "the last process only. § trained with a torch thread count other than 2 (`--threads`; 1 when two runs "
              "shared the 2 cores, which gives ≈1.3× the throughput of one 2-thread run, each run slower)."]
    if other_precision:
        lines[-1] += (" † seed trained in the other precision than its recipe's `bf16` setting (fp32 or bf16 autocast, "
                      "`--no-bf16` / `--bf16`; e.g. fp32 on a CPU without native bf16, where autocast is far slower); "
                      "every final decode runs the saved model in fp32.")
    variants = recipe.get("variants", {})
    for p in (p for p in order if p in variants):
        changes = [f"{k}={v}" for part in ("model", "training") for k, v in variants[p].get(part, {}).items()]
        lines += ["", f"Variant `{p}`: `{variants[p]['preset']}` with {', '.join(changes) or 'no changes'} (recipe `variants`)."]
        for base, what in ((variants[p]["preset"], "the preset it changes"),
                           (same_change_baseline(variants, p), "the baseline with the same changes")):
            t = compare(p, base)
            if t:
                lines.append(f"Against `{base}` ({what}): {t['delta']:+.2f} "
                             f"[{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}], p = {t['p_value']:.3f}.")
    lines += learning_curve_lines(order, by_preset)
    parsing = [p for p in order if any(r.get("dev_parse_head_accuracy") for r in by_preset[p])]
    if parsing:
        lines += ["", "DBSA parse heads on dev: % of the subwords the parse loss scores whose argmax head is the "
                  "parser's head (decoder: teacher-forced reference; mean over the seeds that recorded it):", "",
                  "| preset | source | target |", "|---|---|---|"]
        for p in parsing:
            accs = [r["dev_parse_head_accuracy"] for r in by_preset[p] if r.get("dev_parse_head_accuracy")]
            lines.append(f"| {p} | " + " | ".join(
                f"{np.mean([a[side] for a in accs if side in a]):.2f}" if any(side in a for a in accs) else "–"
                for side in ("source", "target")) + " |")
    extra_names = sorted({k for r in runs for k in r.get("extra", {})})
    for name in extra_names:
        lines += ["", f"Extra evaluation set `{name}` (beam {recipe['final_num_beams']}):", "",
                  "| preset | seeds | BLEU | chrF |", "|---|---|---|---|"]
        for p in order:
            rs = [r for r in by_preset[p] if name in r.get("extra", {})]
            if rs:
                lines.append(f"| {p} | {len(rs)} | {_fmt_mean_std([r['extra'][name]['bleu'] for r in rs])} | "
                             f"{_fmt_mean_std([r['extra'][name]['chrf'] for r in rs])} |")
    chart = plot_chart(recipe, order, by_preset, chart_dir)
    lines += ["", f"![dev BLEU per preset]({os.path.relpath(chart, RESULTS_MD.parent)})", "", "Commands:", "", "```"]
    lines += [r["command"] for p in order for r in sorted(by_preset[p], key=lambda r: r["seed"]) if r.get("command")]
    lines += ["```", ""] + todo
    return "\n".join(lines)


def learning_curve_lines(order: list[str], by_preset: dict) -> list[str]:
    """Markdown table of the greedy dev BLEU at each evaluation during training, mean over seeds.

    Read from each run's `dev_bleu_by_eval`, whose last entry (the final evaluation of the kept
    checkpoint) repeats an earlier one and is left out. The best preset of each column is bold."""
    curves = {p: {} for p in order}
    for p in order:
        for r in by_preset[p]:
            for h in r.get("dev_bleu_by_eval", [])[:-1]:
                curves[p].setdefault(h["epoch"], []).append(h["bleu"])
    epochs = sorted({e for curve in curves.values() for e in curve})
    if not epochs:
        return []
    means = {p: {e: float(np.mean(v)) for e, v in curves[p].items()} for p in order}
    best = {e: max(m[e] for m in means.values() if e in m) for e in epochs}
    lines = ["", "Greedy dev BLEU at each evaluation during training, as the Trainer scored it (under bf16 autocast "
             "when the run trains in bf16; mean over seeds; bold: best preset at that point; the run keeps the "
             "checkpoint with the best of its row):", "",
             "| preset | " + " | ".join(f"epoch {e:g}" for e in epochs) + " |", "|---|" + "---|" * len(epochs)]
    for p in order:
        cells = [("**{:.2f}**" if means[p][e] == best[e] else "{:.2f}").format(means[p][e]) if e in means[p] else "–"
                 for e in epochs]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def plot_chart(recipe: dict, order: list[str], by_preset: dict, chart_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    means = [np.mean([r["dev"]["bleu"] for r in by_preset[p]]) for p in order]
    stds = [np.std([r["dev"]["bleu"] for r in by_preset[p]], ddof=1) if len(by_preset[p]) > 1 else 0.0 for p in order]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(order) + 1), 3.6))
    ax.bar(range(len(order)), means, yerr=stds, capsize=4, color="#4a7ab5")
    ax.set_xticks(range(len(order)), [p.replace("transformer_", "").replace("+", "+\n") for p in order],
                  rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(f"dev BLEU (beam {recipe['final_num_beams']})")
    ax.set_ylim(max(0.0, min(means) - 3 * max(stds + [1.0])), max(means) + 2 * max(stds + [0.5]))
    ax.set_title(f"{recipe['name']}: mean ± std over seeds", fontsize=9)
    fig.tight_layout()
    chart_dir.mkdir(parents=True, exist_ok=True)
    path = chart_dir / f"quality_{recipe['name']}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


RECIPE_PART = re.compile(r"(<!-- quality:([^ ]+?):begin -->.*?<!-- quality:\2:end -->)", re.S)


def summary(args) -> str:
    """Print and write the quality section of model_cards/RESULTS.md. Each recipe has its own marked part of
    it, so a summary of some recipes keeps the others' tables (and the file's other sections)."""
    old = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
    parts = {name: text for text, name in RECIPE_PART.findall(old)}  # the file's recipes, in its order
    for recipe_file in args.recipe:
        recipe = load_recipe(recipe_file)
        parts[recipe["name"]] = marked(f"quality:{recipe['name']}",
                                       summarize_recipe(recipe, args.results_dir, args.output.parent))
    body = "\n".join(["## Dev BLEU: what the syntax buys", "",
                      "Generated by `python benchmarks/quality.py summary` from `benchmarks/results/`.", "",
                      "\n\n".join(parts.values())])
    section = write_section(args.output, "quality", body)
    print(section)
    return section


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
    p_run.add_argument("--threads", type=int, default=2, help="torch threads")
    p_parse = sub.add_parser("parse", parents=[common], help="Fill the parse caches and check the alignment")
    p_parse.set_defaults()
    p_sum = sub.add_parser("summary", parents=[common], help="Write model_cards/RESULTS.md and the bar charts")
    p_sum.add_argument("--output", type=Path, default=RESULTS_MD)
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
        return run(args)
    if args.command_name == "parse":
        return parse_command(args)
    return summary(args)


if __name__ == "__main__":
    main()
