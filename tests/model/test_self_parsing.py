"""Self-parsing models (config.self_parsing, SPEC §9): the model predicts the source tree itself."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import pipeline

import hf_syntax_mt  # noqa: F401  (registers the pipeline)
from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration
from hf_syntax_mt.cli import main
from hf_syntax_mt.features.syntax_features import SyntaxFeatureProcessor
from hf_syntax_mt.inference.model_parsing import parse_with_model
from hf_syntax_mt.modeling_syntax_mt import tree_distances
from hf_syntax_mt.syntax import PreParsedAnnotator, dependency_to_distance, read_conllu, validate_heads
from hf_syntax_mt.training.run import train
from model_helpers import random_batch, tiny_config
from training_helpers import scratch_dir, synthetic_corpus, tiny_args


def self_parsing_model(preset="transformer_dep_rel", seed=0):
    torch.manual_seed(seed)
    return SyntaxMTForConditionalGeneration(tiny_config(preset, self_parsing=True)).eval()


def test_configs_that_cannot_use_a_predicted_tree_are_refused():
    with pytest.raises(ValueError, match="dependency_relations is None"):
        SyntaxMTConfig.from_preset("transformer_rel", self_parsing=True)
    with pytest.raises(ValueError, match="distance_source='flat'"):
        SyntaxMTConfig.from_preset("transformer_dep_rel+transformer_sla", self_parsing=True, distance_source="flat")
    combined = SyntaxMTConfig.from_preset("transformer_dep_labeled_rel+transformer_sla", self_parsing=True)
    assert not combined.needs_source_distances and not combined.needs_parser_at_inference
    with pytest.raises(ValueError, match="self_parsing_layers=0"):
        SyntaxMTConfig.from_preset("transformer_dep", self_parsing=True, self_parsing_layers=0)
    assert not SyntaxMTConfig.from_preset("transformer_dep_rel", self_parsing=True).needs_parser_at_inference
    assert SyntaxMTConfig.from_preset("transformer_dep_rel", self_parsing=True).needs_source_heads  # training


@pytest.mark.parametrize("preset", ["transformer_dep", "transformer_dep_rel", "transformer_dep_labeled_rel",
                                    "transformer_dep_labeled_rel+transformer_sla"])
def test_generate_with_its_own_tree_equals_generate_fed_that_tree(preset):
    model = self_parsing_model(preset)
    batch = random_batch([7, 5, 9], seed=1)
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    own = model.generate(**inputs, num_beams=3, max_new_tokens=6)
    heads = model.predict_heads(**inputs)["source_heads"]
    fed = model.generate(**inputs, source_heads=heads, num_beams=3, max_new_tokens=6)
    assert torch.equal(own, fed)
    other = model.generate(**inputs, source_heads=batch["source_heads"], num_beams=3, max_new_tokens=6)
    logits_own = model(**inputs, decoder_input_ids=own).logits
    logits_other = model(**inputs, source_heads=batch["source_heads"], decoder_input_ids=own).logits
    assert not torch.allclose(logits_own, logits_other)  # the tree it reads matters
    assert other.shape[0] == own.shape[0]


def reference_tree_distances(source_heads):
    """Straight from SPEC §6/§9: per row, `dependency_to_distance` over the tree tokens, + 1; 2000 elsewhere."""
    out = torch.full(source_heads.shape, 2000.0)
    for row, heads in enumerate(source_heads.tolist()):
        tree = [t for t, h in enumerate(heads) if h != -100]
        local = [tree.index(heads[t]) for t in tree]
        for k, d in enumerate(dependency_to_distance(local)):
            out[row, tree[k]] = d + 1.0
    return out


@pytest.mark.parametrize("seed", range(4))
def test_tree_distances_match_the_reference(seed):
    batch = random_batch([9, 4, 12, 2, 1 + 1], seed=seed)
    assert torch.equal(tree_distances(batch["source_heads"]), reference_tree_distances(batch["source_heads"]))


def test_sla_distances_follow_the_tree_the_model_reads():
    """A self-parsing SLA model computes what the same weights without the parse module compute when fed
    the reference distances of the tree it reads (SPEC §9); passing distances to it is refused."""
    model = self_parsing_model("transformer_dep_labeled_rel+transformer_sla")
    twin = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep_labeled_rel+transformer_sla")).eval()
    missing, unexpected = twin.load_state_dict(model.state_dict(), strict=False)
    assert not missing and unexpected and all(".source_parser." in k for k in unexpected)
    batch = random_batch([7, 5, 9], seed=4)
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                  decoder_input_ids=torch.tensor([[0, 5, 6]] * 3))
    for heads in (batch["source_heads"], model.predict_heads(batch["input_ids"], batch["attention_mask"])["source_heads"]):
        fed = twin(**inputs, source_heads=heads, source_distances=reference_tree_distances(heads)).logits
        assert torch.allclose(model(**inputs, source_heads=heads).logits, fed, atol=1e-5)
    own = model(**inputs).logits  # its own tree, and the distances of that tree
    assert torch.allclose(own, fed, atol=1e-5)
    with pytest.raises(ValueError, match="not source_distances"):
        model(**inputs, source_heads=batch["source_heads"], source_distances=batch["source_distances"])


def test_predicted_trees_are_well_formed():
    model = self_parsing_model()
    batch = random_batch([12, 3, 2, 8], seed=2)
    heads = model.predict_heads(batch["input_ids"], batch["attention_mask"])["source_heads"]
    for row, length in zip(heads.tolist(), [12, 3, 2, 8]):
        tree = row[: length - 1]  # the last token is </s>, outside the tree
        validate_heads(tree, single_tree=True)
        assert row[length - 1:] == [-100] * (len(row) - length + 1)


def test_training_loss_supervises_the_parse_module():
    model = self_parsing_model().train()
    batch = random_batch([7, 5], seed=3)
    labels = torch.randint(3, 40, (2, 4))
    out = model(**batch, labels=labels)
    assert out.source_tree_loss is not None and out.source_tree_loss > 0
    assert torch.allclose(out.loss, out.token_loss + out.source_tree_loss)
    out.loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "source_parser" in n]
    assert grads and all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    without = {k: v for k, v in batch.items() if k != "source_heads"}
    with pytest.raises(ValueError, match="needs the parser's `source_heads` during training"):
        model(**without, labels=labels)


def test_own_tree_rate_mixes_the_models_trees_into_training():
    """self_parsing_own_tree_rate p: in training a sentence's relation terms read the model's own decoded tree
    with probability p (p=1: every sentence, the same as feeding that tree; p=0: the parser's); the parse loss
    always takes the parser's tree; evaluation reads the given trees."""
    batch = random_batch([7, 5, 9], seed=4)
    labels = torch.randint(3, 40, (3, 4))
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    mixed = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep_rel", self_parsing=True,
                                                         self_parsing_own_tree_rate=1.0))
    with torch.no_grad():  # relation tables large enough that the tree read shows in the loss
        for name, param in mixed.named_parameters():
            if "relations.dependency" in name:
                param.normal_(0, 1)
    parser_only = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep_rel", self_parsing=True))
    parser_only.load_state_dict(mixed.state_dict())
    own = parser_only.eval().predict_heads(**inputs)["source_heads"]
    assert not torch.equal(own, batch["source_heads"])
    mixed.train(), parser_only.train()  # dropout 0 (TINY): train mode differs only by the tree read
    out = mixed(**batch, labels=labels)
    fed_own = parser_only(**inputs, source_heads=own, labels=labels)
    fed_parser = parser_only(**batch, labels=labels)
    assert torch.equal(out.source_heads, own)
    assert torch.allclose(out.encoder_last_hidden_state, fed_own.encoder_last_hidden_state)
    assert torch.allclose(out.token_loss, fed_own.token_loss)
    assert not torch.allclose(out.encoder_last_hidden_state, fed_parser.encoder_last_hidden_state, atol=1e-3)
    assert torch.allclose(out.source_tree_loss, fed_parser.source_tree_loss)  # supervised by the parser's tree
    half = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep_rel", self_parsing=True,
                                                        self_parsing_own_tree_rate=0.5)).train()
    half.load_state_dict(mixed.state_dict())
    rows = set()
    for seed in range(20):
        torch.manual_seed(seed)
        read = half(**batch, labels=labels).source_heads
        for row in range(3):
            assert torch.equal(read[row], own[row]) or torch.equal(read[row], batch["source_heads"][row])
            rows.add((row, torch.equal(read[row], own[row])))
    assert len(rows) == 6  # every sentence read each kind of tree in some batch
    assert torch.equal(half.eval()(**batch, labels=labels).source_heads, batch["source_heads"])
    with pytest.raises(ValueError, match="self_parsing_own_tree_rate=1.5 must be in"):
        SyntaxMTConfig.from_preset("transformer_dep_rel", self_parsing=True, self_parsing_own_tree_rate=1.5)
    with pytest.raises(ValueError, match="set self_parsing=True"):
        SyntaxMTConfig.from_preset("transformer_dep_rel", self_parsing_own_tree_rate=0.5)


@pytest.fixture(scope="module")
def trained_self_parser():
    out = scratch_dir("self_parsing")
    model_args, data_args, training_args = tiny_args(out, "transformer_dep_rel", parser="preparsed", max_steps=2)
    model_args.config_overrides += ",self_parsing=True,self_parsing_layers=1"
    train(model_args, data_args, training_args)
    return out


def test_pipeline_translates_without_a_parser(trained_self_parser):
    lines = (synthetic_corpus() / "dev.src").read_text().splitlines()[:3]
    translate = pipeline("syntax-translation", model=str(trained_self_parser))
    assert translate.annotator is None and not translate.needs_parser
    own = translate(lines, num_beams=2)
    assert all(r["translation_text"] and "error" not in r for r in own)
    forced = pipeline("syntax-translation", model=str(trained_self_parser),
                      annotator=PreParsedAnnotator.from_conllu(synthetic_corpus() / "dev.src.conllu"))
    assert forced.needs_parser and forced.processor.needs_source_heads  # the user's parser is used instead
    assert len(forced(lines, num_beams=2)) == 3


def test_annotate_places_multiword_tokens_by_their_span(trained_self_parser, capsys):
    """A gold multi-word token ("train" read as the words "Xa" + "Xb", forms not in the text) takes the
    model's head for "train"; its second word hangs on its first; every other word keeps its head."""
    plain_lines = (synthetic_corpus() / "dev.src.conllu").read_text(encoding="utf-8").split("\n\n")[0].splitlines()
    rows = [line.split("\t") for line in plain_lines if not line.startswith("#")]
    shift = {0: 0, **{i: i + (i >= 3) for i in range(1, len(rows) + 1)}}  # 1-based plain id -> id with "Xb" inserted
    mwt = [line for line in plain_lines if line.startswith("#")]
    for row in rows:
        cols = list(row)
        cols[0], cols[6] = str(shift[int(cols[0])]), str(shift[int(cols[6])])
        if cols[1] == "train":
            mwt.append("\t".join(["2-3", "train"] + ["_"] * 8))
            mwt.append("\t".join(cols[:1] + ["Xa", "Xa"] + cols[3:]))
            mwt.append("\t".join(["3", "Xb", "Xb"] + cols[3:6] + ["2", "fixed", "_", "_"]))
        else:
            mwt.append("\t".join(cols))
    directory = scratch_dir("annotate_mwt")
    (directory / "plain.conllu").write_text("\n".join(plain_lines) + "\n\n", encoding="utf-8")
    (directory / "mwt.conllu").write_text("\n".join(mwt) + "\n\n", encoding="utf-8")
    assert rows[1][1] == "train"
    parsed = {}
    for name in ("plain", "mwt"):
        assert main(["annotate", "--model", str(trained_self_parser), "--conllu", str(directory / f"{name}.conllu")]) == 0
        parsed[name] = read_conllu(capsys.readouterr().out)[0]
    assert parsed["mwt"].words[:3] == ["no", "Xa", "Xb"]
    position = {i: shift[i + 1] - 1 for i in range(len(rows))}  # 0-based
    for i, head in enumerate(parsed["plain"].heads):
        assert parsed["mwt"].heads[position[i]] == position[head]
    assert parsed["mwt"].heads[2] == 1


def test_remote_code_translates_where_no_parser_can_be_imported(trained_self_parser):
    lines = (synthetic_corpus() / "dev.src").read_text().splitlines()[:2]
    script = textwrap.dedent(f"""
        import importlib.abc, json, sys

        class NoParsers(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("spacy", "ginza", "ja_ginza", "stanza"):
                    raise ImportError(f"blocked: {{name}}")

        sys.meta_path.insert(0, NoParsers())
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

        # loaded before the package registers its classes: the code saved next to the weights runs
        model = AutoModelForSeq2SeqLM.from_pretrained({str(trained_self_parser)!r}, trust_remote_code=True)
        import hf_syntax_mt  # the syntax-translation task

        translate = pipeline("syntax-translation", model=model,
                             tokenizer=AutoTokenizer.from_pretrained({str(trained_self_parser)!r}))
        print(json.dumps({{"module": type(translate.model).__module__,
                          "out": translate({lines!r}, num_beams=2),
                          "loaded": sorted(m for m in sys.modules if m.split(".")[0] in ("spacy", "stanza"))}}))
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert result["module"].startswith("transformers_modules")  # the model's own saved code
    assert len(result["out"]) == 2 and all(r["translation_text"] for r in result["out"])


def _trained(path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    return AutoModelForSeq2SeqLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)


def test_parse_with_model_maps_a_projected_tree_back_to_the_gold_words(trained_self_parser, monkeypatch):
    """End to end through tokenization and alignment: a parse module that predicted exactly the §5
    projection of the gold trees gives back the gold word trees (SPEC §9)."""
    model, tokenizer = _trained(trained_self_parser)
    gold = read_conllu(synthetic_corpus() / "dev.src.conllu")
    features = SyntaxFeatureProcessor(tokenizer, PreParsedAnnotator(gold), needs_source_heads=True)(
        annotations=gold, return_tensors="pt")
    monkeypatch.setattr(model, "predict_heads", lambda input_ids, attention_mask: {
        "source_heads": features["source_heads"][:, : input_ids.shape[1]]})
    parsed = parse_with_model(model, tokenizer, [a.text for a in gold], words=[a.words for a in gold], batch_size=len(gold))
    assert [p.words for p in parsed] == [g.words for g in gold]
    assert [p.heads for p in parsed] == [g.heads for g in gold]


def test_parse_with_model_takes_spans_for_words_over_a_space(trained_self_parser, monkeypatch):
    """A parser's word may cover a space of a segmented corpus (GiNZA's "送っ" over KyTea's "送 っ"): its form
    is not in the text, so its span must be given; with the spans the projected tree maps back to the words."""
    model, tokenizer = _trained(trained_self_parser)
    gold = []
    for a in read_conllu(synthetic_corpus() / "dev.src.conllu"):
        (start, end), cut = a.spans[0], 1  # a space inside the first word, as a segmented corpus writes it
        text = a.text[: start + cut] + " " + a.text[start + cut:]
        spans = [a.spans[0][:1] + (end + 1,)] + [(s + 1, e + 1) for s, e in a.spans[1:]]
        gold.append(type(a)(text, a.words, spans, a.heads))
    features = SyntaxFeatureProcessor(tokenizer, PreParsedAnnotator(gold), needs_source_heads=True)(
        annotations=gold, return_tensors="pt")
    monkeypatch.setattr(model, "predict_heads", lambda input_ids, attention_mask: {
        "source_heads": features["source_heads"][:, : input_ids.shape[1]]})
    texts, words = [a.text for a in gold], [a.words for a in gold]
    parsed = parse_with_model(model, tokenizer, texts, words=words, spans=[a.spans for a in gold], batch_size=len(gold))
    assert [p.heads for p in parsed] == [g.heads for g in gold]
    assert [p.spans for p in parsed] == [g.spans for g in gold]
    found = parse_with_model(model, tokenizer, texts, words=words, batch_size=len(gold))  # forms searched in the text
    assert all(p.spans[0] is None for p in found)  # the first word's form is not written in its text
    with pytest.raises(ValueError, match="one span per word"):
        parse_with_model(model, tokenizer, texts, words=words, spans=[a.spans[1:] for a in gold])


def test_parse_with_model_gives_one_tree_per_line(trained_self_parser):
    model, tokenizer = _trained(trained_self_parser)
    lines = (synthetic_corpus() / "dev.src").read_text().splitlines()
    parsed = parse_with_model(model, tokenizer, lines, batch_size=4)  # words: the tokenizer's units
    assert len(parsed) == len(lines)
    for line, annotation in zip(lines, parsed):
        assert annotation.words == line.split()  # the synthetic source is space-separated
        validate_heads(annotation.heads, single_tree=True)
    with pytest.raises(ValueError, match="text 2 is empty"):
        parse_with_model(model, tokenizer, [lines[0], "  "])
    plain = SyntaxMTForConditionalGeneration(tiny_config("transformer_dep_rel"))
    with pytest.raises(ValueError, match="no parser of its own"):
        parse_with_model(plain, tokenizer, lines)


def test_annotate_prints_the_models_own_trees_as_conllu(trained_self_parser, capsys):
    gold_path = synthetic_corpus() / "dev.src.conllu"
    assert main(["annotate", "--model", str(trained_self_parser), "--conllu", str(gold_path)]) == 0
    own = read_conllu(capsys.readouterr().out)
    gold = read_conllu(gold_path)
    assert [a.words for a in own] == [a.words for a in gold]  # the gold tokenization, the model's heads
    source = scratch_dir("annotate_input") / "in.txt"
    source.write_text((synthetic_corpus() / "dev.src").read_text().splitlines()[0] + "\n\n", encoding="utf-8")
    assert main(["annotate", "--model", str(trained_self_parser), str(source)]) == 0
    out = capsys.readouterr()
    assert len(read_conllu(out.out)) == 1 and "line 2 is empty" in out.err


def test_annotate_skips_a_gold_sentence_it_cannot_read_and_keeps_the_others(trained_self_parser, capsys):
    blocks = (synthetic_corpus() / "dev.src.conllu").read_text(encoding="utf-8").strip().split("\n\n")[:3]
    broken = [line.replace("\t", " ") if line[:1].isdigit() else line for line in blocks[1].splitlines()]
    damaged = scratch_dir("annotate_damaged") / "gold.conllu"
    damaged.write_text("\n\n".join([blocks[0], "\n".join(broken), blocks[2]]) + "\n\n", encoding="utf-8")
    assert main(["annotate", "--model", str(trained_self_parser), "--conllu", str(damaged)]) == 0
    out = capsys.readouterr()
    own = read_conllu(out.out)
    gold = read_conllu("\n\n".join([blocks[0], blocks[2]]) + "\n")
    assert [a.words for a in own] == [a.words for a in gold]
    assert "# sent_id = 1" in out.out and "# sent_id = 3" in out.out and "# sent_id = 2" not in out.out
    assert "CoNLL-U sentence 2 (sent_id dev-2): expected 10 tab-separated columns" in out.err
    assert "no sentence written" in out.err
