from collections import Counter

import pytest

from hf_syntax_mt.features.synthetic import (
    TARGET_WORDS,
    SyntheticExample,
    generate_synthetic_corpus,
    random_dependency_tree,
    target_from_tree,
    write_synthetic_corpus,
)


@pytest.fixture(scope="module")
def corpus():
    return generate_synthetic_corpus(500, seed=3)


def assert_tree(heads):
    n = len(heads)
    assert all(0 <= h < n for h in heads)
    roots = [i for i, h in enumerate(heads) if h == i]
    assert len(roots) == 1
    for i in range(n):  # every word reaches the root without a cycle
        seen, j = set(), i
        while heads[j] != j:
            assert j not in seen
            seen.add(j)
            j = heads[j]


def tree_leaves(bracketed):
    """Leaves of a bracketed tree, parsed independently of the generator."""
    tokens = bracketed.replace("(", " ( ").replace(")", " ) ").split()
    leaves = [tok for prev, tok in zip(tokens, tokens[1:]) if tok not in "()" and prev not in "("]
    assert tokens.count("(") == tokens.count(")")
    return leaves


def test_trees_are_valid(corpus):
    for ex in corpus:
        words = ex.source.split()
        assert len(words) == len(ex.source_heads) == len(ex.source_deprels) == len(ex.source_xpos)
        assert_tree(ex.source_heads)
        assert [d for i, d in enumerate(ex.source_deprels) if ex.source_heads[i] == i] == ["root"]
        assert len(ex.target.split()) == len(ex.target_heads) == len(ex.target_deprels) == len(ex.alignment)
        assert_tree(ex.target_heads)
        assert tree_leaves(ex.source_tree) == words
        assert ex.source_tree.startswith("(ROOT (S ")


def test_lengths_vocabulary_and_distinct_sentences(corpus):
    lengths = [len(ex.source.split()) for ex in corpus]
    assert min(lengths) >= 4 and max(lengths) <= 25 and 9 <= sum(lengths) / len(lengths) <= 15
    assert len({ex.source for ex in corpus}) == len(corpus)
    assert len(set(TARGET_WORDS.values())) == len(TARGET_WORDS) > 200
    used = Counter(w for ex in corpus for w in ex.source.split())
    assert len(used) > 150
    short = generate_synthetic_corpus(50, seed=3, max_words=8)
    assert max(len(ex.source.split()) for ex in short) <= 8


def test_target_is_head_final_function_of_tree(corpus):
    # A hand-checked example: subject and object get particles, prepositions become
    # postpositions, dependents precede their head, the full stop stays last.
    words = "the big cat chased his dog in the garden .".split()
    heads = [2, 2, 3, 3, 5, 3, 8, 8, 3, 3]
    deprels = ["det", "amod", "nsubj", "root", "det", "obj", "case", "det", "obl", "punct"]
    tokens, t_heads, t_deprels, alignment = target_from_tree(words, heads, deprels)
    T = TARGET_WORDS
    assert tokens == [T["the"], T["big"], T["cat"], "ga", T["his"], T["dog"], "o",
                      T["the"], T["garden"], T["in"], T["chased"], "."]
    assert alignment == [0, 1, 2, -1, 4, 5, -1, 7, 8, 6, 3, 9]
    assert t_heads == [2, 2, 10, 2, 5, 10, 5, 8, 10, 8, 10, 10]
    assert t_deprels[3] == t_deprels[6] == "case"
    for ex in corpus:  # the promises of the module docstring, checked on every generated pair
        src, tgt, align = ex.source.split(), ex.target.split(), ex.alignment
        heads, rels, particle = ex.target_heads, ex.target_deprels, {"nsubj": "ga", "obj": "o"}
        assert sorted(i for i in align if i >= 0) == list(range(len(src))) and tgt[-1] == "."
        assert align.count(-1) == sum(r in particle for r in ex.source_deprels)
        phrase = [[t] for t in range(len(tgt))]  # target tokens under each token
        for t in range(len(tgt)):
            for a in _ancestors(heads, t):
                phrase[a].append(t)
        for t, h in enumerate(heads):
            if align[t] >= 0:  # word-for-word translation, tree carried over through the alignment
                i = align[t]
                assert tgt[t] == T[src[i]] and rels[t] == ex.source_deprels[i]
                assert align[h] == ex.source_heads[i]
            else:  # a particle depends on the subject / object it marks, right after its phrase
                assert (tgt[t], rels[t]) == (particle[rels[h]], "case") and max(phrase[h]) == t
            # head-final: dependents precede their head; case markers and punctuation follow it
            assert t == h or (t > h) == (rels[t] in ("case", "punct"))
            assert sorted(phrase[t]) == list(range(min(phrase[t]), max(phrase[t]) + 1))  # contiguous
            for u in range(t + 1, len(tgt)):  # dependents on one side of a head keep the source order
                if h == heads[u] != t and (t < h) == (u < h) and min(align[t], align[u]) >= 0:
                    assert align[t] < align[u]


def test_syntax_matters():
    """Same words, different trees -> different targets (PP attachment)."""
    words = "the cat saw the dog with the key .".split()
    verb_attach = [1, 2, 2, 4, 2, 7, 7, 2, 2]
    noun_attach = [1, 2, 2, 4, 2, 7, 7, 4, 2]
    deprels_v = ["det", "nsubj", "root", "det", "obj", "case", "det", "obl", "punct"]
    deprels_n = deprels_v[:7] + ["nmod", "punct"]
    assert target_from_tree(words, verb_attach, deprels_v)[0] != target_from_tree(words, noun_attach, deprels_n)[0]


def test_bad_trees_raise():
    with pytest.raises(ValueError, match="root"):
        target_from_tree(["a", "b"], [1, 0], ["x", "y"])
    with pytest.raises(ValueError, match="equal length"):
        target_from_tree(["a", "b"], [0], ["root"])
    with pytest.raises(ValueError, match="connected"):
        target_from_tree(["a", "b", "c"], [0, 2, 1], ["root", "x", "y"])
    with pytest.raises(ValueError, match="heads must lie"):
        target_from_tree(["a", "b"], [0, 2], ["root", "x"])


def test_deterministic_per_seed():
    a = generate_synthetic_corpus(100, seed=7)
    b = generate_synthetic_corpus(100, seed=7)
    c = generate_synthetic_corpus(100, seed=8)
    assert a == b
    assert [e.source for e in a] != [e.source for e in c]
    assert all(isinstance(e, SyntheticExample) for e in a)
    assert generate_synthetic_corpus(10, seed=7) == a[:10]


def test_written_files_round_trip_through_stanza(tmp_path):
    from stanza.models.constituency.tree_reader import read_trees
    from stanza.utils.conll import CoNLL

    paths = write_synthetic_corpus(tmp_path, n_train=40, n_dev=10, n_test=10, seed=1)
    examples = generate_synthetic_corpus(60, seed=1)
    for split, (lo, hi) in {"train": (0, 40), "dev": (40, 50), "test": (50, 60)}.items():
        exs = examples[lo:hi]
        files = paths[split]
        assert files["src"].read_text(encoding="utf-8").splitlines() == [e.source for e in exs]
        assert files["tgt"].read_text(encoding="utf-8").splitlines() == [e.target for e in exs]
        for side in ("src", "tgt"):
            text = files[f"{side}.conllu"].read_text(encoding="utf-8")
            for line in text.splitlines():
                assert line == "" or line.startswith("#") or len(line.split("\t")) == 10
            doc = CoNLL.conll2doc(input_str=text)
            assert len(doc.sentences) == len(exs)
            for sent, ex in zip(doc.sentences, exs):
                words = ex.source.split() if side == "src" else ex.target.split()
                heads = ex.source_heads if side == "src" else ex.target_heads
                assert [w.text for w in sent.words] == words
                assert [w.head - 1 if w.head else i for i, w in enumerate(sent.words)] == heads
        trees = files["src.tree"].read_text(encoding="utf-8").splitlines()
        assert trees == [e.source_tree for e in exs]
        for tree, ex in zip(read_trees("\n".join(trees)), exs):
            assert tree.leaf_labels() == ex.source.split()
            assert tree.label == "ROOT"
    src_doc = CoNLL.conll2doc(input_str=paths["dev"]["src.conllu"].read_text(encoding="utf-8"))
    assert src_doc.sentences[0].words[0].upos == "DET"
    assert src_doc.sentences[0].words[0].xpos == "DT"


def test_random_dependency_tree_is_one_tree_and_seeded():
    import random

    for length in (1, 2, 7, 40):
        for seed in range(5):
            heads = random_dependency_tree(length, random.Random(seed))
            assert len(heads) == length
            assert_tree(heads)
            assert heads == random_dependency_tree(length, random.Random(seed))
    depths = {max(_depth(random_dependency_tree(30, random.Random(seed)), i) for i in range(30)) for seed in range(20)}
    assert len(depths) > 2  # different shapes, not one fixed chain or star


def _depth(heads, i):
    depth = 0
    while heads[i] != i:
        i, depth = heads[i], depth + 1
    return depth


def _ancestors(heads, i):
    while heads[i] != i:
        i = heads[i]
        yield i
