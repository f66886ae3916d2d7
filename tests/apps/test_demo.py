"""`hf-syntax-mt demo` at toy size: a rerun with other corpus settings regenerates the corpus and retrains;
what it prints."""

import signal
import subprocess
import sys
from pathlib import Path

from hf_syntax_mt.demo import run_demo
from training_helpers import CHILD_ENV, scratch_dir, started_until, stopped


def test_demo_rerun_follows_new_corpus_settings(capsys):
    out = scratch_dir("demo")
    small = dict(presets=["transformer_abs"], n_dev=4, max_steps=2, batch_size=8, vocab_size=200,
                 model=dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64), samples=1)
    first = run_demo(out, n_train=16, **small)
    assert len((out / "data" / "train.src").read_text().splitlines()) == 16
    tokenizer_before = (out / "transformer_abs" / "tokenizer.json").read_text()
    second = run_demo(out, n_train=24, **small)
    assert len((out / "data" / "train.src").read_text().splitlines()) == 24
    # the second run trained its own tokenizer on the new corpus instead of reusing the first one's
    assert (out / "transformer_abs" / "tokenizer.json").read_text() != tokenizer_before
    assert set(first) == set(second) == {"transformer_abs"} and second["transformer_abs"]["bleu"] is not None
    printed = capsys.readouterr().out
    assert "16 train" in printed
    # progress by default: one line per training log (here every step), then the scores
    progress = [line for line in printed.splitlines() if line.startswith("  transformer_abs: step ")]
    assert [line.split()[2] for line in progress] == ["1/2", "2/2"] * 2 and all("loss " in line for line in progress)


def test_demo_shows_where_the_presets_differ_without_log_dicts(capsys):
    out = scratch_dir("demo")
    results = run_demo(out, presets=["transformer_abs", "transformer_dep_rel"], n_train=16, n_dev=4, max_steps=2,
                       batch_size=8, vocab_size=200, model=dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64),
                       samples=2)
    printed = capsys.readouterr().out
    assert "{'" not in printed and "train_runtime" not in printed  # the Trainer's log dicts stay out
    dev_src = (out / "data" / "dev.src").read_text().splitlines()
    dev_tgt = (out / "data" / "dev.tgt").read_text().splitlines()
    header = next(line for line in printed.splitlines() if line.startswith("the presets translate "))
    differing = int(header.split()[3])
    assert header.startswith(f"the presets translate {differing} of 4 dev sentences differently")
    blocks = printed.split(header)[1].split("  source:    ")[1:]
    assert differing >= 1 and len(blocks) == min(2, differing)
    for block in blocks:
        source, reference, *outputs = block.split("\n\n")[0].splitlines()
        k = dev_src.index(source)
        assert reference == f"  reference: {dev_tgt[k]}"
        names = [line.split()[0] for line in outputs]
        assert names == list(results)
        texts = {line[len("  ") + 28 + 2:] for line in outputs}
        assert len(texts) == 2  # the two presets' translations differ


def test_the_demo_ends_with_its_models_and_the_next_commands_which_work(capsys):
    """Its last lines name the two models and give translate, app and the pipeline call with their paths; the
    translate and pipeline lines run as printed (in the shell, with this environment's commands); no model folder
    keeps the training lock file."""
    out = scratch_dir("demo")
    run_demo(out, presets=["transformer_abs", "transformer_dep_rel"], n_train=16, n_dev=4, max_steps=2, batch_size=8,
             vocab_size=200, model=dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64), samples=1)
    models = [out / "transformer_abs", out / "transformer_dep_rel"]
    models_line, next_line, translate, app, call = capsys.readouterr().out.rstrip().splitlines()[-5:]
    assert models_line.startswith(f"models: {models[0]}, {models[1]}") and next_line == "next:"
    assert translate.endswith(f"| hf-syntax-mt translate --model {models[1]}")
    assert app.startswith(f"  hf-syntax-mt app --model {models[0]} --model {models[1]}")
    assert f'pipeline("syntax-translation", model="{models[1]}")' in call
    env = dict(CHILD_ENV, PATH=f"{Path(sys.executable).parent}:{CHILD_ENV['PATH']}")
    for command in (translate, call):
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0 and done.stdout.strip() and "error" not in done.stderr.lower(), done.stderr[-2000:]
    assert not [path for model in models for path in model.iterdir() if path.name.endswith(".lock")]


def test_demo_interrupted_stops_with_one_line_and_the_same_command_resumes(tmp_path):
    """SIGINT during the first preset's training: a checkpoint, exit 130, the training's one line (no traceback);
    the same command resumes from that checkpoint and finishes."""
    command = [sys.executable, "-c", "import sys; from hf_syntax_mt.cli import main; sys.exit(main())", "demo",
               "--out", str(tmp_path / "demo"), "--presets", "transformer_abs", "--n-train", "64", "--n-dev", "4",
               "--max-steps", "120", "--batch-size", "8", "--threads", "1"]
    process = started_until(command, "  transformer_abs: step ", stderr=subprocess.PIPE)  # the first training log
    _, err = stopped(process, lambda: process.send_signal(signal.SIGINT), timeout=300)
    assert process.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    [checkpoint] = (tmp_path / "demo" / "transformer_abs").glob("checkpoint-*")
    step = int(checkpoint.name.split("-")[1])
    assert err.rstrip().splitlines()[-1] == (f"interrupted at step {step}: checkpoint saved in {checkpoint}; rerun "
                                             "the same command to resume")
    done = subprocess.run(command, capture_output=True, text=True, env=CHILD_ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    progress = [line for line in done.stdout.splitlines() if line.startswith("  transformer_abs: step ")]
    assert int(progress[0].split()[2].split("/")[0]) > step  # resumed: no log of a step before the checkpoint
    assert "transformer_abs              dev BLEU" in done.stdout


def test_the_demo_syntax_model_translates_raw_text_everywhere_with_no_parser_given(tmp_path, capsys):
    """The demo's dep_rel model records the grammar's parser: the pipeline, `translate` and the page parse raw text
    (typed as a user would: capitals, a full stop against its word) with no extra argument."""
    from transformers import pipeline

    from hf_syntax_mt.app import Translator, sentence_views, translate_all
    from hf_syntax_mt.cli import main

    out = scratch_dir("demo")
    run_demo(out, presets=["transformer_dep_rel"], n_train=16, n_dev=4, max_steps=2, batch_size=8, vocab_size=200,
             model=dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64), samples=1)
    model = str(out / "transformer_dep_rel")
    sentences = (out / "data" / "dev.src").read_text().splitlines()[:2] + ["The dog saw the cat.", "the zebra slept ."]
    outputs = pipeline("syntax-translation", model=model)(sentences, max_new_tokens=4)
    assert ["error" in output for output in outputs] == [False, False, False, True]
    assert "warning" not in outputs[2]  # the capitals of a lowercase corpus are read lowercase, not unknown
    from transformers import AutoTokenizer

    backend = AutoTokenizer.from_pretrained(model).backend_tokenizer  # its subwords, without the parse
    assert backend.encode("The Dog SAW").ids == backend.encode("the dog saw").ids
    assert "'zebra' is not a word of the demo grammar" in outputs[3]["error"]
    translator = Translator.load(model)
    rows, messages = translate_all([translator], sentences[:3], beams=1, max_new_tokens=4)
    assert messages == [] and all(row[2] for row in rows)
    tree, _, said = sentence_views(translator, sentences[2], tmp_path)
    assert tree.is_file() and "the tree the parser gives it" in said
    (tmp_path / "input.txt").write_text("\n".join(sentences[:3]) + "\n")
    capsys.readouterr()
    assert main(["translate", "--model", model, "--max-new-tokens", "4", str(tmp_path / "input.txt")]) == 0
    printed = capsys.readouterr()
    assert len(printed.out.splitlines()) == 3 and printed.err == ""
