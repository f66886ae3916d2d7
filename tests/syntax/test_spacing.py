"""Natural vs segmented CJK source text (`hf_syntax_mt.syntax.spacing`, config.source_spacing)."""

import functools
import json
import logging
import os
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from transformers import AutoTokenizer, pipeline

import hf_syntax_mt  # noqa: F401  (registers the pipeline)
from hf_syntax_mt import SyntaxMTConfig
from hf_syntax_mt.features.joint_bpe import CJK_SCRIPT_RUN, add_cjk_despacing, despaces_cjk, train_joint_bpe_tokenizer
from hf_syntax_mt.features.syntax_features import SyntaxFeatureProcessor
from hf_syntax_mt.syntax import Annotation, PreParsedAnnotator, detect_source_spacing, locate_words, read_conllu
from hf_syntax_mt.syntax.spacing import (
    apply_source_spacing,
    despace_cjk,
    despace_cjk_positions,
    looks_segmented,
    unsegmented_lines,
)
from hf_syntax_mt.training.run import train
from training_helpers import scratch_dir, synthetic_corpus, tiny_args


def test_despace_cjk_removes_only_spaces_next_to_cjk():
    assert despace_cjk("私 は 赤い 車 を 買っ た 。") == "私は赤い車を買った。"
    assert despace_cjk("私 は New York に 行っ た") == "私はNew Yorkに行った"
    assert despace_cjk("ジョン は 20 歳 です 。") == "ジョンは20歳です。"
    assert despace_cjk("He said 「 はい 」 .") == "He said「はい」."
    assert despace_cjk("안녕 하세요") == "안녕 하세요"  # Hangul is written with spaces
    assert despace_cjk("a\u3000b") == "a\u3000b"  # an ideographic space between Latin letters stays
    assert despace_cjk("plain English text .") == "plain English text ."


def test_segmented_and_unsegmented_lines():
    assert looks_segmented("私 は 学生 です") and not looks_segmented("私は学生です")
    assert unsegmented_lines(["私 は 学生", "私は学生", "no CJK here", "猫"]) == [1]


def test_detect_source_spacing():
    assert detect_source_spacing(["私 は 学生 です 。", "猫 が いる 。"]) == "despace_cjk"
    assert detect_source_spacing(["私は学生です。", "a b"]) == "despace_cjk"
    assert detect_source_spacing(["a small test .", "another line ."]) == "as_is"
    assert detect_source_spacing(["", "  "]) == "as_is"


def test_unknown_spacing_is_refused():
    with pytest.raises(ValueError, match="source_spacing='despace'"):
        apply_source_spacing("x", "despace")
    with pytest.raises(ValueError, match="source_spacing='despace'"):
        SyntaxMTConfig(source_spacing="despace")


_PIECES = st.lists(st.sampled_from(["私", "は", "車", "を", "カ", "ー", "。", "「", "a", "B", "7", " ", "  ", "\t", "\u3000", "한"]),
                   max_size=30)


@given(_PIECES)
def test_positions_carry_every_kept_character(pieces):
    text = "".join(pieces)
    new, index = despace_cjk_positions(text)
    assert new == despace_cjk(text) == despace_cjk(new)  # idempotent
    assert len(index) == len(text) + 1 and index[-1] == len(new)
    kept = [i for i in range(len(text)) if index[i + 1] > index[i]]
    assert "".join(text[i] for i in kept) == new
    assert all(new[index[i]] == text[i] for i in kept)


def _cjk_word(word: str) -> str:
    """A made-up CJK word for an English-like word of the synthetic corpus (kanji + kana ending)."""
    if word == ".":
        return "。"
    code = sum(ord(c) * 31 ** i for i, c in enumerate(word))
    return chr(0x4E00 + code % 3000) + chr(0x3041 + code // 3000 % 80) * (len(word) % 2)


def _cjk_corpus():
    """The synthetic corpus with its source words made CJK and space-segmented (gold trees kept)."""
    source_dir = synthetic_corpus()
    out = scratch_dir("cjk_corpus")
    for split in ("train", "dev"):
        annotations = read_conllu(source_dir / f"{split}.src.conllu")
        lines = [" ".join(_cjk_word(w) for w in a.words) for a in annotations]
        (out / f"{split}.src").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        (out / f"{split}.tgt").write_text((source_dir / f"{split}.tgt").read_text(encoding="utf-8"), encoding="utf-8")
        conllu = []
        for a in annotations:
            conllu += [f"{i + 1}\t{_cjk_word(w)}\t_\t_\t_\t_\t{0 if h == i else h + 1}\t{r or 'dep'}\t_\t_"
                       for i, (w, h, r) in enumerate(zip(a.words, a.heads, a.deprels or [None] * len(a.words)))]
            conllu.append("")
        (out / f"{split}.src.conllu").write_text("\n".join(conllu) + "\n", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def cjk_corpus():
    return _cjk_corpus()


def test_script_split_keeps_particles_apart():
    texts = ["私は赤い車を買った。", "車を見た。", "私は見た。"] * 5
    tokenizer = train_joint_bpe_tokenizer(texts, vocab_size=60, split_cjk_scripts=True)
    pieces = tokenizer.tokenize("私は赤い車を買った。")
    assert pieces == ["▁私", "は", "赤", "い", "車", "を", "買", "った", "。"]
    merged = train_joint_bpe_tokenizer(texts, vocab_size=60).tokenize("私は赤い車を買った。")
    assert len(merged) < len(pieces)  # without the cut BPE merges across the particles


def test_processor_gives_natural_and_segmented_input_the_same_features(cjk_corpus):
    segmented = (cjk_corpus / "dev.src").read_text(encoding="utf-8").splitlines()
    natural = [despace_cjk(line) for line in segmented]
    assert natural != segmented
    tokenizer = train_joint_bpe_tokenizer(natural * 3, vocab_size=80, split_cjk_scripts=True)
    gold = PreParsedAnnotator.from_conllu(cjk_corpus / "dev.src.conllu")  # spans index the segmented text
    processor = SyntaxFeatureProcessor(tokenizer, gold, needs_source_distances=True, source_spacing="despace_cjk")
    from_segmented = processor(segmented, return_tensors=None)
    from_natural = processor(natural, return_tensors=None)
    assert from_segmented == from_natural
    # the re-indexed tree is the gold tree: every word of a one-subword-per-word line keeps its head
    a = processor.prepare_source_annotation(gold.annotate([segmented[0]])[0])
    assert a.text == natural[0] and [a.text[s:e] for s, e in a.spans] == a.words
    as_is = SyntaxFeatureProcessor(tokenizer, gold, source_spacing="as_is")
    assert as_is(segmented, return_tensors=None)["input_ids"] != from_natural["input_ids"]


@pytest.fixture(scope="module")
def natural_model(cjk_corpus):
    """A model trained on the segmented CJK corpus with source_spacing="despace_cjk" (detected), and its metrics."""
    out = scratch_dir("natural")
    model_args, data_args, training_args = tiny_args(out, "transformer_dep_rel", parser="preparsed", data_dir=cjk_corpus,
                                                     max_steps=2)
    return out, train(model_args, data_args, training_args)


def test_trained_model_reads_natural_and_segmented_input_alike(natural_model, cjk_corpus):
    out, result = natural_model
    config = json.loads((out / "config.json").read_text())
    assert config["source_spacing"] == "despace_cjk"
    tokenizer = AutoTokenizer.from_pretrained(out)
    pre_tokenizer = json.loads(tokenizer.backend_tokenizer.to_str())["pre_tokenizer"]
    patterns = [p.get("pattern", {}).get("Regex") for p in pre_tokenizer["pretokenizers"]]
    assert CJK_SCRIPT_RUN in patterns  # the script cut travels with the tokenizer
    vocab = tokenizer.get_vocab()
    assert not any(" " in token for token in vocab)
    segmented = (cjk_corpus / "dev.src").read_text(encoding="utf-8").splitlines()
    natural = [despace_cjk(line) for line in segmented]
    gold = PreParsedAnnotator.from_conllu(cjk_corpus / "dev.src.conllu")
    translate = pipeline("syntax-translation", model=str(out), annotator=gold)
    assert translate(segmented, num_beams=2) == translate(natural, num_beams=2)
    assert result.metrics["eval_bleu"] >= 0


def test_segmented_model_cuts_unsegmented_input_at_its_parsers_words_or_warns(cjk_corpus, caplog):
    out = scratch_dir("segmented")
    model_args, data_args, training_args = tiny_args(out, "transformer_abs", parser="none", data_dir=cjk_corpus,
                                                     max_steps=1, eval_strategy="no")
    data_args.source_spacing = "segmented"
    train(model_args, data_args, training_args)
    assert json.loads((out / "config.json").read_text())["source_spacing"] == "segmented"
    segmented = (cjk_corpus / "dev.src").read_text(encoding="utf-8").splitlines()[:3]
    translate = pipeline("syntax-translation", model=str(out))
    with caplog.at_level(logging.WARNING):
        translate([segmented[0], despace_cjk(segmented[1]), segmented[2]], max_new_tokens=3)
    warnings = [r.getMessage() for r in caplog.records if "space-segmented" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("line 2 ")
    # with a parser the pipeline cuts the unsegmented line at the parser's words: the gold treebank's
    # words are the corpus's, so the model reads exactly the segmented line
    caplog.clear()
    gold = PreParsedAnnotator.from_conllu(cjk_corpus / "dev.src.conllu")
    parsed = pipeline("syntax-translation", model=str(out), annotator=gold)
    mixed = [segmented[0], despace_cjk(segmented[1]), segmented[2]]

    def model_reads(translator, texts, annotations=None):
        batch = translator.preprocess({"texts": texts, "annotations": annotations, "offset": 0})
        return batch["model_inputs"]["input_ids"].tolist()

    with caplog.at_level(logging.WARNING):
        read = model_reads(parsed, mixed)
    assert not [r for r in caplog.records if "space-segmented" in r.getMessage()]
    assert read == model_reads(parsed, segmented) != model_reads(translate, mixed)
    # the caller's own annotations fix what the model reads (their texts): warned about when unsegmented
    tree = gold.annotate([segmented[1]])[0]
    unsegmented = Annotation(mixed[1], tree.words, locate_words(mixed[1], tree.words), tree.heads)  # on the despaced text
    assert unsegmented.text != segmented[1]
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert model_reads(parsed, mixed, gold.annotate(segmented)) == read
        assert not [r for r in caplog.records if "space-segmented" in r.getMessage()]
        model_reads(parsed, mixed[:1] + [mixed[1]], gold.annotate(segmented[:1]) + [unsegmented])
    assert [r for r in caplog.records if "space-segmented" in r.getMessage()][-1].getMessage().startswith("line 2 ")


class _CountingAnnotator(PreParsedAnnotator):
    """The gold treebank, recording every text it is asked to parse."""

    def __init__(self, annotations):
        super().__init__(annotations)
        self.asked = []

    def _annotate(self, texts):
        self.asked += texts
        return super()._annotate(texts)


def test_segmented_model_that_needs_a_parser_parses_a_cut_line_once(cjk_corpus):
    out = scratch_dir("segmented_dep")
    model_args, data_args, training_args = tiny_args(out, "transformer_dep", data_dir=cjk_corpus, max_steps=1,
                                                     eval_strategy="no")
    data_args.source_spacing = "segmented"
    train(model_args, data_args, training_args)
    segmented = (cjk_corpus / "dev.src").read_text(encoding="utf-8").splitlines()[:3]
    mixed = [segmented[0], despace_cjk(segmented[1]), segmented[2]]
    gold = _CountingAnnotator(read_conllu(cjk_corpus / "dev.src.conllu"))
    translate = pipeline("syntax-translation", model=str(out), annotator=gold)
    from_mixed = translate.preprocess({"texts": mixed, "annotations": None, "offset": 0})["model_inputs"]
    # the despaced line is parsed once (to cut it); its parse is reused for the features
    assert sorted(gold.asked) == sorted(mixed)
    from_segmented = translate.preprocess({"texts": segmented, "annotations": None, "offset": 0})["model_inputs"]
    assert "source_heads" in from_mixed and from_mixed.keys() == from_segmented.keys()
    assert all(from_mixed[k].tolist() == from_segmented[k].tolist() for k in from_mixed)


def test_continued_model_keeps_its_spacing(cjk_corpus):
    out = scratch_dir("continued")
    model_args, data_args, training_args = tiny_args(out, "transformer_abs", parser="none", data_dir=cjk_corpus,
                                                     max_steps=1, eval_strategy="no")
    train(model_args, data_args, training_args)
    model_args, data_args, training_args = tiny_args(scratch_dir("continued2"), "transformer_abs", parser="none",
                                                     data_dir=cjk_corpus, max_steps=1, eval_strategy="no")
    model_args.model_name_or_path, model_args.config_overrides = str(out), None
    data_args.source_spacing = "as_is"
    with pytest.raises(ValueError, match="trained with source_spacing='despace_cjk'"):
        train(model_args, data_args, training_args)


_CJK_TEXTS = ["私は赤い車を買った。", "車を見た。", "the red car .", "I saw a car ."] * 3


@functools.cache
def _despacing_tokenizer():
    return train_joint_bpe_tokenizer(_CJK_TEXTS, vocab_size=60, split_cjk_scripts=True, despace_cjk=True)


@given(_PIECES)
def test_despacing_normalizer_reads_text_as_despace_cjk(pieces):
    text = "".join(pieces)
    normalizer = _despacing_tokenizer().backend_tokenizer.normalizer
    assert normalizer.normalize_str(text) == unicodedata.normalize("NFKC", despace_cjk(text))


def test_despacing_tokenizer_reads_spaced_cjk_as_unspaced_and_leaves_english_alone():
    tokenizer = _despacing_tokenizer()
    plain = train_joint_bpe_tokenizer(_CJK_TEXTS, vocab_size=60, split_cjk_scripts=True)
    assert despaces_cjk(tokenizer) and not despaces_cjk(plain)
    # the processor defaults to the spacing its tokenizer reads
    assert SyntaxFeatureProcessor(tokenizer, needs_source_heads=False).source_spacing == "despace_cjk"
    assert SyntaxFeatureProcessor(plain, needs_source_heads=False).source_spacing == "as_is"
    spaced = "私 は 赤い 車 を 買っ た 。"
    unspaced = "私は赤い車を買った。"
    assert tokenizer(spaced)["input_ids"] == tokenizer(unspaced)["input_ids"] == plain(unspaced)["input_ids"]
    assert plain(spaced)["input_ids"] != tokenizer(spaced)["input_ids"]
    english = ["the red car .", "I saw  a car ."]
    assert tokenizer(text_target=english)["input_ids"] == plain(text_target=english)["input_ids"]
    # offsets index the raw, spaced text: every subword covers its characters there
    encoding = tokenizer(spaced, return_offsets_mapping=True, add_special_tokens=False)
    pieces = [spaced[start:end].replace(" ", "") for start, end in encoding["offset_mapping"]]
    assert pieces == [token.lstrip("▁") for token in tokenizer.convert_ids_to_tokens(encoding["input_ids"])]
    add_cjk_despacing(plain)  # added to an existing tokenizer: the same reading, once
    add_cjk_despacing(plain)
    assert plain(spaced)["input_ids"] == tokenizer(spaced)["input_ids"]
    assert plain.backend_tokenizer.normalizer.__getstate__() == tokenizer.backend_tokenizer.normalizer.__getstate__()


def test_saved_tokenizer_alone_reads_as_the_pipeline(natural_model, cjk_corpus, tmp_path):
    """AutoTokenizer (with the package, and through remote code without it), the processor built from the
    config and the pipeline give the model the same tokens, on segmented and natural input."""
    out, _ = natural_model
    segmented = (cjk_corpus / "dev.src").read_text(encoding="utf-8").splitlines()[:4]
    natural = [despace_cjk(line) for line in segmented]
    gold = PreParsedAnnotator.from_conllu(cjk_corpus / "dev.src.conllu")
    translate = pipeline("syntax-translation", model=str(out), annotator=gold)
    read = translate.preprocess({"texts": segmented, "annotations": None, "offset": 0})["model_inputs"]["input_ids"]
    pipeline_ids = [[i for i in row if i != translate.tokenizer.pad_token_id] for row in read.tolist()]
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer(segmented)["input_ids"] == tokenizer(natural)["input_ids"] == pipeline_ids
    processor = SyntaxFeatureProcessor.from_config(translate.model.config, tokenizer, gold)
    assert processor.source_spacing == "despace_cjk"
    assert processor(segmented, return_tensors=None)["input_ids"] == pipeline_ids
    code = (f"import json; from transformers import AutoTokenizer; "
            f"t = AutoTokenizer.from_pretrained({str(out)!r}, trust_remote_code=True); "
            f"print(json.dumps(t({segmented + natural!r})['input_ids']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == pipeline_ids * 2


def test_annotation_of_other_text_is_still_refused():
    tokenizer = train_joint_bpe_tokenizer(["私は学生です。"] * 3, vocab_size=30, split_cjk_scripts=True)
    processor = SyntaxFeatureProcessor(tokenizer, source_spacing="despace_cjk")
    other = Annotation("猫 が いる", ["猫", "が", "いる"], [(0, 1), (2, 3), (4, 6)], [2, 0, 2])
    with pytest.raises(ValueError, match="is of the text"):
        processor(["私は学生です。"], annotations=[other])
