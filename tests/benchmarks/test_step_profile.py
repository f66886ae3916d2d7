"""benchmarks/step_profile.py at a tiny batch: it profiles and times both sets of operators and prints its table; the
two sets compute the same loss, and every profiled microsecond lands in one kind."""

import sys
from argparse import Namespace
from pathlib import Path

import pytest
import torch

import hf_syntax_mt.modeling_syntax_mt as modeling
from hf_syntax_mt import fast_ops
from model_helpers import TINY as MODEL

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import speed  # noqa: E402
import step_profile  # noqa: E402

TINY = {**MODEL, "label_smoothing": 0.1}


@pytest.fixture
def operators_restored(monkeypatch):
    """step_profile swaps the model file's dropout and cross-entropy: put the package's back after the test."""
    monkeypatch.setattr(modeling, "dropout", modeling.dropout)
    monkeypatch.setattr(modeling, "label_smoothed_cross_entropy", modeling.label_smoothed_cross_entropy)
    monkeypatch.setenv(fast_ops.HUGE_PAGES_ENV, "0")


def test_functional_and_fast_operators_give_the_same_loss(operators_restored):
    model, config = speed._build("transformer_dep_rel", TINY)
    batch = speed._batch(config, 3, 7)
    losses = {}
    for name in step_profile.OPS:
        step_profile.use_ops(name)
        assert (modeling.dropout, modeling.label_smoothed_cross_entropy) == step_profile.OPS[name]
        losses[name] = model(**batch).loss
    torch.testing.assert_close(losses["functional"], losses["fast"], rtol=1e-5, atol=1e-5)


def test_profile_puts_every_operator_in_one_kind(operators_restored, monkeypatch):
    monkeypatch.setattr(step_profile, "SIZE", TINY)
    args = Namespace(dropout=0.1, label_smoothing=0.1, attn="eager", batch=2, length=6, bf16=False, steps=2)
    result = step_profile.profile_step(step_profile.training_step("transformer_abs", args), args)
    assert result["by_kind"]["matrix products"] > 0
    assert sum(result["by_kind"].values()) == pytest.approx(sum(micros for micros, _ in result["by_op"].values()))


def test_main_prints_each_preset_s_profile_and_speed_up(operators_restored, monkeypatch, capsys):
    monkeypatch.setattr(step_profile, "SIZE", TINY)
    step_profile.main(["--presets", "transformer_abs", "transformer_sla", "--batch", "2", "--length", "6",
                       "--steps", "1", "--rounds", "1", "--top", "3", "--no-huge-pages"])
    out = capsys.readouterr().out
    assert "transformer_sla (fast):" in out and "| where the step goes | share | ms |" in out
    rows = [line for line in out.splitlines() if line.startswith("| transformer_")]
    assert [row.split(" | ")[0] for row in rows] == ["| transformer_abs", "| transformer_sla"]
