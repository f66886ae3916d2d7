"""Input lines (`syntax.lines`): where a line ends, and SentencePiece's NMT whitespace and control-character rule."""

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from hf_syntax_mt.syntax import normalize_line, split_lines
from hf_syntax_mt.syntax.lines import NMT_REMOVED, NMT_SPACES

LINE_BREAKERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@given(st.lists(st.sampled_from(list("ab 猫") + list(LINE_BREAKERS) + ["\r\n"])).map("".join))
def test_lines_end_where_a_files_bytes_end_them(text):
    """As `hf-syntax-mt translate` splits a file (bytes.splitlines: \\n, \\r\\n, \\r), not as str.splitlines."""
    assert split_lines(text) == [line.decode("utf-8") for line in text.encode("utf-8").splitlines()]


def test_a_form_feed_or_a_line_separator_is_no_line_end():
    assert split_lines("the dog\x0cslept .\u2028x\r\ny\rz\n") == ["the dog\x0cslept .\u2028x", "y", "z"]
    assert split_lines("") == [] and split_lines("\n") == [""] and split_lines("a\n\nb") == ["a", "", "b"]


def test_the_rule_written_out():
    """Each character SentencePiece's nmt_nfkc makes a space or removes (its builder's list), and nothing else."""
    spaces = {0x09, 0x0A, 0x0C, 0x0D, 0x1680, 0x200B, 0x200C, 0x200E, 0x200F, 0x2028, 0x2029, 0xFEFF}
    removed = {*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, 0x8F, 0x9F}
    assert set(map(ord, NMT_SPACES)) == spaces and set(map(ord, NMT_REMOVED)) == removed
    for code in range(0x3100):
        character = chr(code)
        expected = " " if code in spaces else "" if code in removed else character
        assert normalize_line(character) == expected, f"U+{code:04X}"


def test_what_it_makes_of_lines():
    assert normalize_line("\u200b") == " " and not normalize_line("\u200b\ufeff\u200c").strip()
    assert normalize_line("\ufeffthe dog slept .") == " the dog slept ."
    assert normalize_line("the\x0cdog\x07 slept .") == "the dog slept ."
    assert normalize_line("私は\u200b本を読んだ。\x00") == "私は 本を読んだ。\x00"  # NUL is left to be refused
    assert normalize_line("e\u0301 ～ ｱ\u200d") == "e\u0301 ～ ｱ\u200d"  # no NFKC, the zero-width joiner kept
    assert unicodedata.category("\u200d") == "Cf"
