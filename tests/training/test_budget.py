"""A fixed budget of updates (hf_syntax_mt.training.budget), the source-relative cap of in-training generation, and the
KFTT budget recipe."""

import json
import sys
from pathlib import Path

import pytest
import torch

from hf_syntax_mt.training.budget import last_checkpoint_steps
from hf_syntax_mt.training.run import SyntaxMTTrainingArguments, train
from training_helpers import scratch_dir, tiny_args

REPO = Path(__file__).resolve().parents[2]


def test_last_checkpoint_steps_lie_evenly_over_the_end_of_the_budget():
    assert last_checkpoint_steps(6348, 5, 0.25) == [5080, 5397, 5714, 6031, 6348]
    assert last_checkpoint_steps(12, 3, 0.5) == [8, 10, 12]
    assert last_checkpoint_steps(3, 5, 1.0) == [1, 2, 3]  # fewer steps than checkpoints asked for
    assert last_checkpoint_steps(20, 1000, 0.25) == [16, 17, 18, 19, 20]  # only the last 25%, not every update
    for count, span in ((0, 0.25), (3, 0.0), (3, 1.5)):
        with pytest.raises(ValueError, match="save_last_checkpoints"):
            last_checkpoint_steps(100, count, span)


def test_bad_budget_and_length_cap_arguments_are_named(tmp_path):
    with pytest.raises(ValueError, match="save_last_checkpoints"):
        SyntaxMTTrainingArguments(output_dir=str(tmp_path), max_steps=100, save_last_checkpoints=2,
                                  save_last_span=2.0, use_cpu=True)
    with pytest.raises(ValueError, match="max_length_a"):
        SyntaxMTTrainingArguments(output_dir=str(tmp_path), generation_max_length_a=-1.0, use_cpu=True)


def test_save_last_checkpoints_raises_a_save_total_limit_that_would_delete_some(tmp_path, caplog):
    """The default --save_total_limit 2 kept 2 of 4 (and the best one may be older: one more)."""
    args = SyntaxMTTrainingArguments(output_dir=str(tmp_path), max_steps=20, save_last_checkpoints=4, use_cpu=True)
    assert args.save_total_limit == 5 and "--save_total_limit raised from 2 to 5" in caplog.text
    caplog.clear()
    args = SyntaxMTTrainingArguments(output_dir=str(tmp_path), max_steps=20, save_last_checkpoints=1000,
                                     load_best_model_at_end=False, use_cpu=True)
    assert args.save_total_limit == 5
    assert "the last 25% of the 20 updates holds 5 of them; saving those 5" in caplog.text
    unlimited = SyntaxMTTrainingArguments(output_dir=str(tmp_path), max_steps=20, save_last_checkpoints=4,
                                          save_total_limit=None, use_cpu=True)
    assert unlimited.save_total_limit is None


def test_a_run_keeps_every_one_of_its_last_checkpoints_and_says_which(caplog):
    out = scratch_dir("keep_last")
    caplog.set_level("INFO", logger="hf_syntax_mt.training.budget")
    train(*tiny_args(out, max_steps=8, eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
                     save_last_checkpoints=4, save_last_span=0.5))
    assert sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*")) == [5, 6, 7, 8]
    assert f"the last 4 checkpoints over the last 50% of the budget are in {out}: steps 5, 6, 7, 8" in caplog.text


def test_budgeted_run_decays_to_zero_and_saves_over_its_last_part():
    out = scratch_dir("budget")
    result = train(*tiny_args(out, max_steps=12, lr_scheduler_type="linear", warmup_steps=2, eval_steps=6,
                              save_steps=6, save_total_limit=None, save_last_checkpoints=3, save_last_span=0.5))
    saved = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    assert saved == [6, 8, 10, 12]  # the save_strategy's 6 and 12, and the budget's 8, 10, 12
    rates = [h["learning_rate"] for h in result.trainer.state.log_history if "learning_rate" in h]
    assert rates[-1] == pytest.approx(3e-3 * 1 / (12 - 2), rel=1e-6)  # the rate of the last update, t = 11
    scheduler = result.trainer.lr_scheduler
    assert scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)  # the budget's end: the rate is zero


def test_in_training_generation_stops_at_the_source_relative_cap():
    """A model that never ends a sentence: the Trainer's evaluation generations stop at floor(a * n + b)."""
    out = scratch_dir("cap")
    model_args, data_args, training_args = tiny_args(out, max_steps=1, eval_strategy="no", save_strategy="no",
                                                     load_best_model_at_end=False, generation_max_length_a=0.25,
                                                     generation_max_length_b=1.0, generation_max_length=30)
    result = train(model_args, data_args, training_args)
    trainer, model = result.trainer, result.trainer.model
    with torch.no_grad():
        model.final_logits_bias[0, model.config.eos_token_id] = -1e4  # never chooses </s> by itself
    batch = next(iter(trainer.get_eval_dataloader()))
    _, generated, _ = trainer.prediction_step(model, batch, prediction_loss_only=False)
    caps = torch.floor(batch["attention_mask"].sum(-1) * 0.25 + 1.0).long()
    assert caps.max() + 2 < 30  # the cap, not generation_max_length, ends these translations
    pad = model.config.pad_token_id
    for row, cap in zip(generated, caps):
        tokens = row[1:][row[1:] != pad]  # after the decoder start, without the padding of the batch
        assert len(tokens) == cap + 1 and tokens[-1] == model.config.eos_token_id  # cap subwords, then </s>


def test_budget_recipe_loads_and_keeps_the_six_epoch_recipe_as_it_was():
    sys.path.insert(0, str(REPO / "benchmarks"))
    from quality_lib.recipes import load_recipe

    budget = load_recipe(REPO / "benchmarks" / "recipes" / "kftt.ja-en.budget.json")
    old = json.loads((REPO / "benchmarks" / "recipes" / "kftt.ja-en.json").read_text())
    assert budget["training"]["lr_scheduler_type"] == "linear" and budget["training"]["max_steps"] == 6 * 1058
    assert budget["training"]["save_last_checkpoints"] == budget["average_last_k"]
    assert budget["variants"]["transformer_abs@2B"]["training"]["max_steps"] == 2 * 6 * 1058
    assert old["training"]["lr_scheduler_type"] == "inverse_sqrt" and "length_cap" not in old
    for key in ("data", "train_sample", "source_parser", "vocab_size", "max_source_length"):
        assert budget[key] == old[key], key
    attention = {"attn_implementation"}  # the budget recipe's is the one measured faster on the CPU it trains on
    assert {k: v for k, v in budget["model"].items() if k not in attention} == \
        {k: v for k, v in old["model"].items() if k not in attention}
