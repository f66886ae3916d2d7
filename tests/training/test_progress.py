"""What a run reports of its progress: the training loss of a short run (logged at the last step, and every 50
updates by default), the curve in training_log.csv (whole across a resume), a default warm-up scaled to the run
(recipes keep the warm-up they set), and a resumed run's record of the whole run."""

import csv
import dataclasses
import json
import logging
import re
from pathlib import Path

import pytest

from hf_syntax_mt.training.progress import (
    DEFAULT_WARMUP_STEPS,
    LOG_NAME,
    first_learning_rates,
    resolve_default_warmup,
)
from hf_syntax_mt.training.run import SyntaxMTTrainingArguments, train
from training_helpers import scratch_dir, tiny_args

RECIPES = Path(__file__).resolve().parents[2] / "benchmarks" / "recipes"
NO_EVAL = dict(eval_strategy="no", save_strategy="no", load_best_model_at_end=False)


def with_defaults(args, *names):
    """The arguments with the package's defaults of the fields `names`, as a run that does not set them gets."""
    defaults = {f.name: f.default for f in dataclasses.fields(SyntaxMTTrainingArguments)}
    return dataclasses.replace(args, **{name: defaults[name] for name in names})


def csv_rows(out):
    with (Path(out) / LOG_NAME).open(newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def test_a_short_run_logs_its_loss_with_the_default_logging_steps(caplog):
    out = scratch_dir("short")
    model_args, data_args, training_args = tiny_args(out, max_steps=4, **NO_EVAL)
    training_args = with_defaults(training_args, "logging_steps")
    assert training_args.logging_steps == 50
    result = train(model_args, data_args, training_args)
    losses = [entry for entry in result.trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in losses] == [4]  # the last step, though the run is shorter than 50 steps
    rows = csv_rows(out)  # the loss at step 4, then the dev evaluation after training
    assert [(int(row["step"]), row["loss"] and float(row["loss"]), bool(row["eval_bleu"])) for row in rows] == [
        (4, pytest.approx(losses[0]["loss"]), False), (4, "", True)]
    assert rows[0]["learning_rate"] and rows[0]["token_loss"] and rows[0]["grad_norm"]


def test_the_default_warmup_is_scaled_to_the_run_and_a_given_one_is_kept(caplog):
    model_args, data_args, training_args = tiny_args(scratch_dir("warmup"), max_steps=4, **NO_EVAL)
    training_args = with_defaults(training_args, "warmup_steps")
    with caplog.at_level(logging.INFO, logger="hf_syntax_mt.training.progress"):
        result = train(model_args, data_args, training_args)
    assert result.trainer.args.warmup_steps == 1  # a tenth of 4 steps, rounded up
    assert "warm-up steps: 1 (the default 800 cut to 10% of this 4-step run; --warmup_steps sets it)" in caplog.text
    learning_rates = [entry["learning_rate"] for entry in result.trainer.state.log_history if "learning_rate" in entry]
    # logged at steps 2 and 4: the rates of those steps, the peak after 1 warm-up step, then peak * sqrt(1 / (step - 1))
    assert learning_rates == [pytest.approx(3e-3), pytest.approx(3e-3 / 3 ** 0.5)]
    given = with_defaults(tiny_args(scratch_dir("given"))[2], "warmup_steps")
    given.warmup_steps = 800.0  # given on the command line: kept, with a warning for a run that short
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.training.progress"):
        resolve_default_warmup(given, 4)
    assert given.warmup_steps == 800
    assert "--warmup_steps 800 is as long as the whole run (4 steps)" in caplog.text
    long_run = with_defaults(tiny_args(scratch_dir("long"))[2], "warmup_steps")
    resolve_default_warmup(long_run, 100_000)
    assert long_run.warmup_steps == 800


@pytest.mark.parametrize("recipe", sorted(RECIPES.glob("*.json")), ids=lambda path: path.stem)
def test_recipes_get_the_warmup_they_set(recipe, tmp_path):
    recipe = json.loads(recipe.read_text(encoding="utf-8"))
    for name, variant in [("", {}), *recipe.get("variants", {}).items()]:
        training = {**recipe["training"], **variant.get("training", {})}
        args = SyntaxMTTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **training)
        assert not isinstance(args.warmup_steps, type(DEFAULT_WARMUP_STEPS)), name
        resolve_default_warmup(args, 10)
        assert args.warmup_steps == training["warmup_steps"], name


def test_a_resumed_run_records_the_whole_run():
    """A run stopped after its checkpoint at step 2 and resumed to step 4 records the loss, epoch and runtime of
    all 4 steps, as a straight run does; its training_log.csv holds the whole curve (what the first part logged after
    its checkpoint is dropped)."""
    straight_out, stopped_out = scratch_dir("straight"), scratch_dir("resumed")
    straight = train(*tiny_args(straight_out, max_steps=4))
    train(*tiny_args(stopped_out, max_steps=2))
    (stopped_out / "all_results.json").unlink()  # stopped after the checkpoint of step 2, before its record
    with (stopped_out / LOG_NAME).open("a", newline="", encoding="utf-8") as file:
        file.write("3,1.0,9.9,,,,,,,,,\n")  # logged after the checkpoint by a run killed there
    first_part = json.loads((stopped_out / "checkpoint-2" / "trainer_state.json").read_text())
    first_seconds = first_part["stateful_callbacks"]["RunLogCallback"]["attributes"]["train_seconds"]
    resumed = train(*tiny_args(stopped_out, max_steps=4))

    record = json.loads((stopped_out / "all_results.json").read_text())
    assert record["train_loss"] == pytest.approx(straight.metrics["train_loss"], abs=1e-3)
    assert record["epoch"] == straight.metrics["epoch"] == pytest.approx(4 / 3, abs=1e-3)  # 3 steps an epoch
    best_step = int(resumed.trainer.state.best_model_checkpoint.rsplit("-", 1)[1])
    assert record["eval_epoch"] == pytest.approx(best_step / 3, abs=1e-3)
    session = [entry for entry in resumed.trainer.state.log_history if "train_runtime" in entry][-1]["train_runtime"]
    assert record["train_runtime"] == pytest.approx(first_seconds + session, abs=0.01)
    assert record["train_steps_per_second"] == pytest.approx(4 / record["train_runtime"], rel=0.01)
    rows = [(int(row["step"]), row["loss"] or None, row["eval_bleu"] or None) for row in csv_rows(stopped_out)]
    assert rows == [(int(row["step"]), row["loss"] or None, row["eval_bleu"] or None) for row in csv_rows(straight_out)]
    assert [step for step, loss, _ in rows if loss] == [2, 4]


def test_the_learning_rates_of_a_schedule_are_the_trainers():
    """Linear, 2 warm-up updates, 5 updates: 0, p/2, p, then down to 0 at the end (p (5 - t) / 3); constant: p."""
    args = dataclasses.replace(tiny_args(scratch_dir("rates"))[2], lr_scheduler_type="linear", warmup_steps=2,
                               learning_rate=0.3)
    assert first_learning_rates(args, 5, 5) == pytest.approx([0.0, 0.15, 0.3, 0.2, 0.1])
    assert first_learning_rates(dataclasses.replace(args, lr_scheduler_type="constant"), 5, 3) == [0.3] * 3


@pytest.mark.parametrize("scheduler", ["inverse_sqrt", "linear", "cosine"])
def test_a_run_whose_every_update_is_at_rate_zero_is_said_in_one_line(caplog, scheduler):
    """One update with a warm-up (the default, cut to 1 step, or one given) is made at rate 0; without a warm-up it
    is made at the peak rate, and a longer run reaches it: no warning."""
    def warnings(run_steps, **settings):
        args = with_defaults(tiny_args(scratch_dir("zero"))[2], "warmup_steps")
        args = dataclasses.replace(args, lr_scheduler_type=scheduler, **settings)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.training.progress"):
            resolve_default_warmup(args, run_steps)
        return [r.getMessage() for r in caplog.records]

    [line] = warnings(1)
    assert line.startswith(f"every update of this 1-step run is made at learning rate 0 (--lr_scheduler_type "
                           f"{scheduler}, --learning_rate 0.003, 1 warm-up steps: ")
    assert line.endswith("so the model it saves is untrained; train longer (--max_steps, --num_train_epochs) or give "
                         "--warmup_steps 0")
    assert len(warnings(1, warmup_steps=3)) == 1
    assert warnings(1, warmup_steps=0) == [] and warnings(2) == []


def test_a_run_of_a_hundredth_of_an_epoch_is_one_update_said_to_be_at_rate_zero(caplog):
    """--num_train_epochs 0.01 of 3 batches an epoch: one update, in the default warm-up."""
    model_args, data_args, training_args = tiny_args(scratch_dir("hundredth"), max_steps=-1, num_train_epochs=0.01,
                                                     **NO_EVAL)
    training_args = with_defaults(training_args, "warmup_steps")
    with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.training.progress"):
        result = train(model_args, data_args, training_args)
    assert result.trainer.state.global_step == 1
    assert "every update of this 1-step run is made at learning rate 0" in caplog.text


@pytest.mark.parametrize("settings, message", [
    (dict(max_steps=0), "--max_steps 0: a run of no update; give --max_steps >= 1, or leave it at -1 (the default) to "
                        "train for --num_train_epochs"),
    (dict(learning_rate=0.0), "--learning_rate 0: the peak learning rate must be > 0"),
])
def test_a_run_of_no_update_or_no_rate_is_refused(settings, message):
    out = scratch_dir("refused")
    with pytest.raises(ValueError, match=re.escape(message)):
        train(*tiny_args(out, **settings))
    assert not any(out.iterdir())  # no checkpoint, model or card
