"""`hf-syntax-mt demo` at toy size: a rerun with other corpus settings regenerates the corpus and retrains."""

from hf_syntax_mt.demo import run_demo

from training_helpers import scratch_dir


def test_demo_rerun_follows_new_corpus_settings(capsys):
    out = scratch_dir("demo")
    small = dict(presets=["transformer_abs"], n_dev=4, max_steps=2, batch_size=8, vocab_size=200,
                 model=dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64), samples=1)
    first = run_demo(out, n_train=16, **small)
    assert len((out / "data" / "train.src").read_text().splitlines()) == 16
    tokenizer_before = (out / "transformer_abs" / "tokenizer.json").read_text()
    second = run_demo(out, n_train=24, **small)
    assert len((out / "data" / "train.src").read_text().splitlines()) == 24
    # the second run trained its own tokenizer on the new corpus instead of reusing the first one's
    assert (out / "transformer_abs" / "tokenizer.json").read_text() != tokenizer_before
    assert set(first) == set(second) == {"transformer_abs"} and second["transformer_abs"]["bleu"] is not None
    assert "16 train" in capsys.readouterr().out
