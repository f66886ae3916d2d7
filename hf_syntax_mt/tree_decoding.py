"""Decoding parse scores into a well-formed dependency tree (SPEC §9): one root, no cycle.

Convention (SPEC §5, §7): for a sentence of n tokens, ``scores[t, q]`` is the score of token q
being the head of token t, and ``scores[t, t]`` the score of t being the root (the root points to
itself). `decode_tree` returns the maximum spanning arborescence with exactly one root:

    heads = argmax over single-root trees T of  Σ_t scores[t, head_T(t)]

Algorithm: Chu–Liu/Edmonds over a graph with an artificial node 0 whose edge 0 → t carries the
root score of t. The single-root constraint is exact through a constant penalty M on every root
edge, larger than any difference of two trees' scores (Gabow & Tarjan 1984; Zmigrod et al. 2020):
a tree with k root edges pays k·M, so the maximum has exactly one root edge, and among the
single-root trees the order is unchanged. Each Chu–Liu/Edmonds round is vectorised with numpy
(argmax of the in-edges, contraction of one cycle); when the argmax heads already form a
single-root tree (the common case for a trained parse head) it returns them after one pass.

Kept free of torch and of the package's other modules, so the modeling file can import it in
remote code.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _find_cycle(heads: np.ndarray) -> list[int] | None:
    """A cycle of `heads` (heads[d] = h, node 0 the artificial root, heads[0] ignored), or None."""
    n = len(heads)
    state = np.zeros(n, dtype=np.int8)  # 0 new, 1 on the current path, 2 done
    state[0] = 2
    for start in range(1, n):
        path, node = [], start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = heads[node]
        if state[node] == 1:  # came back to the current path: a cycle from `node`
            return path[path.index(node):]
        state[path] = 2
    return None


def _max_arborescence(scores: np.ndarray) -> np.ndarray:
    """Chu–Liu/Edmonds: heads of the maximum spanning arborescence rooted at node 0 of the
    dense graph `scores[h, d]` (edge h → d; -inf for none; column 0 and the diagonal unused)."""
    n = scores.shape[0]
    scores = scores.copy()
    scores[:, 0] = -np.inf
    np.fill_diagonal(scores, -np.inf)
    heads = scores.argmax(axis=0)
    heads[0] = 0
    cycle = _find_cycle(heads)
    if cycle is None:
        return heads
    in_cycle = np.zeros(n, dtype=bool)
    in_cycle[cycle] = True
    rest = np.flatnonzero(~in_cycle)  # node 0 is always here
    cycle = np.asarray(cycle)
    cycle_score = scores[heads[cycle], cycle]
    # contracted graph: nodes `rest` + one node c (index len(rest)) for the cycle
    m = len(rest)
    contracted = np.full((m + 1, m + 1), -np.inf)
    contracted[:m, :m] = scores[np.ix_(rest, rest)]
    # into the cycle: u -> v (v in cycle) replaces v's cycle edge
    entering = scores[np.ix_(rest, cycle)] - cycle_score[None, :]
    best_entry = entering.argmax(axis=1)
    contracted[:m, m] = entering[np.arange(m), best_entry]
    # out of the cycle: the best cycle node for each outside node
    leaving = scores[np.ix_(cycle, rest)]
    best_exit = leaving.argmax(axis=0)
    contracted[m, :m] = leaving[best_exit, np.arange(m)]
    inner = _max_arborescence(contracted)
    out = heads.copy()
    for i, node in enumerate(rest[1:], 1):
        h = inner[i]
        out[node] = cycle[best_exit[i]] if h == m else rest[h]
    entry_from = inner[m]
    broken = best_entry[entry_from]
    out[cycle[broken]] = rest[entry_from]
    return out


def decode_tree(scores: Sequence[Sequence[float]] | np.ndarray) -> list[int]:
    """Heads of the best single-root tree of an (n, n) score matrix (see the module docstring);
    the root points to itself. Entries of -inf forbid an arc; at least the diagonal (some root)
    and enough arcs for a tree must be finite."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1]:
        raise ValueError(f"scores must be a square (n, n) matrix, got shape {scores.shape}")
    n = scores.shape[0]
    if n == 0:
        return []
    if np.isnan(scores).any() or np.isposinf(scores).any():
        raise ValueError("scores contain NaN or +inf")
    finite = scores[np.isfinite(scores)]
    penalty = 2.0 * n * (float(finite.max() - finite.min()) + 1.0) if finite.size else 1.0
    graph = np.full((n + 1, n + 1), -np.inf)
    graph[1:, 1:] = scores.T  # graph[h, d] = scores[d, h]
    graph[0, 1:] = np.diag(scores) - penalty
    graph[np.arange(1, n + 1), np.arange(1, n + 1)] = -np.inf
    heads = _max_arborescence(graph)
    tree = [int(h) - 1 if h else d for d, h in enumerate(heads[1:])]
    if sum(h == d for d, h in enumerate(tree)) != 1 or not np.isfinite(scores[np.arange(n), tree]).all():
        raise ValueError("no single-root tree uses only finite scores")
    return tree


def tree_score(scores, heads: Sequence[int]) -> float:
    """Σ_t scores[t, heads[t]]."""
    scores = np.asarray(scores, dtype=np.float64)
    return float(scores[np.arange(len(heads)), list(heads)].sum())


__all__ = ["decode_tree", "tree_score"]
