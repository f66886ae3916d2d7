"""Head-list trees: validation, depth matrices (SPEC §3-4), subword projection (SPEC §5)."""

import ast
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_syntax_mt.syntax import (
    depths,
    labeled_relation_matrix,
    project_heads_to_subwords,
    relative_depth_matrix,
    reroute_heads,
    tree_roots,
    validate_heads,
    word_heads_from_subword_heads,
)

# "My father bought a red car ." — My→father, father→bought, bought=root, a→car, red→car, car→bought, .→bought
HEADS = [1, 2, 2, 5, 5, 2, 2]

TABLE1_SEED000 = [
    [0, -1, -2, 0, 0, -1, -1],
    [1, 0, -1, 1, 1, 0, 0],
    [2, 1, 0, 2, 2, 1, 1],
    [0, -1, -2, 0, 0, -1, -1],
    [0, -1, -2, 0, 0, -1, -1],
    [1, 0, -1, 1, 1, 0, 0],
    [1, 0, -1, 1, 1, 0, 0],
]

N, S = "none", "sib"
TABLE1_SEED002 = [
    ["self", -1, -2, N, N, N, N],
    [1, "self", -1, N, N, S, S],
    [2, 1, "self", 2, 2, 1, 1],
    [N, N, -2, "self", S, -1, N],
    [N, N, -2, S, "self", -1, N],
    [N, S, -1, 1, 1, "self", S],
    [N, S, -1, N, N, S, "self"],
]


def test_syntax_package_is_torch_free():
    for path in (Path(__file__).resolve().parents[2] / "hf_syntax_mt" / "syntax").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "torch" for n in names), f"{path.name} imports torch"


def test_relative_depth_seed000_table1():
    assert depths(HEADS) == [2, 1, 0, 2, 2, 1, 1]
    m = relative_depth_matrix(HEADS)
    assert not m.mask.any()
    assert m.filled(99).tolist() == TABLE1_SEED000


def test_labeled_relations_seed002_table1():
    assert labeled_relation_matrix(HEADS).tolist() == TABLE1_SEED002
    # k = 1: ancestor pairs with |v| > 1 become 'none' (the zero vector), nothing is clipped
    m1 = labeled_relation_matrix(HEADS, k=1)
    assert m1[0, 2] == "none" and m1[2, 0] == "none" and m1[0, 1] == -1 and m1[1, 6] == "sib"


def test_forest_pairs_across_trees_are_masked():
    heads = HEADS + [h + 7 for h in [1, 1]]  # second sentence: "X Y", X→Y
    heads[7], heads[8] = 8, 8
    m = relative_depth_matrix(heads)
    assert m.mask[:7, 7:].all() and m.mask[7:, :7].all() and not m.mask[:7, :7].any()
    lab = labeled_relation_matrix(heads)
    assert (lab[:7, 7:] == "none").all() and lab[7, 8] == -1 and lab[8, 7] == 1


def test_ignored_tokens_outside_the_tree():
    row = [-100, 2, 2, -100]
    assert depths(row) == [-1, 1, 0, -1]
    assert relative_depth_matrix(row).mask[0].all()
    lab = labeled_relation_matrix(row)
    assert lab[0, 0] == "none" and lab[1, 2] == -1 and lab[1, 1] == "self"


@pytest.mark.parametrize(
    "heads, message",
    [
        ([1, 0], "cycle"),
        ([1, 2, 0, 3], "cycle"),
        ([0, 5], "outside the valid range"),
        ([-1, 0], "outside the valid range"),
        ([0.5, 0], "must be ints"),
    ],
)
def test_validate_heads_errors(heads, message):
    with pytest.raises(ValueError, match=message):
        validate_heads(heads)


def test_validate_single_tree():
    validate_heads([0, 0, 2])  # a forest of two trees is fine
    with pytest.raises(ValueError, match="exactly one root.*found 2"):
        validate_heads([0, 0, 2], single_tree=True)
    with pytest.raises(ValueError, match="empty sentence"):
        validate_heads([], single_tree=True)
    with pytest.raises(ValueError, match="outside the tree"):
        validate_heads([-100, 0], ignore_index=-100)


def test_projection_seed004_fingerprint():
    # "Fingerprint is input": Fingerprint→input, is→input, input=root; Fing@@ er@@ print is input
    word_heads = [2, 2, 2]
    word_ids = [0, 0, 0, 1, 2, None]
    heads = project_heads_to_subwords(word_heads, word_ids)
    # er@@ = head(Fing@@), print = head(er@@), input = head(print); </s> outside the tree
    assert heads == [1, 2, 4, 4, 4, -100]


def test_projection_arcs_to_leftmost_subword_and_split_root():
    # "a b": a→b (root); b split into 3 subwords, a into 2
    heads = project_heads_to_subwords([1, 1], [0, 0, 1, 1, 1, None])
    assert heads == [1, 2, 3, 4, 4, -100]


def test_projection_missing_words_reroute():
    # word 1 has no token (merged into word 0's subword): its dependent 2 attaches to word 1's head 3
    heads = project_heads_to_subwords([1, 3, 1, 3], [0, 2, 3, None])
    assert heads == [2, 2, 2, -100]
    # truncation removed the root (word 2): the kept words become roots
    assert project_heads_to_subwords([2, 2, 2], [0, 1, None]) == [0, 1, -100]
    assert reroute_heads([1, 2, 2], [True, False, True]) == [2, -100, 2]


# ---------------------------------------------------------------------------------------------
# property tests on random trees


@st.composite
def forests(draw, max_sentences=3, max_words=12):
    """A forest of random trees, one per sentence, sentences contiguous."""
    heads, sizes = [], []
    for _ in range(draw(st.integers(1, max_sentences))):
        n = draw(st.integers(1, max_words))
        order = draw(st.permutations(range(n)))
        offset = len(heads)
        local = [0] * n
        local[order[0]] = order[0]
        for k in range(1, n):
            local[order[k]] = order[draw(st.integers(0, k - 1))]
        heads += [h + offset for h in local]
        sizes.append(n)
    return heads, sizes


@settings(max_examples=80, deadline=None)
@given(forests(), st.data())
def test_projection_keeps_a_valid_forest(forest, data):
    heads, sizes = forest
    pieces = [data.draw(st.integers(1, 3)) for _ in heads]
    word_ids = [None] + [w for w, p in enumerate(pieces) for _ in range(p)] + [None]
    sub = project_heads_to_subwords(heads, word_ids)
    validate_heads(sub, ignore_index=-100)
    roots = {r for r in tree_roots(sub, ignore_index=-100) if r >= 0}
    assert len(roots) == len(sizes)  # one tree per sentence
    assert sub[0] == sub[-1] == -100
    # each word's last subword points to its head word's first subword (or itself for roots)
    first = {w: word_ids.index(w) for w in range(len(heads))}
    for w in range(len(heads)):
        last = len(word_ids) - 1 - word_ids[::-1].index(w)
        assert sub[last] == (last if heads[w] == w else first[heads[w]])
    # truncation keeps a valid forest too
    cut = data.draw(st.integers(1, len(word_ids)))
    validate_heads(project_heads_to_subwords(heads, word_ids[:cut]), ignore_index=-100)


@settings(max_examples=80, deadline=None)
@given(forests())
def test_relative_depth_antisymmetric_and_labeled_symmetry(forest):
    heads, _ = forest
    m = relative_depth_matrix(heads)
    assert (m.data == -m.data.T).all() and (m.mask == m.mask.T).all()
    lab = labeled_relation_matrix(heads, k=2)
    n = len(heads)
    for i in range(n):
        for j in range(n):
            a, b = lab[i, j], lab[j, i]
            if isinstance(a, str):
                assert a == b  # self / sib / none are symmetric
            else:
                assert a == -b and 1 <= abs(a) <= 2 and a == m[i, j]


def test_reroute_to_nearest_kept_ancestor():
    #   5 (root)
    #   ├── 4
    #   │   └── 3
    #   │       └── 1
    #   │           └── 0
    #   └── 2
    heads = [1, 3, 5, 4, 5, 5]
    # drop 1 and 3: word 0 climbs past both to 4, not to the root 5
    assert reroute_heads(heads, [True, False, True, False, True, True]) == [4, -100, 5, -100, 5, 5]
    # drop 1 and the root: 0 attaches to 3; 4 and 2 have no kept ancestor and become roots
    assert reroute_heads(heads, [True, False, True, True, True, False]) == [3, -100, 2, 4, 4, -100]


@settings(max_examples=80, deadline=None)
@given(forests(), st.data())
def test_reroute_keeps_ancestry(forest, data):
    heads, _ = forest
    keep = data.draw(st.lists(st.booleans(), min_size=len(heads), max_size=len(heads)))
    new = reroute_heads(heads, keep)
    validate_heads(new, ignore_index=-100)
    for i, k in enumerate(keep):  # nearest kept ancestor on the original heads, else itself
        kept_ancestors = [a for a in _ancestors(heads, i) if keep[a]]
        assert new[i] == (-100 if not k else kept_ancestors[0] if kept_ancestors else i)


def _ancestors(heads, i):
    while heads[i] != i:
        i = heads[i]
        yield i


@settings(max_examples=80, deadline=None)
@given(forests(max_sentences=1), st.data())
def test_word_tree_of_a_projected_tree_is_the_word_tree(forest, data):
    """SPEC §9: mapping a §5 projection back to words gives the words' own tree."""
    heads, _ = forest
    pieces = [data.draw(st.integers(1, 3)) for _ in heads]
    word_ids = [None] + [w for w, p in enumerate(pieces) for _ in range(p)] + [None]
    sub = project_heads_to_subwords(heads, word_ids)
    assert word_heads_from_subword_heads(sub, word_ids, len(heads)) == heads


@settings(max_examples=80, deadline=None)
@given(forests(max_sentences=1, max_words=14), st.data())
def test_word_tree_of_any_subword_tree_is_a_tree(forest, data):
    """Any single-root subword tree (not only projection-shaped ones, e.g. a model's prediction) maps to
    one word tree; words without a token attach to the preceding word."""
    token_heads, _ = forest
    n_tokens = len(token_heads)
    n_words = data.draw(st.integers(1, n_tokens + 2))
    # contiguous words over the tokens; words past the last token (e.g. truncated away) get none
    cuts = sorted(data.draw(st.lists(st.integers(1, max(n_tokens - 1, 1)), max_size=min(n_words - 1, n_tokens - 1),
                                     unique=True))) if n_tokens > 1 else []
    word_ids, w = [], 0
    for t in range(n_tokens):
        if w < len(cuts) and t == cuts[w]:
            w += 1
        word_ids.append(w)
    n_words = max(n_words, max(word_ids) + 1)
    word_heads = word_heads_from_subword_heads(token_heads, word_ids, n_words)
    validate_heads(word_heads, single_tree=True)
    assert all(word_heads[w] == max(word_ids) for w in range(max(word_ids) + 1, n_words))


def test_word_tree_cycle_through_a_word_is_broken_at_its_highest_subword():
    # words A = tokens 0, 1 and B = token 2; 0 is the root, 1 -> 2 -> 0: A's last subword leaves A and comes
    # back, so "the word of the last subword's head" would give A -> B -> A; the highest subword of A is the root
    assert word_heads_from_subword_heads([0, 2, 0], [0, 0, 1], 2) == [0, 0]
    # special tokens around the tree are skipped; a word without a token follows its predecessor
    assert word_heads_from_subword_heads([-100, 2, 2, 2, -100], [None, 0, 2, 2, None], 3) == [2, 0, 2]


@pytest.mark.parametrize(
    "token_heads, word_ids, n_words, message",
    [
        ([0, 1], [0, 1], 2, "2 roots"),
        ([0, 0], [0, 5], 2, "word id 5"),
        ([0, -100], [0, 1], 2, "has no head"),
        ([-100, -100], [None, None], 1, "no word has a token"),
        ([0], [0, 0], 1, "1 token heads for 2 word ids"),
    ],
)
def test_word_tree_errors(token_heads, word_ids, n_words, message):
    with pytest.raises(ValueError, match=message):
        word_heads_from_subword_heads(token_heads, word_ids, n_words)
