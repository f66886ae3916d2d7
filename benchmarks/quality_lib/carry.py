"""What a machine without the parsers and without ../shared needs to train a recipe's runs (`quality.py carry`).

`scripts/device_quality.sh prepare` fills a folder with it here; `device_quality.sh run` unpacks it on a lent GPU
machine, where the parse caches are found by their records (`corpus.cache_made_elsewhere`)."""

from __future__ import annotations

import gzip
import json
import logging
import shutil
from pathlib import Path

from .corpus import Corpus, sample_pairs
from .recipes import grid_runs, load_recipe, read_pair, run_config, text_sha

logger = logging.getLogger("quality")


def _copy_compressed(path: Path, dest_dir: Path) -> Path:
    """`path` into `dest_dir`: as it is if gzipped already, else gzipped as `<name>.carry.gz` (the name
    `device_quality.sh run` unpacks to `<name>`, leaving the corpus's own .gz files as the recipes name them)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        return Path(shutil.copy(path, dest_dir / path.name))
    dest = dest_dir / f"{path.name}.carry.gz"
    with open(path, "rb") as src, gzip.open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
    return dest


def _write_train_sample(recipe: dict, paths: list[Path], dest_dir: Path) -> list[Path]:
    """The recipe's `train_sample` pairs, as the corpus lists them, gzipped under the corpus files' names."""
    written = []
    for path, lines in zip(paths, sample_pairs(*read_pair(*paths), **recipe["train_sample"])):
        out_dir = dest_dir / path.parent.name
        out_dir.mkdir(parents=True, exist_ok=True)
        name = path.name if path.suffix == ".gz" else f"{path.name}.carry.gz"
        with gzip.open(out_dir / name, "wt", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
        written.append(out_dir / name)
    return written


def pack_carry(recipe: dict, runs_dir: Path, dest: Path) -> dict:
    """Fill `dest` with what `recipe`'s runs read and a bare machine lacks:

    - `data/<corpus folder>/<file>[.carry.gz]`: the train, dev (and tune) files and the blind test source (unpacked there
      into ../shared/data/<corpus folder>/, where the recipe's paths point), with their CoNLL-U files for a
      recipe whose trees come from CoNLL-U; for a recipe with a `train_sample`, only the sampled training pairs
      (in corpus order, under the corpus files' names: drawing the sample there again takes all of them, in that
      order, so the texts, parse caches and tokenizer are the same);
    - `parse_cache/`: the source parse caches of exactly the texts the runs parse (train, dev, tune, the blind
      lines), each with its record, and the target side's where one of the recipe's runs reads target trees
      (transformer_dbsa's decoder parse head); parsed here first where missing;
    - `tokenizers/<recipe>/<tokenizer>/`: the recipe's joint BPE tokenizer, trained here first where missing.
    Returns {"recipe", "files", "parse_caches", "tokenizer"} (the names copied)."""
    corpus = Corpus(recipe, runs_dir)
    corpus.tokenizer  # trained here where missing, saved at corpus.tokenizer_path
    spec = recipe.get("source_parser") or {}
    texts = [(corpus.texts[split][0], corpus.paths[split][0]) for split in corpus.texts]  # train, dev (, tune)
    files = {path for split in corpus.texts for path in corpus.paths[split]}
    blind = corpus.blind_lines_parsed()
    if blind:
        texts.append((blind[1], blind[0]))
        files.add(blind[0])
    if "conllu_suffix" in spec:
        files |= {Path(f"{path}{spec['conllu_suffix']}") for _, path in texts}
    sampled = set(corpus.paths["train"]) if recipe.get("train_sample") else set()
    copied = [_copy_compressed(path, dest / "data" / path.parent.name).name for path in sorted(files - sampled)]
    if sampled:
        copied += [p.name for p in _write_train_sample(recipe, corpus.paths["train"], dest / "data")]

    parsed = [(lines, path, "source") for lines, path in texts] if spec and "conllu_suffix" not in spec else []
    target_spec = recipe.get("target_parser") or {}
    if target_spec and "conllu_suffix" not in target_spec and any(
            run_config(recipe, name).needs_target_heads for name in dict.fromkeys(p for p, _ in grid_runs(recipe))):
        parsed += [(corpus.texts[split][1], corpus.paths[split][1], "target") for split in corpus.texts]
    caches = []
    if parsed:
        for lines, path, side in parsed:
            corpus.parses(lines, side, path)  # writes the cache and its record where missing
        wanted = {text_sha(lines) for lines, _, _ in parsed}
        (dest / "parse_cache").mkdir(parents=True, exist_ok=True)
        for record in sorted(corpus.parse_dir.glob("*.jsonl.gz.json")):
            if json.loads(record.read_text(encoding="utf-8"))["text_sha"] in wanted:
                shutil.copy(record, dest / "parse_cache")
                shutil.copy(record.with_suffix(""), dest / "parse_cache")
                caches.append(record.with_suffix("").name)
    tokenizer = corpus.tokenizer_path
    shutil.copytree(tokenizer, dest / "tokenizers" / recipe["name"] / tokenizer.name, dirs_exist_ok=True)
    return {"recipe": recipe["name"], "files": copied, "parse_caches": caches, "tokenizer": tokenizer.name}


def carry_command(args) -> list[dict]:
    packed = []
    for recipe_path in args.recipe:
        packed.append(pack_carry(load_recipe(recipe_path), args.runs_dir, args.to))
        logger.info("%s ready in %s: %d corpus files, %d parse caches, %s", packed[-1]["recipe"], args.to,
                    len(packed[-1]["files"]), len(packed[-1]["parse_caches"]), packed[-1]["tokenizer"])
    return packed
