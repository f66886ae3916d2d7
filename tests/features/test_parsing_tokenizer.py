"""`SyntaxMTParsingTokenizer` (`hf_syntax_mt.features.parsing_tokenizer`): the saved tokenizer of a model trained with
a parser attaches the features the package's own path computes, pads them with their ignore values, pickles without
its parser, hashes alike before and after parsing, and names the package to install when the parser is missing."""

import json
import pickle
import shutil

import pytest
import torch
from transformers import AutoConfig, AutoTokenizer, DataCollatorForSeq2Seq

from hf_syntax_mt import DataCollatorForSyntaxSeq2Seq, SyntaxFeatureProcessor, SyntaxMTParsingTokenizer
from hf_syntax_mt.training.run import train
from training_helpers import scratch_dir, tiny_args

spacy_util = pytest.importorskip("spacy.util")
if not spacy_util.is_package("ja_ginza"):
    pytest.skip("ja_ginza is not installed", allow_module_level=True)

PAIRS = [  # written for these tests
    ("私は赤い車を買った。", "I bought a red car ."),
    ("猫が庭で寝ている。", "The cat is sleeping in the garden ."),
    ("彼女は新しい本を読んだ。", "She read a new book ."),
    ("兄は毎朝公園を走る。", "My brother runs in the park every morning ."),
]
SOURCES = [ja for ja, _ in PAIRS]


@pytest.fixture(scope="module")
def sla_model():
    """A tiny transformer_dep_rel+transformer_sla model trained 2 updates with GiNZA: it reads heads and distances."""
    work = scratch_dir("parsing_tokenizer")
    (work / "train.ja").write_text("".join(ja + "\n" for ja, _ in PAIRS), encoding="utf-8")
    (work / "train.en").write_text("".join(en + "\n" for _, en in PAIRS), encoding="utf-8")
    model_args, data_args, training_args = tiny_args(work / "model", "transformer_dep_rel+transformer_sla",
                                                     parser="ja_ginza", data_dir=work, max_steps=2, eval_strategy="no",
                                                     save_strategy="no", load_best_model_at_end=False)
    data_args.source_lang, data_args.target_lang, data_args.validation_file = "ja", "en", None
    model_args.vocab_size = 200
    train(model_args, data_args, training_args)
    return work / "model"


def test_the_saved_tokenizer_parses_and_gives_the_package_s_features(sla_model):
    saved = json.loads((sla_model / "tokenizer_config.json").read_text())
    assert saved["tokenizer_class"] == "SyntaxMTParsingTokenizer"
    assert saved["syntax_features"]["parser"]["model"] == "ja_ginza"
    remote = (sla_model / "parsing_tokenizer.py").read_text()  # its remote code: the installed package's class
    assert "from hf_syntax_mt.features.parsing_tokenizer import SyntaxMTParsingTokenizer" in remote
    tokenizer = AutoTokenizer.from_pretrained(sla_model)
    assert isinstance(tokenizer, SyntaxMTParsingTokenizer) and tokenizer.parses_sources
    config = AutoConfig.from_pretrained(sla_model)
    with tokenizer.without_parsing():
        expected = SyntaxFeatureProcessor.from_config(config, tokenizer, max_source_length=6)(SOURCES,
                                                                                             return_tensors=None)
    got = tokenizer(SOURCES, max_length=6, truncation=True)
    assert set(got) == {"input_ids", "attention_mask", "source_heads", "source_distances"}
    for name in ("input_ids", "source_heads", "source_distances"):
        assert got[name] == expected[name], name
    assert all(len(row) == 6 for row in got["input_ids"])  # truncated, the features with the tokens
    one = tokenizer(SOURCES[0])
    assert one["source_heads"] == tokenizer(SOURCES[:1])["source_heads"][0]  # a string: one example
    target = tokenizer(text_target=[en for _, en in PAIRS])
    assert set(target) == {"input_ids", "attention_mask"}  # targets stay plain
    both = tokenizer(SOURCES, text_target=[en for _, en in PAIRS])
    assert both["labels"] == target["input_ids"] and both["source_heads"] == tokenizer(SOURCES)["source_heads"]


def test_padding_and_the_collator_pad_the_features_with_their_ignore_values(sla_model):
    tokenizer = AutoTokenizer.from_pretrained(sla_model)
    plain = tokenizer(SOURCES)
    batch = tokenizer(SOURCES, padding="max_length", max_length=24, truncation=True, return_tensors="pt")
    assert batch["input_ids"].shape == batch["source_heads"].shape == batch["source_distances"].shape == (4, 24)
    for row, heads in enumerate(plain["source_heads"]):
        assert batch["source_heads"][row, :len(heads)].tolist() == heads
        assert (batch["source_heads"][row, len(heads):] == -100).all()
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    rows = [{**{k: v[i] for k, v in plain.items()}, "labels": [5, 6, 1][: 1 + i % 3]} for i in range(4)]
    collated = collator(rows)
    longest = max(len(ids) for ids in plain["input_ids"])
    assert collated["source_heads"].shape == (4, longest) and collated["source_heads"].dtype == torch.long
    assert collated["source_distances"].dtype == torch.float32
    assert collated["labels"][0].tolist() == [5, -100, -100]
    tokenizer.padding_side = "left"
    left = tokenizer.pad([{k: v[i] for k, v in plain.items()} for i in range(2)], return_tensors="pt")
    shift = left["input_ids"].shape[1] - len(plain["input_ids"][0])
    assert left["source_heads"][0, shift:].tolist() == [h if h == -100 else h + shift for h in plain["source_heads"][0]]


def test_a_batch_mixing_parsed_and_unparsed_examples_is_refused_naming_the_feature_and_the_example(sla_model):
    """Never a KeyError (the parsed example first) nor the features dropped for the whole batch (the other order)."""
    tokenizer = AutoTokenizer.from_pretrained(sla_model)
    parsed = tokenizer(SOURCES[0])
    with tokenizer.without_parsing():
        plain = tokenizer(SOURCES[1])
    for rows, message in (([parsed, plain], "example 1 of the batch has no source_heads but example 0 has"),
                          ([plain, parsed], "example 0 of the batch has no source_heads but example 1 has")):
        with pytest.raises(ValueError, match=message):
            tokenizer.pad(rows, return_tensors="pt")
        with pytest.raises(ValueError, match=message):
            DataCollatorForSyntaxSeq2Seq(tokenizer)(rows)
    padded = tokenizer.pad([parsed, tokenizer(SOURCES[1])], return_tensors="pt")  # parsed alike: padded alike
    assert padded["source_heads"].shape == padded["source_distances"].shape == padded["input_ids"].shape


def test_it_pickles_without_its_parser_and_hashes_alike_before_and_after_parsing(sla_model):
    from datasets.fingerprint import Hasher

    tokenizer = AutoTokenizer.from_pretrained(sla_model)
    before = Hasher.hash(tokenizer)
    from hf_syntax_mt.features.syntax_features import _TOKENIZER_PROCESSORS

    tokenizer(SOURCES[:1])  # loads GiNZA
    assert tokenizer in _TOKENIZER_PROCESSORS
    assert Hasher.hash(tokenizer) == before  # so a second identical map is served from the datasets cache
    copy = pickle.loads(pickle.dumps(tokenizer))
    assert copy not in _TOKENIZER_PROCESSORS  # it loads its own parser, in its process
    assert copy(SOURCES)["source_heads"] == tokenizer(SOURCES)["source_heads"]


def test_a_missing_parser_is_named_with_what_to_install(sla_model, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(sla_model, folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["syntax_features"]["parser"]["model"] = "xx_no_such_pipeline"
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    tokenizer = AutoTokenizer.from_pretrained(folder)  # loading needs no parser (the pipeline may be given parses)
    with pytest.raises(ImportError) as raised:
        tokenizer(SOURCES)
    message = str(raised.value)
    assert "\n" not in message and "xx_no_such_pipeline" in message and "install" in message


def test_a_model_that_reads_no_parse_keeps_a_plain_tokenizer(tmp_path):
    out = tmp_path / "abs"
    train(*tiny_args(out, "transformer_abs", max_steps=1, eval_strategy="no", save_strategy="no",
                     load_best_model_at_end=False))
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"


def test_the_pipeline_and_the_length_checks_parse_once_with_the_pipelines_parser(sla_model):
    """The pipeline parses through its own `SyntaxFeatureProcessor`: the tokenizer it loads (a parsing one) encodes
    plainly there, so no sentence is parsed twice."""
    from transformers import pipeline

    from hf_syntax_mt.features.syntax_features import _TOKENIZER_PROCESSORS

    translate = pipeline("syntax-translation", model=str(sla_model), max_new_tokens=4)
    assert isinstance(translate.tokenizer, SyntaxMTParsingTokenizer)
    outputs = translate(SOURCES[:2])
    assert len(outputs) == 2 and all("translation_text" in out for out in outputs)
    assert translate.tokenizer not in _TOKENIZER_PROCESSORS  # its own parser was never loaded


WITHOUT_THE_PACKAGE = """
import json, sys
# an editable install's finder (a class) and its path hook, the checkout itself
sys.meta_path = [f for f in sys.meta_path if "editable" not in getattr(f, "__name__", type(f).__name__).lower()]
sys.path = [p for p in sys.path if p not in ("", ".", sys.argv[2]) and "__editable__" not in p]
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
print(json.dumps({"package": "hf_syntax_mt" in sys.modules, "ids": tokenizer(json.loads(sys.argv[3]))["input_ids"]}))
"""


def test_without_the_package_the_saved_tokenizer_loads_as_the_model_does(sla_model, tmp_path):
    """`trust_remote_code=True` where hf_syntax_mt cannot be imported (its finder and folder taken off the path): the
    plain tokenizer of the same vocabulary, the same ids (natural and segmented Japanese alike), and one warning that
    it does not parse (it failed: "Run `pip install hf_syntax_mt`", a name the index does not have)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    texts = SOURCES + ["私 は 赤い 車 を 買っ た 。"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", WITHOUT_THE_PACKAGE, str(sla_model), repo, json.dumps(texts)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["package"] is False
    assert got["ids"] == AutoTokenizer.from_pretrained(sla_model)(texts)["input_ids"]
    assert "hf_syntax_mt is not installed, so this tokenizer does not parse" in done.stderr
    assert "source_heads, source_distances) are to be built by hand" in done.stderr
