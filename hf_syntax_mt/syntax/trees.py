"""Dependency trees as head lists: validation, depths, relation matrices, subword projection.

Convention (shared by the whole package): ``heads`` is a list of ints, 0-based, and the root of
each sentence points to itself (``heads[r] == r``). Several sentences in one input form a forest
with one self-looped root per sentence. In subword-level rows (``source_heads``/``target_heads``)
tokens outside every tree (special tokens, padding) hold ``IGNORE_INDEX`` (-100).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

IGNORE_INDEX = -100


def tree_roots(heads: Sequence[int], ignore_index: Optional[int] = None) -> list[int]:
    """Validate ``heads`` as a forest and return the root index of every token (-1 if ignored).

    Raises ``ValueError`` naming the problem: a head outside ``0..n-1``, a token pointing to an
    ignored token, or a cycle that does not end in a self-looped root.
    """
    n = len(heads)
    for i, h in enumerate(heads):
        if isinstance(h, (bool, np.bool_)) or not isinstance(h, (int, np.integer)):
            raise ValueError(f"head of token {i} is {h!r}; heads must be ints")
        if ignore_index is not None and h == ignore_index:
            continue
        if not 0 <= h < n:
            raise ValueError(f"head of token {i} is {h}, outside the valid range 0..{n - 1}")
        if ignore_index is not None and heads[h] == ignore_index:
            raise ValueError(f"token {i} points to token {h}, which is outside the tree ({ignore_index})")
    roots = [-2] * n  # -2 = not visited yet
    for start in range(n):
        if roots[start] != -2:
            continue
        if ignore_index is not None and heads[start] == ignore_index:
            roots[start] = -1
            continue
        path, on_path, i = [], set(), start
        while roots[i] == -2 and heads[i] != i:
            if i in on_path:
                cycle = path[path.index(i):]
                raise ValueError(f"heads contain a cycle through tokens {cycle} (no self-looped root)")
            path.append(i)
            on_path.add(i)
            i = heads[i]
        root = i if heads[i] == i else roots[i]
        roots[i] = root
        for j in path:
            roots[j] = root
    return roots


def validate_heads(
    heads: Sequence[int], *, single_tree: bool = False, ignore_index: Optional[int] = None
) -> None:
    """Check that ``heads`` is a forest of self-looped roots, raising ``ValueError`` otherwise.

    With ``single_tree=True`` (one sentence) the input must be non-empty and have exactly one
    root. ``ignore_index`` (e.g. -100) marks tokens outside every tree.
    """
    roots = tree_roots(heads, ignore_index=ignore_index)
    if single_tree:
        n_roots = len({r for r in roots if r >= 0})
        if len(heads) == 0:
            raise ValueError("empty sentence: a tree needs at least one word")
        if n_roots != 1:
            found = sorted({r for r in roots if r >= 0})
            raise ValueError(f"expected exactly one root (self-looped token), found {n_roots}: {found}")


def depths(heads: Sequence[int], ignore_index: Optional[int] = IGNORE_INDEX) -> list[int]:
    """depth(root) = 0, depth(child) = depth(head) + 1; tokens outside the tree get -1."""
    tree_roots(heads, ignore_index=ignore_index)
    out = [None] * len(heads)
    for start in range(len(heads)):
        chain, i = [], start
        while out[i] is None:
            if ignore_index is not None and heads[i] == ignore_index:
                out[i] = -1
                break
            if heads[i] == i:
                out[i] = 0
                break
            chain.append(i)
            i = heads[i]
        d = out[i]
        for j in reversed(chain):
            d += 1
            out[j] = d
    return out


def relative_depth_matrix(heads: Sequence[int], ignore_index: Optional[int] = IGNORE_INDEX) -> np.ma.MaskedArray:
    """SPEC §3: ``dist[i, j] = depth(j) - depth(i)`` (parent direction negative).

    Returned as an integer ``numpy.ma.MaskedArray``: pairs in different trees or involving a token
    outside the tree are masked (their data is 0), because depth differences only mean something
    inside one tree.
    """
    d = np.asarray(depths(heads, ignore_index=ignore_index), dtype=np.int64)
    roots = np.asarray(tree_roots(heads, ignore_index=ignore_index), dtype=np.int64)
    same_tree = (roots[:, None] == roots[None, :]) & (roots[:, None] >= 0)
    dist = np.where(same_tree, d[None, :] - d[:, None], 0)
    return np.ma.MaskedArray(dist, mask=~same_tree)


def _ancestor_matrix(heads: Sequence[int], ignore_index: Optional[int]) -> np.ndarray:
    """``anc[i, j]`` is True when token i is a proper ancestor of token j."""
    n = len(heads)
    anc = np.zeros((n, n), dtype=bool)
    for j in range(n):
        i = heads[j]
        if ignore_index is not None and i == ignore_index:
            continue
        while i != j and not anc[i, j]:
            anc[i, j] = True
            if heads[i] == i:
                break
            i = heads[i]
    return anc


def labeled_relation_matrix(
    heads: Sequence[int], k: Optional[int] = None, ignore_index: Optional[int] = IGNORE_INDEX
) -> np.ndarray:
    """SPEC §4 (seed 002): the labeled tree relation of every pair (i, j), as an object array.

    Entries: ``'self'`` (i = j), the signed int ``depth(j) - depth(i)`` when one token is an
    ancestor of the other, ``'sib'`` for distinct tokens with the same head (roots excluded), and
    ``'none'`` otherwise (also for pairs in different trees or involving a token outside the tree,
    including such a token with itself). With ``k`` given, ancestor pairs with ``|value| > k``
    become ``'none'``: the model gives both the zero vector, so ``'none'`` stands for "zero vector".
    """
    n = len(heads)
    d = depths(heads, ignore_index=ignore_index)
    anc = _ancestor_matrix(heads, ignore_index)
    out = np.full((n, n), "none", dtype=object)
    inside = [d[i] >= 0 for i in range(n)]
    for i in range(n):
        if not inside[i]:
            continue
        out[i, i] = "self"
        for j in range(n):
            if j == i or not inside[j]:
                continue
            if anc[i, j] or anc[j, i]:
                v = d[j] - d[i]
                if k is None or abs(v) <= k:
                    out[i, j] = v
            elif heads[i] == heads[j] and heads[i] not in (i, j):
                out[i, j] = "sib"
    return out


def reroute_heads(heads: Sequence[int], keep: Sequence[bool], ignore_index: int = IGNORE_INDEX) -> list[int]:
    """Restrict a forest to the tokens with ``keep[i]``, preserving ancestry.

    A kept token whose head is not kept points to its nearest kept ancestor; if it has none (its
    root is dropped) it becomes a root itself. Dropped tokens get ``ignore_index``. This is how
    truncation and tokens that receive no subword are handled.
    """
    tree_roots(heads, ignore_index=ignore_index)
    out = []
    for i, h in enumerate(heads):
        if not keep[i] or h == ignore_index:
            out.append(ignore_index)
            continue
        while not keep[h] and heads[h] != h:
            h = heads[h]
        out.append(h if keep[h] else i)
    return out


def project_heads_to_subwords(
    word_heads: Sequence[int], word_ids: Sequence[Optional[int]], ignore_index: int = IGNORE_INDEX
) -> list[int]:
    """Project a word-level forest onto subword tokens (SPEC §5, seeds 001 §4.1 / 004 §3.3).

    ``word_ids[t]`` is the word of token t (``None`` for special tokens, as from a fast
    tokenizer's ``word_ids()``). For a word split into subwords s_1..s_m (in token order):
    ``head(s_i) = s_{i+1}`` for i < m and ``head(s_m)`` = the leftmost subword of the head word
    (or s_m itself for a root). Special tokens get ``ignore_index``. Words without any token
    (truncated away, or merged into a neighbour's subword) are skipped via ``reroute_heads``.
    """
    n_words = len(word_heads)
    positions: list[list[int]] = [[] for _ in range(n_words)]
    for t, w in enumerate(word_ids):
        if w is None:
            continue
        if not 0 <= w < n_words:
            raise ValueError(f"token {t} has word id {w}, but there are only {n_words} words")
        positions[w].append(t)
    heads = reroute_heads(word_heads, [bool(p) for p in positions], ignore_index=ignore_index)
    out = [ignore_index] * len(word_ids)
    for w, toks in enumerate(positions):
        for a, b in zip(toks, toks[1:]):
            out[a] = b
        if toks:
            out[toks[-1]] = toks[-1] if heads[w] == w else positions[heads[w]][0]
    return out


def word_heads_from_subword_heads(
    token_heads: Sequence[int], word_ids: Sequence[Optional[int]], n_words: int, ignore_index: int = IGNORE_INDEX
) -> list[int]:
    """The word-level tree of a subword-level tree (SPEC §9; the inverse of `project_heads_to_subwords`).

    ``token_heads[t]`` is the head token of token t (one root pointing to itself; ``ignore_index``
    outside the tree), ``word_ids[t]`` its word (None outside the tree). The head of word w is the word
    of the head of w's highest subword (the one closest to the root, the last of the highest on a tie):
    in the §5 shape that is w's last subword, so a projected tree maps back to the words' tree. The
    word of the root token is the root. Depth falls along every word arc, so the result is a tree
    even for subword trees of another shape. A word without a token of its own (merged into a
    neighbour's subword, or truncated away) is attached to the nearest preceding word that has one
    (the following one at the start). Returns 0-based word heads, the root pointing to itself.
    """
    if len(token_heads) != len(word_ids):
        raise ValueError(f"{len(token_heads)} token heads for {len(word_ids)} word ids")
    roots = sorted({r for r in tree_roots(token_heads, ignore_index=ignore_index) if r >= 0})
    if len(roots) > 1:
        raise ValueError(f"the subword tree has {len(roots)} roots (tokens {roots}); one is needed")
    token_depths = depths(token_heads, ignore_index=ignore_index)
    top: list[Optional[int]] = [None] * n_words
    for t, w in enumerate(word_ids):
        if w is None:
            continue
        if not 0 <= w < n_words:
            raise ValueError(f"token {t} has word id {w}, but there are only {n_words} words")
        if token_heads[t] == ignore_index:
            raise ValueError(f"token {t} belongs to word {w} but has no head")
        if top[w] is None or token_depths[t] <= token_depths[top[w]]:
            top[w] = t
    with_token = [w for w, t in enumerate(top) if t is not None]
    if n_words and not with_token:
        raise ValueError("no word has a token: nothing to parse")
    heads = []
    for w, t in enumerate(top):
        if t is None:
            before = [v for v in with_token if v < w]
            heads.append(before[-1] if before else with_token[0])
            continue
        head_word = word_ids[token_heads[t]]
        if head_word is None:
            raise ValueError(f"token {t} (word {w}) has head token {token_heads[t]}, which belongs to no word")
        heads.append(head_word)
    return heads
