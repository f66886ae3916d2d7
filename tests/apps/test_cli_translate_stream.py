"""`hf-syntax-mt translate` on long inputs and pre-parsed ones: each batch written as it is done, a clean stop on
SIGINT / SIGTERM that keeps the lines written, progress on a terminal, `--reference` scores, `--conllu` matched to the
lines by position."""

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios

import pytest

from hf_syntax_mt.cli import main
from hf_syntax_mt.training.run import train
from training_helpers import scratch_dir, synthetic_corpus, tiny_args, trained_model

DEP = "transformer_dep_rel+transformer_dbsa+transformer_sla"
ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", HF_SYNTAX_MT_THREADS="1")
TRANSLATE = [sys.executable, "-m", "hf_syntax_mt.cli", "translate"]


@pytest.fixture(scope="module")
def abs_model():
    """A tiny transformer_abs model (it needs no parse) trained long enough (60 steps, ~4 s) that its translations
    differ from line to line, and 1200 input lines."""
    work = scratch_dir("cli_stream")
    train(*tiny_args(work / "model", "transformer_abs", max_steps=60, learning_rate=5e-3, eval_strategy="no",
                     save_strategy="no", logging_steps=100))
    sources = (synthetic_corpus() / "train.src").read_text().splitlines()
    lines = [sources[i % len(sources)] for i in range(1200)]
    (work / "in.txt").write_text("\n".join(lines) + "\n")
    return work / "model", work / "in.txt"


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_translate_with_the_lines_written_so_far(abs_model, signal_number, capsys):
    """The lines appear batch by batch; SIGINT / SIGTERM after the first ones stops with one line on stderr (no
    traceback), exit status 128 + the signal, and the lines written are the first lines of the full translation."""
    model, infile = abs_model
    options = ["--model", str(model), "--batch-size", "4", "--max-new-tokens", "8"]
    # unbuffered: what readline does not return stays in the pipe for communicate
    process = subprocess.Popen([*TRANSLATE, *options, str(infile)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               bufsize=0, env=ENV)
    try:
        first = process.stdout.readline()  # the first batch, while the rest is still being translated
        process.send_signal(signal_number)
        rest, err = process.communicate(timeout=120)
    finally:
        process.kill()
    written, err = (first + rest).decode().splitlines(), err.decode()
    assert process.returncode == 128 + signal_number, err
    assert 4 <= len(written) < 1200 and len(written) % 4 == 0  # whole batches
    name = signal.Signals(signal_number).name
    assert err == (f"hf-syntax-mt translate: stopped by {name}: {len(written)} of 1200 lines translated and written "
                   "(the first ones, in input order)\n")
    head = scratch_dir("cli_stream") / "head.txt"
    head.write_text("".join(infile.read_text().splitlines(keepends=True)[: len(written)]))
    capsys.readouterr()
    assert main(["translate", *options, str(head)]) == 0
    assert capsys.readouterr().out.splitlines() == written
    assert len(set(written)) > 1  # the order shows


def test_progress_on_a_terminal(abs_model):
    """stderr a terminal: lines done, lines/s and the time left, on one line that is redrawn."""
    model, infile = abs_model
    head = scratch_dir("cli_stream") / "head.txt"
    head.write_text("".join(infile.read_text().splitlines(keepends=True)[:40]))
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal 120 columns wide
    process = subprocess.Popen([*TRANSLATE, "--model", str(model), "--batch-size", "4", "--max-new-tokens", "4",
                                str(head)], stdout=subprocess.PIPE, stderr=follower, env=ENV)
    os.close(follower)
    shown = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        try:
            chunk = os.read(leader, 4096) if ready else b""
        except OSError:  # the terminal closed: the process ended
            chunk = b""
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0
    assert len(out.decode().splitlines()) == 40
    shown = shown.decode()
    assert "/40 [" in shown and " lines/s]" in shown and "<" in shown, shown  # n/total [elapsed<left, rate]


def test_reference_prints_bleu_and_chrf(capsys):
    out, _ = trained_model(DEP)
    data, work = synthetic_corpus(), scratch_dir("cli_reference")
    (work / "in.txt").write_text("".join((data / "dev.src").read_text().splitlines(keepends=True)[:3]))
    parsed = preparsed(work, range(3))
    translate = ["translate", "--model", str(out), "--max-new-tokens", "6", *parsed, str(work / "in.txt")]
    capsys.readouterr()
    assert main(translate) == 0
    (work / "ref.txt").write_text(capsys.readouterr().out)
    assert main([*translate, "--reference", str(work / "ref.txt")]) == 0
    done = capsys.readouterr()
    assert done.out == (work / "ref.txt").read_text()
    assert done.err == ("hf-syntax-mt translate: BLEU 100.00, chrF 100.00 (nrefs:1|case:mixed|eff:no|tok:13a|"
                        f"smooth:exp|version:{__import__('sacrebleu').__version__}) against {work / 'ref.txt'}\n")
    (work / "short.txt").write_text("one line\n")
    assert main([*translate, "--reference", str(work / "short.txt")]) == 2
    assert capsys.readouterr().err == f"hf-syntax-mt translate: --reference {work / 'short.txt'} has 1 lines for 3 input lines\n"
    assert main([*translate, "--reference", str(work / "ref.txt"), "--bleu-tokenize", "spaces"]) == 2
    assert capsys.readouterr().err.startswith("hf-syntax-mt translate: --bleu-tokenize spaces: expected one of ")


def preparsed(work, sentences, edit=None, trees=None) -> list[str]:
    """--conllu / --trees files holding the dev sentences numbered `sentences` (0-based), in that order; `edit`
    changes the CoNLL-U blocks, `trees` replaces the trees (one per sentence)."""
    data = synthetic_corpus()
    blocks = (data / "dev.src.conllu").read_text().strip("\n").split("\n\n")
    dev_trees = (data / "dev.src.tree").read_text().splitlines()
    chosen = [blocks[i] for i in sentences]
    if edit is not None:
        chosen = edit(chosen)
    (work / "in.conllu").write_text("\n\n".join(chosen) + "\n\n")
    (work / "in.tree").write_text("\n".join(trees or [dev_trees[i] for i in sentences]) + "\n")
    return ["--conllu", str(work / "in.conllu"), "--trees", str(work / "in.tree")]


def test_conllu_sentences_go_with_the_lines_by_position(capsys):
    """A repeated line gets its own sentence (a bad parse of the second copy fails that line, not the other);
    a sentence whose text is not its line's, a tree whose leaves are not the words, and a tree that does not fit
    its sentence fail their lines with a message that says so (a tree is called a tree, not a CoNLL-U sentence)."""
    out, _ = trained_model(DEP)
    work = scratch_dir("cli_position")
    dev = (synthetic_corpus() / "dev.src").read_text().splitlines()
    trees = (synthetic_corpus() / "dev.src.tree").read_text().splitlines()
    (work / "in.txt").write_text("\n".join([dev[0], dev[1], "", dev[0], dev[2]]) + "\n")
    translate = ["translate", "--model", str(out), "--max-new-tokens", "6", str(work / "in.txt")]
    capsys.readouterr()
    assert main([*translate, *preparsed(work, [0, 1, 0, 2])]) == 0
    good = capsys.readouterr()
    assert good.err == "hf-syntax-mt translate: line 3: empty input line (empty output line)\n"
    first, second, _, again, third = good.out.splitlines()
    assert first == again and all((first, second, third))

    def cycle_in_the_third(blocks):  # the second copy of line 1's sentence: "no <- train <- no"
        blocks[2] = blocks[2].replace("2\ttrain\ttrain\tNOUN\tNN\t_\t3\t", "2\ttrain\ttrain\tNOUN\tNN\t_\t1\t")
        return blocks

    assert main([*translate, *preparsed(work, [0, 1, 0, 2], edit=cycle_in_the_third)]) == 0
    done = capsys.readouterr()
    assert done.out.splitlines() == [first, second, "", "", third]
    assert done.err.splitlines()[1] == ("hf-syntax-mt translate: line 4: could not parse: CoNLL-U sentence 3 (sent_id "
                                        "dev-1): the heads form a cycle through words 1 -> 2 -> 1 (empty output line)")

    assert main([*translate, *preparsed(work, [0, 2, 0, 1])]) == 0  # sentences 2 and 4 swapped
    done = capsys.readouterr()
    assert done.out.splitlines() == [first, "", "", again, ""]
    assert done.err.splitlines()[0] == (f"hf-syntax-mt translate: line 2: CoNLL-U sentence 2 is {dev[2]!r}, not this "
                                        "line's text: its words and the text disagree (empty output line)")

    other_leaves = trees[1].replace("(NN song)", "(NN poem)")
    assert main([*translate, *preparsed(work, [0, 1, 0, 2], trees=[trees[0], other_leaves, trees[0], trees[2]])]) == 0
    done = capsys.readouterr()
    assert done.out.splitlines() == [first, "", "", again, third]
    assert done.err.splitlines()[0] == ("hf-syntax-mt translate: line 2: tree 2 has the leaves 'her tiny poem that "
                                        "smiled arrived .', not the words of CoNLL-U sentence 2 (empty output line)")

    too_few = "(ROOT (S (NP (DT her)) (. .)))"
    assert main([*translate, *preparsed(work, [0, 1, 0, 2], trees=[trees[0], too_few, trees[0], trees[2]])]) == 0
    done = capsys.readouterr()
    assert done.out.splitlines() == [first, "", "", again, third]
    assert done.err.splitlines()[0] == ("hf-syntax-mt translate: line 2: could not parse: tree 2 (the constituency "
                                        "tree of CoNLL-U sentence 2, sent_id dev-2): 2 leaves for the sentence's 7 "
                                        "words (empty output line)")


def test_conllu_with_another_number_of_sentences_is_refused(capsys):
    out, _ = trained_model(DEP)
    work = scratch_dir("cli_position")
    dev = (synthetic_corpus() / "dev.src").read_text().splitlines()
    (work / "in.txt").write_text("\n".join([dev[0], "", dev[1]]) + "\n")
    parsed = preparsed(work, [0, 1, 2])
    capsys.readouterr()
    assert main(["translate", "--model", str(out), *parsed, str(work / "in.txt")]) == 2
    assert capsys.readouterr().err == (f"hf-syntax-mt translate: --conllu {work / 'in.conllu'} has 3 sentences but the "
                                       "input has 2 lines that are not blank: one sentence per such line, in the same "
                                       "order\n")


def test_translate_into_a_pipe_that_closes_stops_quietly(abs_model):
    """`hf-syntax-mt translate ... | head -3`: when the reader goes away the command stops without a word on stderr,
    with cat's status (128 + SIGPIPE), not 'error: [Errno 32] Broken pipe' and 2."""
    model, infile = abs_model
    done = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" | head -3', "bash", *TRANSLATE, "--model", str(model),
                           "--batch-size", "4", "--max-new-tokens", "8", str(infile)],
                          capture_output=True, text=True, env=ENV, timeout=300)
    assert len(done.stdout.splitlines()) == 3
    assert done.stderr == ""
    assert done.returncode == 128 + signal.SIGPIPE


def test_an_output_stopped_by_a_signal_is_continued_to_the_full_translation(abs_model, capsys, tmp_path):
    """`--output FILE` stopped by SIGINT says how to go on; the same command with `--continue` translates the lines
    after those FILE holds and appends them: FILE is then the translation of the whole input, line for line, as an
    uninterrupted run writes it (with `--scores` too, whose index goes on counting)."""
    model, infile = abs_model
    options = ["--model", str(model), "--batch-size", "4", "--max-new-tokens", "8"]
    head = tmp_path / "in.txt"  # 200 lines: enough for a stop midway, few enough to finish fast
    head.write_text("".join(infile.read_text().splitlines(keepends=True)[:200]))
    out = tmp_path / "out.txt"
    process = subprocess.Popen([*TRANSLATE, *options, "--output", str(out), str(head)], stderr=subprocess.PIPE, env=ENV)
    try:
        while not out.is_file() or out.stat().st_size == 0:  # the first batch is written
            assert process.poll() is None, process.stderr.read().decode()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    kept = out.read_text().splitlines()
    assert process.returncode == 130 and 4 <= len(kept) < 200, err.decode()
    assert err.decode().rstrip().endswith("; the same command with --continue translates the rest")
    capsys.readouterr()
    assert main(["translate", *options, "--output", str(out), "--continue", str(head)]) == 0
    assert (f"holds the translations of the first {len(kept)} of 200 input lines: translating the rest"
            in capsys.readouterr().err)
    assert main(["translate", *options, str(head)]) == 0
    assert out.read_text() == capsys.readouterr().out
    scored = tmp_path / "scored.txt"
    assert main(["translate", *options, "--scores", "--output", str(scored), str(head)]) == 0
    whole = scored.read_text()
    scored.write_text("".join(whole.splitlines(keepends=True)[:8]))  # two whole batches: the same batches after
    assert main(["translate", *options, "--scores", "--output", str(scored), "--continue", str(head)]) == 0
    assert scored.read_text() == whole and whole.splitlines()[8].startswith("8 ||| ")


@pytest.mark.parametrize("held, options, message", [
    ("a\nb\n", [], "already holds translations: --continue translates the input lines after them and appends, "
                   "--overwrite replaces them"),
    ("a\nb", ["--continue"], "ends in the middle of a line (a write cut short)"),
    ("a\n" * 7, ["--continue"], "has 7 lines, which are not the translations of the first input lines (1 a line with "
                                "--n-best 1, 6 input lines)"),
    ("a\n" * 3, ["--continue", "--n-best", "2", "--beams", "2"], "has 3 lines, which are not the translations"),
    ("", ["--continue", "--overwrite"], "choose one"),
])
def test_an_output_that_is_not_a_prefix_of_this_inputs_translation_is_refused_and_kept(tmp_path, capsys, held, options,
                                                                                        message):
    model = trained_model("transformer_abs")[0]
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in (synthetic_corpus() / "dev.src").read_text().splitlines()))
    out = tmp_path / "out.txt"
    out.write_text(held)
    capsys.readouterr()
    assert main(["translate", "--model", str(model), "--output", str(out), *options, str(source)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("hf-syntax-mt translate: ") and message in line, line
    assert out.read_text() == held
    assert main(["translate", "--model", str(model), "--output", str(out), "--overwrite", "--max-new-tokens", "4",
                 str(source)]) == 0
    assert len(out.read_text().splitlines()) == 6
