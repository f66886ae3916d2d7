"""The source-relative length cap (`length_cap.py`): the processor against its formula, greedy decoding against
uncapped decoding cut at the cap, the pipeline and CLI options and their errors."""

import math

import pytest
import torch
from transformers import LogitsProcessorList, pipeline

import hf_syntax_mt.inference.pipeline  # noqa: F401  (registers "syntax-translation")
from hf_syntax_mt import SourceLengthCapLogitsProcessor, SyntaxMTForConditionalGeneration
from hf_syntax_mt.cli import main
from hf_syntax_mt.syntax import PreParsedAnnotator, read_conllu
from model_helpers import random_batch, tiny_config
from training_helpers import synthetic_corpus, trained_model

DEP = "transformer_dep_rel+transformer_dbsa+transformer_sla"


def test_rows_at_their_cap_may_only_end():
    """Sentences of 3 and 5 source tokens, a=1.5, b=1: caps floor(5.5)=5 and floor(8.5)=8; two rows each
    (beams). After 5 generated tokens the first sentence's rows keep only </s> (with its own score), the
    second's are untouched."""
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    cap = SourceLengthCapLogitsProcessor(mask, 1.5, 1, eos_token_id=2)
    assert cap.caps.tolist() == [5, 8]
    scores = torch.randn(4, 7)
    for generated, ended in ((4, [False, False, False, False]), (5, [True, True, False, False]),
                             (8, [True, True, True, True])):
        input_ids = torch.zeros(4, 1 + generated, dtype=torch.long)  # decoder start + generated
        out = cap(input_ids, scores.clone())
        for row in range(4):
            if ended[row]:
                expected = torch.full((7,), -math.inf)
                expected[2] = scores[row, 2]
                assert torch.equal(out[row], expected)
            else:
                assert torch.equal(out[row], scores[row])


def test_cap_formula_edges():
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 4:] = 0
    assert SourceLengthCapLogitsProcessor(mask, 0.3, eos_token_id=1).caps.tolist() == [3, 1, 3]  # 0.3*10: 3, not 2
    assert SourceLengthCapLogitsProcessor(mask, b=7, eos_token_id=1).caps.tolist() == [7, 7, 7]  # a fixed cap
    assert SourceLengthCapLogitsProcessor(mask, 0.01, eos_token_id=1).caps.tolist() == [1, 1, 1]  # at least 1
    with pytest.raises(ValueError, match="built for another batch"):
        SourceLengthCapLogitsProcessor(mask, 1.0, eos_token_id=1)(torch.zeros(4, 2, dtype=torch.long), torch.zeros(4, 5))


@pytest.mark.parametrize("a, b, named", [(-1, None, "max_length_a=-1"), (None, float("nan"), "max_length_b=nan"),
                                         ("2", None, "max_length_a='2'"), (0, 0, "would be 0"), (None, None, "0")])
def test_bad_caps_are_named(a, b, named):
    with pytest.raises(ValueError, match=named):
        SourceLengthCapLogitsProcessor(torch.ones(1, 3), a, b, eos_token_id=1)


def test_greedy_with_cap_is_uncapped_greedy_cut_at_the_cap():
    """Greedy decoding is prefix-consistent, so capped output = the uncapped output's first cap_i tokens
    and </s> where it was longer, the uncapped output itself where it was not. An untrained model rarely
    ends by itself, so most rows reach their cap."""
    torch.manual_seed(0)
    config = tiny_config()
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([4, 9, 6, 12], seed=3)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        uncapped = model.generate(**inputs, max_length=40, min_length=0)
        cap = SourceLengthCapLogitsProcessor(inputs["attention_mask"], 0.5, 2, eos_token_id=config.eos_token_id)
        capped = model.generate(**inputs, max_length=40, logits_processor=LogitsProcessorList([cap]))
    eos, pad = config.eos_token_id, config.pad_token_id
    reached = 0
    for row, length in enumerate(batch["attention_mask"].sum(-1).tolist()):
        limit = math.floor(0.5 * length + 2)
        free = [t for t in uncapped[row, 1:].tolist() if t != pad]
        free = free[: free.index(eos) + 1] if eos in free else free
        got = [t for t in capped[row, 1:].tolist() if t != pad]
        if len(free) > limit:  # the cap binds: cut, then </s>
            reached += 1
            assert got == free[:limit] + [eos]
        else:
            assert got == free
    assert reached >= 3


def test_beam_search_respects_each_cap():
    torch.manual_seed(1)
    config = tiny_config()
    model = SyntaxMTForConditionalGeneration(config).eval()
    batch = random_batch([5, 11, 8], seed=4)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    cap = SourceLengthCapLogitsProcessor(inputs["attention_mask"], 1.0, 1, eos_token_id=config.eos_token_id)
    with torch.no_grad():
        out = model.generate(**inputs, num_beams=3, num_return_sequences=2, max_length=40,
                             logits_processor=LogitsProcessorList([cap]))
    assert out.shape[0] == 6 and cap.caps.tolist() == [6, 12, 9]
    for row in range(6):  # two returned sequences a sentence; the output is padded after its first </s>
        tokens = out[row, 1:].tolist()
        words = tokens[: tokens.index(config.eos_token_id)] if config.eos_token_id in tokens else tokens
        assert len(words) <= cap.caps[row // 2].item()
        assert config.pad_token_id not in words


@pytest.fixture(scope="module")
def dev():
    data = synthetic_corpus()
    trees = (data / "dev.src.tree").read_text().splitlines()
    return (data / "dev.src").read_text().splitlines(), read_conllu(data / "dev.src.conllu", trees=trees)


def test_pipeline_cap_is_per_sentence_and_batch_independent(dev):
    sources, annotations = dev
    out, _ = trained_model(DEP)
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(annotations))
    capped = translate(sources[:6], batch_size=3, num_beams=2, max_length_a=0.5)
    assert capped == translate(sources[:6], batch_size=1, num_beams=2, max_length_a=0.5)
    assert capped != translate(sources[:6], batch_size=3, num_beams=2)  # the cap binds on some of them
    tokenizer = translate.tokenizer
    for source, output in zip(sources[:6], capped):
        source_tokens = len(tokenizer(source)["input_ids"])
        assert len(tokenizer(output["translation_text"], add_special_tokens=False)["input_ids"]) <= 0.5 * source_tokens
    with pytest.raises(ValueError, match="max_length_b=-2"):
        translate(sources[:1], max_length_b=-2)


def test_cli_length_cap(dev, capsys):
    sources, _ = dev
    out, _ = trained_model(DEP)
    data = synthetic_corpus()
    parsed = ["--conllu", str(data / "dev.src.conllu"), "--trees", str(data / "dev.src.tree")]
    infile = data / "dev.src"
    capsys.readouterr()
    assert main(["translate", "--model", str(out), "--max-length-a", "0.5", *parsed, str(infile)]) == 0
    lines = capsys.readouterr().out.splitlines()
    translate = pipeline("syntax-translation", model=str(out), annotator=PreParsedAnnotator(read_conllu(
        data / "dev.src.conllu", trees=(data / "dev.src.tree").read_text().splitlines())))
    assert lines == [o["translation_text"] for o in translate(sources, batch_size=16, max_length_a=0.5)]
    assert main(["translate", "--model", str(out), "--max-length-a", "0", *parsed, str(infile)]) == 2
    assert capsys.readouterr().err == ("hf-syntax-mt translate: --max-length-a/--max-length-b: max_length_a=0 and "
                                       "max_length_b=0: the length cap (a * source tokens + b) would be 0; give a > 0 "
                                       "(e.g. 1.5) and/or b > 0\n")
