"""What training says about settings the data changes: a BPE vocabulary that cannot have the asked size, and pairs
longer than the length limits (counted once per split)."""

import logging

from hf_syntax_mt.features.joint_bpe import train_joint_bpe_tokenizer
from hf_syntax_mt.syntax import apply_source_spacing
from hf_syntax_mt.training.run import read_parallel_file, train
from training_helpers import scratch_dir, synthetic_corpus, tiny_args

TEXTS = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"]  # written for these tests


def test_a_vocab_size_below_the_alphabet_says_what_the_vocabulary_became(caplog):
    characters = len(set("".join(TEXTS).replace(" ", "")) | {"▁"})
    with caplog.at_level(logging.INFO, logger="hf_syntax_mt.features.joint_bpe"):
        tokenizer = train_joint_bpe_tokenizer(TEXTS, vocab_size=10)
    assert len(tokenizer) == characters + 3
    assert (f"vocab_size=10 is below the {characters} characters of the training text plus the 3 special tokens: BPE "
            f"keeps every character, so the vocabulary has {characters + 3} tokens and no merges") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hf_syntax_mt.features.joint_bpe"):
        tokenizer = train_joint_bpe_tokenizer(TEXTS, vocab_size=1000)
    assert (f"the vocabulary has {len(tokenizer)} tokens, not vocab_size=1000: the training text has no more pairs "
            "seen at least min_frequency=2 times to merge") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hf_syntax_mt.features.joint_bpe"):
        train_joint_bpe_tokenizer(TEXTS, vocab_size=len(tokenizer))
    assert "vocab" not in caplog.text  # the size asked: nothing to say


def one_step_args(name, max_source_length, max_target_length):
    model_args, data_args, training_args = tiny_args(scratch_dir(name), max_steps=1, eval_strategy="no",
                                                     save_strategy="no", load_best_model_at_end=False)
    data_args.max_source_length, data_args.max_target_length = max_source_length, max_target_length
    return model_args, data_args, training_args


def test_pairs_longer_than_the_length_limits_are_counted_once_per_split(caplog):
    with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.features.training_data"):
        result = train(*one_step_args("long", 10, 12))
    tokenizer = result.trainer.processing_class
    pairs = read_parallel_file(synthetic_corpus() / "train")
    spacing = result.trainer.model.config.source_spacing
    spaced = [apply_source_spacing(text, spacing) for text in pairs["source"]]
    sources = sum(len(ids) > 10 for ids in tokenizer(spaced)["input_ids"])
    targets = sum(len(ids) > 12 for ids in tokenizer(text_target=pairs["target"])["input_ids"])
    assert 0 < sources < len(pairs["source"]) and 0 < targets < len(pairs["target"])
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train: ")]
    assert lines == [f"train: {sources} sources longer than --max_source_length 10 and {targets} targets longer than "
                     f"--max_target_length 12 (of {len(pairs['source'])} pairs; lengths in subwords, </s> included): "
                     "they are cut to that length; raise the limit to keep them whole"]
    assert all(len(ids) <= 10 for ids in result.datasets["train"]["input_ids"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.features.training_data"):
        train(*one_step_args("short", 128, 128))
    assert "longer than --max" not in caplog.text
