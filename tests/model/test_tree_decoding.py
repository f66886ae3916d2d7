"""Maximum spanning tree decoding of parse scores (hf_syntax_mt.tree_decoding, SPEC §9)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hf_syntax_mt.syntax import validate_heads
from hf_syntax_mt.tree_decoding import decode_tree, tree_score


def is_single_root_tree(heads):
    n = len(heads)
    if sum(h == i for i, h in enumerate(heads)) != 1:
        return False
    for start in range(n):
        seen, node = set(), start
        while heads[node] != node:
            if node in seen:
                return False
            seen.add(node)
            node = heads[node]
    return True


def brute_force(scores):
    """The best single-root tree by enumerating every head assignment (n^n of them)."""
    n = len(scores)
    trees = (h for h in itertools.product(range(n), repeat=n) if is_single_root_tree(h))
    return max(tree_score(scores, h) for h in trees)


@pytest.mark.parametrize("seed", range(40))
def test_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 1 + seed % 6
    scores = rng.normal(size=(n, n)) * (0.1, 1.0, 5.0)[seed % 3]
    if seed % 4 == 0:
        scores = np.round(scores)  # ties
    heads = decode_tree(scores)
    assert is_single_root_tree(heads)
    assert tree_score(scores, heads) == pytest.approx(brute_force(scores), abs=1e-9)


def test_argmax_tree_is_kept_and_cycles_are_broken():
    # "My father bought a red car ." as argmax heads (SPEC §3): already a tree, returned as it is
    gold = [1, 2, 2, 5, 5, 2, 2]
    scores = np.full((7, 7), -5.0)
    scores[np.arange(7), gold] = 3.0
    assert decode_tree(scores) == gold
    # two tokens that pick each other, and two roots: the decoder keeps one root and breaks the cycle
    scores = np.array([[0.0, 5.0, 1.0], [5.0, 0.0, 1.0], [1.0, 1.0, 4.0]])
    heads = decode_tree(scores)
    assert is_single_root_tree(heads) and tree_score(scores, heads) == pytest.approx(brute_force(scores))
    scores = np.diag([5.0, 5.0, 5.0]) + 0.1
    assert is_single_root_tree(decode_tree(scores))


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 30), st.just(1)).map(lambda s: (s[0], s[0])),
              elements=st.floats(-1e3, 1e3, allow_nan=False)))
def test_always_one_root_and_no_cycle(scores):
    heads = decode_tree(scores)
    assert is_single_root_tree(heads)
    validate_heads(heads, single_tree=True)


def test_forbidden_arcs_are_respected():
    scores = np.array([[0.0, 9.0, -np.inf], [-np.inf, 0.0, -np.inf], [-np.inf, 9.0, 1.0]])
    heads = decode_tree(scores)
    assert heads == [1, 1, 1] and is_single_root_tree(heads)


def test_bad_scores_are_refused():
    with pytest.raises(ValueError, match="square"):
        decode_tree(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        decode_tree(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="no single-root tree"):
        decode_tree(np.array([[0.0, -np.inf], [-np.inf, 0.0]]))
    assert decode_tree(np.zeros((0, 0))) == []
