"""How a training run reports its progress: the loss curve in `<output_dir>/training_log.csv`, a loss logged at every
checkpoint and at the last step, a default warm-up scaled to the run, and the record of a resumed run that covers the
whole run, not only its last part.

    callback = RunLogCallback()                       # one of the trainer's callbacks
    resolve_default_warmup(training_args, run_steps)  # before trainer.train()
    metrics = callback.whole_run_metrics(trainer.train(...).metrics, trainer.state)
"""

from __future__ import annotations

import csv
import logging
import math
import time
from pathlib import Path
from typing import Optional

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import IntervalStrategy

logger = logging.getLogger(__name__)

LOG_NAME = "training_log.csv"
LOG_COLUMNS = ("step", "epoch", "loss", "token_loss", "encoder_parse_loss", "decoder_parse_loss", "grad_norm",
               "learning_rate", "eval_loss", "eval_bleu", "eval_chrf", "eval_gen_len")
"""The columns of `training_log.csv`: one row per training log (losses, gradient norm, learning rate) or evaluation."""

WARMUP_SHARE = 0.1
"""The default warm-up is at most this share of the run."""


class DefaultWarmupSteps(float):
    """The default of `--warmup_steps` (800): a value the user did not give, so `resolve_default_warmup` may cut it to
    `WARMUP_SHARE` of a shorter run; any number given (800 included) is a plain float and is kept as given."""


DEFAULT_WARMUP_STEPS = DefaultWarmupSteps(800)


def resolve_default_warmup(training_args, run_steps: int) -> None:
    """Set the default warm-up to min(800, a tenth of the run's `run_steps` updates), and say so when it is cut; a run
    whose schedule makes every update at learning rate 0 (one update in a warm-up, whose first update is made at rate
    0, or `--learning_rate 0`) gets a warning that its model is untrained, and a warm-up given that lasts the whole
    run one that the learning rate never reaches its peak."""
    asked = training_args.warmup_steps
    if isinstance(asked, DefaultWarmupSteps):
        steps = min(int(asked), max(1, math.ceil(WARMUP_SHARE * run_steps)))
        training_args.warmup_steps = steps
        if steps < asked:
            logger.info("warm-up steps: %d (the default %d cut to %.0f%% of this %d-step run; --warmup_steps sets it)",
                        steps, asked, 100 * WARMUP_SHARE, run_steps)
    warmup = training_args.get_warmup_steps(run_steps)
    if not any(first_learning_rates(training_args, run_steps, min(run_steps, warmup + 1))):
        logger.warning("every update of this %d-step run is made at learning rate 0 (--lr_scheduler_type %s, "
                       "--learning_rate %g, %d warm-up steps: the first update of a warm-up is made at rate 0), so "
                       "the model it saves is untrained; train longer (--max_steps, --num_train_epochs) or give "
                       "--warmup_steps 0", run_steps, _value(training_args.lr_scheduler_type),
                       training_args.learning_rate, warmup)
    elif not isinstance(asked, DefaultWarmupSteps) and asked >= 1 and asked >= run_steps:
        logger.warning("--warmup_steps %g is as long as the whole run (%d steps): the learning rate never reaches "
                       "--learning_rate %g", asked, run_steps, training_args.learning_rate)


def first_learning_rates(training_args, run_steps: int, updates: int) -> list[float]:
    """The learning rates of the first `updates` updates of a `run_steps`-update run, from the schedule the Trainer
    builds (`transformers.get_scheduler` with the run's type, warm-up and settings)."""
    import torch
    from transformers import get_scheduler

    if _value(training_args.lr_scheduler_type) == "reduce_lr_on_plateau":  # its rate follows the evaluations
        return [training_args.learning_rate] * updates
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=training_args.learning_rate)
    scheduler = get_scheduler(training_args.lr_scheduler_type, optimizer,
                              num_warmup_steps=training_args.get_warmup_steps(run_steps), num_training_steps=run_steps,
                              scheduler_specific_kwargs=training_args.lr_scheduler_kwargs or {})
    rates = []
    for _ in range(updates):
        rates.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return rates


def _value(setting) -> str:
    return str(getattr(setting, "value", setting))


class RunLogCallback(TrainerCallback, ExportableState):
    """The training run's log, whole across resumes.

    - logs the loss at every checkpoint and at the last step besides every `logging_steps` (unless
      `logging_strategy="no"`), so a short run shows its loss and the logs of a resumed run cover every step;
    - appends each log to `<output_dir>/training_log.csv` (`LOG_COLUMNS`); a resumed run first rewrites the file from
      its checkpoint's log history, so it holds the curve of the steps that made the model;
    - counts the seconds of training behind the model in its checkpoints' state, for `whole_run_metrics`.
    """

    def __init__(self, train_seconds: float = 0.0):
        self.train_seconds = train_seconds  # seconds of training before this session (restored from the checkpoint)
        self._session_start: Optional[float] = None
        self._first_step = 0

    def state(self) -> dict:
        elapsed = time.time() - self._session_start if self._session_start is not None else 0.0
        return {"args": {}, "attributes": {"train_seconds": round(self.train_seconds + elapsed, 3)}}

    def on_train_begin(self, args, state, control, **kwargs):
        self._session_start, self._first_step = time.time(), state.global_step
        # a checkpoint saved before this callback existed has no entry for it: the Trainer's save would fail
        state.stateful_callbacks.setdefault(type(self).__name__, self.state())
        if state.is_world_process_zero:
            with self._log_path(args).open("w", newline="", encoding="utf-8") as file:
                writer = csv.DictWriter(file, LOG_COLUMNS, extrasaction="ignore")
                writer.writeheader()
                writer.writerows(entry for entry in state.log_history if _is_curve_entry(entry))

    def on_step_end(self, args, state, control, **kwargs):
        last_step = state.global_step >= state.max_steps
        if args.logging_strategy != IntervalStrategy.NO and (control.should_save or last_step):
            control.should_log = True

    def on_epoch_end(self, args, state, control, **kwargs):
        if args.logging_strategy != IntervalStrategy.NO and control.should_save:
            control.should_log = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and _is_curve_entry(logs):
            with self._log_path(args).open("a", newline="", encoding="utf-8") as file:
                csv.DictWriter(file, LOG_COLUMNS, extrasaction="ignore").writerow(
                    {"step": state.global_step, "epoch": state.epoch, **logs})

    @staticmethod
    def _log_path(args) -> Path:
        path = Path(args.output_dir) / LOG_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def whole_run_metrics(self, metrics: dict, state) -> dict:
        """`Trainer.train`'s metrics, which cover the steps of its own call only, made the whole run's after a resume:
        the mean training loss over every step (from the logged losses, each the mean of its window), and the runtime
        and speeds of every session's training behind the model."""
        if self._first_step == 0:
            return metrics
        whole = dict(metrics)
        losses = [(entry["step"], entry["loss"]) for entry in state.log_history if "loss" in entry and "step" in entry]
        if losses:
            steps = [step for step, _ in losses]
            windows = [step - before for step, before in zip(steps, [0, *steps[:-1]])]
            whole["train_loss"] = sum(loss * n for (_, loss), n in zip(losses, windows)) / max(sum(windows), 1)
        session = metrics.get("train_runtime")
        if session is not None:
            runtime = self.train_seconds + session
            whole["train_runtime"] = round(runtime, 4)
            session_rate = metrics.get("train_steps_per_second")
            whole["train_steps_per_second"] = round(state.global_step / runtime, 3) if runtime > 0 else 0.0
            if session_rate and "train_samples_per_second" in metrics:  # the samples of a step stay the same
                whole["train_samples_per_second"] = round(
                    metrics["train_samples_per_second"] / session_rate * whole["train_steps_per_second"], 3)
        return whole


def _is_curve_entry(entry: dict) -> bool:
    return any(key in entry for key in LOG_COLUMNS[2:])


__all__ = ["DEFAULT_WARMUP_STEPS", "DefaultWarmupSteps", "LOG_COLUMNS", "LOG_NAME", "RunLogCallback",
           "first_learning_rates", "resolve_default_warmup"]
