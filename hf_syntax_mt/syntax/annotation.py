"""The parser-independent annotation of one input text, and conversions into it.

Every parser path (stanza live or from CoNLL-U, spaCy/GiNZA, pre-parsed CoNLL-U files) ends in an
``Annotation``; alignment to subwords and feature computation only ever see this class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from .distance import (
    BINARIZATIONS,
    SENTENCE_DISTANCE,
    dependency_to_distance,
    syntactic_distance,
    tree_leaves,
    tree_to_bracketed,
)
from .trees import reroute_heads, validate_heads

Span = Optional[tuple[int, int]]
DISTANCE_SOURCES = ("auto", "constituency", "dependency", "flat")


@dataclass
class Annotation:
    """Words of one input text (possibly several sentences) with their syntax.

    Attributes:
        text: the original text; ``spans`` index into it.
        words: word forms as the parser produced them.
        spans: ``(start, end)`` character span of each word in ``text``, or None when the word
            cannot be located (e.g. the 2nd word of a contracted token such as "du" -> "de le").
        heads: 0-based head of each word over the whole text; each sentence root points to itself.
        deprels: dependency labels (or None).
        sentence_ids: sentence index of each word (0, 0, ..., 1, 1, ...).
        trees: one bracketed constituency tree per sentence whose leaves are that sentence's
            words, or None if the parser made none.
    """

    text: str
    words: list[str]
    spans: list[Span]
    heads: list[int]
    deprels: Optional[list[str]] = None
    sentence_ids: list[int] = field(default=None)
    trees: Optional[list[str]] = None

    def __post_init__(self):
        n = len(self.words)
        if self.sentence_ids is None:
            self.sentence_ids = [0] * n
        for name in ("spans", "heads", "sentence_ids") + (("deprels",) if self.deprels is not None else ()):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Annotation has {n} words but {len(getattr(self, name))} {name}")
        self.spans = [tuple(s) if s is not None else None for s in self.spans]
        for i in range(1, n):
            if self.sentence_ids[i] < self.sentence_ids[i - 1]:
                raise ValueError("sentence_ids must be non-decreasing")
        for s in range(self.num_sentences):
            idx = [i for i in range(n) if self.sentence_ids[i] == s]
            if not idx:
                raise ValueError(f"sentence {s} has no words")
            local = []
            for i in idx:
                if not idx[0] <= self.heads[i] <= idx[-1]:
                    raise ValueError(f"word {i} ({self.words[i]!r}) has head {self.heads[i]} outside its sentence {s}")
                local.append(self.heads[i] - idx[0])
            try:
                validate_heads(local, single_tree=True)
            except ValueError as err:
                raise ValueError(f"sentence {s} ({' '.join(self.words[i] for i in idx)!r}): {err}") from None
        if self.trees is not None:
            self.trees = [t if isinstance(t, str) else tree_to_bracketed(t) for t in self.trees]
            if len(self.trees) != self.num_sentences:
                raise ValueError(f"{len(self.trees)} constituency trees for {self.num_sentences} sentences")
            for s, tree in enumerate(self.trees):
                n_words, n_leaves = self.sentence_ids.count(s), len(tree_leaves(tree))
                if n_leaves != n_words:
                    raise ValueError(
                        f"constituency tree of sentence {s} has {n_leaves} leaves but the sentence has {n_words} words"
                    )

    @property
    def num_sentences(self) -> int:
        return self.sentence_ids[-1] + 1 if self.sentence_ids else 0

    def word_distances(self, source: str = "auto", binarize: str = "none") -> list[float]:
        """Word-level syntactic distances (one per gap between consecutive words).

        ``source``: ``"constituency"`` (Algorithm 1 on ``trees``), ``"dependency"``
        (``dependency_to_distance``), ``"auto"`` (constituency when trees exist), or ``"flat"``:
        the distances of a flat tree, one node over all words of a sentence (every gap 1), a
        control without syntax for localized attention. Gaps between sentences get
        ``SENTENCE_DISTANCE``. ``binarize`` ("none", "right", "left"): binarise the constituency
        trees, or the constituents derived from the dependency tree, as NLTK's
        ``chomsky_normal_form(factor=...)`` before Algorithm 1 (seed 003's code: "right"); the flat
        control stays flat (binarised it would be a right- or left-branching tree, not "no syntax").
        """
        if binarize not in BINARIZATIONS:
            raise ValueError(f"binarize must be one of {BINARIZATIONS}, not {binarize!r}")
        if source not in DISTANCE_SOURCES:
            raise ValueError(f"source must be one of {DISTANCE_SOURCES}, not {source!r}")
        if source == "constituency" and self.trees is None:
            raise ValueError("no constituency trees in this annotation; use source='dependency'")
        use_trees = self.trees is not None and source in ("auto", "constituency")
        out: list[float] = []
        start = 0
        for s in range(self.num_sentences):
            end = start
            while end < len(self.words) and self.sentence_ids[end] == s:
                end += 1
            if source == "flat":
                dist = [1] * (end - start - 1)
            elif use_trees:
                dist = syntactic_distance(self.trees[s], binarize)
            else:
                dist = dependency_to_distance([h - start for h in self.heads[start:end]], binarize)
            if s > 0:
                out.append(SENTENCE_DISTANCE)
            out.extend(float(x) for x in dist)
            start = end
        return out


def empty_annotation(text: str) -> Annotation:
    """The annotation of an empty or whitespace-only text: no words, no sentences."""
    return Annotation(text=text, words=[], spans=[], heads=[], deprels=[], sentence_ids=[], trees=None)


def locate_words(text: str, words: Sequence[str], start: int = 0) -> list[Span]:
    """Character spans of ``words`` found left to right in ``text`` (whitespace may separate them).

    A word that does not appear at the current position (after skipping whitespace) gets None and
    the search position does not move, so one unmatched word never shifts the others.
    """
    spans: list[Span] = []
    pos = start
    for w in words:
        p = pos
        while p < len(text) and text[p].isspace():
            p += 1
        if w and text.startswith(w, p):
            spans.append((p, p + len(w)))
            pos = p + len(w)
        else:
            spans.append(None)
    return spans


def drop_words(annotation: Annotation, keep: Sequence[bool]) -> Annotation:
    """Remove words (e.g. whitespace tokens), re-attaching their dependents to the nearest kept
    ancestor. If a sentence loses its root, its first orphan becomes the root and the other
    orphans attach to it, so every sentence keeps exactly one root."""
    heads = reroute_heads(annotation.heads, keep)
    first_root = {}
    for i, h in enumerate(heads):
        if h == i:
            s = annotation.sentence_ids[i]
            heads[i] = first_root.setdefault(s, i)
    new_index = {}
    for i, k in enumerate(keep):
        if k:
            new_index[i] = len(new_index)
    idx = list(new_index)
    sent_map = {s: j for j, s in enumerate(sorted({annotation.sentence_ids[i] for i in idx}))}
    trees = None  # dropping leaves invalidates constituency trees
    if annotation.trees is not None and all(keep):
        trees = annotation.trees
    return Annotation(
        text=annotation.text,
        words=[annotation.words[i] for i in idx],
        spans=[annotation.spans[i] for i in idx],
        heads=[new_index[heads[i]] for i in idx],
        deprels=None if annotation.deprels is None else [annotation.deprels[i] for i in idx],
        sentence_ids=[sent_map[annotation.sentence_ids[i]] for i in idx],
        trees=trees,
    )


def annotation_from_stanza(doc, text: Optional[str] = None) -> Annotation:
    """Convert a ``stanza.Document`` (from a live ``Pipeline`` or ``CoNLL.conll2doc``).

    Heads: stanza's 1-based ``word.head`` (0 = root) become 0-based over the whole text with the
    root pointing to itself. Spans come from the tokens' ``start_char``/``end_char`` when present,
    otherwise the tokens are located in the text (``locate_words``). The words of a multi-word
    token ("du" -> "de le") share its span through the first word only. Constituency trees come
    from ``sentence.constituency`` when every sentence has one.
    """
    if text is None:
        text = doc.text
    if text is None:  # CoNLL-U without a document text: rebuild it from the tokens
        parts = []
        for sent in doc.sentences:
            for tok in sent.tokens:
                parts.append(tok.text + (tok.spaces_after if tok.spaces_after is not None else " "))
        text = "".join(parts).rstrip()
    words, spans, heads, deprels, sentence_ids, trees = [], [], [], [], [], []
    pos = 0
    for s, sent in enumerate(doc.sentences):
        offset = len(words)
        for tok in sent.tokens:
            if tok.start_char is not None and tok.end_char is not None:
                span = (tok.start_char, tok.end_char)
            else:
                span = locate_words(text, [tok.text], pos)[0]
            if span is not None:
                pos = span[1]
            for k, word in enumerate(tok.words):
                words.append(word.text)
                spans.append(span if k == 0 else None)
                index = offset + word.id - 1
                heads.append(index if word.head in (0, None) else offset + word.head - 1)
                deprels.append(word.deprel)
                sentence_ids.append(s)
        tree = getattr(sent, "constituency", None)
        trees.append(None if tree is None else tree_to_bracketed(tree))
    return Annotation(
        text=text,
        words=words,
        spans=spans,
        heads=heads,
        deprels=deprels,
        sentence_ids=sentence_ids,
        trees=None if not trees or any(t is None for t in trees) else trees,
    )


def annotation_from_spacy(doc) -> Annotation:
    """Convert a spaCy ``Doc`` (e.g. from GiNZA ``ja_ginza``): one sentence per ``doc.sents``.

    Whitespace tokens (``token.is_space``) are removed and their dependents re-attached to the
    nearest kept ancestor (``drop_words``).
    """
    if len(doc) and not doc.has_annotation("DEP"):
        raise ValueError("the spaCy Doc has no dependency parse: the pipeline needs an enabled 'parser' component")
    words, spans, heads, deprels, sentence_ids = [], [], [], [], []
    sent_of = {}
    for s, sent in enumerate(doc.sents):
        for tok in sent:
            sent_of[tok.i] = s
    for tok in doc:
        words.append(tok.text)
        spans.append((tok.idx, tok.idx + len(tok.text)))
        heads.append(tok.head.i)
        deprels.append(tok.dep_)
        sentence_ids.append(sent_of[tok.i])
    keep = [not w.isspace() and w != "" for w in words]
    full = Annotation(doc.text, words, spans, heads, deprels, sentence_ids)
    return full if all(keep) else drop_words(full, keep)


def to_conllu(annotation: Annotation, sent_id: Optional[str] = None) -> str:
    """``annotation`` as CoNLL-U (the inverse of ``read_conllu``): one block per sentence with
    ``# sent_id`` (``<sent_id>`` or ``<sent_id>.<k>`` for several sentences) and ``# text``, and ID,
    FORM, HEAD (1-based, 0 = root) and DEPREL (``root`` / ``dep`` when the parse has no labels)."""
    blocks = []
    for s in range(annotation.num_sentences):
        idx = [i for i, sid in enumerate(annotation.sentence_ids) if sid == s]
        spans = [annotation.spans[i] for i in idx if annotation.spans[i] is not None]
        text = annotation.text[spans[0][0]: spans[-1][1]] if spans else " ".join(annotation.words[i] for i in idx)
        lines = []
        if sent_id is not None:
            lines.append(f"# sent_id = {sent_id if annotation.num_sentences == 1 else f'{sent_id}.{s + 1}'}")
        lines.append(f"# text = {text}")
        for k, i in enumerate(idx):
            head = 0 if annotation.heads[i] == i else annotation.heads[i] - idx[0] + 1
            if annotation.deprels is not None:
                deprel = annotation.deprels[i]
            else:
                deprel = "root" if head == 0 else "dep"
            following = idx[k + 1] if k + 1 < len(idx) else None
            glued = (following is not None and annotation.spans[i] is not None and annotation.spans[following] is not None
                     and annotation.spans[i][1] == annotation.spans[following][0])
            misc = "SpaceAfter=No" if glued else "_"
            lines.append("\t".join([str(k + 1), annotation.words[i], "_", "_", "_", "_", str(head), deprel, "_", misc]))
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def _conllu_blocks(source: Union[str, Path]) -> list[list[str]]:
    if isinstance(source, str) and "\n" not in source and "\t" not in source:
        source = Path(source)  # a path, not CoNLL-U text
    if isinstance(source, Path):
        if not source.is_file():
            raise FileNotFoundError(f"CoNLL-U file not found: {source}")
        source = source.read_text(encoding="utf-8")
    blocks, cur = [], []
    for line in source.splitlines():
        if line.strip():
            cur.append(line.rstrip("\n"))
        elif cur:
            blocks.append(cur)
            cur = []
    if cur:
        blocks.append(cur)
    return blocks


class ConlluSentenceError(ValueError):
    """A CoNLL-U sentence that cannot be read or is not one tree. The message names the sentence by its
    1-based position in the file (``number``; and its ``# sent_id`` if it has one) and its words by their
    IDs in the file; ``text`` is the sentence's text, None where it could not be read."""

    def __init__(self, message: str, number: int, text: Optional[str] = None):
        super().__init__(message)
        self.number = number
        self.text = text


def _tree_error(heads: Sequence[int], ids: Sequence[str]) -> Optional[str]:
    """Why the 0-based `heads` (root -> itself) of the words with CoNLL-U IDs `ids` are not one tree, or None."""
    roots = [i for i, head in enumerate(heads) if head == i]
    for start in range(len(heads)):
        path, i = [], start
        while heads[i] != i and i not in path:
            path.append(i)
            i = heads[i]
        if heads[i] != i:
            cycle = path[path.index(i):]
            return f"the heads form a cycle through words {' -> '.join(ids[j] for j in cycle + cycle[:1])}"
    if len(roots) != 1:
        return f"expected exactly one root (head 0), found {len(roots)}: words {', '.join(ids[i] for i in roots)}"
    return None


def _read_conllu_sentence(block: Sequence[str], number: int, tree) -> Annotation:
    """One CoNLL-U sentence (`number`: its 1-based position in the file) as an `Annotation`."""
    text, sent_id = None, None

    def error(message: str) -> ConlluSentenceError:
        where = f"CoNLL-U sentence {number}" + (f" (sent_id {sent_id})" if sent_id else "")
        return ConlluSentenceError(f"{where}: {message}", number, text)

    tokens = []  # (form, space_after, [(id, form, head, deprel)])
    mwt_end = 0
    for line in block:
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if key.strip() == "text":
                text = value.strip()
            elif key.strip() == "sent_id":
                sent_id = value.strip()
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise error(f"expected 10 tab-separated columns in {line!r}")
        tid, form, head, deprel, misc = cols[0], cols[1], cols[6], cols[7], cols[9]
        space_after = "SpaceAfter=No" not in misc.split("|")
        if "." in tid:
            continue
        if "-" in tid:
            mwt_end = int(tid.split("-")[1])
            tokens.append((form, space_after, []))
            continue
        try:
            word = (tid, form, int(head), deprel)
        except ValueError:
            raise error(f"head {head!r} of word {tid} is not an int") from None
        if int(tid) <= mwt_end:
            tokens[-1][2].append(word)
        else:
            tokens.append((form, space_after, [word]))
    if not tokens:
        raise error("no word lines")
    if text is None:
        text = "".join(form + (" " if sp else "") for form, sp, _ in tokens).rstrip()
    token_spans = locate_words(text, [form for form, _, _ in tokens])
    ids, words, spans, heads, deprels = [], [], [], [], []
    n = sum(len(ws) for _, _, ws in tokens)
    for (form, _, ws), span in zip(tokens, token_spans):
        for k, (tid, wform, head, deprel) in enumerate(ws):
            if not 0 <= head <= n:
                raise error(f"word {tid} ({wform!r}) has head {head}, outside 0..{n}")
            ids.append(tid)
            words.append(wform)
            spans.append(span if k == 0 else None)
            heads.append(len(heads) if head == 0 else head - 1)
            deprels.append(deprel)
    problem = _tree_error(heads, ids)
    if problem is not None:
        raise error(problem)
    try:
        annotation = Annotation(text=text, words=words, spans=spans, heads=heads, deprels=deprels)
    except ValueError as err:
        raise error(str(err)) from None
    if tree is None:
        return annotation
    where = f"tree {number} (the constituency tree of CoNLL-U sentence {number}" + (f", sent_id {sent_id})" if sent_id
                                                                                       else ")")
    try:
        leaves = tree_leaves(tree)
    except ValueError as err:
        raise ConlluSentenceError(f"{where}: {err}", number, text) from None
    if len(leaves) != len(words):
        raise ConlluSentenceError(f"{where}: {len(leaves)} leaves for the sentence's {len(words)} words", number, text)
    annotation.trees = [tree if isinstance(tree, str) else tree_to_bracketed(tree)]
    return annotation


def read_conllu_with_errors(source: Union[str, Path],
                            trees: Optional[Sequence] = None) -> tuple[list[Annotation], list[ConlluSentenceError]]:
    """Like `read_conllu`, but a sentence that cannot be read or is not one tree is left out and
    returned as a `ConlluSentenceError`: (the valid sentences, the errors of the others)."""
    sentences = read_conllu_sentences(source, trees)
    return ([a for a in sentences if isinstance(a, Annotation)],
            [err for err in sentences if isinstance(err, ConlluSentenceError)])


def read_conllu_sentences(source: Union[str, Path],
                          trees: Optional[Sequence] = None) -> list[Union[Annotation, ConlluSentenceError]]:
    """Every sentence of a CoNLL-U file (or text) in file order: its `Annotation`, or the
    `ConlluSentenceError` that says why it cannot be read or is not one tree (as `read_conllu`); for
    matching the sentences to input lines by position. `trees`: one bracketed tree per sentence; a tree
    that cannot be read or has another number of leaves than its sentence has words is its sentence's
    error, named as "tree N"."""
    blocks = _conllu_blocks(source)
    if trees is not None and len(trees) != len(blocks):
        raise ValueError(f"{len(trees)} trees for {len(blocks)} CoNLL-U sentences")
    sentences = []
    for number, block in enumerate(blocks, 1):
        try:
            sentences.append(_read_conllu_sentence(block, number, None if trees is None else trees[number - 1]))
        except ConlluSentenceError as err:
            sentences.append(err)
    return sentences


def read_conllu(source: Union[str, Path], trees: Optional[Sequence] = None) -> list[Annotation]:
    """Read CoNLL-U (a file path or the text itself) into one ``Annotation`` per sentence.

    CoNLL-U heads are 1-based with 0 = root; they become 0-based with the root pointing to itself.
    The text is the ``# text =`` comment, or the forms joined with spaces honouring
    ``SpaceAfter=No``. Multi-word token lines give the span; empty nodes (``8.1``) are ignored.
    ``trees`` optionally gives one bracketed constituency tree per sentence (e.g. gold PTB).
    A cycle, several roots or a head outside the sentence raise ``ConlluSentenceError`` (a
    ``ValueError``) naming the sentence by its number in the file and its words by their IDs.
    """
    annotations, errors = read_conllu_with_errors(source, trees)
    if errors:
        raise errors[0]
    return annotations


def merge_annotations(annotations: Sequence[Annotation], separator: str = " ") -> Annotation:
    """Join single-text annotations into one multi-sentence annotation (texts joined by ``separator``)."""
    text, words, spans, heads, deprels, sentence_ids, trees = "", [], [], [], [], [], []
    for a in annotations:
        if text:
            text += separator
        shift, offset, s0 = len(text), len(words), (sentence_ids[-1] + 1 if sentence_ids else 0)
        text += a.text
        words += a.words
        spans += [None if sp is None else (sp[0] + shift, sp[1] + shift) for sp in a.spans]
        heads += [h + offset for h in a.heads]
        deprels += a.deprels if a.deprels is not None else [""] * len(a.words)
        sentence_ids += [s + s0 for s in a.sentence_ids]
        trees = None if trees is None or a.trees is None else trees + a.trees
    return Annotation(text, words, spans, heads, deprels, sentence_ids, trees)
