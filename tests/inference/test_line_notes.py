"""What a line is and what the output says of it, alike in the pipeline, `translate` and the page (issue 109): format
characters and byte-order marks read as spaces (a line of them is an empty line), subwords the model does not know
counted in a note, and a line the parser reads as several sentences noted."""

import pytest
from transformers import pipeline

import hf_syntax_mt.inference.pipeline  # noqa: F401  (registers "syntax-translation")
from hf_syntax_mt.app import read_sentences
from hf_syntax_mt.cli import main
from hf_syntax_mt.syntax import GrammarAnnotator
from training_helpers import trained_model

SENTENCE = "your village found this doctor ."
DEP = "transformer_dep_rel+transformer_dbsa+transformer_sla"


@pytest.fixture(scope="module")
def abs_model():
    folder = str(trained_model("transformer_abs")[0])
    return folder, pipeline("syntax-translation", model=folder)


def test_format_characters_read_as_spaces(abs_model):
    _, translate = abs_model
    lines = [SENTENCE, "\ufeff" + SENTENCE, SENTENCE.replace(" ", "\x0c", 1), SENTENCE.replace(" ", " \u200b", 2),
             "\u200b", "\ufeff\u200c \u2028"]
    outputs = translate(lines, num_beams=1, max_new_tokens=6)
    assert [out["translation_text"] for out in outputs[1:4]] == [outputs[0]["translation_text"]] * 3
    assert all("error" not in out and "warning" not in out for out in outputs[:4])
    assert [out.get("error") for out in outputs[4:]] == ["empty input line"] * 2


def test_translate_reads_a_files_lines_as_the_pipeline_and_the_page_do(abs_model, tmp_path, capsys):
    """A byte-order mark that starts a line in mid-file, a form feed inside a line, a line that is one zero-width
    space: `translate` answers as for the plain line, the plain line, and an empty line; the page reads the same
    text as the same sentences, the empty one left out."""
    folder, _ = abs_model
    text = f"{SENTENCE}\n\ufeff{SENTENCE}\n{SENTENCE.replace(' ', chr(12), 1)}\n\u200b\n"
    (tmp_path / "input.txt").write_bytes(text.encode("utf-8"))
    capsys.readouterr()
    assert main(["translate", "--model", folder, "--beams", "1", "--max-new-tokens", "6",
                 str(tmp_path / "input.txt")]) == 0
    printed = capsys.readouterr()
    lines = printed.out.split("\n")[:-1]
    assert len(lines) == 4 and lines[0] and lines[1] == lines[0] == lines[2] and lines[3] == ""
    assert "line 4: empty input line" in printed.err
    assert read_sentences(text) == [SENTENCE] * 3


def test_unknown_subwords_are_counted_in_a_note(abs_model, caplog):
    """Capitals to a model of a lowercase corpus: a few unknown subwords get their count, a line of mostly unknown
    ones the word that its translation says little; a line the model knows, no note."""
    _, translate = abs_model
    known, capital, unknown = translate([SENTENCE, "Your village found this Doctor .", "ЖЖЖ ЖЖЖ"], max_new_tokens=4)
    assert "warning" not in known
    count, total = capital["warning"].split(" ")[0:4:3]
    assert 1 <= int(count) < int(total) / 2
    assert capital["warning"] == (f"{count} of its {total} subwords are unknown to this model (<unk>: characters "
                                  "it was not trained on)")
    assert unknown["warning"].endswith("so its translation says little")
    assert "line 2: " + capital["warning"] + " (translated anyway)" in caplog.text


def test_several_sentences_on_a_line_are_noted():
    """The synthetic grammar ends a sentence at each full stop: two on one line get a note, in the pipeline's
    output and on the page."""
    folder = str(trained_model(DEP)[0])
    translate = pipeline("syntax-translation", model=folder, annotator=GrammarAnnotator())
    one, two = translate([SENTENCE, SENTENCE + " " + SENTENCE], max_new_tokens=4)
    assert "warning" not in one
    assert two["warning"] == ("the parser found 2 sentences in this line, but the model was trained on one sentence "
                              "a line and may leave some out: give each sentence its own line")
