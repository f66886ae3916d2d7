"""Text -> features: alignment, processor, datasets map (num_proc, cache), collator."""

import random

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from hf_syntax_mt.features.syntax_features import (
    DataCollatorForSyntaxSeq2Seq,
    SyntaxFeatureProcessor,
    add_syntax_features,
)
from hf_syntax_mt.syntax import (
    LARGE_DISTANCE,
    Annotation,
    PreParsedAnnotator,
    SpacyAnnotator,
    align_tokens_to_words,
    labeled_relation_matrix,
    read_conllu,
    relative_depth_matrix,
    tree_roots,
    validate_heads,
)

DETS, ADJS = ["the", "a", "my"], ["red", "small", "quiet", "famous"]
NOUNS, VERBS = ["father", "fingerprint", "river", "teacher", "window"], ["bought", "painted", "crossed", "liked"]


def generated_sentence(rng):
    """A generated sentence "DET ADJ NOUN VERB DET NOUN ." with its gold trees."""
    w = [rng.choice(DETS), rng.choice(ADJS), rng.choice(NOUNS), rng.choice(VERBS), rng.choice(DETS), rng.choice(NOUNS)]
    heads = [3, 3, 4, 0, 6, 4, 4]  # CoNLL-U: 1-based, 0 = root
    text = " ".join(w) + " ."
    conllu = f"# text = {text}\n" + "".join(
        f"{i + 1}\t{form}\t_\t_\t_\t_\t{h}\tdep\t_\t_\n" for i, (form, h) in enumerate(zip(w + ["."], heads))
    )
    tree = f"(ROOT (S (NP {w[0]} {w[1]} {w[2]}) (VP {w[3]} (NP {w[4]} {w[5]})) .))"
    return text, conllu, tree


def corpus(n, seed=0):
    rng = random.Random(seed)
    texts, blocks, trees = [], [], []
    for _ in range(n):
        t, c, tr = generated_sentence(rng)
        if t not in texts:
            texts.append(t)
            blocks.append(c)
            trees.append(tr)
    return texts, read_conllu("\n".join(blocks) + "\n", trees=trees)


def tiny_tokenizer(texts, vocab_size=60):
    """A small BPE (Metaspace) fast tokenizer: <pad>=0, </s>=1, <unk>=2, appends </s>."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"]))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A $B </s>", special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="module")
def data():
    texts, annotations = corpus(40)
    return texts, annotations, tiny_tokenizer(texts * 5)


def _word_ids(tokenizer, annotation, target=False):
    text = {"text_target" if target else "text": annotation.text}
    enc = tokenizer(**text, return_offsets_mapping=True, return_special_tokens_mask=True)
    return align_tokens_to_words(annotation, enc["offset_mapping"], enc["special_tokens_mask"])


def _assert_heads_follow_words(heads, word_ids, annotation):
    """Inside a word: the next subword; a word's last subword: the leftmost subword of its head word
    (itself at the root); special tokens: -100."""
    for t, w in enumerate(word_ids):
        if w is None:
            assert heads[t] == -100
        elif t + 1 < len(word_ids) and word_ids[t + 1] == w:
            assert heads[t] == t + 1
        elif annotation.heads[w] == w:
            assert heads[t] == t
        else:
            assert heads[t] == word_ids.index(annotation.heads[w])


def test_processor_features_follow_the_word_tree(data):
    texts, annotations, tokenizer = data
    processor = SyntaxFeatureProcessor(
        tokenizer, PreParsedAnnotator(annotations), needs_source_heads=True, needs_source_distances=True
    )
    out = processor(texts[:8], return_tensors=None)
    assert set(out) == {"input_ids", "attention_mask", "source_heads", "source_distances"}
    assert any(len(ids) > 8 for ids in out["input_ids"])  # words really are split into subwords
    for a, ids, heads, dist in zip(annotations, out["input_ids"], out["source_heads"], out["source_distances"]):
        assert len(ids) == len(heads) == len(dist) and ids[-1] == tokenizer.eos_token_id
        validate_heads(heads, ignore_index=-100)
        word_ids = _word_ids(tokenizer, a)
        assert word_ids[-1] is None and None not in word_ids[:-1]
        _assert_heads_follow_words(heads, word_ids, a)
        assert all(dist[t] == 1.0 for t in range(len(ids) - 1) if word_ids[t + 1] == word_ids[t])  # inside a word: 0 + 1
        # word gaps are Algorithm 1 on the tree + 1; the gap before </s> and after it are large
        gaps = [d for t, d in enumerate(dist[:-2]) if word_ids[t] != word_ids[t + 1]]
        assert gaps == [x + 1 for x in a.word_distances()]
        assert dist[-2:] == [LARGE_DISTANCE, LARGE_DISTANCE]


def test_features_match_what_the_model_derives(data):
    modeling = pytest.importorskip("hf_syntax_mt.modeling_syntax_mt")
    texts, annotations, tokenizer = data
    batch = SyntaxFeatureProcessor(tokenizer, PreParsedAnnotator(annotations))(texts[:4])
    ids, _ = modeling.dependency_relation_ids(batch["source_heads"], "labeled", 2)
    names = modeling.labeled_relation_names(2)
    depth_ids, _ = modeling.dependency_relation_ids(batch["source_heads"], "depth", 2)
    for row, row_ids, row_depth in zip(batch["source_heads"].tolist(), ids, depth_ids):
        ours = labeled_relation_matrix(row, k=2)
        theirs = [[names[v] if 0 <= v < len(names) else "none" for v in r] for r in row_ids.tolist()]
        assert ours.tolist() == theirs
        rel = relative_depth_matrix(row)
        clipped = np.clip(rel.data, -2, 2) + 2
        assert (row_depth.numpy()[~rel.mask] == clipped[~rel.mask]).all()


def test_truncation_cuts_features_with_tokens(data):
    texts, annotations, tokenizer = data
    annotator = PreParsedAnnotator(annotations)
    full = SyntaxFeatureProcessor(tokenizer, annotator, needs_source_distances=True)(texts[:6], return_tensors=None)
    cut = SyntaxFeatureProcessor(tokenizer, annotator, needs_source_distances=True, max_source_length=6)(
        texts[:6], return_tensors=None
    )
    for ids, heads, dist, full_ids, full_dist in zip(
        cut["input_ids"], cut["source_heads"], cut["source_distances"], full["input_ids"], full["source_distances"]
    ):
        assert len(ids) == len(heads) == len(dist) == 6 and ids[-1] == tokenizer.eos_token_id
        assert ids[:5] == full_ids[:5] and heads[-1] == -100
        validate_heads(heads, ignore_index=-100)
        assert dist[:4] == full_dist[:4] and dist[4:] == [LARGE_DISTANCE, LARGE_DISTANCE]


def _annotation(text, words, spans, heads):
    return Annotation(text=text, words=words, spans=spans, heads=heads)


def test_alignment_when_parser_and_tokenizer_disagree():
    text = "New York, cannot  wait"
    # the parser merged "New York", dropped ",", split "cannot" into "can" + "not"
    a = _annotation(
        text,
        ["New York", "can", "not", "wait"],
        [(0, 8), (10, 13), (13, 16), (18, 22)],
        [3, 3, 1, 3],
    )
    # tokenizer pieces: "▁New" "▁York" "," "▁cannot" "▁" "▁wait" "</s>" (a lone "▁" before "wait")
    offsets = [(0, 3), (3, 8), (8, 9), (9, 16), (16, 17), (17, 22), (0, 0)]
    special = [0, 0, 0, 0, 0, 0, 1]
    word_ids = align_tokens_to_words(a, offsets, special)
    # "," joins the preceding word; "cannot" belongs to "can" (its first character); the
    # whitespace-only piece joins the next word
    assert word_ids == [0, 0, 0, 1, 3, 3, None]
    from hf_syntax_mt.syntax import token_features

    feats = token_features(a, offsets, special, heads=True, distances=True)
    # "not" (word 2) got no token; arcs to the root "wait" reach its leftmost piece, the lone "▁"
    assert feats["heads"] == [1, 2, 4, 4, 5, 5, -100]
    validate_heads(feats["heads"], ignore_index=-100)
    assert len(feats["distances"]) == 7 and feats["distances"][-2:] == [LARGE_DISTANCE] * 2


def test_alignment_reroutes_dependents_of_words_without_tokens():
    # parser: "買っ" "た" as two words, tokenizer: one piece "買った"; "た" heads "よ"
    a = _annotation("買ったよ", ["買っ", "た", "よ"], [(0, 2), (2, 3), (3, 4)], [0, 0, 1])
    feats = token_features_for(a, [(0, 3), (3, 4), (0, 0)], [0, 0, 1])
    assert feats["heads"] == [0, 0, -100]  # "よ" re-attached to "た"'s head "買っ"


def token_features_for(a, offsets, special):
    from hf_syntax_mt.syntax import token_features

    return token_features(a, offsets, special, heads=True, distances=True)


def test_empty_and_whitespace_sources(data):
    texts, annotations, tokenizer = data
    annotator = PreParsedAnnotator(annotations)
    out = SyntaxFeatureProcessor(tokenizer, annotator, needs_source_distances=True)(
        ["", "   ", texts[0]], return_tensors=None
    )
    assert out["input_ids"][0] == [tokenizer.eos_token_id]
    assert out["source_heads"][0] == [-100] and out["source_distances"][0] == [LARGE_DISTANCE]
    assert set(out["source_heads"][1]) == {-100}
    validate_heads(out["source_heads"][2], ignore_index=-100)


def test_multi_sentence_source_keeps_one_tree_per_sentence(data):
    from hf_syntax_mt.syntax import SENTENCE_DISTANCE, merge_annotations

    texts, annotations, tokenizer = data
    merged = merge_annotations(annotations[:2])
    out = SyntaxFeatureProcessor(tokenizer, needs_source_distances=True)(annotations=[merged], return_tensors=None)
    heads, dist = out["source_heads"][0], out["source_distances"][0]
    assert len({r for r in tree_roots(heads, ignore_index=-100) if r >= 0}) == 2
    assert dist.count(SENTENCE_DISTANCE) == 1


def test_missing_annotator_and_slow_tokenizer(data):
    texts, _, tokenizer = data
    with pytest.raises(ValueError, match="no source annotator"):
        SyntaxFeatureProcessor(tokenizer)(texts[:1])
    # nothing to parse: plain tokenization, no annotator needed
    out = SyntaxFeatureProcessor(tokenizer, needs_source_heads=False)(texts[:1], return_tensors=None)
    assert set(out) == {"input_ids", "attention_mask"}

    class Slow:
        is_fast = False

    with pytest.raises(ValueError, match="fast tokenizer"):
        SyntaxFeatureProcessor(Slow())


def test_target_heads_align_with_labels(data):
    texts, annotations, tokenizer = data
    parsed = PreParsedAnnotator(annotations)
    processor = SyntaxFeatureProcessor(
        tokenizer, parsed, needs_source_heads=False, needs_target_heads=True, target_annotator=parsed
    )
    out = processor(texts[:3], texts[3:6], return_tensors=None)
    assert any(len(labels) > 8 for labels in out["labels"])  # target words really are split into subwords
    for a, labels, heads in zip(annotations[3:6], out["labels"], out["target_heads"]):
        assert labels == tokenizer(text_target=a.text)["input_ids"] and labels[-1] == tokenizer.eos_token_id
        word_ids = _word_ids(tokenizer, a, target=True)
        assert len(word_ids) == len(heads) and word_ids[-1] is None and None not in word_ids[:-1]
        validate_heads(heads, ignore_index=-100)
        _assert_heads_follow_words(heads, word_ids, a)  # the target tree, as for the source
    with pytest.raises(ValueError, match="no target annotator"):
        SyntaxFeatureProcessor(tokenizer, parsed, needs_target_heads=True)(texts[:1], texts[1:2])


def test_processor_tensors_and_collator_padding(data):
    texts, annotations, tokenizer = data
    processor = SyntaxFeatureProcessor(
        tokenizer,
        PreParsedAnnotator(annotations),
        needs_source_distances=True,
        needs_target_heads=True,
        target_annotator=PreParsedAnnotator(annotations),
    )
    batch = processor(["", texts[0]], [texts[1], ""])
    n, m = batch["input_ids"].shape[1], batch["labels"].shape[1]
    assert batch["source_heads"].dtype == torch.long and batch["source_distances"].dtype == torch.float32
    assert batch["source_heads"].shape == batch["source_distances"].shape == (2, n)
    assert batch["target_heads"].shape == (2, m)
    assert (batch["source_heads"][0] == -100).all() and (batch["source_distances"][0] == LARGE_DISTANCE).all()
    assert (batch["input_ids"][0, 1:] == tokenizer.pad_token_id).all()
    assert (batch["labels"][1, 1:] == -100).all() and (batch["target_heads"][1] == -100).all()

    rows = [{k: v[i] for k, v in processor(texts[:2], texts[2:4], return_tensors=None).items()} for i in range(2)]
    collator = DataCollatorForSyntaxSeq2Seq(tokenizer)
    right = collator(rows)
    tokenizer.padding_side = "left"
    try:
        left = collator(rows)
    finally:
        tokenizer.padding_side = "right"
    for i, row in enumerate(rows):
        pad = len(left["input_ids"][i]) - len(row["input_ids"])
        heads = left["source_heads"][i, pad:].tolist()
        assert heads == [h if h == -100 else h + pad for h in row["source_heads"]]
        assert (left["source_heads"][i, :pad] == -100).all() and (left["source_distances"][i, :pad] == LARGE_DISTANCE).all()
        assert right["source_heads"][i, : len(row["source_heads"])].tolist() == row["source_heads"]
    rows[0]["source_heads"] = rows[0]["source_heads"][:-1]
    with pytest.raises(ValueError, match="source_heads has"):
        collator(rows)


def test_from_config(data):
    configuration = pytest.importorskip("hf_syntax_mt.configuration_syntax_mt")
    texts, annotations, tokenizer = data
    config = configuration.SyntaxMTConfig.from_preset("transformer_sla", vocab_size=len(tokenizer))
    processor = SyntaxFeatureProcessor.from_config(config, tokenizer, PreParsedAnnotator(annotations))
    batch = processor(texts[:2])
    assert "source_distances" in batch and "source_heads" not in batch


class CountingAnnotator(PreParsedAnnotator):
    """Pre-parsed lookups that log every parser call to a file (works across processes)."""

    def __init__(self, annotations, log):
        super().__init__(annotations)
        self.log = str(log)

    def settings(self):
        return {"annotations": self.annotations, "log": self.log}

    def _annotate(self, texts):
        with open(self.log, "a") as f:
            f.write(f"{len(texts)}\n")
        return super()._annotate(texts)


def test_dataset_map_num_proc_and_cache(data, tmp_path):
    datasets = pytest.importorskip("datasets")
    texts, annotations, tokenizer = data
    datasets.Dataset.from_dict({"source": texts, "target": texts[::-1]}).save_to_disk(str(tmp_path / "raw"))
    log = tmp_path / "parser_calls.txt"
    annotator = CountingAnnotator(annotations, log)
    kwargs = dict(
        tokenizer=tokenizer,
        annotator=annotator,
        source_column="source",
        target_column="target",
        max_source_length=12,
        max_target_length=12,
        source_heads=True,
        source_distances=True,
        target_heads=True,
        target_annotator=annotator,
    )

    def run():
        ds = datasets.load_from_disk(str(tmp_path / "raw"))
        return ds.map(add_syntax_features, batched=True, batch_size=8, num_proc=2, fn_kwargs=kwargs, remove_columns=["source", "target"])

    first = run()
    calls = log.read_text().split()
    assert len(calls) >= 2 and sum(map(int, calls)) == 2 * len(texts)  # source + target of every row
    second = run()
    assert log.read_text().split() == calls  # served from the cache: no parser call
    assert second.cache_files == first.cache_files
    assert first[0].keys() == {"input_ids", "attention_mask", "labels", "source_heads", "source_distances", "target_heads"}
    assert first["source_heads"] == second["source_heads"]
    row = first[0]
    assert len(row["input_ids"]) <= 12 and len(row["source_heads"]) == len(row["input_ids"])
    assert len(row["target_heads"]) == len(row["labels"])
    batch = DataCollatorForSyntaxSeq2Seq(tokenizer)([first[i] for i in range(5)])
    assert batch["source_distances"].shape == batch["input_ids"].shape


def test_map_column_paths(data):
    texts, annotations, tokenizer = data
    batch = {"translation": [{"en": t, "xx": t} for t in texts[:2]]}
    out = add_syntax_features(
        batch, tokenizer, PreParsedAnnotator(annotations), source_column="translation.en", target_column="translation.xx"
    )
    assert len(out["source_heads"]) == 2 and "labels" in out
    with pytest.raises(KeyError, match="column 'src'"):
        add_syntax_features(batch, tokenizer, PreParsedAnnotator(annotations), source_column="src")


# ---------------------------------------------------------------------------------------------
# Japanese with the real GiNZA parser


def test_ginza_features_on_raw_japanese():
    pytest.importorskip("ja_ginza")
    texts = ["私は赤い車を買った。", "猫が窓の外を見ている。", "明日は雨が降るでしょう。先生が言った。"]
    tokenizer = tiny_tokenizer(texts * 20, vocab_size=40)
    processor = SyntaxFeatureProcessor(tokenizer, SpacyAnnotator("ja_ginza"), needs_source_distances=True)
    out = processor(texts, return_tensors=None)
    for text, ids, heads, dist in zip(texts, out["input_ids"], out["source_heads"], out["source_distances"]):
        assert len(ids) == len(heads) == len(dist)
        validate_heads(heads, ignore_index=-100)
        n_roots = len({r for r in tree_roots(heads, ignore_index=-100) if r >= 0})
        assert n_roots == text.count("。")
        assert all(d >= 1 for d in dist) and dist[-1] == LARGE_DISTANCE
