"""Parsers, the parse cache and the corpus context (texts, tokenizer, parses) shared by all runs of a recipe."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import logging
import time
from pathlib import Path
from typing import Optional, Sequence

from hf_syntax_mt.syntax import (
    Annotation,
    Annotator,
    DespacedSpacyAnnotator,
    PreParsedAnnotator,
    PretokenizedSpacyAnnotator,
    SpacyAnnotator,
    apply_source_spacing,
    read_conllu,
)

from .recipes import read_lines, read_pair, resolve, text_sha

logger = logging.getLogger("quality")


# ---------------------------------------------------------------------------------------------
# Parsers and the parse cache
# ---------------------------------------------------------------------------------------------


def parser_label(spec: Optional[dict]) -> str:
    if not spec:
        return "none"
    if "conllu_suffix" in spec:
        return f"CoNLL-U files (<text>{spec['conllu_suffix']})"
    return spec["spacy"] + (" (on the text without spaces)" if spec.get("despace") else
                            " (pre-tokenized: the words are the space-separated tokens)" if spec.get("pretokenized") else "")


def parser_installed(spec: dict) -> bool:
    return "spacy" not in spec or importlib.util.find_spec(spec["spacy"]) is not None


def check_parser_installed(spec: dict) -> None:
    """A clear ImportError naming the pip package of a missing spaCy pipeline."""
    if not parser_installed(spec):
        package = spec.get("pip", spec["spacy"].replace("_", "-"))
        raise ImportError(
            f"the recipe parses with the spaCy pipeline {spec['spacy']!r}, which is not installed: "
            f"pip install {package}" + (" (a benchmark-only extra, not a dependency of hf_syntax_mt)"
                                        if spec.get("benchmark_only") else "")
        )


def build_parser(spec: dict, check_installed: bool = True) -> Annotator:
    """The recipe's spaCy parser (loaded on first use); `check_installed=False` only to read its settings."""
    if check_installed:
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
    The cache file is written chunk by chunk, so an interrupted parse resumes where it stopped. Its key holds the
    parser's version, which a machine without the parser cannot know: there the cache is found by the record
    `<cache>.json` (`record_cache_maker`) of the text and parser settings it was made for, so a GPU machine can
    train on parses made elsewhere."""
    if "conllu_suffix" in spec:
        conllu = Path(f"{text_path}{spec['conllu_suffix']}")
        annotations = read_conllu(conllu)
        if len(annotations) < len(lines):
            raise ValueError(f"{conllu} has {len(annotations)} sentences for {len(lines)} lines of {text_path}")
        return annotations[: len(lines)]
    parser = build_parser(spec, check_installed=False)
    key = hashlib.sha256(repr((text_sha(lines), parser._fingerprint())).encode()).hexdigest()[:20]
    path = cache_dir / f"{Path(str(text_path)).name}.{spec['spacy']}.{key}.jsonl.gz"
    installed = parser_installed(spec)
    if not installed and not path.is_file():
        path = cache_made_elsewhere(lines, parser, text_path, spec, cache_dir) or path
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
        if installed:
            record_cache_maker(path, lines, parser)
        return done[: len(lines)]
    check_parser_installed(spec)
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
    record_cache_maker(path, lines, parser)
    logger.info("parse cache: %s (%d lines, %.0f s)", path, len(lines), time.time() - start)
    return done


def record_cache_maker(path: Path, lines: list[str], parser: Annotator) -> None:
    """Write `<cache>.json` beside a complete parse cache (once): the text it parses (sha, line count), the
    parser's settings and its full fingerprint (with the version that made it)."""
    record = Path(f"{path}.json")
    if not record.is_file():
        record.write_text(json.dumps({"text_sha": text_sha(lines), "lines": len(lines), "parser": parser.to_dict(),
                                      "fingerprint": repr(parser._fingerprint())}, ensure_ascii=False) + "\n",
                          encoding="utf-8")


def cache_made_elsewhere(lines: list[str], parser: Annotator, text_path: Path, spec: dict,
                         cache_dir: Path) -> Optional[Path]:
    """The parse cache of exactly `lines` by a parser with `parser`'s settings, found by its record, for a
    machine where that parser is not installed (None if there is none)."""
    sha, settings = text_sha(lines), parser.to_dict()
    for record in sorted(cache_dir.glob(f"{Path(str(text_path)).name}.{spec['spacy']}.*.jsonl.gz.json")):
        made = json.loads(record.read_text(encoding="utf-8"))
        if made["text_sha"] == sha and made["parser"] == settings:
            logger.info("%s is not installed here: using the parses it made elsewhere (%s, %s)", spec["spacy"],
                        made["fingerprint"], record.name[: -len(".json")])
            return record.with_suffix("")
    return None


def alignment_report(annotations: Sequence[Annotation], tokenizer) -> dict:
    """How parser words and subwords agree: words left without a subword of their own (their
    dependents are re-attached), and subwords that end inside another word than they start in."""
    from hf_syntax_mt.features.syntax_features import plain_encoding
    from hf_syntax_mt.syntax import align_tokens_to_words

    words = orphan = crossing = tokens = 0
    for a in annotations:
        with plain_encoding(tokenizer):
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


def sample_pairs(source: list[str], target: list[str], pairs: int, seed: int, max_source_chars: Optional[int] = None,
                 max_target_words: Optional[int] = None) -> tuple[list[str], list[str]]:
    """`pairs` training pairs drawn at random (`random.Random(seed)`) from the whole training set, kept in
    corpus order, after dropping the extreme outliers longer than `max_source_chars` characters or
    `max_target_words` words (a recipe's `train_sample`): the sample has the corpus's length distribution."""
    import random

    keep = [i for i, (s, t) in enumerate(zip(source, target))
            if (max_source_chars is None or len(s) <= max_source_chars)
            and (max_target_words is None or len(t.split()) <= max_target_words)]
    if pairs > len(keep):
        raise ValueError(f"train_sample: {pairs} pairs asked, but the training set has {len(keep)} within the caps")
    chosen = sorted(random.Random(seed).sample(keep, pairs))
    return [source[i] for i in chosen], [target[i] for i in chosen]


class Corpus:
    """Texts, tokenizer and parse caches of one recipe (built lazily, once). A recipe's `train_pairs` trains
    on the first N pairs of its training files (a low-resource subset, with its own tokenizer and parses);
    `train_limit` (probes) cuts further."""

    def __init__(self, recipe: dict, runs_dir: Path, train_limit: Optional[int] = None, dev_limit: Optional[int] = None):
        self.recipe = recipe
        self.root = Path(runs_dir) / recipe["name"]
        self.parse_dir = Path(runs_dir) / "parse_cache"
        data = recipe["data"]
        train_limit = min((n for n in (train_limit, recipe.get("train_pairs")) if n is not None), default=None)
        self.paths = {split: [resolve(recipe, p) for p in data[split]] for split in ("train", "dev", "tune")
                      if split in data}
        self.source_spacing = recipe.get("source_spacing", "as_is")
        self.texts = {}
        for split, limit in [(name, train_limit if name == "train" else dev_limit) for name in self.paths]:  # tune: as dev
            if split == "train" and recipe.get("train_sample"):
                source, target = sample_pairs(*read_pair(*self.paths[split]), **recipe["train_sample"])
                source, target = source[:limit], target[:limit]
            else:
                source, target = read_pair(*self.paths[split], limit=limit)
            self.texts[split] = (self.prepare_sources(source), target)
        self._tokenizer = None
        self._parses: dict = {}

    @property
    def selection_split(self) -> str:
        """The split the Trainer evaluates on to pick the checkpoint (best model, early stopping): the recipe's
        `data.tune` where it has one, so that the dev figures are measured on a split no choice was made on."""
        return "tune" if "tune" in self.texts else "dev"

    def prepare_sources(self, lines: list[str]) -> list[str]:
        """Source lines as the recipe's models read them (`source_spacing`, `hf_syntax_mt.syntax.spacing`)."""
        return [apply_source_spacing(line, self.source_spacing) for line in lines]

    def blind_sources(self) -> Optional[tuple[Path, list[str]]]:
        """(path, lines as the models read them) of the recipe's blind test source (`test_source`, whose
        references the project does not have); None for a recipe without one. Its non-empty lines are the
        ones parsed and translated."""
        if not self.recipe.get("test_source"):
            return None
        path = resolve(self.recipe, self.recipe["test_source"])
        return path, self.prepare_sources(read_lines(path))

    def blind_lines_parsed(self) -> Optional[tuple[Path, list[str]]]:
        """(path, the non-empty blind lines): the text whose parse cache `translate_blind` reads."""
        blind = self.blind_sources()
        return blind and (blind[0], [line for line in blind[1] if line.strip()])

    @property
    def tokenizer_settings(self) -> dict:
        """The recipe's pre-tokenization switches of `train_joint_bpe_tokenizer`."""
        return {"split_punctuation": self.recipe.get("split_punctuation", False),
                "split_cjk_scripts": self.recipe.get("split_cjk_scripts", False)}

    @property
    def tokenizer_path(self) -> Path:
        """Where the recipe's tokenizer is saved: keyed by the training text and the tokenizer settings."""
        src, tgt = self.texts["train"]
        settings = self.tokenizer_settings
        return self.root / (f"tokenizer-{text_sha(src + tgt)[:12]}-{self.recipe['vocab_size']}"
                            f"{'-punct' if settings['split_punctuation'] else ''}"
                            f"{'-cjk' if settings['split_cjk_scripts'] else ''}")

    @property
    def tokenizer(self):
        """The recipe's joint BPE tokenizer, trained once on train source + target."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            from hf_syntax_mt.features.joint_bpe import train_joint_bpe_tokenizer

            path = self.tokenizer_path
            if (path / "tokenizer.json").is_file():
                self._tokenizer = AutoTokenizer.from_pretrained(path)
            else:
                src, tgt = self.texts["train"]
                logger.info("training the joint BPE tokenizer (%d) on %d pairs", self.recipe["vocab_size"], len(src))
                self._tokenizer = train_joint_bpe_tokenizer(src + tgt, vocab_size=self.recipe["vocab_size"],
                                                            **self.tokenizer_settings)
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
        """Pre-parsed source / target annotators over train + dev (+ tune), as the preset needs them."""
        def parses_of_every_split(side, k):
            return [a for split in self.texts for a in self.parses(self.texts[split][k], side, self.paths[split][k])]

        source = target = None
        if config.needs_source_parse:
            source = PreParsedAnnotator(parses_of_every_split("source", 0), made_by=self.parser_settings("source"))
        if config.needs_target_heads:
            target = PreParsedAnnotator(parses_of_every_split("target", 1), made_by=self.parser_settings("target"))
        return source, target

    def parser_settings(self, side: str) -> Optional[dict]:
        """The settings (`Annotator.to_dict()`) of the parser that makes this side's parse caches, which a
        trained model records as `config.parser`; None for gold CoNLL-U files (no parser made them)."""
        spec = self.recipe.get(f"{side}_parser")
        return build_parser(spec, check_installed=False).to_dict() if spec and "conllu_suffix" not in spec else None

    def raw_datasets(self):
        import datasets

        out = {}
        for split, name in (("train", "train"), (self.selection_split, "validation")):  # the Trainer evaluates on it
            src, tgt = self.texts[split]
            table = datasets.table.InMemoryTable.from_pydict({"source": src, "target": tgt})
            out[name] = datasets.Dataset(table, fingerprint=datasets.fingerprint.Hasher.hash([split, text_sha(src + tgt)]))
        return datasets.DatasetDict(out)

