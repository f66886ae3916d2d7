"""Syntactic distance (seed 003, after Shen et al. 2018) and syntactic local ranges.

A constituency tree with n leaves gives a vector d of n - 1 gaps, d_i ranking the height of the
lowest common ancestor of leaves i and i + 1. Trees can be bracketed strings ("(S (NP I) ...)"),
stanza ``Tree`` objects (``.label`` / ``.children``, leaves have no children) or nltk ``Tree``
objects (list subclasses whose leaves are strings).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from .trees import depths, tree_roots

SENTENCE_DISTANCE = 999.0
"""Distance of a gap between two sentences of one input (seed 003)."""

LARGE_DISTANCE = 2000.0
"""Distance of a gap next to a special token, after the last token, and of padding."""


@dataclass
class BracketTree:
    """Minimal constituency tree node: a ``label`` and ``children`` (subtrees or leaf strings)."""

    label: str
    children: list = field(default_factory=list)

    def leaves(self) -> list[str]:
        return [leaf for child in self.children for leaf in _leaves(child)]

    def __str__(self) -> str:
        return tree_to_bracketed(self)


_TOKEN_RE = re.compile(r"\(|\)|[^\s()]+")


def parse_bracketed(text: str) -> BracketTree:
    """Parse one bracketed tree, e.g. ``"(ROOT (S (NP I) (VP swim)))"`` (PTB's ``"( (S ...))"`` too)."""
    tokens = _TOKEN_RE.findall(text)
    if not tokens or tokens[0] != "(":
        raise ValueError(f"not a bracketed tree: {text[:60]!r}")
    stack: list[BracketTree] = []
    root = None
    for pos, tok in enumerate(tokens):
        if tok == "(":
            has_label = pos + 1 < len(tokens) and tokens[pos + 1] not in "()"
            node = BracketTree(label="" if not has_label else None)
            if stack:
                stack[-1].children.append(node)
            elif root is not None:
                raise ValueError(f"more than one tree in {text[:60]!r}")
            else:
                root = node
            stack.append(node)
        elif tok == ")":
            if not stack:
                raise ValueError(f"unbalanced ')' in {text[:60]!r}")
            stack.pop()
        else:
            if not stack:
                raise ValueError(f"leaf {tok!r} outside any bracket in {text[:60]!r}")
            if stack[-1].label is None:
                stack[-1].label = tok
            else:
                stack[-1].children.append(tok)
    if stack:
        raise ValueError(f"unbalanced '(' in {text[:60]!r}")
    return root


def _children(node) -> Optional[list]:
    """Children of a tree node, or None for a leaf (a string or a node without children)."""
    if isinstance(node, str):
        return None
    children = getattr(node, "children", None)
    if children is None and isinstance(node, list):  # nltk.Tree
        children = list(node)
    return list(children) if children else None


def _label(node) -> str:
    label = getattr(node, "label", "")
    return label() if callable(label) else label


def _leaves(node) -> list[str]:
    children = _children(node)
    if children is None:
        return [node if isinstance(node, str) else _label(node)]
    return [leaf for child in children for leaf in _leaves(child)]


def tree_leaves(tree) -> list[str]:
    """The leaf words of a tree (bracketed string or tree object), left to right."""
    return _leaves(parse_bracketed(tree) if isinstance(tree, str) else tree)


def tree_to_bracketed(tree) -> str:
    """Serialize any supported tree object to a one-line bracketed string."""
    children = _children(tree)
    if children is None:
        return tree if isinstance(tree, str) else _label(tree)
    return "(" + " ".join([_label(tree)] + [tree_to_bracketed(c) for c in children]) + ")"


def syntactic_distance(tree) -> list[int]:
    """Seed 003 Algorithm 1: ``d(leaf) = []``, ``d(node) = [d(c_1); nd; d(c_2); ...; nd; d(c_m)]``
    with ``nd = 1 + max`` of all values in the children's vectors (0 if all are empty).

    So ``d_i`` is the height of the lowest common ancestor of leaves i and i + 1 (pre-terminals
    and unary chains do not change it); the result has ``n_leaves - 1`` entries.
    """
    if isinstance(tree, str):
        tree = parse_bracketed(tree)

    def distance(node) -> list[int]:
        children = _children(node)
        if children is None:
            return []
        parts = [distance(c) for c in children]
        nd = 1 + max((max(p) for p in parts if p), default=0)
        out = list(parts[0])
        for p in parts[1:]:
            out.append(nd)
            out.extend(p)
        return out

    return distance(tree)


def dependency_to_distance(heads: Sequence[int]) -> list[float]:
    """Syntactic distance from a dependency tree (SPEC §6, "beyond the paper").

    Each word with its dependents' yields is a constituent: ``c(h) = {h} ∪ c(dependents of h)``,
    with ``height(c(h)) = 0`` for a word without dependents, else ``1 + max height(c(dependent))``.
    The gap between words i and i + 1 gets the height of the constituent of their lowest common
    ancestor in the dependency tree; for a projective tree this equals Algorithm 1 on the derived
    constituency tree. A non-projective tree has discontinuous constituents; the same LCA-height
    definition is used unchanged (it is still well defined and ranks gaps by how high the two
    words are joined). In a forest, a gap between two different trees gets ``SENTENCE_DISTANCE``.
    """
    n = len(heads)
    roots = tree_roots(heads)
    depth = depths(heads, ignore_index=None)
    height = [0] * n
    for i in sorted(range(n), key=lambda i: -depth[i]):
        h = heads[i]
        if h != i:
            height[h] = max(height[h], height[i] + 1)
    out: list[float] = []
    for i in range(n - 1):
        if roots[i] != roots[i + 1]:
            out.append(SENTENCE_DISTANCE)
            continue
        a, b = i, i + 1
        while depth[a] > depth[b]:
            a = heads[a]
        while depth[b] > depth[a]:
            b = heads[b]
        while a != b:
            a, b = heads[a], heads[b]
        out.append(height[a])
    return out


def local_range_mask(distances: Sequence[float]) -> np.ndarray:
    """Seed 003 Algorithm 2 (crisp), 0-based: the syntactic local range of every token.

    ``distances`` are the n - 1 gaps (gap t between tokens t and t + 1); returns a bool (n, n)
    matrix G with ``G[i, b_l : b_r + 1] = True`` where
    ``b_l = max{j + 1 : j < i - 1, d_j > d_{i-1}}`` (0 if none) and
    ``b_r = min{j : j > i, d_j > d_i}`` (n - 1 if none).
    For a per-token ``source_distances`` row (gap after each token), pass ``row[:-1]``.
    """
    d = np.asarray(distances, dtype=np.float64)
    n = len(d) + 1
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        left = 0
        if i >= 1:
            bigger = np.nonzero(d[: max(i - 1, 0)] > d[i - 1])[0]
            if len(bigger):
                left = int(bigger[-1]) + 1
        right = n - 1
        if i <= n - 2:
            bigger = np.nonzero(d[i + 1:] > d[i])[0]
            if len(bigger):
                right = i + 1 + int(bigger[0])
        mask[i, left:right + 1] = True
    return mask


def fill_subword_distances(
    word_distances: Sequence[float],
    word_ids: Sequence[Optional[int]],
    sentence_ids: Optional[Sequence[int]] = None,
) -> list[float]:
    """Per-token distances of the gap AFTER each token (the ``source_distances`` row).

    ``word_distances`` has one entry per gap between consecutive words (``SENTENCE_DISTANCE``
    across sentences, as returned by ``annotation_word_distances``). Gap after token t:
    ``LARGE_DISTANCE`` if t is the last token or t or t + 1 is a special token (word id None);
    ``SENTENCE_DISTANCE`` if the two words are in different sentences; otherwise
    ``1 + (0 if same word else max of the word gaps between them)`` (seed 003: fill 0 inside a
    word, then add 1, so the minimum is 1). Taking the max over the word gaps in between keeps
    the LCA height when words without tokens sit between two tokens.
    """
    n = len(word_ids)
    out = [LARGE_DISTANCE] * n
    for t in range(n - 1):
        a, b = word_ids[t], word_ids[t + 1]
        if a is None or b is None:
            continue
        if sentence_ids is not None and sentence_ids[a] != sentence_ids[b]:
            out[t] = SENTENCE_DISTANCE
        elif a == b:
            out[t] = 1.0
        else:
            lo, hi = min(a, b), max(a, b)
            gap = max(word_distances[lo:hi])
            out[t] = gap if gap >= SENTENCE_DISTANCE else 1.0 + gap
    return out
