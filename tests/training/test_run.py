"""Training API: data loading, end-to-end tiny runs, logging, sequential evaluation, schedule, resume,
model card and the files `--push_to_hub` would push."""

import json
import logging
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers.trainer
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, get_scheduler

import hf_syntax_mt.training.run
from hf_syntax_mt import SyntaxMTConfig
from hf_syntax_mt.hub.model_card import write_model_card
from hf_syntax_mt.inference.metrics import load_metric
from hf_syntax_mt.syntax import SpacyAnnotator
from hf_syntax_mt.training.run import (
    SyntaxMTTrainingArguments,
    build_annotator,
    parse_config_overrides,
    read_parallel_file,
    train,
)
from training_helpers import scratch_dir, synthetic_corpus, tiny_args, trained_model

JAPANESE_PAIRS = [  # written for these tests
    ("私は赤い車を買った。", "I bought a red car ."),
    ("猫が庭で寝ている。", "The cat is sleeping in the garden ."),
    ("彼女は新しい本を読んだ。", "She read a new book ."),
    ("兄は毎朝公園を走る。", "My brother runs in the park every morning ."),
    ("先生が学生に質問をした。", "The teacher asked the student a question ."),
    ("私たちは駅で友達を待った。", "We waited for a friend at the station ."),
    ("子供たちが川で泳いでいる。", "The children are swimming in the river ."),
    ("父は古い時計を直した。", "My father fixed the old clock ."),
]


# --- data loading and arguments ------------------------------------------------------------


def test_read_parallel_formats(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    assert read_parallel_file(tmp_path / "a", "en", "de") == {"source": ["one", "two"], "target": ["eins", "zwei"],
                                                              "line": [1, 2]}
    (tmp_path / "b.tsv").write_text("one\teins\ntwo\tzwei\n")
    assert read_parallel_file(tmp_path / "b.tsv")["target"] == ["eins", "zwei"]
    (tmp_path / "c.jsonl").write_text('{"translation": {"en": "one", "de": "eins"}}\n{"en": "two", "de": "zwei"}\n')
    assert read_parallel_file(tmp_path / "c.jsonl", "en", "de")["source"] == ["one", "two"]


def test_bad_data_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.en"):
        read_parallel_file(tmp_path / "missing", "en", "de")
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    with pytest.raises(ValueError, match="3 lines.*has 2"):
        read_parallel_file(tmp_path / "a", "en", "de")
    (tmp_path / "b.tsv").write_text("one\teins\ntwo zwei\n")
    with pytest.raises(ValueError, match="b.tsv:2"):
        read_parallel_file(tmp_path / "b.tsv")
    (tmp_path / "c.jsonl").write_text('{"en": "one"}\n')
    with pytest.raises(ValueError, match="c.jsonl:1"):
        read_parallel_file(tmp_path / "c.jsonl", "en", "de")


def test_empty_pairs_are_skipped_with_their_lines_named(tmp_path, caplog):
    (tmp_path / "a.en").write_text("one\n\nthree\nfour\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n   \nvier\n")
    with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.features.training_data"):
        pairs = read_parallel_file(tmp_path / "a", "en", "de")
    assert pairs == {"source": ["one", "four"], "target": ["eins", "vier"], "line": [1, 4]}
    assert f"{tmp_path / 'a'}.{{en,de}}: skipped 2 pair(s) with an empty source or target line: lines 2, 3" in caplog.text


def test_training_text_that_is_not_utf8_names_file_and_line(tmp_path):
    (tmp_path / "a.en").write_bytes(b"one\ntwo\ncaf\xe9\n")
    (tmp_path / "a.de").write_text("eins\nzwei\ndrei\n")
    with pytest.raises(ValueError, match=r"a\.en:3: not UTF-8 text \(invalid byte 0xe9\)"):
        read_parallel_file(tmp_path / "a", "en", "de")


def test_train_reports_missing_file(tmp_path):
    model_args, data_args, training_args = tiny_args(tmp_path / "out")
    data_args.train_file = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere.src"):
        train(model_args, data_args, training_args)


def test_dependency_preset_requires_a_parser(tmp_path):
    model_args, data_args, training_args = tiny_args(tmp_path / "out", "transformer_dep", parser="none")
    with pytest.raises(ValueError, match="needs source syntax"):
        train(model_args, data_args, training_args)


@pytest.mark.parametrize("native", [True, False])
def test_bf16_on_a_cpu_without_native_bf16_warns(tmp_path, monkeypatch, caplog, native):
    """bf16 autocast on a CPU without bf16 kernels is emulated (21x slower steps measured on AVX2): say so first."""
    monkeypatch.setattr(hf_syntax_mt.training.run, "cpu_has_native_bf16", lambda: native)
    model_args, data_args, training_args = tiny_args(tmp_path / "out", "transformer_dep", parser="none", bf16=True)
    with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.training.run"), pytest.raises(ValueError, match="needs source"):
        train(model_args, data_args, training_args)
    assert ("drop --bf16 to train in fp32" in caplog.text) is (not native)


def test_decoder_parse_head_needs_a_target_parser_for_the_target_language(tmp_path):
    model_args, data_args, training_args = tiny_args(tmp_path / "out", "transformer_dbsa_dec", parser="none")
    with pytest.raises(ValueError, match="decoder parse head on target trees: choose --target_parser"):
        train(model_args, data_args, training_args)
    model_args.parser = "ja_ginza"  # a source-language spaCy pipeline is not taken for the target
    with pytest.raises(ValueError, match="--parser ja_ginza is a spaCy pipeline for the source language"):
        train(model_args, data_args, training_args)


def test_config_overrides_and_parsers():
    assert parse_config_overrides("d_model=256,sla_layers=[1,2],activation_function=gelu,dropout=0.3") == {
        "d_model": 256, "sla_layers": [1, 2], "activation_function": "gelu", "dropout": 0.3,
    }
    with pytest.raises(ValueError, match="key=value"):
        parse_config_overrides("d_model")
    assert build_annotator("ja_ginza").to_dict()["model"] == "ja_ginza"
    assert "constituency" in build_annotator("stanza", "en", constituency=True).to_dict()["processors"]
    assert build_annotator("none") is None and build_annotator("preparsed") is None


def test_changing_one_of_eval_and_save_strategy_keeps_best_checkpoint_selection(tmp_path):
    steps = SyntaxMTTrainingArguments(output_dir=str(tmp_path), eval_strategy="steps", eval_steps=100)
    assert (steps.save_strategy, steps.save_steps, steps.load_best_model_at_end) == ("steps", 100, True)
    saves = SyntaxMTTrainingArguments(output_dir=str(tmp_path), save_strategy="steps", save_steps=300)
    assert (saves.eval_strategy, saves.eval_steps) == ("steps", 300)
    assert not SyntaxMTTrainingArguments(output_dir=str(tmp_path), eval_strategy="no").load_best_model_at_end
    assert SyntaxMTTrainingArguments(output_dir=str(tmp_path)).save_strategy == "epoch"


def test_a_save_interval_given_alone_saves_by_steps(tmp_path):
    """`--save_steps 100` without `--save_strategy` means steps, as in transformers' run_translation.py (evaluation
    follows, for the best checkpoint); a strategy given, or no interval, keeps its meaning."""
    from hf_syntax_mt.training.arguments import train_argument_parser

    parser = train_argument_parser()
    for argv, strategy, every in ((["--save_steps", "100"], "steps", 100), ([], "epoch", None),
                                  (["--save_steps", "100", "--save_strategy", "epoch"], "epoch", None)):
        _, _, training_args, *_ = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), *argv],
                                                                  return_remaining_strings=True)
        assert training_args.save_strategy == training_args.eval_strategy == strategy
        assert every is None or training_args.save_steps == training_args.eval_steps == every
    assert SyntaxMTTrainingArguments(output_dir=str(tmp_path), save_steps=100).save_strategy == "steps"


def test_inverse_sqrt_schedule_with_warmup():
    """lr_scheduler_type='inverse_sqrt': linear warm-up to the peak at W, then peak * sqrt(W / step)."""
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler("inverse_sqrt", optimizer, num_warmup_steps=800)
    lrs = []
    for _ in range(3201):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[400] == pytest.approx(0.5)
    assert lrs[800] == pytest.approx(1.0)
    assert lrs[3200] == pytest.approx(math.sqrt(800 / 3200))


# --- end to end ---------------------------------------------------------------------------


def test_end_to_end_outputs_and_push_files():
    out, result = trained_model()
    files = {p.name for p in out.iterdir()}
    # what Trainer.push_to_hub uploads: model, generation config, tokenizer, remote code, args, card
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "configuration_syntax_mt.py", "modeling_syntax_mt.py",
                 "training_args.bin", "README.md", "all_results.json"):
        assert name in files, name
    config = json.loads((out / "config.json").read_text())
    assert config["preset"] == "transformer_dep_rel+transformer_dbsa+transformer_sla"
    assert "parser" in config and config["parser"] is None  # pre-parsed data: no parser to re-create
    assert config["label_smoothing"] == 0.1  # the recipe's ε, set by training (the model's default is plain CE)
    assert config["auto_map"]["AutoModelForSeq2SeqLM"] == "modeling_syntax_mt.SyntaxMTForConditionalGeneration"
    assert config["vocab_size"] == len(AutoTokenizer.from_pretrained(out))
    card = (out / "README.md").read_text()
    metadata = card.split("---\n")[1]
    assert "library_name: transformers\npipeline_tag: translation\n" in metadata and "language:" not in metadata
    for placeholder in ("{{", "https://github.com/", "PATH_OR_REPO"):
        assert placeholder not in card
    assert f'pipeline("syntax-translation", model="{out}")' in card
    assert "source_heads" in card and "trust_remote_code=True" in card  # what loading without the package needs
    bleu = result.metrics["eval_bleu"]
    assert "transformer_dep_rel+transformer_dbsa+transformer_sla" in card
    assert f"| validation | bleu | {bleu:.2f} |" in card and "pre-parsed CoNLL-U" in card
    assert "train: " in card and "48 pairs" in card


def test_model_card_names_the_data_files_by_their_plain_paths():
    """A data path given through `..` (the quality runner's `<clone>/../shared/data/...`) is written without it."""
    corpus = synthetic_corpus()
    out = scratch_dir("dotted")
    train(*tiny_args(out, data_dir=corpus / ".." / corpus.name, max_steps=1, eval_strategy="no", save_strategy="no"))
    card = (out / "README.md").read_text()
    assert f"train: `{corpus / 'train'}` (48 pairs)" in card and "/../" not in card


def test_model_card_of_a_japanese_model_without_syntax():
    """Hub metadata with the languages, a Japanese example for ja→en, no syntax listed for transformer_abs,
    and how to translate without the package."""
    config = SyntaxMTConfig.from_preset("transformer_abs").to_dict()
    card = write_model_card(scratch_dir("card"), preset="transformer_abs", config=config, languages=("ja", "en"),
                            model_id="user/ja-en-abs").read_text()
    metadata = card.split("---\n")[1]
    assert "library_name: transformers\npipeline_tag: translation\n" in metadata
    assert "language:\n- ja\n- en\n" in metadata
    assert "- Syntax: none (absolute positions only)\n" in card and "relation_combination" not in card
    assert 'pipeline("syntax-translation", model="user/ja-en-abs")' in card
    assert 'translate(["私は赤い車を買った。"], num_beams=4)' in card
    assert "needs no syntax at inference, `model.generate(" in card
    combined = SyntaxMTConfig.from_preset("transformer_dep_rel").to_dict()
    card = write_model_card(scratch_dir("card"), preset="transformer_dep_rel", config=combined).read_text()
    assert "- Syntax: relative_positions=True, dependency_relations=depth, relation_combination=sum\n" in card
    own_parser = SyntaxMTConfig.from_preset("transformer_dep_rel", self_parsing=True).to_dict()
    card = write_model_card(scratch_dir("card"), preset="transformer_dep_rel", config=own_parser).read_text()
    assert "parses its source itself" in card and "source_heads" not in card  # no parser, no hand-built tree


@pytest.mark.parametrize("parser, says", [
    (None, "trained on pre-parsed sources, so the pipeline needs the parses"),
    ({"type": "preparsed"}, "trained on pre-parsed sources, so the pipeline needs the parses"),
    ({"type": "synthetic_grammar"}, "parses each sentence with the package's synthetic grammar"),
    ({"type": "spacy", "model": "ja_ginza"}, "parses each sentence with the spaCy pipeline `ja_ginza`"),
    ({"type": "spacy_despaced", "model": "ja_ginza"}, "parses each sentence with the spaCy pipeline `ja_ginza`"),
    ({"type": "spacy_pretokenized", "model": "en_core_web_sm"}, "spaCy pipeline `en_core_web_sm`"),
    ({"type": "stanza", "lang": "de"}, "parses each sentence with stanza (`de`"),
])
def test_model_card_says_how_the_pipeline_gets_the_parse(parser, says):
    """The parser the config records, by its kind: the demo's grammar and spaCy's despaced or pre-tokenized
    pipelines parse raw text themselves (the card said 'trained on pre-parsed sources' for them)."""
    config = SyntaxMTConfig.from_preset("transformer_dep_rel").to_dict()
    config["parser"] = parser
    card = write_model_card(scratch_dir("card"), preset="transformer_dep_rel", config=config).read_text()
    assert says in card
    assert ("pre-parsed sources" in card) == (says.startswith("trained on pre-parsed"))


def test_component_losses_are_logged():
    _, result = trained_model()
    logs = [h for h in result.trainer.state.log_history if "loss" in h and "eval_loss" not in h]
    assert logs, result.trainer.state.log_history
    for name in ("token_loss", "encoder_parse_loss", "decoder_parse_loss"):
        assert all(name in h and h[name] > 0 for h in logs), name
    config = result.trainer.model.config  # each a mean over the same steps as `loss`, which is their weighted sum
    for h in logs:
        total = h["token_loss"] + config.dbsa_encoder_loss_weight * h["encoder_parse_loss"] + \
            config.dbsa_decoder_loss_weight * h["decoder_parse_loss"]
        assert abs(float(h["loss"]) - total) < 1e-3 * max(1.0, total), (h, total)


@pytest.mark.parametrize("bleus, best", [((3.0, 7.0), "checkpoint-4"), ((7.0, 3.0), "checkpoint-2")])
def test_best_checkpoint_is_chosen_by_bleu(monkeypatch, bleus, best):
    """Evaluations at steps 2 and 4 score the BLEUs given (then 0); the kept model is the higher one's."""
    scores = iter(bleus)

    def fake_metric_fn(tokenizer, bleu_tokenize="13a"):
        return lambda eval_preds: {"bleu": next(scores, 0.0), "chrf": 0.0, "gen_len": 1.0}

    monkeypatch.setattr(hf_syntax_mt.training.run, "bleu_metric_fn", fake_metric_fn)
    result = train(*tiny_args(scratch_dir("best"), "transformer_abs"))
    state = result.trainer.state
    assert [h["eval_bleu"] for h in state.log_history if "eval_bleu" in h][:2] == list(bleus)
    assert state.best_metric == 7.0 and state.best_model_checkpoint.endswith(best)
    kept = AutoModelForSeq2SeqLM.from_pretrained(state.best_model_checkpoint)
    assert all(torch.equal(p, q) for p, q in zip(kept.state_dict().values(), result.trainer.model.state_dict().values()))


def test_eval_stays_in_order_with_group_by_length():
    """transformers 5.23 shuffles the eval set under group_by_length; our trainer evaluates in dataset
    order, so hypotheses meet their own references: the labels come back in order, each prediction
    is generate() on that row, and the reported BLEU is sacrebleu on those pairs."""
    out, result = trained_model()
    trainer, dev = result.trainer, result.datasets["validation"]
    trainer.args.train_sampling_strategy = "group_by_length"
    trainer.args.per_device_eval_batch_size = 1
    trainer.create_accelerator_and_postprocess()  # later Trainers in this session reset the shared accelerate state
    prediction = trainer.predict(dev, metric_key_prefix="eval")
    tokenizer = trainer.processing_class
    model = trainer.model.eval()
    hyps, refs = [], []
    for i, row in enumerate(dev):
        assert [t for t in prediction.label_ids[i].tolist() if t not in (-100, tokenizer.pad_token_id)] == row["labels"]
        batch = {k: torch.tensor([row[k]]) for k in ("input_ids", "attention_mask", "source_heads", "source_distances")}
        ids = model.generate(**batch, max_length=12)[0].tolist()
        assert [t for t in prediction.predictions[i].tolist() if t >= 0 and t != tokenizer.pad_token_id] == [
            t for t in ids if t != tokenizer.pad_token_id]
        hyps.append(tokenizer.decode(ids, skip_special_tokens=True).strip())
        refs.append(tokenizer.decode(row["labels"], skip_special_tokens=True).strip())
    scores = load_metric().compute(predictions=hyps, references=[[r] for r in refs])
    assert prediction.metrics["eval_bleu"] == pytest.approx(round(scores["bleu"], 2), abs=0.01)
    assert prediction.metrics["eval_chrf"] == pytest.approx(round(scores["chrf"], 2), abs=0.01)


def test_resume_from_checkpoint():
    out = scratch_dir("resume")
    args = dict(eval_strategy="no", load_best_model_at_end=False, save_steps=2, logging_steps=1)
    first = train(*tiny_args(out, "transformer_abs", max_steps=2, **args))
    assert (out / "checkpoint-2").is_dir()
    tokenizer_before = (out / "tokenizer.json").read_text()
    result = train(*tiny_args(out, "transformer_abs", max_steps=4, **args))
    state = result.trainer.state
    assert state.global_step == 4
    logged_steps = [h["step"] for h in state.log_history if "loss" in h]
    assert logged_steps == [1, 2, 3, 4]  # steps 1-2 come from the checkpoint's state
    assert (out / "tokenizer.json").read_text() == tokenizer_before
    # the tokenizer re-saved after loading holds no loading or call state; its length limit is the model's
    saved = json.loads((out / "tokenizer_config.json").read_text())
    assert not {"is_local", "local_files_only", "max_length", "stride", "truncation_strategy"} & set(saved), saved
    assert saved["model_max_length"] == json.loads((out / "config.json").read_text())["max_position_embeddings"]
    assert json.loads(tokenizer_before)["truncation"] is None
    # the second run read the features cached by the first (same data, tokenizer, settings)
    assert result.datasets["train"].cache_files[0]["filename"] == first.datasets["train"].cache_files[0]["filename"]
    # another model in the same output_dir: refused, unless it is told to start from scratch there
    with pytest.raises(ValueError, match="checkpoint of a different model .*relative_positions False there, True now"
                                         ".*--overwrite_output_dir"):
        train(*tiny_args(out, "transformer_rel", max_steps=2, **args))
    fresh = train(*tiny_args(out, "transformer_rel", max_steps=2, overwrite_output_dir=True, **args))
    assert [h["step"] for h in fresh.trainer.state.log_history if "loss" in h] == [1, 2]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    assert json.loads((out / "config.json").read_text())["preset"] == "transformer_rel"


def test_dev_set_is_decoded_once_per_evaluation_and_a_rerun_keeps_the_record(monkeypatch):
    """Training evaluates at steps 2 and 4 and the final dev scores are the kept checkpoint's logged ones
    (no third decoding after load-best); a second run into the finished output_dir trains nothing,
    evaluates nothing and leaves all_results.json as it was."""
    evaluations = []
    evaluate = hf_syntax_mt.training.run.SyntaxMTSeq2SeqTrainer.evaluate

    def counting_evaluate(self, *args, **kwargs):
        evaluations.append(self.state.global_step)
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(hf_syntax_mt.training.run.SyntaxMTSeq2SeqTrainer, "evaluate", counting_evaluate)
    out = scratch_dir("rerun")
    first = train(*tiny_args(out, "transformer_abs"))
    assert evaluations == [2, 4]
    state = first.trainer.state
    best_step = int(state.best_model_checkpoint.rsplit("-", 1)[1])
    [logged] = [h for h in state.log_history if "eval_bleu" in h and h["step"] == best_step]
    assert {k: first.metrics[k] for k in ("eval_bleu", "eval_chrf", "eval_loss")} == {
        k: logged[k] for k in ("eval_bleu", "eval_chrf", "eval_loss")}
    record = (out / "all_results.json").read_text()
    assert json.loads(record)["train_loss"] > 0
    evaluations.clear()
    again = train(*tiny_args(out, "transformer_abs"))
    assert evaluations == [] and (out / "all_results.json").read_text() == record
    assert again.metrics == json.loads(record)
    kept, trained = again.trainer.model.state_dict(), first.trainer.model.state_dict()
    assert kept.keys() == trained.keys() and all(torch.equal(kept[k], trained[k]) for k in kept)


class _FakeHub:
    """Stands in for `huggingface_hub.HfApi` (the Hub is unreachable): records each upload."""

    def __init__(self):
        self.uploads = []

    def create_repo(self, name, **kwargs):
        return SimpleNamespace(repo_id=f"user/{Path(name).name}")

    def upload_folder(self, folder_path, commit_message="", **kwargs):
        card = Path(folder_path) / "README.md"
        self.uploads.append((commit_message, card.read_text() if card.is_file() else "", sorted(os.listdir(folder_path))))
        return SimpleNamespace(done=lambda: True)


def test_push_to_hub_uploads_the_final_card_and_results(monkeypatch):
    hub = _FakeHub()
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: hub)
    out = scratch_dir("push")
    result = train(*tiny_args(out, "transformer_abs", push_to_hub=True, hub_strategy="end"))
    assert [commit for commit, _, _ in hub.uploads] == ["End of training"]
    _, card, files = hub.uploads[0]
    assert "d_model=32" in card and f"| validation | bleu | {result.metrics['eval_bleu']:.2f} |" in card
    assert {"all_results.json", "model.safetensors", "tokenizer.json", "modeling_syntax_mt.py"} <= set(files)


def test_push_to_hub_uploads_once_by_default_and_every_upload_loads(monkeypatch):
    """By default (hub_strategy "end") one upload, at the end; with every_save each mid-run upload holds the model's
    code that config.json's auto_map names, and a card (the Trainer's own uploads had neither: a model that did not
    load)."""
    hub = _FakeHub()
    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: hub)
    args = tiny_args(scratch_dir("push_default"), "transformer_abs", push_to_hub=True)
    assert args[2].hub_strategy == "end"
    train(*args)
    assert [commit for commit, _, _ in hub.uploads] == ["End of training"]
    hub.uploads.clear()
    out = scratch_dir("push_every")
    train(*tiny_args(out, "transformer_abs", push_to_hub=True, hub_strategy="every_save"))
    assert [commit for commit, _, _ in hub.uploads][:2] == ["Training in progress, step 2", "Training in progress, step 4"]
    auto_map = json.loads((out / "config.json").read_text())["auto_map"]
    code = {reference.split(".")[0] + ".py" for reference in auto_map.values()}
    for commit, card, files in hub.uploads:
        assert code | {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(files), commit
        assert "d_model=32" in card, commit


def test_continuing_a_saved_model_keeps_its_tokenizer_and_config():
    out, _ = trained_model()
    model_args, data_args, training_args = tiny_args(scratch_dir("continue"), max_steps=1)
    model_args.model_name_or_path, model_args.config_overrides = str(out), None
    model_args.preset = "transformer_dep_rel+transformer_dbsa+transformer_sla"
    result = train(model_args, data_args, training_args)
    assert result.trainer.processing_class.backend_tokenizer.to_str() == AutoTokenizer.from_pretrained(out).backend_tokenizer.to_str()
    model_args.config_overrides = "d_model=64"
    with pytest.raises(ValueError, match="--config_overrides builds a new model"):
        train(model_args, data_args, training_args)
    model_args.config_overrides, model_args.preset = None, "transformer_rel"
    with pytest.raises(ValueError, match="--preset transformer_rel but --model_name_or_path is a transformer_dep_rel"):
        train(model_args, data_args, training_args)


def test_japanese_with_ginza_end_to_end(tmp_path):
    pytest.importorskip("spacy")
    import spacy.util

    if not spacy.util.is_package("ja_ginza"):
        pytest.skip("ja_ginza is not installed")
    from transformers import pipeline

    import hf_syntax_mt.inference.pipeline  # noqa: F401  (registers "syntax-translation")

    (tmp_path / "train.ja").write_text("".join(ja + "\n" for ja, _ in JAPANESE_PAIRS), encoding="utf-8")
    (tmp_path / "train.en").write_text("".join(en + "\n" for _, en in JAPANESE_PAIRS), encoding="utf-8")
    model_args, data_args, training_args = tiny_args(
        tmp_path / "out", "transformer_dep_rel+transformer_sla", parser="ja_ginza", data_dir=tmp_path,
        max_steps=3, eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
    )
    data_args.source_lang, data_args.target_lang = "ja", "en"
    data_args.validation_file = None
    model_args.vocab_size = 200
    model_args.distance_source = "dependency"
    train(model_args, data_args, training_args)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["parser"]["type"] == "spacy" and config["parser"]["model"] == "ja_ginza"
    assert config["distance_source"] == "dependency"  # the pipeline derives SLA distances the same way
    translate = pipeline("syntax-translation", model=str(tmp_path / "out"), max_new_tokens=6)
    outputs = translate(["妹は白い犬を見た。", "私は本を買った。"])
    assert len(outputs) == 2 and all(o["translation_text"] for o in outputs)


def test_sources_longer_than_sudachi_accepts_are_skipped_with_their_lines_named(tmp_path, caplog):
    """SudachiPy (GiNZA's tokenizer) refuses text over 49,149 bytes; such a training line is skipped and
    named by file and line instead of stopping feature building with an error that names neither."""
    sudachipy = pytest.importorskip("sudachipy")
    pytest.importorskip("ja_ginza")
    tokenizer = sudachipy.Dictionary().create()
    tokenizer.tokenize("あ" * 16383)  # 49,149 bytes: accepted
    with pytest.raises(Exception, match="too long"):
        tokenizer.tokenize("あ" * 16384)
    assert SpacyAnnotator("ja_ginza").max_text_bytes == 49149
    pairs = JAPANESE_PAIRS[:4] + [("あ" * 16384, "A long line .")] + JAPANESE_PAIRS[4:]
    (tmp_path / "train.ja").write_text("".join(ja + "\n" for ja, _ in pairs), encoding="utf-8")
    (tmp_path / "train.en").write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")
    model_args, data_args, training_args = tiny_args(
        tmp_path / "out", "transformer_dep", parser="ja_ginza", data_dir=tmp_path, max_steps=1, eval_strategy="no",
        save_strategy="no", load_best_model_at_end=False,
    )
    data_args.source_lang, data_args.target_lang, data_args.validation_file = "ja", "en", None
    with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.features.training_data"):
        result = train(model_args, data_args, training_args)
    assert len(result.datasets["train"]) == len(JAPANESE_PAIRS)
    assert (f"skipped 1 train pair(s) whose source is longer than the parser ja_ginza accepts (49149 UTF-8 bytes): "
            f"{tmp_path / 'train.ja'}: line 5") in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("budget", [None, 120])
def test_accelerate_two_cpu_processes(tmp_path, budget):
    """`accelerate launch --multi_gpu --num_processes 2 training/train.py --use_cpu true ...` on CPU
    (opt-in: HF_SYNTAX_MT_SLOW=1), with fixed-size batches and with token-budget batches (the sampler splits
    its 10 batches an epoch between the processes: 5 steps an epoch)."""
    import os
    import subprocess
    import sys

    if os.environ.get("HF_SYNTAX_MT_SLOW") != "1":
        pytest.skip("set HF_SYNTAX_MT_SLOW=1 to run the 2-process accelerate check")
    data = synthetic_corpus()
    script = Path(__file__).resolve().parents[2] / "training" / "train.py"
    # `--cpu` would force accelerate's single-process launcher; `--multi_gpu` + `--use_cpu` gives DDP over gloo
    cmd = [str(Path(sys.executable).parent / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", str(script),
           "--preset", "transformer_dep_rel", "--parser", "preparsed", "--config_overrides", "d_model=32,encoder_layers=1,"
           "decoder_layers=1,encoder_attention_heads=4,decoder_attention_heads=4,encoder_ffn_dim=64,decoder_ffn_dim=64",
           "--train_file", str(data / "train"), "--validation_file", str(data / "dev"), "--vocab_size", "120",
           "--max_target_length", "12", "--output_dir", str(tmp_path / "out"), "--max_steps", "4",
           "--per_device_train_batch_size", "8", "--eval_strategy", "steps", "--eval_steps", "4", "--save_strategy",
           "steps", "--save_steps", "4", "--warmup_steps", "1", "--logging_steps", "2", "--disable_tqdm", "true",
           "--cache_dir", str(tmp_path / "cache"), "--use_cpu", "true"]
    if budget:
        cmd += ["--max_tokens_per_batch", str(budget)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads((tmp_path / "out" / "trainer_state.json").read_text())
    # 48 pairs / (2 processes x 8) = 3 steps an epoch; 10 token-budget batches / 2 processes = 5
    assert state["epoch"] == pytest.approx(4 / 5 if budget else 4 / 3, abs=0.01)
    assert state["global_step"] == 4 and any("eval_bleu" in h for h in state["log_history"])
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_loading_the_best_checkpoint_does_not_report_tied_embeddings_missing(monkeypatch):
    """A checkpoint stores one copy of the tied embeddings; the Trainer must not warn that the others are missing,
    and must still warn about a key that really is missing."""
    from hf_syntax_mt import SyntaxMTForConditionalGeneration
    from hf_syntax_mt.training.run import SyntaxMTSeq2SeqTrainer

    model = SyntaxMTForConditionalGeneration(SyntaxMTConfig.from_preset(
        "transformer_abs", vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32))
    trainer = object.__new__(SyntaxMTSeq2SeqTrainer)
    trainer.model = model
    warnings = []
    monkeypatch.setattr(transformers.trainer.logger, "warning", lambda message, *args: warnings.append(message))
    state = {k: v for k, v in model.state_dict().items() if k not in model._tied_weights_keys}
    fresh = SyntaxMTForConditionalGeneration(model.config)
    trainer.model = fresh
    trainer._issue_warnings_after_load(fresh.load_state_dict(state, strict=False))
    assert warnings == []
    assert fresh.lm_head.weight.data_ptr() == fresh.model.shared.weight.data_ptr()
    assert torch.equal(fresh.model.encoder.embed_tokens.weight, model.model.shared.weight)
    state.pop("model.encoder.layers.0.feed_forward.fc1.weight")
    trainer._issue_warnings_after_load(fresh.load_state_dict(state, strict=False))
    assert len(warnings) == 1 and "model.encoder.layers.0.feed_forward.fc1.weight" in warnings[0] and "embed_tokens" not in warnings[0]
