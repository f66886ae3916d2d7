"""`hf-syntax-mt` round trips (subprocesses for translate / train, in-process for the rest)."""

import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from transformers.utils import is_torch_bf16_gpu_available

from hf_syntax_mt.cli import main
from hf_syntax_mt.training.arguments import SyntaxMTTrainingArguments
from training_helpers import TINY_OVERRIDES, scratch_dir, synthetic_corpus, trained_model

DEP = "transformer_dep_rel+transformer_dbsa+transformer_sla"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


def run_cli(*args, stdin=None, text=True):
    return subprocess.run([sys.executable, "-m", "hf_syntax_mt.cli", *args], input=stdin, capture_output=True,
                          text=text, env=ENV, timeout=300)


def run_console_script(name, *args):
    """`name` as pip's console-script wrapper runs it: `sys.exit(function())` of its pyproject entry point."""
    tomllib = pytest.importorskip("tomllib")
    scripts = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts[name].partition(":")
    code = f"import sys; from {module} import {function}; sys.argv[0] = {name!r}; sys.exit({function}())"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=ENV, timeout=300)


def preparsed_options(count: int) -> list[str]:
    """`--conllu FILE --trees FILE` with the parses of the first `count` dev sentences (one per input line)."""
    data, work = synthetic_corpus(), scratch_dir("cli_parsed")
    blocks = (data / "dev.src.conllu").read_text().split("\n\n")[:count]
    (work / "dev.conllu").write_text("\n\n".join(blocks).strip("\n") + "\n\n")
    (work / "dev.tree").write_text("".join((data / "dev.src.tree").read_text().splitlines(keepends=True)[:count]))
    return ["--conllu", str(work / "dev.conllu"), "--trees", str(work / "dev.tree")]


def test_translate_stdin_and_file_round_trip(capsys):
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    lines = (data / "dev.src").read_text().splitlines()[:3]
    parsed = preparsed_options(3)  # one sentence per line that is not blank
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


def test_translate_writes_one_line_per_input_whatever_the_generation_config_returns(capsys):
    """A model whose generation config asks for 2 sequences a sentence still gets one output line a line."""
    out, _ = trained_model(DEP)
    model = scratch_dir("cli_two_sequences") / "model"
    shutil.copytree(out, model, dirs_exist_ok=True)
    generation = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**generation, "num_beams": 2, "num_return_sequences": 2}))
    infile = scratch_dir("cli_two_sequences") / "in.txt"
    infile.write_text("".join((synthetic_corpus() / "dev.src").read_text().splitlines(keepends=True)[:3]))
    capsys.readouterr()
    assert main(["translate", "--model", str(model), "--beams", "2", "--max-new-tokens", "6", *preparsed_options(3),
                 str(infile)]) == 0
    output = capsys.readouterr().out.split("\n")[:-1]
    assert len(output) == 3 and all(output)


def test_translate_n_best_writes_k_lines_per_input_line_best_first(capsys):
    out, _ = trained_model(DEP)
    infile = scratch_dir("cli_n_best") / "in.txt"
    lines = (synthetic_corpus() / "dev.src").read_text().splitlines()[:3]
    infile.write_text("\n".join([lines[0], "", lines[1], lines[2]]) + "\n")
    options = ["translate", "--model", str(out), "--beams", "3", "--max-new-tokens", "6", *preparsed_options(3)]
    capsys.readouterr()
    assert main([*options, str(infile)]) == 0
    best = capsys.readouterr().out.split("\n")[:-1]
    assert main([*options, "--n-best", "2", str(infile)]) == 0
    captured = capsys.readouterr()
    n_best = captured.out.split("\n")[:-1]
    assert len(n_best) == 8 and n_best[0::2] == best and n_best[2:4] == ["", ""] and all(n_best[4:])
    assert "line 2: empty input line (2 empty output lines)" in captured.err
    assert main([*options, "--n-best", "2", "--scores", str(infile)]) == 0
    scored = [re.fullmatch(r"(\d+) \|\|\| (.*) \|\|\| logprob= (\S+) \|\|\| (\S+)", line)
              for line in capsys.readouterr().out.split("\n")[:-1]]
    assert [int(m[1]) for m in scored] == [0, 0, 1, 1, 2, 2, 3, 3] and [m[2] for m in scored] == n_best
    log_probabilities, scores = [float(m[3]) for m in scored], [float(m[4]) for m in scored]
    assert all(math.isnan(x) for x in log_probabilities[2:4] + scores[2:4])
    assert all(scores[i] >= scores[i + 1] for i in (0, 4, 6))  # best first
    assert all(p < 0 and p <= s < 0 for p, s in zip(log_probabilities, scores) if not math.isnan(p))
    assert _user_error(capsys, [*options, "--n-best", "4", str(infile)]) == (
        "hf-syntax-mt translate: --n-best 4 needs --beams 4 or more (the beam keeps --beams translations; it is 3)\n")


def test_translate_reports_each_undecodable_line_once_and_translates_the_rest(capsys, monkeypatch):
    """Bytes that are not UTF-8, on stdin or in a file: one message per bad line, numbered from 1 as
    editors number lines, an empty output line for it, every other line translated."""
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    lines = (data / "dev.src").read_text().splitlines()[:3]
    parsed = preparsed_options(3)  # no sentence for the line that is not UTF-8, as `annotate` writes none
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


def test_translate_skips_a_bad_conllu_sentence_and_names_it_as_the_file_does(capsys):
    """A cycle in one pre-parsed sentence fails that line only, named by its number and word IDs in the file."""
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    lines = (data / "dev.src").read_text().splitlines()[:3]
    blocks = (data / "dev.src.conllu").read_text().split("\n\n")[:3]
    work = scratch_dir("cli")
    (work / "good.conllu").write_text("\n\n".join(blocks) + "\n")
    blocks[1] = blocks[1].replace("\t0\troot\t", "\t3\troot\t")  # arrived <- song <- arrived
    (work / "bad.conllu").write_text("\n\n".join(blocks) + "\n")
    (work / "bad.tree").write_text("".join((data / "dev.src.tree").read_text().splitlines(keepends=True)[:3]))
    (work / "in.txt").write_text("\n".join(lines) + "\n")
    args = ["translate", "--model", str(out), "--max-new-tokens", "6", "--trees", str(work / "bad.tree")]
    capsys.readouterr()  # drop what training the shared tiny model printed
    assert main([*args, "--conllu", str(work / "good.conllu"), str(work / "in.txt")]) == 0
    first, _, third = capsys.readouterr().out.splitlines()
    assert main([*args, "--conllu", str(work / "bad.conllu"), str(work / "in.txt")]) == 0
    done = capsys.readouterr()
    assert done.out.splitlines() == [first, "", third]
    assert done.err == ("hf-syntax-mt translate: line 2: could not parse: CoNLL-U sentence 2 (sent_id dev-2): the heads "
                        "form a cycle through words 3 -> 6 -> 3 (empty output line)\n")


def test_translate_names_a_missing_model_directory_first(capsys, monkeypatch):
    for missing in ("/nonexistent/model", "out/typo_model"):
        assert main(["translate", "--model", missing]) == 2
        assert capsys.readouterr().err == f"hf-syntax-mt translate: error: no model directory {missing}\n"
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    assert main(["translate", "--model", "/nonexistent/model"]) == 2  # not a Hub id: no Hub lookup
    assert capsys.readouterr().err == "hf-syntax-mt translate: error: no model directory /nonexistent/model\n"
    monkeypatch.chdir(scratch_dir("cli"))
    Path("out").mkdir()
    assert main(["translate", "--model", "out/typo_model"]) == 2  # a local folder's typo: no Hub retries
    assert capsys.readouterr().err == ("hf-syntax-mt translate: error: no model directory out/typo_model (there is a "
                                       "local folder out, so it is no Hub repo id)\n")


def test_a_name_that_is_no_folder_is_answered_at_once_naming_the_folder_then_the_hub(capsys, monkeypatch):
    """`app --model no_such_dir` online: one Hub lookup, no half minute of retries; the line names the missing folder
    first, then why the Hub did not help (no answer, or no such model). The Hub is stood in for: tests stay offline."""
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.chdir(scratch_dir("cli"))
    lookups = []

    def unreachable(api, name, timeout=None):
        lookups.append((name, timeout))
        raise httpx2.ConnectError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "model_info", unreachable)
    for command in ("app", "translate"):
        assert main([command, "--model", "no_such_dir"]) == 2
        assert capsys.readouterr().err == (
            f"hf-syntax-mt {command}: error: no model directory no_such_dir, and the Hugging Face Hub could not be "
            "reached to look it up there (ConnectError: [Errno -2] Name or service not known); offline, give a local "
            "folder\n")
    assert lookups == [("no_such_dir", 10)] * 2

    def unknown(api, name, timeout=None):
        answer = httpx2.Response(404, request=httpx2.Request("GET", f"https://huggingface.co/api/models/{name}"))
        raise RepositoryNotFoundError("404 Client Error: Repository Not Found", response=answer)

    monkeypatch.setattr(HfApi, "model_info", unknown)
    assert main(["app", "--model", "no_such_dir"]) == 2
    assert capsys.readouterr().err == ("hf-syntax-mt app: error: no model directory no_such_dir, nor a model no_such_dir "
                                       "on the Hugging Face Hub (a private one needs `hf auth login`)\n")


def test_a_model_folder_without_config_json_is_named(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a sentence\n")
    for argv in (["translate", "--model", str(tmp_path), str(tmp_path / "in.txt")],
                 ["annotate", "--model", str(tmp_path), str(tmp_path / "in.txt")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path} has no config.json, so it is no saved model" in err and "model_type" not in err


def test_translate_refuses_beam_size_zero(capsys):
    out, _ = trained_model(DEP)
    with pytest.raises(SystemExit) as exit_status:
        main(["translate", "--model", str(out), "--beams", "0"])
    assert exit_status.value.code == 2
    assert "argument --beams: expected an integer >= 1, got '0'" in capsys.readouterr().err


def test_translate_device_is_checked_and_the_cpu_is_the_default_without_a_gpu(capsys):
    out, _ = trained_model(DEP)
    infile = scratch_dir("cli-device") / "in.txt"
    infile.write_text("\n".join((synthetic_corpus() / "dev.src").read_text().splitlines()[:3]) + "\n")
    translate = ["translate", "--model", str(out), "--beams", "2", "--max-new-tokens", "6", *preparsed_options(3)]
    capsys.readouterr()
    assert main([*translate, str(infile)]) == 0
    default = capsys.readouterr().out
    assert main([*translate, "--device", "cpu", str(infile)]) == 0
    assert capsys.readouterr().out == default and default.count("\n") == 3
    assert "--device gpu0: not a device (cpu, cuda, cuda:1, mps)" in _user_error(capsys, [*translate, "--device", "gpu0",
                                                                                          str(infile)])
    assert "hf-syntax-mt app: --device gpu0: not a device" in _user_error(capsys, ["app", "--model", str(out),
                                                                                  "--device", "gpu0"])
    if not torch.cuda.is_available():
        assert '--device cuda: no CUDA GPU here (torch.cuda.is_available() is False); use the CPU ("cpu")' in _user_error(
            capsys, [*translate, "--device", "cuda", str(infile)])
    else:
        assert f"--device cuda:{torch.cuda.device_count()}: this machine has" in _user_error(
            capsys, [*translate, "--device", f"cuda:{torch.cuda.device_count()}", str(infile)])


def _user_error(capsys, argv) -> str:
    """What a command prints on stderr when it refuses `argv` (exit status 2): one line (`train`: and the
    line that points to --traceback)."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 + (argv[0] == "train"), err
    return err


def test_translate_without_the_parse_a_model_needs(capsys):
    out, _ = trained_model(DEP)  # trained on pre-parsed data: its config records no parser
    infile = scratch_dir("cli") / "in.txt"
    infile.write_text("a sentence .\n")
    assert "records no parser (it was trained on pre-parsed data): give --conllu FILE" in \
        _user_error(capsys, ["translate", "--model", str(out), str(infile)])


def test_translate_missing_input_file_directory_or_empty_input(capsys):
    out, _ = trained_model(DEP)
    work = scratch_dir("cli")
    assert _user_error(capsys, ["translate", "--model", str(out), "/nonexistent/input.txt"]) == \
        "hf-syntax-mt: input file not found: /nonexistent/input.txt\n"
    assert _user_error(capsys, ["translate", "--model", str(out), str(work)]) == \
        f"hf-syntax-mt: {work} is a directory, not an input file\n"
    (work / "empty.txt").write_text("")
    assert main(["translate", "--model", str(out), str(work / "empty.txt")]) == 0
    done = capsys.readouterr()
    assert done.out == "" and done.err == "hf-syntax-mt translate: no input lines (nothing to translate)\n"


def test_parser_and_preparsed_input_together_are_refused(capsys):
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    infile = scratch_dir("cli") / "in.txt"
    infile.write_text("a sentence .\n")
    assert _user_error(capsys, ["translate", "--model", str(out), "--parser", "ja_ginza", "--conllu",
                                str(data / "dev.src.conllu"), str(infile)]) == (
        "hf-syntax-mt translate: --parser ja_ginza and --conllu both give the parses: --conllu reads them from the "
        "file, --parser parses the text; choose one\n")
    assert "--trees needs --conllu" in _user_error(
        capsys, ["translate", "--model", str(out), "--trees", str(data / "dev.src.tree"), str(infile)])


def test_annotate_dumps_trees_and_features(capsys):
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    capsys.readouterr()  # the Trainer's logs, where this test trained the model
    assert main(["annotate", "--model", str(out), "--conllu", str(data / "dev.src.conllu"),
                 "--trees", str(data / "dev.src.tree"), str(data / "dev.src")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == len((data / "dev.src").read_text().splitlines())
    row = rows[0]
    assert row["words"] == row["text"].split() and len(row["heads"]) == len(row["words"])
    assert row["trees"][0].startswith("(ROOT")
    assert len(row["tokens"]) == len(row["source_heads"]) == len(row["source_distances"])
    assert row["tokens"][-1] == "</s>" and row["source_heads"][-1] == -100



def test_annotate_reports_a_sentence_that_is_not_a_tree_and_annotates_the_rest(capsys):
    conllu = scratch_dir("cli_annotate") / "gold.conllu"
    rows = {"a b": [("a", 2, "nsubj"), ("b", 0, "root")], "c d": [("c", 2, "nsubj"), ("d", 1, "dep")],
            "e f": [("e", 0, "root"), ("f", 1, "dep")]}  # "c d": a cycle
    conllu.write_text("".join(f"# text = {text}\n" + "".join(f"{i}\t{form}\t_\t_\t_\t_\t{head}\t{rel}\t_\t_\n"
                                                         for i, (form, head, rel) in enumerate(words, 1)) + "\n"
                              for text, words in rows.items()), encoding="utf-8")
    infile = conllu.with_name("in.txt")
    infile.write_text("".join(text + "\n" for text in rows), encoding="utf-8")
    assert main(["annotate", "--conllu", str(conllu), str(infile)]) == 0
    out = capsys.readouterr()
    written = [json.loads(line) for line in out.out.splitlines()]
    assert [row["line"] for row in written] == [1, 2, 3]
    assert written[0]["heads"] == [1, 1] and written[2]["heads"] == [0, 0]
    assert written[1] == {"line": 2, "text": "c d",
                          "error": "CoNLL-U sentence 2: the heads form a cycle through words 1 -> 2 -> 1"}
    assert "line 2: could not parse: CoNLL-U sentence 2" in out.err

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
    assert "has no localized attention (sla_layers is empty): choose --kind relations" in _user_error(
        capsys, ["plot", "--model", str(out), "--sentence", sentence, "--kind", "sla", *parsed])
    for empty in ("", "  "):
        assert "--sentence is empty" in _user_error(capsys, ["plot", "--model", str(out), "--sentence", empty, *parsed])
    work = scratch_dir("plot")
    assert _user_error(capsys, ["plot", "--model", str(out), "--sentence", sentence, *parsed, "--out", str(work)]) == (
        f"hf-syntax-mt plot: error: {work} is a directory: give the image file to write, e.g. {work / 'plot.png'}\n")


def test_plot_writes_the_file_it_names(capsys):
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    sentence = (data / "dev.src").read_text().splitlines()[0]
    target = scratch_dir("plot") / "figure"  # no suffix: a PNG under exactly that name
    capsys.readouterr()
    assert main(["plot", "--model", str(out), "--sentence", sentence, "--conllu", str(data / "dev.src.conllu"),
                 "--out", str(target)]) == 0
    assert capsys.readouterr().out == f"{target}\n"
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not target.with_suffix(".png").exists()


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
    card = (tmp_path / "out" / "README.md").read_text()  # which pipeline task the card's `pipeline_tag` is not
    assert "The task is `syntax-translation`, registered by `import hf_syntax_mt`" in card
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


def test_train_names_a_directory_and_conflicting_precisions(tmp_path, capsys):
    data = synthetic_corpus()
    assert _user_error(capsys, ["train", *_train_args(tmp_path), "--train_file", str(data)]).splitlines()[0] == (
        f"hf-syntax-mt-train: error: {data} is a directory: give a .tsv, .json or .jsonl file, or the prefix P "
        "of the plain-text pair P.src, P.tgt")
    (tmp_path / "pairs.tsv").mkdir()
    assert f"error: {tmp_path / 'pairs.tsv'} is a directory, not a data file\n" in \
        _user_error(capsys, ["train", *_train_args(tmp_path), "--train_file", str(tmp_path / "pairs.tsv")])
    assert "--bf16 and --fp16 both set the mixed precision: give one of them" in \
        _user_error(capsys, ["train", *_train_args(tmp_path), "--bf16", "true", "--fp16", "true"])


@pytest.mark.skipif(is_torch_bf16_gpu_available(), reason="this machine trains bf16 on its GPU")
def test_bf16_without_a_bf16_gpu_trains_on_the_cpu_or_says_so(tmp_path):
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="--bf16: this GPU does not compute in bf16 .*add --use_cpu"):
            SyntaxMTTrainingArguments(output_dir=str(tmp_path), bf16=True)
    else:
        assert SyntaxMTTrainingArguments(output_dir=str(tmp_path), bf16=True).use_cpu


def test_continued_model_parses_with_its_recorded_parser(tmp_path, capsys):
    """Without --parser a continued model uses config.parser (here one that is not installed, so the run stops
    there, naming it) instead of asking for --parser."""
    out, _ = trained_model("transformer_dep")
    model = tmp_path / "recorded"
    shutil.copytree(out, model, ignore=shutil.ignore_patterns("checkpoint-*"))
    config = json.loads((model / "config.json").read_text())
    config["parser"] = {"type": "spacy", "model": "xx_no_such_pipeline", "disable": [], "batch_size": 8}
    (model / "config.json").write_text(json.dumps(config))
    args = _train_args(tmp_path, "--model_name_or_path", str(model), "--config_overrides", "")
    args = [a for i, a in enumerate(args) if "--parser" not in args[max(i - 1, 0):i + 1]]  # no --parser preparsed
    capsys.readouterr()
    assert main(["train", *args]) == 2
    assert ("hf-syntax-mt-train: error: the parser in the model's config (config.parser): 'xx_no_such_pipeline' is "
            "neither an installed spaCy") in capsys.readouterr().err


def test_evaluation_scores_without_sacrebleu_detokenize_warning(caplog):
    """The BLEU of every evaluation (`hf_syntax_mt.inference.metrics`) scores decoded text: without sacrebleu's three-line
    "you forgot to detokenize" warning for 100 lines ending in " ." (which `force=False` still gives)."""
    from hf_syntax_mt.inference.metrics import load_metric

    lines = [f"sentence number {i} ." for i in range(100)]
    metric = load_metric()
    with caplog.at_level("WARNING"):
        assert metric.compute(predictions=lines, references=[[line] for line in lines])["bleu"] == pytest.approx(100)
        assert "detokenize" not in caplog.text
        metric.compute(predictions=lines, references=[[line] for line in lines], force=False)
        assert "It looks like you forgot to detokenize" in caplog.text


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


@pytest.fixture
def threads_seen(monkeypatch):
    """Stops `translate`, `train` and `demo` where their work would start, recording torch's threads then;
    torch's thread count is restored afterwards."""
    import transformers

    import hf_syntax_mt.features.synthetic
    import hf_syntax_mt.training.run

    seen = []

    def record(*args, **kwargs):
        seen.append(torch.get_num_threads())
        raise ValueError("stopped where the work starts")

    monkeypatch.setattr(transformers, "pipeline", record)
    monkeypatch.setattr(hf_syntax_mt.training.run, "train", record)
    monkeypatch.setattr(hf_syntax_mt.features.synthetic, "write_synthetic_corpus", record)
    monkeypatch.delenv("HF_SYNTAX_MT_THREADS", raising=False)
    before = torch.get_num_threads()
    yield seen
    torch.set_num_threads(before)


def _command_argv(command, tmp_path):
    if command == "translate":
        (tmp_path / "in.txt").write_text("a sentence\n")
        model, _ = trained_model(DEP)
        return ["translate", "--model", str(model), str(tmp_path / "in.txt")]
    if command == "train":
        return ["train", *_train_args(tmp_path)]
    return ["demo", "--out", str(tmp_path / "demo")]


@pytest.mark.parametrize("command", ["translate", "train", "demo"])
def test_threads_flag_and_environment_variable_set_torch_threads(command, tmp_path, monkeypatch, capsys,
                                                                   threads_seen):
    argv = _command_argv(command, tmp_path)
    torch.set_num_threads(1)
    assert main([*argv, "--threads", "2"]) == 2 and threads_seen == [2]
    torch.set_num_threads(1)
    monkeypatch.setenv("HF_SYNTAX_MT_THREADS", "3")
    assert main(argv) == 2 and threads_seen == [2, 3]
    torch.set_num_threads(1)
    assert main([*argv, "--threads", "2"]) == 2 and threads_seen == [2, 3, 2]  # the flag wins
    monkeypatch.delenv("HF_SYNTAX_MT_THREADS")
    torch.set_num_threads(1)
    assert main(argv) == 2 and threads_seen == [2, 3, 2, 1]  # neither: left as it was
    assert "stopped where the work starts" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["translate", "train", "demo"])
def test_bad_thread_counts_are_refused_in_one_line(command, tmp_path, monkeypatch, capsys, threads_seen):
    argv = _command_argv(command, tmp_path)
    prefix = "hf-syntax-mt-train" if command == "train" else f"hf-syntax-mt {command}"
    assert main([*argv, "--threads", "0"]) == 2
    assert capsys.readouterr().err.startswith(f"{prefix}: error: --threads 0: expected a number of threads >= 1")
    monkeypatch.setenv("HF_SYNTAX_MT_THREADS", "many")
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(
        f"{prefix}: error: HF_SYNTAX_MT_THREADS 'many': expected a number of threads >= 1")
    assert threads_seen == []
