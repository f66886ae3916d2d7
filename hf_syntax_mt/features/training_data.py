"""The training data of `hf_syntax_mt.training.run.train`: local sentence-pair files (plain-text pairs, TSV, JSON
lines) and hub datasets as a `DatasetDict`, their text columns, and the source / target parsers that annotate
them (`build_annotator`, `preparsed_annotator`). `data_args` is a run's `training.arguments.DataArguments` (any object
with its fields)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

from ..syntax import (
    Annotator,
    GrammarAnnotator,
    PreParsedAnnotator,
    SpacyAnnotator,
    StanzaAnnotator,
    apply_source_spacing,
    read_conllu,
)
from .syntax_features import plain_encoding

logger = logging.getLogger(__name__)


def _read_lines(path: Path) -> list[str]:
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, not a data file")
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text (invalid byte {data[err.start]:#04x})") from None
    return text.splitlines()


def read_parallel_file(path, source_lang: str = "src", target_lang: str = "tgt") -> dict[str, list]:
    """Read local sentence pairs into `{"source": [...], "target": [...], "line": [...]}` (`line`: the
    1-based line number of each pair in its file, for messages).

    `path` is a `.tsv` (source TAB target), a `.json`/`.jsonl` (JSON lines with a `translation`
    dict or flat `source_lang`/`target_lang` keys) or a prefix P of the plain-text pair
    P.<source_lang>, P.<target_lang>. Missing files, text that is not UTF-8, rows of the wrong shape
    and source/target files with different line counts raise errors naming the file and line. Pairs
    with an empty (or whitespace-only) source or target are skipped with a warning that counts them and
    names their lines (blank lines of a JSON-lines file are no pairs and are passed over silently).
    """
    path = Path(path)
    suffix = path.suffix.lower()
    source, target, numbers = [], [], []
    if suffix == ".tsv":
        for i, line in enumerate(_read_lines(path), 1):
            parts = line.split("\t")
            if len(parts) != 2:
                raise ValueError(f"{path}:{i}: expected 'source<TAB>target', found {len(parts)} field(s)")
            source.append(parts[0])
            target.append(parts[1])
            numbers.append(i)
    elif suffix in (".json", ".jsonl"):
        for i, line in enumerate(_read_lines(path), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{i}: not a JSON line ({err})") from None
            pair = row.get("translation", row)
            if source_lang not in pair or target_lang not in pair:
                raise ValueError(f"{path}:{i}: expected keys {source_lang!r} and {target_lang!r} (or a 'translation' dict)")
            source.append(pair[source_lang])
            target.append(pair[target_lang])
            numbers.append(i)
    else:
        src_path, tgt_path = Path(f"{path}.{source_lang}"), Path(f"{path}.{target_lang}")
        if path.is_dir() and not src_path.exists():
            raise IsADirectoryError(f"{path} is a directory: give a .tsv, .json or .jsonl file, or the prefix P of the "
                                    f"plain-text pair P.{source_lang}, P.{target_lang}")
        source, target = _read_lines(src_path), _read_lines(tgt_path)
        if len(source) != len(target):
            raise ValueError(
                f"{src_path} has {len(source)} lines but {tgt_path} has {len(target)}: source and target must be "
                "line-aligned"
            )
        numbers = list(range(1, len(source) + 1))
        path = Path(f"{path}.{{{source_lang},{target_lang}}}")
    empty = [k for k, (s, t) in enumerate(zip(source, target)) if not (s.strip() and t.strip())]
    if empty:
        logger.warning("%s: skipped %d pair(s) with an empty source or target line: %s", path, len(empty),
                       _line_list([numbers[k] for k in empty]))
        keep = sorted(set(range(len(source))) - set(empty))
        source, target, numbers = [source[k] for k in keep], [target[k] for k in keep], [numbers[k] for k in keep]
    return {"source": source, "target": target, "line": numbers}


def _line_list(numbers: list[int], shown: int = 10) -> str:
    """'line 3', 'lines 3, 17, 20', or the first `shown` of more: 'lines 3, 17, ..., 80, ... (25 in all)'."""
    text = f"line{'s' if len(numbers) > 1 else ''} " + ", ".join(map(str, numbers[:shown]))
    return text + (f", ... ({len(numbers)} in all)" if len(numbers) > shown else "")


def _file_signature(path: Path) -> list:
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


def _data_files(path, source_lang, target_lang) -> list[Path]:
    path = Path(path)
    if path.suffix.lower() in (".tsv", ".json", ".jsonl"):
        return [path]
    return [Path(f"{path}.{source_lang}"), Path(f"{path}.{target_lang}")]


def load_raw_datasets(data_args):
    """A `DatasetDict` with splits among train / validation / test.

    Local files give `source` / `target` columns; hub datasets keep their columns and are read
    through `translation.<lang>` (or `<lang>`) columns by `add_syntax_features`.
    """
    import datasets

    if data_args.dataset_name is not None:
        raw = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name, cache_dir=data_args.cache_dir)
        return datasets.DatasetDict({("validation" if k == "dev" else k): v for k, v in raw.items()})
    files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    if not any(files.values()):
        raise ValueError("no data: give --dataset_name or at least one of --train_file/--validation_file/--test_file")
    out = {}
    for split, path in files.items():
        if path is None:
            continue
        columns = read_parallel_file(path, data_args.source_lang, data_args.target_lang)
        signature = [_file_signature(p) for p in _data_files(path, data_args.source_lang, data_args.target_lang)]
        fingerprint = datasets.fingerprint.Hasher.hash([split, signature, len(columns["line"])])
        out[split] = datasets.Dataset(datasets.table.InMemoryTable.from_pydict(columns), fingerprint=fingerprint)
    return datasets.DatasetDict(out)


def text_columns(dataset, data_args) -> tuple[str, str]:
    """Source / target column names as `add_syntax_features` reads them."""
    names = dataset.column_names
    if "source" in names and "target" in names:
        return "source", "target"
    if "translation" in names:
        return f"translation.{data_args.source_lang}", f"translation.{data_args.target_lang}"
    if data_args.source_lang in names and data_args.target_lang in names:
        return data_args.source_lang, data_args.target_lang
    raise ValueError(f"cannot find source/target text columns in {names}")


def column_texts(dataset, column: str) -> list[str]:
    """The texts of a column; `translation.ja` reads the `ja` field of a `translation` column."""
    if column in dataset.column_names:
        return list(dataset[column])
    outer, _, inner = column.partition(".")
    return [row[inner] for row in dataset[outer]]


def skip_texts_too_long_for(parser: Optional[Annotator], raw, data_args, side: int,
                             split_files: dict) -> None:
    """Drop the pairs whose source (`side` 0) or target (1) text is longer than `parser` accepts
    (`max_text_bytes`, e.g. SudachiPy's 49,149 bytes), with a warning naming their file and lines;
    without this the parser stops feature building with an error that names neither."""
    limit = getattr(parser, "max_text_bytes", None)
    if limit is None:
        return
    for split in [name for name in ("train", "validation", "test") if name in raw]:
        dataset = raw[split]
        texts = column_texts(dataset, text_columns(dataset, data_args)[side])
        too_long = [i for i, text in enumerate(texts) if len(text.encode("utf-8")) > limit]
        if not too_long:
            continue
        if "line" in dataset.column_names and split_files.get(split):
            files = _data_files(split_files[split], data_args.source_lang, data_args.target_lang)
            where = f"{files[side % len(files)]}: {_line_list([dataset['line'][i] for i in too_long])}"
        else:
            where = f"rows {', '.join(map(str, too_long[:10]))}" + (" ..." if len(too_long) > 10 else "")
        logger.warning("skipped %d %s pair(s) whose %s is longer than the parser %s accepts (%d UTF-8 bytes): %s",
                       len(too_long), split, ("source", "target")[side], getattr(parser, "model", parser.name), limit,
                       where)
        drop = set(too_long)
        raw[split] = dataset.select([i for i in range(len(dataset)) if i not in drop])


def warn_truncated_pairs(raw, processed: dict, data_args, tokenizer, source_spacing: str) -> None:
    """Say once per split how many sources and targets are longer than `--max_source_length` /
    `--max_target_length` subwords (the features keep their first subwords only): the pairs at the limit in
    `processed` (the features of `raw`, row for row) are tokenized again, one subword longer, to count them."""
    import pyarrow.compute as pc

    sides = (("input_ids", "source", "max_source_length"), ("labels", "target", "max_target_length"))
    for split, features in processed.items():
        columns = text_columns(raw[split], data_args)
        found = []
        for side, (feature, what, flag) in enumerate(sides):
            limit = getattr(data_args, flag)
            if feature not in features.column_names:
                continue
            lengths = pc.list_value_length(features.data.column(feature))
            at_limit = pc.indices_nonzero(pc.greater_equal(lengths, limit)).to_pylist()
            if not at_limit:
                continue
            texts = column_texts(raw[split].select(at_limit), columns[side])
            cut = dict(truncation=True, max_length=limit + 1)  # one subword more tells a longer text
            with plain_encoding(tokenizer):
                if side == 0:
                    encoded = tokenizer([apply_source_spacing(text, source_spacing) for text in texts], **cut)
                else:
                    encoded = tokenizer(text_target=texts, **cut)
            longer = sum(len(ids) > limit for ids in encoded["input_ids"])
            if longer:
                found.append(f"{longer} {what}{'s' * (longer > 1)} longer than --{flag} {limit}")
        if found:
            logger.warning("%s: %s (of %d pairs; lengths in subwords, </s> included): they are cut to that length; "
                           "raise the limit to keep them whole", split, " and ".join(found), len(features))


# ---------------------------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------------------------




def build_annotator(parser: Optional[str], lang: Optional[str] = None, *, constituency: bool = False,
                    pretokenized: bool = False, disable: Optional[str] = None,
                    model_dir: Optional[str] = None) -> Optional[Annotator]:
    """`'stanza'` -> `StanzaAnnotator(lang)` (+ constituency when SLA needs trees), `'synthetic_grammar'` ->
    `GrammarAnnotator()` (the demo's source language), `'none'`/None -> None, `'preparsed'` -> None (annotations
    come from files, see `preparsed_annotator`), anything else -> `SpacyAnnotator(parser)` (a spaCy pipeline name
    such as `ja_ginza`)."""
    if parser is None or parser.lower() in ("none", "preparsed"):
        return None
    if parser == GrammarAnnotator.name:
        return GrammarAnnotator()
    if parser == "stanza":
        if not lang:
            raise ValueError("stanza needs a language code (hf-syntax-mt-train: --parser_lang or --source_lang; "
                             "hf-syntax-mt annotate / translate: --lang)")
        processors = "tokenize,pos,lemma,depparse" + (",constituency" if constituency else "")
        return StanzaAnnotator(lang, processors=processors, pretokenized=pretokenized, model_dir=model_dir)
    name = parser.split(":", 1)[1] if parser.startswith("spacy:") else parser
    return SpacyAnnotator(name, disable=[c for c in (disable or "").split(",") if c])


def preparsed_annotator(text_file, lang: str) -> PreParsedAnnotator:
    """Annotations stored next to a data file: `<file>.<lang>.conllu` (+ `<file>.<lang>.tree`,
    one bracketed tree a line, if present), e.g. `train.src.conllu` for the prefix `train`."""
    conllu = Path(f"{text_file}.{lang}.conllu")
    if conllu.is_dir():
        raise IsADirectoryError(f"--parser preparsed: {conllu} is a directory, not a CoNLL-U file")
    if not conllu.is_file():
        raise FileNotFoundError(f"--parser preparsed: {conllu} not found (expected next to {text_file})")
    trees_path = Path(f"{text_file}.{lang}.tree")
    trees = _read_lines(trees_path) if trees_path.is_file() else None
    return PreParsedAnnotator(read_conllu(conllu, trees=trees))
