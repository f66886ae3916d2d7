"""Syntactic distance (seed 003 Algorithm 1), local ranges (Algorithm 2), dependency-derived distance."""

import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_syntax_mt.syntax import (
    LARGE_DISTANCE,
    SENTENCE_DISTANCE,
    dependency_to_distance,
    fill_subword_distances,
    local_range_mask,
    parse_bracketed,
    syntactic_distance,
    tree_leaves,
    tree_to_bracketed,
)

FIG1 = "(S (NP I) (VP swim (PP across (NP the river))) .)"
WORDS = ["I", "swim", "across", "the", "river", "."]
SHARED = Path(__file__).resolve().parents[3] / "shared"


def test_fig1_distance_and_local_range_of_across():
    d = syntactic_distance(FIG1)
    assert d == [4, 3, 2, 1, 4]
    g = local_range_mask(d)
    assert [w for w, on in zip(WORDS, g[2]) if on] == ["swim", "across", "the", "river"]
    assert g.shape == (6, 6) and g.dtype == bool
    assert np.diag(g).all() and all(g[i, i + 1] and g[i + 1, i] for i in range(5))


def test_preterminals_and_unary_chains_do_not_change_distance():
    with_pos = "(ROOT (S (NP (PRP I)) (VP (VBP swim) (PP (IN across) (NP (DT the) (NN river)))) (. .)))"
    assert syntactic_distance(with_pos) == [4, 3, 2, 1, 4]
    assert tree_leaves(with_pos) == WORDS
    assert syntactic_distance("(S word)") == [] and syntactic_distance("( (S (A a) (B b)))") == [1]


def test_stanza_and_nltk_trees():
    from stanza.models.constituency.tree_reader import read_trees

    stanza_tree = read_trees("(ROOT (S (NP (PRP I)) (VP (VBP swim) (PP (IN across) (NP (DT the) (NN river)))) (. .)))")[0]
    assert syntactic_distance(stanza_tree) == [4, 3, 2, 1, 4]
    assert tree_leaves(stanza_tree) == WORDS
    nltk = pytest.importorskip("nltk")
    nltk_tree = nltk.Tree.fromstring(FIG1)
    assert syntactic_distance(nltk_tree) == [4, 3, 2, 1, 4]
    assert tree_to_bracketed(nltk_tree) == FIG1


@pytest.mark.parametrize("bad", ["", "I swim", "(S (NP I)", "(S I))", "(S I) (S you)"])
def test_bad_brackets(bad):
    with pytest.raises(ValueError):
        parse_bracketed(bad)


def _nested(text):
    """A bracketed tree as nested lists of children (leaves are strings, labels dropped), parsed
    independently of the package."""
    tokens = text.replace("(", " ( ").replace(")", " ) ").split()
    stack = [[]]
    for prev, tok in zip([None] + tokens, tokens):
        if tok == "(":
            stack.append([])
        elif tok == ")":
            node = stack.pop()
            stack[-1].append(node)
        elif prev != "(":  # the token after "(" is the label
            stack[-1].append(tok)
    return stack[0][0]


def _reference_distance(text):
    """SPEC §6 read directly: d_i = height of the lowest common ancestor of leaves i and i + 1.

    Algorithm 1 adds a level only at a node with >= 2 children, so SPEC's height counts branching
    nodes: a leaf is 0 and a unary node (pre-terminal, unary chain) has its child's height. This
    pins the exact values, not only their order.
    """
    def height(node):
        if isinstance(node, str):
            return 0
        return height(node[0]) if len(node) == 1 else 1 + max(height(c) for c in node)

    def paths(node, above=()):  # the ancestors of each leaf, root first, left to right
        return [above] if isinstance(node, str) else [p for c in node for p in paths(c, above + (node,))]

    leaf_paths = paths(_nested(text))
    return [height([x for x, y in zip(a, b) if x is y][-1]) for a, b in zip(leaf_paths, leaf_paths[1:])]


@pytest.mark.parametrize(
    "tree, expected",
    [
        (FIG1, [4, 3, 2, 1, 4]),
        ("(ROOT (S (NP (NP a b) (PP c (NP d))) (VP e)))", [1, 2, 1, 3]),
        ("(A (B (C (D x y))) z)", [1, 2]),  # the unary chain over "x y" adds nothing
        ("(S (A a b) c (B d (C e f)))", [1, 3, 3, 2, 1]),  # a flat node: every gap gets its height
        ("(S (S (S a b) c) d)", [1, 2, 3]),
        ("(X (Y a) (Y (Z b)))", [1]),
    ],
)
def test_hand_made_trees_match_lca_height(tree, expected):
    assert _reference_distance(tree) == expected
    assert syntactic_distance(tree) == expected


PTB_SAMPLE = SHARED / "data" / "nltk_treebank" / "treebank.zip"


def _ptb_trees():
    """The bracketed trees of the PTB sample's .mrg files."""
    trees = []
    with zipfile.ZipFile(PTB_SAMPLE) as z:
        for name in (n for n in z.namelist() if n.endswith(".mrg")):
            text, depth, start = z.read(name).decode("utf-8"), 0, None
            for i, ch in enumerate(text):  # split the file into top-level bracketed trees
                if ch == "(":
                    start = i if depth == 0 else start
                    depth += 1
                elif ch == ")":
                    depth -= 1
                    if depth == 0:
                        trees.append(text[start:i + 1])
    return trees


@pytest.mark.skipif(not PTB_SAMPLE.is_file(), reason="../shared absent")
def test_ptb_sample_trees_match_lca_height():
    trees = _ptb_trees()
    assert len(trees) > 3000
    for t in trees:
        d = syntactic_distance(t)
        assert len(d) == len(tree_leaves(t)) - 1 and d == _reference_distance(t), t


# ---------------------------------------------------------------------------------------------
# binarised trees (seed 003's code: NLTK's chomsky_normal_form before Algorithm 1)


def _nltk_binarized_distance(tree, factor):
    """Seed 003's preprocessing: NLTK's ``chomsky_normal_form(factor)`` (default arguments), then Algorithm 1
    on the binary tree (the package's n-ary Algorithm 1, equal to the LCA-height reference above)."""
    nltk = pytest.importorskip("nltk")
    binary = nltk.Tree.fromstring(tree)
    binary.chomsky_normal_form(factor=factor)
    return syntactic_distance(binary)


@pytest.mark.parametrize(
    "tree, n_ary, right, left",
    [
        (FIG1, [4, 3, 2, 1, 4], [5, 3, 2, 1, 4], [4, 3, 2, 1, 5]),  # the first example
        ("(ROOT (NP (VBG Performing) (NNS loans) (. .)))", [1, 1], [2, 1], [1, 2]),  # its second example
        ("(A (B (C (D x y))) z)", [1, 2], [1, 2], [1, 2]),  # binary already: unchanged, unaries kept
        ("(S a b c d e)", [1, 1, 1, 1], [4, 3, 2, 1], [1, 2, 3, 4]),
    ],
)
def test_binarized_distances_of_worked_examples(tree, n_ary, right, left):
    assert syntactic_distance(tree) == syntactic_distance(tree, binarize="none") == n_ary
    assert syntactic_distance(tree, binarize="right") == right
    assert syntactic_distance(tree, binarize="left") == left


def test_fig1_right_binarization_is_nltk_chomsky_normal_form():
    nltk = pytest.importorskip("nltk")
    binary = nltk.Tree.fromstring(FIG1)
    binary.chomsky_normal_form()  # seed 003's call: right factorisation, default arguments
    assert tree_to_bracketed(binary) == "(S (NP I) (S|<VP-.> (VP swim (PP across (NP the river))) .))"
    assert syntactic_distance(binary) == syntactic_distance(FIG1, binarize="right") == [5, 3, 2, 1, 4]


@pytest.mark.parametrize("factor", ["right", "left"])
@pytest.mark.parametrize(
    "tree",
    [
        "(ROOT (S (NP (NP a b) (PP c (NP d))) (VP e)))",
        "(S (A a b) c (B d (C e f)))",
        "(S (S (S a b) c) d)",
        "(X (A a b c) (B (C d e f g) h) i (D j))",  # a unary D, a wide node inside a wide node
        "(X a (Y (Z b c d e)) (W f g h) i)",
    ],
)
def test_binarized_distances_match_nltk_chomsky_normal_form(tree, factor):
    assert syntactic_distance(tree, binarize=factor) == _nltk_binarized_distance(tree, factor)


@pytest.mark.skipif(not PTB_SAMPLE.is_file(), reason="../shared absent")
@pytest.mark.parametrize("factor", ["right", "left"])
def test_ptb_sample_binarized_distances_match_nltk_chomsky_normal_form(factor):
    pytest.importorskip("nltk")
    trees = _ptb_trees()
    changed = total = 0
    for t in trees:
        binarized = syntactic_distance(t, binarize=factor)
        assert binarized == _nltk_binarized_distance(t, factor), t
        n_ary = syntactic_distance(t)
        changed += sum(a != b for a, b in zip(binarized, n_ary))
        total += len(n_ary)
    assert 0.3 < changed / total < 0.9  # the issue: 49,268 of 79,626 gaps change (right, usable trees)


def test_bad_binarize_is_refused():
    with pytest.raises(ValueError, match="binarize='up'; expected one of"):
        syntactic_distance(FIG1, binarize="up")
    with pytest.raises(ValueError, match="binarize='up'; expected one of"):
        dependency_to_distance([1, 1], binarize="up")


def test_annotation_word_distances_binarize_trees_and_derived_constituents():
    from hf_syntax_mt.syntax import Annotation, locate_words

    text = "I swim across the river . I swim ."
    words = text.split()
    heads = [1, 1, 1, 4, 2, 1, 7, 7, 7]  # I→swim, across→swim, the→river, river→across, .→swim
    annotation = Annotation(text, words, locate_words(text, words), heads, sentence_ids=[0] * 6 + [1] * 3,
                            trees=[FIG1, "(S (NP I) (VP swim) .)"])
    S = SENTENCE_DISTANCE
    assert annotation.word_distances("constituency") == [4, 3, 2, 1, 4, S, 1, 1]
    assert annotation.word_distances("constituency", binarize="right") == [5, 3, 2, 1, 4, S, 2, 1]
    assert annotation.word_distances("constituency", binarize="left") == [4, 3, 2, 1, 5, S, 1, 2]
    # swim's constituent: I | swim | across (height 2) | . ; right-binarised it joins at 5, 4, 3
    assert annotation.word_distances("dependency") == [3, 3, 2, 1, 3, S, 1, 1]
    assert annotation.word_distances("dependency", binarize="right") == [5, 4, 2, 1, 3, S, 2, 1]
    assert annotation.word_distances("flat", binarize="right") == annotation.word_distances("flat")  # the control
    with pytest.raises(ValueError, match="binarize must be one of"):
        annotation.word_distances("constituency", binarize="yes")


def test_dependency_to_distance_example_and_forest():
    # My father bought a red car . -> heights: father 1, car 1, bought 2
    assert dependency_to_distance([1, 2, 2, 5, 5, 2, 2]) == [1, 2, 2, 1, 1, 2]
    assert dependency_to_distance([1, 1, 2]) == [1, SENTENCE_DISTANCE]
    assert dependency_to_distance([0]) == []


def test_dependency_to_distance_non_projective():
    # a b c d: a→c, b→d, c root, d→c (arc a→c crosses b→d); LCA(a,b)=c, LCA(b,c)=c, LCA(c,d)=c
    assert dependency_to_distance([2, 3, 2, 2]) == [2, 2, 2]


def test_binarized_dependency_distances():
    # My father bought a red car .: bought's children father | bought | car | . (heights 1, 0, 2, 0 binarised:
    # car's children a | red | car give 2), joined right to left at heights 3, 4, 5 (right factorisation)
    heads = [1, 2, 2, 5, 5, 2, 2]
    assert dependency_to_distance(heads, binarize="right") == [1, 5, 4, 2, 1, 3]
    assert dependency_to_distance(heads, binarize="left") == [1, 2, 3, 1, 2, 4]
    # forests keep SENTENCE_DISTANCE between trees
    assert dependency_to_distance([1, 1, 3, 3, 3], binarize="right") == [1, SENTENCE_DISTANCE, 2, 1]
    # non-projective: c's children ordered by head word a | c | d (d's constituent {b, d}, height 1);
    # gap a-b is joined where a's child and d's child meet
    assert dependency_to_distance([2, 3, 2, 2], binarize="right") == [3, 2, 2]
    assert dependency_to_distance([2, 3, 2, 2], binarize="left") == [2, 2, 2]


def test_fill_subword_distances():
    # words: w0 w1 | w2 (2nd sentence); tokens: w0a w0b w1 w2 </s>
    word_d = [3.0, SENTENCE_DISTANCE]
    out = fill_subword_distances(word_d, [0, 0, 1, 2, None], [0, 0, 1])
    assert out == [1.0, 4.0, SENTENCE_DISTANCE, LARGE_DISTANCE, LARGE_DISTANCE]
    # a word without tokens in between: the gap takes the max of the word gaps it spans
    assert fill_subword_distances([1.0, 5.0, 2.0], [0, 2, 3], [0, 0, 0, 0])[:2] == [6.0, 3.0]
    assert fill_subword_distances([], [None, None], None) == [LARGE_DISTANCE] * 2


# ---------------------------------------------------------------------------------------------
# property tests


@st.composite
def projective_trees(draw, max_words=12):
    """A random projective dependency tree built by recursive splitting of a span."""
    n = draw(st.integers(1, max_words))
    heads = [None] * n

    def build(lo, hi, parent):
        h = draw(st.integers(lo, hi - 1))
        heads[h] = h if parent is None else parent
        cuts_left = sorted(draw(st.sets(st.integers(lo + 1, h), max_size=2))) if h > lo else []
        cuts_right = sorted(draw(st.sets(st.integers(h + 2, hi), max_size=2))) if h + 1 < hi else []
        for a, b in zip([lo] + cuts_left, cuts_left + [h]):
            if a < b:
                build(a, b, h)
        for a, b in zip([h + 1] + cuts_right, cuts_right + [hi]):
            if a < b:
                build(a, b, h)

    build(0, n, None)
    return heads


def _derived_bracketed(heads):
    """The constituency tree of SPEC §6: each head with its dependents' subtrees, in word order."""
    deps = {i: [d for d in range(len(heads)) if heads[d] == i and d != i] for i in range(len(heads))}

    def node(i):
        if not deps[i]:
            return f"w{i}"
        parts = [node(d) if d != i else f"w{i}" for d in sorted(deps[i] + [i])]
        return "(X " + " ".join(parts) + ")"

    root = next(i for i in range(len(heads)) if heads[i] == i)
    tree = node(root)
    return tree if tree.startswith("(") else f"(X {tree})"


@settings(max_examples=100, deadline=None)
@given(projective_trees())
def test_dependency_distance_equals_algorithm1_on_derived_tree(heads):
    d = dependency_to_distance(heads)
    tree = _derived_bracketed(heads)
    assert tree_leaves(tree) == [f"w{i}" for i in range(len(heads))]
    assert d == syntactic_distance(tree)
    assert len(d) == len(heads) - 1


@settings(max_examples=60, deadline=None)
@given(projective_trees(), st.sampled_from(["right", "left"]))
def test_binarized_dependency_distance_equals_nltk_chomsky_normal_form_of_derived_tree(heads, factor):
    assert dependency_to_distance(heads, binarize=factor) == _nltk_binarized_distance(_derived_bracketed(heads), factor)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=0, max_size=15))
def test_local_range_properties(d):
    g = local_range_mask(d)
    n = len(d) + 1
    assert g.shape == (n, n)
    for i in range(n):
        row = np.nonzero(g[i])[0]
        assert (np.diff(row) == 1).all() and g[i, i]  # one contiguous range containing i
        for j in range(n):  # brute force of Algorithm 2
            inside = True
            if j < i - 1:
                inside = all(d[t] <= d[i - 1] for t in range(j, i - 1))
            elif j > i + 1:
                inside = all(d[t] <= d[i] for t in range(i + 1, j))
            assert g[i, j] == inside
