"""Syntactic distance (seed 003, after Shen et al. 2018) and syntactic local ranges.

A constituency tree with n leaves gives a vector d of n - 1 gaps, d_i ranking the height of the
lowest common ancestor of leaves i and i + 1. Trees can be bracketed strings ("(S (NP I) ...)"),
stanza ``Tree`` objects (``.label`` / ``.children``, leaves have no children) or nltk ``Tree``
objects (list subclasses whose leaves are strings).

Binarisation (``binarize``): seed 003 prints Algorithm 1 on the tree as parsed, but its authors' code
(LUMIA-Group/distance_transformer) first calls NLTK's ``Tree.chomsky_normal_form()`` (right
factorisation, default arguments), so its published numbers come from binary trees. ``"right"`` /
``"left"`` reproduce NLTK's ``chomsky_normal_form(factor="right" / "left")`` (a node with m > 2 children
becomes a chain of m - 1 binary nodes; unary nodes stay, as NLTK collapses none by default),
``"none"`` keeps the n-ary tree. Fig. 1's ``(S (NP I) (VP swim (PP across (NP the river))) .)`` gives
[5, 3, 2, 1, 4] right-binarised (NLTK: ``(S (NP I) (S|<VP-.> (VP ...) .))``) and [4, 3, 2, 1, 4] n-ary.
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

BINARIZATIONS = ("none", "right", "left")
"""How a tree is binarised before Algorithm 1: not at all, or as NLTK's ``chomsky_normal_form(factor=...)``."""


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


def _check_binarize(binarize: str) -> None:
    if binarize not in BINARIZATIONS:
        raise ValueError(f"binarize={binarize!r}; expected one of {BINARIZATIONS}")


def _gap_heights(child_heights: Sequence[int], binarize: str) -> list[int]:
    """Heights of the nodes joining consecutive children c_k, c_{k+1} of one node (m children, m - 1 gaps).

    n-ary: every gap gets the node's height ``1 + max_k h_k``. Right factorisation (nodes
    N_k = (c_k N_{k+1}), N_{m-1} = (c_{m-1} c_m)): gap k is joined at N_k, ``H(N_k) = 1 + max(h_k, H(N_{k+1}))``
    with ``H(N_m) = h_m``. Left factorisation (M_k = (M_{k-1} c_k), M_1 = c_1): gap k is joined at M_{k+1},
    ``H(M_k) = 1 + max(H(M_{k-1}), h_k)``.
    """
    m = len(child_heights)
    if binarize == "none":
        return [1 + max(child_heights)] * (m - 1)
    gaps = [0] * (m - 1)
    if binarize == "right":
        height = child_heights[-1]
        for k in range(m - 2, -1, -1):
            height = gaps[k] = 1 + max(child_heights[k], height)
    else:
        height = child_heights[0]
        for k in range(1, m):
            height = gaps[k - 1] = 1 + max(height, child_heights[k])
    return gaps


def syntactic_distance(tree, binarize: str = "none") -> list[int]:
    """Seed 003 Algorithm 1: ``d(leaf) = []``, ``d(node) = [d(c_1); nd; d(c_2); ...; nd; d(c_m)]``
    with ``nd = 1 + max`` of all values in the children's vectors (0 if all are empty).

    So ``d_i`` is the height of the lowest common ancestor of leaves i and i + 1 (pre-terminals
    and unary chains do not change it); the result has ``n_leaves - 1`` entries. With ``binarize``
    "right" or "left" the tree is first binarised as NLTK's ``chomsky_normal_form(factor=binarize)``
    (what seed 003's code does, see the module docstring): the gaps between the children of a node
    get the heights of the binary nodes that join them (``_gap_heights``) instead of one shared ``nd``.
    """
    _check_binarize(binarize)
    if isinstance(tree, str):
        tree = parse_bracketed(tree)

    def distance(node) -> list[int]:
        children = _children(node)
        if children is None:
            return []
        parts = [distance(c) for c in children]
        gaps = _gap_heights([max(p, default=0) for p in parts], binarize)
        out = list(parts[0])
        for gap, part in zip(gaps, parts[1:]):
            out.append(gap)
            out.extend(part)
        return out

    return distance(tree)


def dependency_to_distance(heads: Sequence[int], binarize: str = "none") -> list[float]:
    """Syntactic distance from a dependency tree (SPEC §6, "beyond the paper").

    Each word with its dependents' yields is a constituent: ``c(h) = {h} ∪ c(dependents of h)``,
    with ``height(c(h)) = 0`` for a word without dependents, else ``1 + max height(c(dependent))``.
    The gap between words i and i + 1 gets the height of the constituent of their lowest common
    ancestor in the dependency tree; for a projective tree this equals Algorithm 1 on the derived
    constituency tree. A non-projective tree has discontinuous constituents; the same LCA-height
    definition is used unchanged (it is still well defined and ranks gaps by how high the two
    words are joined). In a forest, a gap between two different trees gets ``SENTENCE_DISTANCE``.

    ``binarize`` ("right" / "left") binarises every derived constituent as ``syntactic_distance`` does:
    the children of c(h), ordered by their head words' positions (h's own leaf at h), are joined by a chain
    of binary nodes, and the gap gets the height of the binary node joining the children that hold i and
    i + 1 (``_gap_heights``). For a projective tree this equals Algorithm 1 on NLTK's
    ``chomsky_normal_form(factor=binarize)`` of the derived constituency tree.
    """
    _check_binarize(binarize)
    n = len(heads)
    roots = tree_roots(heads)
    depth = depths(heads, ignore_index=None)
    dependents: list[list[int]] = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h != i:
            dependents[h].append(i)
    height = [0] * n
    child_order: list[dict] = [{} for _ in range(n)]  # child (dependent, or h for its own leaf) -> its index
    gaps: list[list[int]] = [[] for _ in range(n)]
    for h in sorted(range(n), key=lambda i: -depth[i]):  # dependents before their head
        if not dependents[h]:
            continue
        children = sorted(dependents[h] + [h])
        child_order[h] = {c: k for k, c in enumerate(children)}
        gaps[h] = _gap_heights([0 if c == h else height[c] for c in children], binarize)
        height[h] = max(gaps[h])

    def child_holding(word: int, ancestor: int) -> int:
        """The child of ``ancestor``'s constituent that holds ``word`` (``ancestor`` itself for its own leaf)."""
        while word != ancestor and heads[word] != ancestor:
            word = heads[word]
        return word

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
        left, right = sorted(child_order[a][child_holding(w, a)] for w in (i, i + 1))
        out.append(gaps[a][left if binarize != "left" else right - 1])
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
