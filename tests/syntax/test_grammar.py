"""The demo grammar's parser (`hf_syntax_mt.syntax.grammar`, `GrammarAnnotator`): every generated sentence parses into
a tree the generator could have drawn, mostly the one it drew; text outside the grammar is refused, naming why."""

import pytest

from hf_syntax_mt.features.synthetic import generate_synthetic_corpus, target_from_tree
from hf_syntax_mt.syntax import GrammarAnnotator, load_annotator, parse_bracketed, tree_leaves
from hf_syntax_mt.syntax.grammar import parse_grammar_sentence


def test_every_generated_sentence_parses_and_most_parses_are_the_generators_tree():
    examples = generate_synthetic_corpus(500, seed=11)
    same = 0
    for example in examples:
        words = example.source.split()
        heads, deprels, xpos, tree = parse_grammar_sentence(words)
        target_from_tree(words, heads, deprels)  # one tree over all the words
        assert tree_leaves(parse_bracketed(tree)) == words and xpos == example.source_xpos
        same += (heads, deprels, tree) == (example.source_heads, example.source_deprels, example.source_tree)
    assert same >= 0.8 * len(examples)  # the rest are attachment ambiguities, read the more probable way


def test_an_ambiguous_attachment_takes_the_more_probable_reading():
    # a verb's PP at depth 0 (p 0.3) is likelier than its object's (depth 1: p 0.15)
    heads, deprels, *_ = parse_grammar_sentence("the man saw the dog with the hat .".split())
    assert (heads[5], deprels[5]) == (7, "case") and (heads[7], deprels[7]) == (2, "obl")


def test_the_annotator_reads_text_as_typed_and_refuses_what_is_no_sentence_of_the_grammar():
    annotator = load_annotator(GrammarAnnotator().to_dict())
    [one] = annotator.annotate("The dog saw the cat.  Some cat slept .")
    assert one.words == ["The", "dog", "saw", "the", "cat", ".", "Some", "cat", "slept", "."]
    assert [one.text[start:end] for start, end in one.spans] == one.words
    assert one.sentence_ids == [0] * 6 + [1] * 4 and one.heads[6:] == [7, 8, 8, 8] and len(one.trees) == 2
    with pytest.raises(ValueError, match="'zebra' is not a word of the demo grammar"):
        annotator.annotate("the zebra slept .")
    with pytest.raises(ValueError, match="'the dog slept' is not a sentence of the demo grammar"):
        annotator.annotate("the dog slept")
