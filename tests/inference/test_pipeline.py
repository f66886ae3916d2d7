"""The `syntax-translation` pipeline on tiny trained models: outputs, batching, bad input."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
from transformers.utils import logging as transformers_logging

import hf_syntax_mt  # noqa: F401
import hf_syntax_mt.inference.pipeline  # noqa: F401  (registers "syntax-translation")
from hf_syntax_mt.features.syntax_features import SyntaxFeatureProcessor
from hf_syntax_mt.inference.pipeline import SyntaxTranslationPipeline
from hf_syntax_mt.syntax import PreParsedAnnotator, read_conllu
from training_helpers import scratch_dir, synthetic_corpus, trained_model

DEP = "transformer_dep_rel+transformer_dbsa+transformer_sla"


@pytest.fixture(scope="module")
def dev():
    data = synthetic_corpus()
    trees = (data / "dev.src.tree").read_text().splitlines()
    annotations = read_conllu(data / "dev.src.conllu", trees=trees)
    return (data / "dev.src").read_text().splitlines(), annotations


def test_translates_raw_sentences_with_preparsed_annotator(dev):
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(annotations))
    assert isinstance(translate, SyntaxTranslationPipeline)
    outputs = translate(sources, batch_size=4, num_beams=2, max_new_tokens=8)
    assert len(outputs) == len(sources)
    assert all(set(o) == {"translation_text"} and o["translation_text"] for o in outputs)
    assert translate(sources[0], max_new_tokens=8)[0]["translation_text"]
    # per-call annotations instead of an annotator
    plain = pipeline("syntax-translation", model=str(out))
    assert plain(sources[:2], annotations=annotations[:2], max_new_tokens=8) == translate(sources[:2], max_new_tokens=8)


def _direct_generate(out, sources, annotations, **generate):
    """(pipeline over the model of `out`, the stripped decoded `model.generate` outputs of `sources`)."""
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    processor = SyntaxFeatureProcessor.from_config(model.config, tokenizer, PreParsedAnnotator(annotations))
    batch = processor(sources)
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "source_heads", "source_distances")}
    with torch.no_grad():
        ids = model.generate(**inputs, **generate)
    translate = pipeline("syntax-translation", model=model, tokenizer=tokenizer, annotator=PreParsedAnnotator(annotations))
    return translate, [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def test_matches_direct_generate(dev):
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate, expected = _direct_generate(out, sources[:3], annotations, max_new_tokens=8)
    got = [o["translation_text"] for o in translate(sources[:3], batch_size=2, max_new_tokens=8)]
    assert got == expected


def test_n_best_lists_match_direct_generate(dev):
    """num_return_sequences=k gives each sentence its own k beams, best first (generate's k rows per
    sentence, grouped), and a bad line k empty ones with its error; k > num_beams without sampling is refused."""
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate, decoded = _direct_generate(out, sources[:3], annotations, num_beams=3, num_return_sequences=2,
                                          max_new_tokens=8)
    expected = [decoded[0:2], decoded[2:4], decoded[4:6], ["", ""]]
    got = translate(sources[:3] + [""], batch_size=2, num_beams=3, num_return_sequences=2, max_new_tokens=8)
    assert [[o["translation_text"] for o in alternatives] for alternatives in got] == expected
    assert [o.get("error") for o in got[3]] == ["empty input line"] * 2 and "error" not in got[0][0]
    assert translate(sources[:1], num_beams=3, num_return_sequences=1, max_new_tokens=8) == [
        {"translation_text": decoded[0]}]
    for kwargs, message in (({"num_return_sequences": 0}, "^num_return_sequences=0: the number of translations "
                                                            "per sentence must be an integer >= 1$"),
                            ({"num_return_sequences": 2}, "^num_return_sequences=2 but num_beams=1: beam search "),
                            ({"num_return_sequences": 4, "num_beams": 3}, "raise num_beams to at least 4")):
        with pytest.raises(ValueError, match=message):
            translate(sources[:1], **kwargs)
    sampled = translate(sources[:2], num_return_sequences=3, do_sample=True, max_new_tokens=5)
    assert [len(alternatives) for alternatives in sampled] == [3, 3]




def test_generation_settings_given_at_construction_are_checked_and_used_as_a_calls(dev):
    """pipeline(..., num_beams=3, num_return_sequences=2) gives what the same settings per call give (they were
    passed to generate behind the n-best grouping's back: a RuntimeError); a bad one is refused when the
    pipeline is built (num_beams=0 was a ZeroDivisionError inside generate); a call's generation_config
    replaces them, as in transformers."""
    from transformers import GenerationConfig

    sources, annotations = dev
    out, _ = trained_model(DEP)
    annotator = PreParsedAnnotator(annotations)
    per_call = pipeline("syntax-translation", model=str(out), annotator=annotator)
    expected = per_call(sources[:3], num_beams=3, num_return_sequences=2, max_new_tokens=8)
    built = pipeline("syntax-translation", model=str(out), annotator=annotator, num_beams=3, num_return_sequences=2,
                     max_new_tokens=8)
    assert built(sources[:3]) == expected and all(len(alternatives) == 2 for alternatives in expected)
    assert built(sources[:1], num_return_sequences=1) == [expected[0][0]]
    beams = pipeline("syntax-translation", model=str(out), annotator=annotator, num_beams=3, max_new_tokens=8)
    assert beams(sources[:3], num_return_sequences=2) == expected  # the construction's beam admits the call's k
    assert built(sources[:1], generation_config=GenerationConfig(max_new_tokens=8)) == per_call(
        sources[:1], max_new_tokens=8)
    for settings, message in (({"num_beams": 0}, "^num_beams=0: the beam size must be an integer >= 1"),
                              ({"num_return_sequences": 2}, "^num_return_sequences=2 but num_beams=1"),
                              ({"return_dict_in_generate": True}, "^return_dict_in_generate=True: the pipeline"),
                              ({"max_length_a": -1}, "^max_length_a=-1: the length cap's a ")):
        with pytest.raises(ValueError, match=message):
            pipeline("syntax-translation", model=str(out), annotator=annotator, **settings)

def _naive_log_probability(model, inputs: dict, row: int, ids: list[int]) -> float:
    """sum_t log softmax(logits_t)[y_t] over y = ids (the decoder start first), one prefix a forward pass."""
    one = {name: value[row : row + 1] for name, value in inputs.items()}
    total = 0.0
    for t in range(1, len(ids)):
        with torch.no_grad():
            logits = model(**one, decoder_input_ids=torch.tensor([ids[:t]])).logits[0, -1]
        total += torch.log_softmax(logits, dim=-1)[ids[t]].item()
    return total


def test_return_scores_match_the_formula_and_the_beams_own_scores(dev):
    """return_scores=True: log_probability as a prefix-by-prefix sum of token log-probabilities, up to the
    first </s>, and score = log_probability / length ** length_penalty, which is beam search's own
    sequences_scores; a bad line gets no score; the texts are those without return_scores."""
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate, _ = _direct_generate(out, sources[:1], annotations)
    model, tokenizer = translate.model, translate.tokenizer
    batch = SyntaxFeatureProcessor.from_config(model.config, tokenizer, PreParsedAnnotator(annotations))(sources[:3])
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "source_heads", "source_distances")}
    # the tiny model's beams end at a frequent token taken as </s> at different lengths: rows padded after it
    for generate in ({"max_new_tokens": 8}, {"num_beams": 3, "num_return_sequences": 2, "max_new_tokens": 30,
                                             "eos_token_id": 4, "length_penalty": 0.6}):
        k, eos = generate.get("num_return_sequences", 1), generate.get("eos_token_id", model.config.eos_token_id)
        with torch.no_grad():
            direct = model.generate(**inputs, **generate, return_dict_in_generate=True, output_scores=True)
        got = translate(sources[:3] + [""], batch_size=2, return_scores=True, **generate)
        rows = [record for alternatives in got[:3] for record in (alternatives if k > 1 else [alternatives])]
        ends_early = False
        assert [r["translation_text"] for r in rows] == [
            t.strip() for t in tokenizer.batch_decode(direct.sequences, skip_special_tokens=True)]
        for row, record in enumerate(rows):
            ids = direct.sequences[row].tolist()
            ids = ids[: ids.index(eos, 1) + 1] if eos in ids[1:] else ids
            ends_early |= len(ids) < len(direct.sequences[row])
            assert record["log_probability"] == pytest.approx(
                _naive_log_probability(model, inputs, row // k, ids), abs=1e-4)
            length_penalty = generate.get("length_penalty", 1.0)
            assert record["score"] == pytest.approx(record["log_probability"] / (len(ids) - 1) ** length_penalty,
                                                    abs=1e-5)
            if k > 1:
                assert record["score"] == pytest.approx(direct.sequences_scores[row].item(), abs=1e-4)
        assert ends_early == (k > 1)
        bad = got[3] if k > 1 else [got[3]]
        assert all(set(record) == {"translation_text", "error"} for record in bad)
        without = translate(sources[:3], batch_size=2, **generate)
        assert [[o["translation_text"] for o in (a if k > 1 else [a])] for a in without] == [
            [o["translation_text"] for o in (a if k > 1 else [a])] for a in got[:3]]
    with pytest.raises(ValueError, match="^return_scores='yes': expected True or False$"):
        translate(sources[:1], return_scores="yes")
    for name in ("return_dict_in_generate", "output_scores", "output_logits"):  # were a KeyError or ignored
        with pytest.raises(ValueError, match=f"^{name}=True: the pipeline returns translations, .* return_scores=True"):
            translate(sources[:1], **{name: True})

def test_transformers_translation_pipeline_keywords(dev):
    """The keywords of transformers v4's translation pipeline: return_tensors gives generate's ids up to the first
    </s> (instead of the text, or beside it with return_text=True), clean_up_tokenization_spaces reaches the
    decoding, and src_lang / tgt_lang / truncation are refused saying why (they went to generate, which
    refused them as unused model_kwargs)."""
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate, texts = _direct_generate(out, sources[:3], annotations, max_new_tokens=8)
    model, tokenizer = translate.model, translate.tokenizer
    batch = SyntaxFeatureProcessor.from_config(model.config, tokenizer, PreParsedAnnotator(annotations))(sources[:3])
    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "source_heads", "source_distances")}
    # the tiny model's beams end at a frequent token taken as </s> at different lengths: padded after it
    generate = {"num_beams": 3, "num_return_sequences": 2, "max_new_tokens": 30, "eos_token_id": 4, "length_penalty": 0.6}
    with torch.no_grad():
        rows = model.generate(**inputs, **generate).tolist()
    expected_ids = [row[: row.index(4, 1) + 1] if 4 in row[1:] else row for row in rows]
    assert any(len(ids) < len(rows[0]) for ids in expected_ids)  # some row was padded

    def flat(outputs):
        return [record for alternatives in outputs for record in alternatives]

    got = translate(sources[:3] + [""], batch_size=4, return_tensors=True, **generate)
    assert [o["translation_token_ids"] for o in flat(got[:3])] == expected_ids
    assert all(set(o) == {"translation_token_ids"} for o in flat(got[:3]))
    assert [o["translation_token_ids"] for o in got[3]] == [[], []] and all("error" in o for o in got[3])
    both = flat(translate(sources[:3], return_tensors=True, return_text=True, **generate))
    assert [o["translation_token_ids"] for o in both] == expected_ids
    assert [o["translation_text"] for o in both] == [t.strip() for t in tokenizer.batch_decode(rows, skip_special_tokens=True)]
    for clean_up in (True, False):
        decoded = tokenizer.batch_decode(rows, skip_special_tokens=True, clean_up_tokenization_spaces=clean_up)
        assert [o["translation_text"] for o in flat(translate(sources[:3], clean_up_tokenization_spaces=clean_up,
                                                                **generate))] == [t.strip() for t in decoded]
    at_construction = pipeline("syntax-translation", model=model, tokenizer=tokenizer, return_tensors=True,
                               annotator=PreParsedAnnotator(annotations))
    assert at_construction(sources[:3], batch_size=4, **generate) == got[:3]
    assert translate(sources[:3], max_new_tokens=8, truncation=False) == translate(sources[:3], max_new_tokens=8)
    with pytest.raises(ValueError, match="^src_lang='ja': a syntax-translation model translates the one language pair"):
        translate(sources[:1], src_lang="ja")
    with pytest.raises(ValueError, match="^tgt_lang='en': .* leave them out$"):
        translate(sources[:1], tgt_lang="en")
    with pytest.raises(ValueError, match="^truncation=True: the pipeline does not truncate: a line longer than"):
        translate(sources[:1], truncation=True)
    with pytest.raises(ValueError, match="^return_text=False without return_tensors=True leaves nothing to return$"):
        translate(sources[:1], return_text=False)
    with pytest.raises(ValueError, match="^return_tensors='yes': expected True or False$"):
        translate(sources[:1], return_tensors="yes")


def test_bad_lines_are_reported_and_skipped(dev, caplog):
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(annotations))
    lines = [sources[0], "", "a sentence nobody parsed .", sources[1]]
    with caplog.at_level("WARNING"):
        outputs = translate(lines, batch_size=4, max_new_tokens=6)
    assert [bool(o["translation_text"]) for o in outputs] == [True, False, False, True]
    assert outputs[1]["error"] == "empty input line"
    assert "could not parse" in outputs[2]["error"] and "error" not in outputs[0]
    assert "line 2: empty input line" in caplog.text and "line 3: could not parse" in caplog.text  # 1-based
    assert len(caplog.records) == 2  # one report per bad line


def test_undecodable_lines_are_reported_by_number_and_skipped(dev, caplog):
    """bytes that are not UTF-8 and strings with lone surrogates are bad lines like empty ones; UTF-8
    bytes are text, and a single bytes input is one sentence."""
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(annotations))
    good = translate(sources[:2], max_new_tokens=6)
    lines = [sources[0], b"caf\xe9 \xff", "caf\udce9", sources[1].encode("utf-8")]
    with caplog.at_level("WARNING"):
        outputs = translate(lines, batch_size=4, max_new_tokens=6)
    assert [o["translation_text"] for o in outputs] == [good[0]["translation_text"], "", "", good[1]["translation_text"]]
    assert outputs[1]["error"] == "not UTF-8 text (invalid byte 0xe9 at byte 4 of the line)"
    assert outputs[2]["error"] == "not valid Unicode text (lone surrogate '\\udce9' at character 4)"
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["line 2", "line 3"]
    assert translate(sources[1].encode("utf-8"), max_new_tokens=6) == [good[1]]


def test_an_item_that_is_not_text_fails_alone(dev, caplog):
    """42 (or None) in a batch: that item gets its error, the rest of the batch is translated."""
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(annotations))
    good = translate(sources[:2], max_new_tokens=6)
    with caplog.at_level("WARNING"):
        outputs = translate([42, sources[0], None, sources[1]], batch_size=4, max_new_tokens=6)
    assert outputs == [
        {"translation_text": "", "error": "not text but int (42): give a string or UTF-8 bytes"},
        good[0],
        {"translation_text": "", "error": "not text but NoneType (None): give a string or UTF-8 bytes"},
        good[1],
    ]
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["line 1", "line 3"]


@pytest.mark.parametrize("beams", [0, -1, 1.5])
def test_beam_size_below_one_is_refused(dev, beams):
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(dev[1]))
    with pytest.raises(ValueError, match=f"num_beams={beams}: the beam size must be an integer >= 1"):
        translate(dev[0][:1], num_beams=beams)


def test_bad_lengths_batch_sizes_and_inputs_are_named(dev):
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(dev[1]))
    for name, value in (("max_new_tokens", -1), ("max_new_tokens", 0), ("max_length", 2.5)):
        with pytest.raises(ValueError, match=f"^{name}={value}: the length limit must be an integer >= 1$"):
            translate(dev[0][:1], **{name: value})
    with pytest.raises(ValueError, match="^batch_size=0: the number of sentences per batch must be an integer >= 1$"):
        translate(dev[0][:1], batch_size=0)
    with pytest.raises(ValueError, match="^batch_size=0: the number of sentences per batch"):
        pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(dev[1]), batch_size=0)
    for bad in (None, 42):
        with pytest.raises(ValueError, match=f"^the input is {type(bad).__name__}: give a sentence .str or UTF-8 bytes. "
                                             "or a list of them$"):
            translate(bad)


def test_max_new_tokens_without_the_max_length_warning(dev, caplog):
    """max_new_tokens=N is max_length=N + 1 for this decoder (test_matches_direct_generate: the same
    output as generate(max_new_tokens=N)), without generate's warning that the model's generation
    config sets max_length too; a call that sets both still gets it."""
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(annotations))
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()  # whatever an earlier test (e.g. the quiet demo) left
    try:
        with caplog.at_level("WARNING"):
            assert translate(sources, max_new_tokens=3) == translate(sources, max_length=4)
            assert "max_new_tokens" not in caplog.text
            translate(sources[:1], max_new_tokens=3, max_length=6)
            assert "Both `max_new_tokens` (=3) and `max_length`(=6)" in caplog.text
    finally:
        transformers_logging.set_verbosity(verbosity)


def test_generate_with_max_new_tokens_does_not_warn_about_the_saved_max_length(dev, caplog):
    """A plain `generate()` stops at the trained limit (max_target_length); `max_new_tokens` replaces it quietly."""
    sources, _ = dev
    out, _ = trained_model("transformer_abs")
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    model.generation_config.eos_token_id = None  # no early stop: the length limit ends each translation
    inputs = AutoTokenizer.from_pretrained(out)(sources[:2], return_tensors="pt", padding=True)
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()
    try:
        with caplog.at_level("WARNING"):
            assert model.generate(**inputs).shape[1] == model.generation_config.max_length
            assert model.generate(**inputs, max_new_tokens=3).shape[1] == 4  # the decoder start token and 3
            assert "max_new_tokens" not in caplog.text
            model.generate(**inputs, max_new_tokens=3, max_length=7)  # two limits the user gave: still said
    finally:
        transformers_logging.set_verbosity(verbosity)
    assert "Both `max_new_tokens` (=3) and `max_length`(=7)" in caplog.text


def test_line_longer_than_the_model_allows_is_reported(dev, caplog):
    """With the package's own message only: not transformers' "Token indices sequence length is longer" before it."""
    sources, annotations = dev
    out, _ = trained_model(DEP)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    model.config.max_position_embeddings = max(len(tokenizer(s)["input_ids"]) for s in sources[:2])
    tokenizer.model_max_length = model.config.max_position_embeddings  # as a saved model's tokenizer records it
    long_line = " ".join(sources[:4])
    assert len(tokenizer(long_line, verbose=False)["input_ids"]) > model.config.max_position_embeddings
    translate = pipeline("syntax-translation", model=model, tokenizer=tokenizer, annotator=PreParsedAnnotator(annotations))
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_warning()
    try:
        caplog.clear()
        with caplog.at_level("WARNING"):
            outputs = translate([sources[0], long_line, sources[1]], max_new_tokens=6)
    finally:
        transformers_logging.set_verbosity(verbosity)
    assert [bool(o["translation_text"]) for o in outputs] == [True, False, True]
    assert f"max_position_embeddings={model.config.max_position_embeddings}" in outputs[1]["error"]
    assert [r.getMessage() for r in caplog.records] == [f"line 2: {outputs[1]['error']}; its translation is left empty"]


@pytest.mark.parametrize("recorded", ["dependency", "flat"])
def test_distances_are_derived_as_the_config_records(dev, recorded):
    sources, annotations = dev  # the annotations carry constituency trees and dependency trees
    out, _ = trained_model(DEP)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForSeq2SeqLM.from_pretrained(out, distance_source=recorded).eval()
    translate = pipeline("syntax-translation", model=model, tokenizer=tokenizer, annotator=PreParsedAnnotator(annotations))
    got = translate.processor(sources[:3], annotations=annotations[:3])["source_distances"]
    for source in ("dependency", "constituency", "flat"):
        reference = SyntaxFeatureProcessor(tokenizer, needs_source_distances=True, distance_source=source,
                                           distance_binarize=model.config.sla_binarize)
        expected = reference(sources[:3], annotations=annotations[:3])["source_distances"]
        assert torch.equal(got, expected) == (source == recorded)
    assert model.config.sla_binarize == "right"  # a new config: seed 003's binarised trees
    n_ary = SyntaxFeatureProcessor(tokenizer, needs_source_distances=True, distance_source=recorded)
    assert torch.equal(got, n_ary(sources[:3], annotations=annotations[:3])["source_distances"]) == (recorded == "flat")


def test_annotations_of_other_sentences_are_rejected(dev):
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out))
    with pytest.raises(ValueError, match="annotation 0 is of the text .* not of"):
        translate(sources[:2], annotations=[annotations[1], annotations[0]], max_new_tokens=6)


def test_dbsa_only_model_needs_no_parser(dev):
    sources, _ = dev
    out, _ = trained_model("transformer_dbsa")
    config = json.loads((out / "config.json").read_text())
    assert config["parser"] is None
    translate = pipeline("syntax-translation", model=str(out))
    assert not translate.needs_parser
    assert all(o["translation_text"] for o in translate(sources[:3], max_new_tokens=6))


def test_model_needing_a_parser_without_one(dev):
    sources, _ = dev
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out))
    with pytest.raises(ValueError, match="records no parser.*PreParsedAnnotator"):
        translate(sources[:1])


def test_model_dir_without_tokenizer():
    out, _ = trained_model(DEP)
    bare = scratch_dir("bare")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(out / name, bare / name)
    with pytest.raises(ValueError, match="no tokenizer could be loaded"):
        pipeline("syntax-translation", model=str(bare))


def test_parser_in_config_not_installed():
    out, _ = trained_model(DEP)
    broken = scratch_dir("noparser")
    for path in out.iterdir():
        if path.is_file():
            shutil.copy(path, broken / path.name)
    config = json.loads((broken / "config.json").read_text())
    config["parser"] = {"type": "spacy", "model": "xx_no_such_pipeline", "disable": [], "batch_size": 8}
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ImportError, match="this model's parser: 'xx_no_such_pipeline' is neither an installed spaCy"):
        pipeline("syntax-translation", model=str(broken))


def test_tokenizer_loads_without_questions_or_warnings(caplog, tmp_path):
    """With the package imported AutoTokenizer needs nothing more; without it, trust_remote_code=True (as
    the model card says: AutoTokenizer reads the model's config, whose class is custom code) and no
    question about custom code, no warning about a model type ``."""
    out, _ = trained_model(DEP)
    positions = json.loads((out / "config.json").read_text())["max_position_embeddings"]
    with caplog.at_level("WARNING"):
        assert AutoTokenizer.from_pretrained(out).model_max_length == positions
    assert "model of type" not in caplog.text
    code = (f"from transformers import AutoTokenizer; "
            f"print(AutoTokenizer.from_pretrained({str(out)!r}, trust_remote_code=True).model_max_length)")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0 and done.stdout == f"{positions}\n", done.stderr
    assert "custom code" not in done.stderr and "model of type" not in done.stderr


def test_resolve_device_checks_the_name_and_words_its_errors_for_python_callers():
    """`resolve_device` (behind `Translator.load`, `launch` and the CLI's --device): the default is the first CUDA
    GPU or the CPU; a torch.device passes; a name that is no device, or a GPU this machine lacks, is a ValueError
    that names it and points to "cpu" without a command-line option (the CLI adds its own "--device")."""
    from hf_syntax_mt.inference.pipeline import resolve_device

    assert resolve_device() == torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    assert resolve_device(torch.device("cpu")) == resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"^gpu0: not a device \(cpu, cuda, cuda:1, mps\)$"):
        resolve_device("gpu0")
    with pytest.raises(ValueError, match=r"^meta: expected cpu, cuda\[:N\] or mps$"):
        resolve_device("meta")
    missing = f"cuda:{torch.cuda.device_count()}" if torch.cuda.is_available() else "cuda"
    with pytest.raises(ValueError, match=f"^{missing}: ") as refused:
        resolve_device(missing)
    assert "--device" not in str(refused.value)
