"""Stopping training on Ctrl-C (SIGINT) or SIGTERM with a resumable checkpoint instead of a traceback.

`InterruptCallback` replaces the SIGINT / SIGTERM handlers while the Trainer trains (restoring the old
ones after). A signal only sets a flag; at the end of the current optimizer step the callback asks the Trainer to
save a checkpoint there and to stop. A signal within `FOLLOW_UP_SECONDS` of the first is part of the same stop:
a launcher's (torch elastic under `accelerate launch --multi_gpu` or `torchrun` passes the Ctrl-C that reached the
whole process group on to its processes a few milliseconds later, `--processes` a SIGTERM). A signal after that
aborts at once without saving, as the old handler would (a second Ctrl-C), except a SIGTERM under torch elastic,
which its launcher passes on. The Trainer then stops (a signal at or after the last
step lets the run finish as usual). `trainer.train(resume_from_checkpoint=...)`
then continues from that step with the saved optimizer, scheduler and RNG states and the same data order,
and ends with the weights of an uninterrupted run.

    interrupt = InterruptCallback()
    trainer = Seq2SeqTrainer(..., callbacks=[interrupt])
    with interrupt.handling_signals():
        trainer.train()
    if interrupt.step is not None:
        ...  # stopped early: interrupt.checkpoint holds the step; don't save or evaluate a "final" model

Under data parallelism the flag is shared at every step (an all-reduce), so that all processes stop
after the same step. Outside the main thread Python cannot set signal handlers: the callback then does
nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from typing import Optional

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, SaveStrategy

logger = logging.getLogger(__name__)

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
FOLLOW_UP_SECONDS = 1.0
"""A signal this soon after the first is the same stop (a launcher passing it on), not a second Ctrl-C."""


class InterruptCallback(TrainerCallback):
    """Turn SIGINT / SIGTERM during training into "save a checkpoint after this step, then stop".

    Attributes:
        signal_number: the signal that came (None while none did); when it stopped training, the exit status
            of a command line tool is `128 + signal_number` (130 for SIGINT, 143 for SIGTERM).
        step: the step training stopped after (None when it was not stopped early).
        checkpoint: the directory of the checkpoint saved at that step.
    """

    def __init__(self):
        self.signal_number: Optional[int] = None
        self.checkpoint: Optional[str] = None
        self.step: Optional[int] = None
        self._previous_handlers: dict[int, object] = {}
        self._first_signal_at: Optional[float] = None

    # --- signal handlers ----------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Catch SIGINT and SIGTERM until `restore_signal_handlers` (no-op outside the main thread)."""
        if self._previous_handlers or threading.current_thread() is not threading.main_thread():
            return
        for number in HANDLED_SIGNALS:
            self._previous_handlers[number] = signal.signal(number, self._on_signal)

    def restore_signal_handlers(self) -> None:
        """Put back the handlers that were there before `install_signal_handlers` (idempotent)."""
        for number, handler in self._previous_handlers.items():
            signal.signal(number, handler)
        self._previous_handlers = {}

    @contextlib.contextmanager
    def handling_signals(self):
        """Catch the signals for the duration of the block; the old handlers come back even on an error."""
        self.install_signal_handlers()
        try:
            yield self
        finally:
            self.restore_signal_handlers()

    def _on_signal(self, number, frame) -> None:
        under_elastic = "TORCHELASTIC_RUN_ID" in os.environ
        if self._first_signal_at is not None:
            if time.monotonic() - self._first_signal_at < FOLLOW_UP_SECONDS:
                logger.info("%s received again %.3f s after the first: the same stop (a launcher passing it on)",
                            signal.Signals(number).name, time.monotonic() - self._first_signal_at)
            elif not (number == signal.SIGTERM and under_elastic):
                self.restore_signal_handlers()  # a second signal aborts at once, as the old handler does
                signal.raise_signal(number)
            return
        self._first_signal_at = time.monotonic()
        self.signal_number = number
        # a `--processes` launcher passes SIGTERM on to its processes: one sent to the group comes twice
        again = "Ctrl-C" if number == signal.SIGTERM and under_elastic else \
            ("Ctrl-C" if number == signal.SIGINT else signal.Signals(number).name) + " again"
        logger.warning("%s received: stopping after this training step to save a checkpoint (%s aborts without "
                       "saving)", signal.Signals(number).name, again)

    # --- Trainer events -----------------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        self.install_signal_handlers()

    def on_train_end(self, args, state, control, **kwargs):
        self.restore_signal_handlers()

    def on_step_end(self, args, state, control, **kwargs):
        if not self._interrupted(args) or self.step is not None:
            return
        if state.global_step >= state.max_steps:
            # resuming a checkpoint of the last step would train one step more (transformers 5.24 does)
            logger.warning("the interrupted step was the last one: finishing the run (final model, evaluation)")
            return
        self.step = state.global_step
        # at the end of an epoch saved each epoch, the epoch's save (after its evaluation) keeps the step
        if not (_epoch_is_complete(state) and args.save_strategy == SaveStrategy.EPOCH):
            control.should_save = True
        control.should_training_stop = True

    def on_epoch_end(self, args, state, control, **kwargs):
        if self.step is None:
            return
        if not _epoch_is_complete(state):
            control.should_evaluate = False  # no epoch evaluation in the middle of an epoch
            control.should_save = False
        if self.checkpoint is None:  # not saved at the step (e.g. save_strategy="best" and no new best)
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        if self.step is not None:
            self.checkpoint = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")

    def _interrupted(self, args) -> bool:
        """Whether a signal came to this process or, under data parallelism, to any of them."""
        signal_number = self.signal_number or 0
        if args.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
            shared = torch.tensor([signal_number], device=args.device)
            torch.distributed.all_reduce(shared, op=torch.distributed.ReduceOp.MAX)
            signal_number = int(shared.item())
            self.signal_number = self.signal_number or signal_number or None
        return signal_number > 0

    def message(self) -> str:
        """The line that says where training stopped and how to go on."""
        where = f"checkpoint saved in {self.checkpoint}" if self.checkpoint else "no checkpoint saved"
        return f"interrupted at step {self.step}: {where}; rerun the same command to resume"


def _epoch_is_complete(state) -> bool:
    """Whether the last step ended an epoch (the Trainer sets `state.epoch` to epoch + steps done / steps in it)."""
    return state.epoch is not None and float(state.epoch).is_integer()


__all__ = ["InterruptCallback"]
