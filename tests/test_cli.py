"""`hf-syntax-mt` round trips (subprocesses for translate / train, in-process for the rest)."""

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from hf_syntax_mt.cli import main

from training_helpers import TINY_OVERRIDES, scratch_dir, synthetic_corpus, trained_model

DEP = "transformer_dep_rel+transformer_dbsa+transformer_sla"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


def run_cli(*args, stdin=None, text=True):
    return subprocess.run([sys.executable, "-m", "hf_syntax_mt.cli", *args], input=stdin, capture_output=True,
                          text=text, env=ENV, timeout=300)


def run_console_script(name, *args):
    """`name` as pip's console-script wrapper runs it: `sys.exit(function())` of its pyproject entry point."""
    tomllib = pytest.importorskip("tomllib")
    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts[name].partition(":")
    code = f"import sys; from {module} import {function}; sys.argv[0] = {name!r}; sys.exit({function}())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=ENV, timeout=300)


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


def test_translate_reports_each_undecodable_line_once_and_translates_the_rest(capsys, monkeypatch):
    """Bytes that are not UTF-8, on stdin or in a file: one message per bad line, numbered from 1 as
    editors number lines, an empty output line for it, every other line translated."""
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    lines = (data / "dev.src").read_text().splitlines()[:3]
    parsed = ["--conllu", str(data / "dev.src.conllu"), "--trees", str(data / "dev.src.tree")]
    translate = ["translate", "--model", str(out), "--max-new-tokens", "6", *parsed]
    good, infile = scratch_dir("cli") / "good.txt", scratch_dir("cli") / "latin1.txt"
    good.write_text("\n".join(lines) + "\n")
    assert main([*translate, str(good)]) == 0
    first, second, third = capsys.readouterr().out.splitlines()
    text = "\n".join([lines[0], "caf\xe9 \xff", lines[1], "", lines[2]]).encode("latin-1") + b"\n"
    infile.write_bytes(text)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    for args in ([], [str(infile)]):
        assert main([*translate, *args]) == 0
        done = capsys.readouterr()
        assert done.out.splitlines() == [first, "", second, "", third]
        assert done.err.splitlines() == [
            "hf-syntax-mt translate: line 2: not UTF-8 text (invalid byte 0xe9 at byte 4 of the line) (empty output line)",
            "hf-syntax-mt translate: line 4: empty input line (empty output line)",
        ]  # nothing else: no weight-loading bar, no max_length warning


def test_translate_names_a_missing_model_directory_first(capsys, monkeypatch):
    for missing in ("/nonexistent/model", "out/typo_model"):
        assert main(["translate", "--model", missing]) == 2
        assert capsys.readouterr().err == f"hf-syntax-mt translate: error: no model directory {missing}\n"
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    assert main(["translate", "--model", "/nonexistent/model"]) == 2  # not a Hub id: no Hub lookup
    assert capsys.readouterr().err == "hf-syntax-mt translate: error: no model directory /nonexistent/model\n"


def test_translate_refuses_beam_size_zero(capsys):
    out, _ = trained_model(DEP)
    with pytest.raises(SystemExit) as exit_status:
        main(["translate", "--model", str(out), "--beams", "0"])
    assert exit_status.value.code == 2
    assert "argument --beams: expected an integer >= 1, got '0'" in capsys.readouterr().err


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


def test_plot_refuses_what_it_cannot_draw(capsys):
    out, _ = trained_model("transformer_dbsa")  # no localized attention
    data = synthetic_corpus()
    sentence = (data / "dev.src").read_text().splitlines()[0]
    parsed = ["--conllu", str(data / "dev.src.conllu"), "--trees", str(data / "dev.src.tree")]
    with pytest.raises(SystemExit, match="--kind sla, but .* has no localized attention .*choose --kind relations"):
        main(["plot", "--model", str(out), "--sentence", sentence, "--kind", "sla", *parsed])
    for empty in ("", "  "):
        with pytest.raises(SystemExit, match="--sentence is empty"):
            main(["plot", "--model", str(out), "--sentence", empty, *parsed])


def test_train_subcommand(tmp_path):
    data = synthetic_corpus()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([
            "train", "--preset", "transformer_dep", "--parser", "preparsed", "--config_overrides", TINY_OVERRIDES,
            "--train_file", str(data / "train"), "--validation_file", str(data / "dev"), "--vocab_size", "120",
            "--split_punctuation", "true", "--max_target_length", "8", "--output_dir", str(tmp_path / "out"),
            "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end", "false",
            "--per_device_train_batch_size", "16", "--disable_tqdm", "true", "--cache_dir", str(tmp_path / "cache"),
        ]) == 0
    metrics = json.loads((tmp_path / "out" / "all_results.json").read_text())
    assert "eval_bleu" in metrics and (tmp_path / "out" / "README.md").is_file()
    assert not [w for w in caught if "pin_memory" in str(w.message)]  # no pinned memory on a CPU run
    pre_tokenizers = json.loads((tmp_path / "out" / "tokenizer.json").read_text())["pre_tokenizer"]["pretokenizers"]
    assert [p["type"] for p in pre_tokenizers] == ["WhitespaceSplit", "Metaspace", "Split"]  # --split_punctuation


def _train_args(tmp_path, *extra):
    data = synthetic_corpus()
    return ["--preset", "transformer_abs", "--parser", "preparsed", "--config_overrides", TINY_OVERRIDES,
            "--train_file", str(data / "train"), "--validation_file", str(data / "dev"), "--vocab_size", "120",
            "--max_target_length", "8", "--output_dir", str(tmp_path / "out"), "--max_steps", "2",
            "--eval_strategy", "no", "--save_strategy", "no", "--per_device_train_batch_size", "16",
            "--disable_tqdm", "true", "--cache_dir", str(tmp_path / "cache"), *extra]


def test_train_console_script_exit_status(tmp_path):
    """0 after a successful run, with the metrics printed once (on stdout); 2 with the message alone
    for a user error, the traceback with --traceback."""
    done = run_console_script("hf-syntax-mt-train", *_train_args(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads(done.stdout[done.stdout.rindex("\n{\n"):])
    assert metrics == json.loads((tmp_path / "out" / "all_results.json").read_text())
    assert "eval_bleu" in metrics and "eval_bleu" not in done.stderr
    bad = run_console_script("hf-syntax-mt-train", *_train_args(tmp_path, "--config_overrides", "d_model=abc"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "hf-syntax-mt-train: error: config setting d_model='abc' must be of type int" in bad.stderr
    with pytest.raises(ValueError, match="must be of type int"):
        main(["train", *_train_args(tmp_path, "--config_overrides", "d_model=abc", "--traceback")])


@pytest.mark.parametrize("extra, message", [
    (["--parser", "ja_ginzza", "--preset", "transformer_dep"], "did you mean 'ja_ginza'?"),
    (["--preset", "transformer_dep_rel+transformer_dep_labeled"],
     "presets transformer_dep_rel and transformer_dep_labeled conflict: dependency_relations='depth' in the first, "
     "'labeled' in the second"),
    (["--config_overrides", "sla_layers=1"], "config setting sla_layers=1 must be of type list"),
    (["--config_overrides", "", "--model_name_or_path", "/nonexistent/model"], "no model directory /nonexistent/model"),
    (["--generation_num_beams", "0"], "--generation_num_beams 0: the beam size must be >= 1"),
])
def test_train_user_errors_print_the_message(tmp_path, capsys, extra, message):
    assert main(["train", *_train_args(tmp_path, *extra)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hf-syntax-mt-train: error: ") and message in err and "Traceback" not in err
    assert "pip install" not in err
