"""Input lines as NMT toolkits read them: where a line ends, and the characters that are not text in it.

`split_lines` ends a line at \\n, \\r\\n and \\r only (as editors number lines, and as `hf-syntax-mt translate`
reads a file), so a form feed or a Unicode line separator inside a line does not make two sentences of it.
`normalize_line` applies the whitespace and control-character part of SentencePiece's `nmt_nfkc` rule (not its
NFKC folding, which would change what a trained tokenizer reads):

- tab, form feed, carriage return, line feed, Ogham space, zero-width space, zero-width non-joiner, left-to-right
  and right-to-left marks, line and paragraph separators and the byte-order mark (U+FEFF, also a zero-width
  no-break space) become a space;
- the other C0 control characters (U+0001–U+0008, U+000B, U+000E–U+001F) and U+007F, U+008F, U+009F are removed.

A line that is only such characters is then blank, which the pipeline answers as an empty input line. NUL and
U+FFFD (the mark of a broken encoding) are left for the callers to refuse by name.
"""

from __future__ import annotations

import re

NMT_SPACES = "\t\n\x0c\r\u1680\u200b\u200c\u200e\u200f\u2028\u2029\ufeff"
"""Characters `normalize_line` turns into a space."""
NMT_REMOVED = "".join(map(chr, [*range(0x01, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F, 0x8F, 0x9F]))
"""Characters `normalize_line` removes."""
_NMT_TABLE = str.maketrans({**dict.fromkeys(NMT_SPACES, " "), **dict.fromkeys(NMT_REMOVED)})
_LINE_END = re.compile(r"\r\n|\r|\n")


def normalize_line(text: str) -> str:
    """`text` with NMT's whitespace-like characters made spaces and its control characters removed (module doc)."""
    return text.translate(_NMT_TABLE)


def split_lines(text: str) -> list[str]:
    """The lines of `text`, ended at \\n, \\r\\n or \\r only (a last line end starts no empty line), as `bytes.
    splitlines` splits a file: not at the form feed, vertical tab, file separators, U+0085, U+2028 or U+2029 that
    `str.splitlines` also ends lines at."""
    lines = _LINE_END.split(text)
    return lines[:-1] if lines and lines[-1] == "" else lines


__all__ = ["NMT_REMOVED", "NMT_SPACES", "normalize_line", "split_lines"]
