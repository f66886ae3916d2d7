"""`hf-syntax-mt` round trips (subprocesses for translate / train, in-process for the rest)."""

import json
import os
import subprocess
import sys

import pytest

from hf_syntax_mt.cli import main

from training_helpers import TINY_OVERRIDES, scratch_dir, synthetic_corpus, trained_model

DEP = "transformer_dep_rel+transformer_dbsa+transformer_sla"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "hf_syntax_mt.cli", *args], input=stdin, capture_output=True,
                          text=True, env=ENV, timeout=300)


def test_translate_stdin_and_file_round_trip(capsys):
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    lines = (data / "dev.src").read_text().splitlines()[:3]
    parsed = ["--conllu", str(data / "dev.src.conllu"), "--trees", str(data / "dev.src.tree")]
    text = "\n".join([lines[0], "", lines[1], lines[2]]) + "\n"
    done = run_cli("translate", "--model", str(out), "--beams", "2", "--batch-size", "2", "--max-new-tokens", "6",
                   *parsed, stdin=text)
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout.split("\n")[:-1]
    assert len(output) == 4 and output[1] == "" and all(output[i] for i in (0, 2, 3))
    assert "line 2: empty input line" in done.stderr
    infile = scratch_dir("cli") / "in.txt"
    infile.write_text(text)
    capsys.readouterr()  # drop what training the shared tiny model printed
    assert main(["translate", "--model", str(out), "--beams", "2", "--batch-size", "2", "--max-new-tokens", "6",
                 *parsed, str(infile)]) == 0
    assert capsys.readouterr().out == done.stdout


def test_translate_without_the_parse_a_model_needs():
    out, _ = trained_model(DEP)  # trained on pre-parsed data: its config records no parser
    infile = scratch_dir("cli") / "in.txt"
    infile.write_text("a sentence .\n")
    with pytest.raises(SystemExit, match="records no parser .*give --conllu FILE"):
        main(["translate", "--model", str(out), str(infile)])


def test_translate_missing_input_file():
    out, _ = trained_model(DEP)
    with pytest.raises(SystemExit, match="input file not found"):
        main(["translate", "--model", str(out), "/nonexistent/input.txt"])


def test_annotate_dumps_trees_and_features(capsys):
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    assert main(["annotate", "--model", str(out), "--conllu", str(data / "dev.src.conllu"),
                 "--trees", str(data / "dev.src.tree"), str(data / "dev.src")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == len((data / "dev.src").read_text().splitlines())
    row = rows[0]
    assert row["words"] == row["text"].split() and len(row["heads"]) == len(row["words"])
    assert row["trees"][0].startswith("(ROOT")
    assert len(row["tokens"]) == len(row["source_heads"]) == len(row["source_distances"])
    assert row["tokens"][-1] == "</s>" and row["source_heads"][-1] == -100


@pytest.mark.parametrize("kind", ["relations", "sla", "attention"])
def test_plot_writes_png(kind):
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    sentence = (data / "dev.src").read_text().splitlines()[0]
    png = scratch_dir("plot") / f"{kind}.png"
    assert main(["plot", "--model", str(out), "--sentence", sentence, "--kind", kind, "--layer", "1", "--head", "3",
                 "--conllu", str(data / "dev.src.conllu"), "--trees", str(data / "dev.src.tree"),
                 "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_subcommand(tmp_path):
    data = synthetic_corpus()
    main(["train", "--preset", "transformer_dep", "--parser", "preparsed", "--config_overrides", TINY_OVERRIDES,
         "--train_file", str(data / "train"), "--validation_file", str(data / "dev"), "--vocab_size", "120",
         "--split_punctuation", "true", "--max_target_length", "8", "--output_dir", str(tmp_path / "out"), "--max_steps", "2",
         "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
         "--per_device_train_batch_size", "16", "--disable_tqdm", "true",
         "--cache_dir", str(tmp_path / "cache")])
    metrics = json.loads((tmp_path / "out" / "all_results.json").read_text())
    assert "eval_bleu" in metrics and (tmp_path / "out" / "README.md").is_file()
    pre_tokenizers = json.loads((tmp_path / "out" / "tokenizer.json").read_text())["pre_tokenizer"]["pretokenizers"]
    assert [p["type"] for p in pre_tokenizers] == ["WhitespaceSplit", "Metaspace", "Split"]  # --split_punctuation
