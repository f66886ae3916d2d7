import pytest

pytest.importorskip("transformers")

from transformers import AutoTokenizer  # noqa: E402

from hf_syntax_mt.features.joint_bpe import train_joint_bpe_tokenizer  # noqa: E402
from hf_syntax_mt.features.synthetic import generate_synthetic_corpus  # noqa: E402

JAPANESE = [
    "私は赤い車を買った。",
    "猫が庭で静かに寝ている。",
    "明日は雨が降るでしょう。",
    "彼女は新しい本を三冊読んだ。",
    "駅の近くに小さな店がある。",
]


@pytest.fixture(scope="module")
def corpus():
    return generate_synthetic_corpus(400, seed=5)


@pytest.fixture(scope="module")
def tokenizer(corpus):
    texts = [e.source for e in corpus] + [e.target for e in corpus] + JAPANESE * 3
    return train_joint_bpe_tokenizer(texts, vocab_size=600, min_frequency=2, model_max_length=128)


def test_special_tokens_and_eos(tokenizer, corpus):
    assert tokenizer.convert_tokens_to_ids(["<pad>", "</s>", "<unk>"]) == [0, 1, 2]
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    assert tokenizer.model_max_length == 128
    assert 300 < len(tokenizer) <= 600
    single = tokenizer(corpus[0].source)
    assert single["input_ids"][-1] == 1 and single["input_ids"].count(1) == 1
    assert "token_type_ids" not in single
    pair = tokenizer(corpus[0].source, corpus[1].source)
    n_a = len(tokenizer(corpus[0].source)["input_ids"])
    assert pair["input_ids"][n_a - 1] == 1 and pair["input_ids"][-1] == 1 and pair["input_ids"].count(1) == 2
    labels = tokenizer(text_target=corpus[0].target)["input_ids"]
    assert labels[-1] == 1
    batch = tokenizer([corpus[0].source, "the cat"], padding=True)
    assert batch["input_ids"][1][-1] == 0 and batch["attention_mask"][1][-1] == 0


def test_decode_gives_clean_text(tokenizer, corpus):
    for text in [e.source for e in corpus[:50]] + [e.target for e in corpus[:50]] + JAPANESE:
        ids = tokenizer(text)["input_ids"]
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.decode(tokenizer("  the   cat  .")["input_ids"], skip_special_tokens=True) == "the cat ."
    # words seen in training stay whole; the synthetic target vocabulary is covered
    assert tokenizer.tokenize("the cat") == ["▁the", "▁cat"]


@pytest.mark.parametrize(
    "text",
    ["the  old cat slept under the table .", "  leading and trailing spaces  ", "私は赤い車を買った。",
     "猫が庭で　静かに寝ている。", "ｆｕｌｌ width ＡＢＣ and ﬁne ligature", "unseen zebra ㍿ ½ chars"],
)
def test_offsets_index_the_raw_string(tokenizer, text):
    enc = tokenizer(text, return_offsets_mapping=True)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    words = [(i, i + len(w)) for i, w in _word_spans(text)]
    for token, (start, end) in zip(tokens, enc["offset_mapping"]):
        if token == "</s>":
            assert (start, end) == (0, 0)
            continue
        assert 0 <= start < end <= len(text)
        assert text[start:end].strip() == text[start:end]  # never covers whitespace
        assert any(ws <= start and end <= we for ws, we in words)  # inside one word
    # every non-space character of the input is covered by some token
    covered = {k for s, e in enc["offset_mapping"] for k in range(s, e)}
    assert covered == {k for k, ch in enumerate(text) if not ch.isspace()}
    if text.isascii():  # without normalization effects the token text is the raw slice
        for token, (start, end) in zip(tokens, enc["offset_mapping"]):
            if token not in ("</s>", "<unk>", "▁"):
                assert token.lstrip("▁") == text[start:end]


def _word_spans(text):
    spans, start = [], None
    for k, ch in enumerate(text + " "):
        if ch.isspace() and start is not None:
            spans.append((start, text[start:k]))
            start = None
        elif not ch.isspace() and start is None:
            start = k
    return spans


def test_save_and_autotokenizer_round_trip(tokenizer, corpus, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = [e.source for e in corpus[:30]] + [e.target for e in corpus[:30]] + JAPANESE + ["ｆｕｌｌ ＡＢＣ ㍿"]
    for text in texts:
        a = tokenizer(text, return_offsets_mapping=True)
        b = loaded(text, return_offsets_mapping=True)
        assert a["input_ids"] == b["input_ids"] and a["offset_mapping"] == b["offset_mapping"]
        assert loaded.decode(b["input_ids"], skip_special_tokens=True) == tokenizer.decode(a["input_ids"], skip_special_tokens=True)
    assert loaded(texts[0], texts[1])["input_ids"] == tokenizer(texts[0], texts[1])["input_ids"]
    assert (loaded.pad_token_id, loaded.eos_token_id, loaded.unk_token_id) == (0, 1, 2)
    assert loaded.model_max_length == 128
    assert "token_type_ids" not in loaded(texts[0])
    assert loaded.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()


def test_normalization_option():
    texts = ["ＡＢＣ abc"] * 5
    nfkc = train_joint_bpe_tokenizer(texts, vocab_size=50)
    raw = train_joint_bpe_tokenizer(texts, vocab_size=50, normalization=None)
    assert nfkc.decode(nfkc("ＡＢＣ")["input_ids"], skip_special_tokens=True) == "ABC"
    assert raw.decode(raw("ＡＢＣ")["input_ids"], skip_special_tokens=True) == "ＡＢＣ"


def test_split_punctuation_option():
    texts = ["the cat sat.", "a dog ran, then sat.", "don't (stop) -- now!"] * 20
    plain = train_joint_bpe_tokenizer(texts, vocab_size=80)
    split = train_joint_bpe_tokenizer(texts, vocab_size=80, split_punctuation=True)
    assert plain.tokenize("the cat sat.")[-1] == "▁sat."  # without the option BPE merges word and full stop
    assert split.tokenize("the cat sat.")[-2:] == ["▁sat", "."]
    text = "a cat sat, then ran."
    pieces = split.tokenize(text)
    assert pieces[-1] == "." and "," in pieces
    punctuation = set(",.'()-!")
    for t in texts[:3] + [text, "a dog sat ."]:
        for piece in split.tokenize(t):  # a piece with punctuation is that one mark (after an optional "▁")
            assert not any(c in punctuation for c in piece) or piece.lstrip("▁") in punctuation, piece
        enc = split(t, return_offsets_mapping=True)
        assert split.decode(enc["input_ids"], skip_special_tokens=True) == t
        for tok, (s, e) in zip(split.convert_ids_to_tokens(enc["input_ids"]), enc["offset_mapping"]):
            if tok in punctuation:
                assert t[s:e] == tok  # punctuation pieces index exactly their own character
    pre_tokenize = split.backend_tokenizer.pre_tokenizer.pre_tokenize_str
    assert pre_tokenize("a dog sat .")[-1] == ("▁.", (10, 11))  # a spaced punctuation mark keeps its "▁"


def test_bad_input():
    with pytest.raises(ValueError, match="vocab_size"):
        train_joint_bpe_tokenizer(["a b"], vocab_size=3)
    with pytest.raises(ValueError, match="non-empty"):
        train_joint_bpe_tokenizer(["", "  "])
    with pytest.raises(ValueError, match="strings"):
        train_joint_bpe_tokenizer(["a", 3])
    with pytest.raises(ValueError, match="normalization"):
        train_joint_bpe_tokenizer(["a"], normalization="NFD!")
