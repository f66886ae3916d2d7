"""Training to a fixed budget of updates: checkpoints over the end of the schedule, for averaging.

With a schedule that decays the learning rate to zero at a fixed budget (`--max_steps B --lr_scheduler_type linear`,
warm-up then η_t = η · (B − t) / (B − warmup); Li et al., "Budgeted Training", ICLR 2020), the model is trained when
the budget ends, and the mean of the last checkpoints (fairseq's `average_checkpoints.py --num-update-checkpoints`)
is a mean of trained models only if they were saved near that end. `SaveLastCheckpointsCallback` saves k of them,
evenly over the last share s of the budget:

    steps B − j · round(s · B / k) for j = 0 … k − 1, those above B − s · B

(fewer than k when the last share holds fewer updates).
"""

from __future__ import annotations

import logging
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

logger = logging.getLogger(__name__)


def last_checkpoint_steps(max_steps: int, count: int, span: float) -> list[int]:
    """The `count` steps, ascending, evenly over the last `span` (0 < span ≤ 1) of a `max_steps` budget, ending at
    `max_steps`; fewer when the budget has fewer distinct steps in that span."""
    if count < 1 or not 0 < span <= 1:
        raise ValueError(f"save_last_checkpoints={count}, save_last_span={span}: expected a count >= 1 and a "
                         "share of the budget in (0, 1]")
    interval = max(1, round(span * max_steps / count))
    first = max(0.0, max_steps - span * max_steps)
    return sorted({max_steps - j * interval for j in range(count) if max_steps - j * interval > first})


def checkpoints_kept_for_averaging(max_steps: int, count: int, span: float, keeps_best: bool) -> int:
    """The `save_total_limit` that keeps every one of the last checkpoints (`last_checkpoint_steps`, the requested
    `count` when the budget is not known yet), plus the best one when it is kept too (it may be older)."""
    saved = len(last_checkpoint_steps(max_steps, count, span)) if max_steps > 0 else count
    return saved + int(keeps_best)


class SaveLastCheckpointsCallback(TrainerCallback):
    """Also save a checkpoint at each of `last_checkpoint_steps(max_steps, count, span)` (besides the
    `save_strategy`'s own), so that the last `count` checkpoints of a budgeted run lie in its last `span`."""

    def __init__(self, count: int, span: float):
        self.count, self.span = count, span
        self.steps: set[int] = set()

    def on_train_begin(self, args, state, control, **kwargs):
        if state.max_steps <= 0:
            raise ValueError("--save_last_checkpoints needs a known budget of updates (--max_steps, or a dataset "
                             "of known length)")
        self.steps = set(last_checkpoint_steps(state.max_steps, self.count, self.span))

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            control.should_save = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        """Say which of the last checkpoints the run holds (to average them: `hf-syntax-mt average`)."""
        if not state.is_world_process_zero or not self.steps:
            return
        held = [step for step in sorted(self.steps)
                if (Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{step}").is_dir()]
        logger.info("the last %d checkpoints over the last %g%% of the budget are in %s: steps %s (hf-syntax-mt "
                    "average --run-dir %s --last %d averages them)", len(held), 100 * self.span, args.output_dir,
                    ", ".join(map(str, held)) or "none yet", args.output_dir, len(held))
