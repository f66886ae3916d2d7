"""A bad flag value: a one-line usage and the error, not the usage of every option (`--help` still lists them)."""

import pytest

from hf_syntax_mt.cli import main


@pytest.mark.parametrize("argv, usage, error", [
    (["translate", "--model", "m", "--beams", "x"], "usage: hf-syntax-mt translate --model MODEL [input] [options]",
     "hf-syntax-mt translate: error: argument --beams: expected an integer >= 1, got 'x'"),
    (["average", "--out", "x", "--run-dir", "r", "--last", "0"],
     "usage: hf-syntax-mt average --out OUT (--checkpoints CHECKPOINTS [CHECKPOINTS ...] | --run-dir RUN_DIR) [options]",
     "hf-syntax-mt average: error: argument --last: expected an integer >= 1, got '0'"),
    (["plot", "--model", "m", "--sentence", "s", "--kind", "x"],
     "usage: hf-syntax-mt plot --model MODEL --sentence SENTENCE [options]",
     "hf-syntax-mt plot: error: argument --kind: invalid choice: 'x' (choose from 'relations', 'sla', 'attention')"),
    (["transl"], "usage: hf-syntax-mt {translate,annotate,plot,train,average,app,demo} ... [options]",
     "hf-syntax-mt: error: argument command: invalid choice: 'transl' (choose from 'translate', 'annotate', 'plot', "
     "'train', 'average', 'app', 'demo')"),
    (["train", "--preset", "transformer_abs", "--num_train_epochs", "x"], "usage: hf-syntax-mt train [options]",
     "hf-syntax-mt train: error: argument --num_train_epochs/--num-train-epochs: invalid float value: 'x'"),
    (["train", "--preset", "transformer_abs", "--bogus"], "usage: hf-syntax-mt train [options]",
     "hf-syntax-mt train: error: unrecognized arguments: --bogus"),
])
def test_a_bad_flag_value_prints_two_lines(argv, usage, error, capsys):
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"{usage} (--help lists them)", error]


def test_help_still_lists_every_option(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["translate", "--help"])
    assert stop.value.code == 0
    shown = capsys.readouterr().out
    assert all(flag in shown for flag in ("--beams", "--batch-size", "--reference", "--conllu", "--threads"))


@pytest.mark.parametrize("argv, error", [
    (["--num_train_epochs", "x"], "argument --num_train_epochs/--num-train-epochs: invalid float value: 'x'"),
    (["--threads", "x"], "argument --threads: invalid int value: 'x'"),
    (["--bogus", "2"], "unrecognized arguments: --bogus 2"),
])
def test_the_train_entry_point_prints_two_lines_for_a_bad_flag_value(argv, error, capsys, monkeypatch):
    from hf_syntax_mt.training.run import main as train_main

    monkeypatch.setattr("sys.argv", ["hf-syntax-mt-train"])  # the console script's program name
    with pytest.raises(SystemExit) as stop:
        train_main(argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == ["usage: hf-syntax-mt-train [options] (--help lists them)",
                                                    f"hf-syntax-mt-train: error: {error}"]
