"""Translation and scoring of the quality runs: corpus-order translations in length-sorted batches, sacreBLEU
scores, the dev / tune / extra sets, the blind test set (never scored) and the parse head's agreement with the parser."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

from hf_syntax_mt.syntax import Annotation

from .corpus import Corpus
from .recipes import REPO, read_pair

logger = logging.getLogger("quality")


def translate(model, tokenizer, sources: list[str], annotations: Optional[list[Annotation]], num_beams: int,
              max_length: int, max_source_length: int, batch_size: int = 64,
              length_cap: Optional[Sequence[float]] = None) -> list[str]:
    """Translate `sources` with the features the model needs at inference (no target side), returned in corpus
    order; `length_cap` (a, b) stops each sentence after floor(a * source tokens + b) subwords as well
    (`hf_syntax_mt.inference.length_cap`, a recipe's `length_cap`). A self-parsing model reads its own trees, or the parser's when `annotations` are given. Batches hold
    sentences of similar length (sorted by character count, longest first, as fairseq's generation sorts by
    length), so a batch runs as many decoding steps as its own longest sentence needs, not the corpus's."""
    import torch

    from hf_syntax_mt.features.syntax_features import SyntaxFeatureProcessor
    from hf_syntax_mt.inference.length_cap import with_length_cap

    config = model.config
    processor = SyntaxFeatureProcessor(
        tokenizer, None,
        needs_source_heads=config.dependency_relations is not None and (not config.self_parsing or annotations is not None),
        needs_source_distances=config.needs_source_distances,
        max_source_length=max_source_length, distance_source=config.distance_source,
        distance_binarize=config.sla_binarize,
        source_spacing=config.source_spacing,
    )
    needs_parse = processor.needs_source_parse
    model.eval()
    order = sorted(range(len(sources)), key=lambda k: -len(sources[k]))
    hyps = [""] * len(sources)
    for i in range(0, len(order), batch_size):
        rows = order[i: i + batch_size]
        batch = processor([sources[k] for k in rows],
                          annotations=[annotations[k] for k in rows] if needs_parse else None).to(model.device)
        with torch.no_grad():
            generate = {"num_beams": num_beams, "max_length": max_length}
            if length_cap:
                generate = with_length_cap(generate, batch["attention_mask"], *length_cap, eos_token_id=config.eos_token_id)
            out = model.generate(**batch, **generate)
        for k, hyp in zip(rows, tokenizer.batch_decode(out, skip_special_tokens=True)):
            hyps[k] = hyp.strip()
    return hyps


def translate_batch_size(recipe: dict) -> int:
    """Sentences per `generate` call in the final translations: the recipe's `translate_batch_size` (a GPU recipe
    raises it: decoding is bound by the number of sequential steps, not by the batch), else 64."""
    return recipe.get("translate_batch_size", 64)


def score(hyps: list[str], refs: list[str], tokenize: str) -> dict:
    """Corpus BLEU and chrF (sacrebleu); `force=True` only silences the warning that detokenized output looks
    tokenized (the scores are the same)."""
    import sacrebleu

    return {"bleu": round(sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize, force=True).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2)}


# ---------------------------------------------------------------------------------------------
# Runs
def dev_feature_batches(corpus: Corpus, model, tokenizer, batch_size: int = 64) -> Iterator[dict]:
    """The dev set as padded model inputs with the syntax features the model's config asks for
    (parses from the corpus caches), for `parse_head_accuracy`; built when first iterated."""
    from hf_syntax_mt.features.syntax_features import DataCollatorForSyntaxSeq2Seq, SyntaxFeatureProcessor

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
    """Dev accuracy (%) of the model's parse heads (SPEC §5), per side: the share of the subwords the parse
    loss scores whose predicted head is the parser's head projected to subwords. DBSA heads ("source",
    "target"; the decoder reads the reference, teacher forcing) by argmax; a self-parsing model's own parser
    ("self_parse") by argmax and by the tree it decodes ("self_parse_tree", SPEC §9). None without parse heads."""
    import torch

    from hf_syntax_mt.modeling_syntax_mt import IGNORE_INDEX, decode_source_heads, decoder_parse_targets

    config = model.config
    if not (config.dbsa_encoder_layer or config.dbsa_decoder_layer or config.self_parsing):
        return None
    special = sorted({i for i in (config.eos_token_id, config.pad_token_id, config.bos_token_id) if i is not None})
    model.eval()
    counts: dict[str, list[int]] = {}
    with torch.no_grad():
        for batch in batches:
            batch = {k: v.to(model.device) for k, v in batch.items()}
            out = model(**batch)
            source_gold = batch["source_heads"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
            sides = []
            if out.encoder_parse_logits is not None:
                sides.append(("source", out.encoder_parse_logits.argmax(-1), source_gold))
            if out.decoder_parse_logits is not None:
                target_gold = decoder_parse_targets(batch["target_heads"], config.dbsa_decoder_supervised_row)
                sides.append(("target", out.decoder_parse_logits.argmax(-1), target_gold))
            if out.source_tree_logits is not None:
                sides.append(("self_parse", out.source_tree_logits.argmax(-1), source_gold))
                tree = decode_source_heads(out.source_tree_logits, batch["input_ids"], batch["attention_mask"], special)
                sides.append(("self_parse_tree", tree, source_gold))
            for side, predicted, gold in sides:
                gold = gold[:, : predicted.shape[1]]
                scored = gold != IGNORE_INDEX
                count = counts.setdefault(side, [0, 0])
                count[0] += int((predicted == gold)[scored].sum())
                count[1] += int(scored.sum())
    return {side: round(100 * correct / max(total, 1), 2) for side, (correct, total) in counts.items()}


def evaluate_sets(model, tokenizer, corpus: Corpus, sets: dict, out_prefix: Path, num_beams: int,
                  model_label: str = "") -> dict:
    """Translate each set `{name: (src_path, tgt_path)}` with beam `num_beams`; write hypotheses
    next to `out_prefix` (`<prefix>.<name><model_label>.beam<k>.txt`, e.g. model_label ".averaged") and return
    `{name: {bleu, chrf, hypotheses, ...}}`; "dev" and "tune" are the corpus's splits. A self-parsing model
    translates each set twice: with its own trees (`name`) and fed the parser's (`<name>_parser_fed`)."""
    recipe = corpus.recipe
    config = model.config
    results = {}
    for name, (src_path, tgt_path) in sets.items():
        if name in ("dev", "tune"):
            src, refs = corpus.texts[name]
        else:
            src, refs = read_pair(src_path, tgt_path)
            src = corpus.prepare_sources(src)
        runs = [(name, corpus.parses(src, "source", src_path) if config.needs_parser_at_inference else None)]
        if config.self_parsing:
            runs.append((f"{name}_parser_fed", corpus.parses(src, "source", src_path)))
        for run_name, run_annotations in runs:
            start = time.time()
            hyps = translate(model, tokenizer, src, run_annotations, num_beams, recipe["max_target_length"],
                             recipe["max_source_length"], translate_batch_size(recipe), recipe.get("length_cap"))
            hyp_path = Path(f"{out_prefix}.{run_name}{model_label}.beam{num_beams}.txt")
            hyp_path.parent.mkdir(parents=True, exist_ok=True)
            hyp_path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
            results[run_name] = {**score(hyps, refs, recipe["bleu_tokenize"]), "num_beams": num_beams,
                                 "sentences": len(src), "source": str(src_path), "reference": str(tgt_path),
                                 "hypotheses": os.path.relpath(hyp_path, REPO),
                                 "translate_seconds": round(time.time() - start, 1)}
            logger.info("%s%s: BLEU %.2f chrF %.2f (beam %d)", run_name, model_label, results[run_name]["bleu"],
                        results[run_name]["chrf"], num_beams)
    return results


def blind_path(out_prefix: Path, num_beams: int, model_label: str = "") -> Path:
    return Path(f"{out_prefix}.test{model_label}.beam{num_beams}.txt")


def translate_blind(model, tokenizer, corpus: Corpus, out_prefix: Path, model_label: str = "") -> Optional[dict]:
    """Translate the recipe's blind test source (`test_source`; its references are held out of the project, on
    purpose) as dev is translated, into `<out_prefix>.test<model_label>.beam<k>.txt` (model_label e.g. ".averaged"):
    corpus order, one line per source line, an empty line for a line that cannot be translated (an empty source
    line, or one the feature processor rejects). Never scored. None when the recipe has no blind set (e.g. en→ja)."""
    recipe = corpus.recipe
    blind = corpus.blind_sources()
    if blind is None:
        return None
    num_beams = recipe["final_num_beams"]
    src_path, sources = blind
    todo = [i for i, line in enumerate(sources) if line.strip()]
    texts = [sources[i] for i in todo]
    annotations = corpus.parses(texts, "source", src_path) if model.config.needs_parser_at_inference else None

    def decode(positions):  # positions in `texts`
        return translate(model, tokenizer, [texts[k] for k in positions],
                         None if annotations is None else [annotations[k] for k in positions],
                         num_beams, recipe["max_target_length"], recipe["max_source_length"],
                         translate_batch_size(recipe), recipe.get("length_cap"))

    start = time.time()
    hyps = [""] * len(sources)
    try:
        done = dict(enumerate(decode(range(len(texts)))))
    except ValueError:  # a line the processor rejects: translate line by line, that line stays empty
        done = {}
        for k in range(len(texts)):
            try:
                done[k] = decode([k])[0]
            except ValueError as error:
                logger.warning("blind test line %d not translated (%s); its line is left empty", todo[k] + 1, error)
    for k, hyp in done.items():
        hyps[todo[k]] = hyp
    translated = {todo[k] for k in done}
    path = blind_path(out_prefix, num_beams, model_label)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    untranslated = [i + 1 for i in range(len(sources)) if i not in translated]  # 1-based line numbers
    logger.info("blind test set: %d lines translated (beam %d), %d left empty -> %s", len(done), num_beams,
                len(untranslated), path)
    return {"source": recipe["test_source"], "sentences": len(sources), "num_beams": num_beams,
            "hypotheses": os.path.relpath(path, REPO), "untranslated_lines": untranslated,
            "translate_seconds": round(time.time() - start, 1)}
