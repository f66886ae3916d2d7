"""What keeps a training run's output directory whole: one run at a time in it (`locked_output_dir`), a resume from
the last checkpoint whose save finished (`last_complete_checkpoint`), and no resume from a checkpoint whose files are
damaged (`check_checkpoint_files`).

    with locked_output_dir(training_args.output_dir):  # a second run there raises OutputDirInUseError
        checkpoint = last_complete_checkpoint(training_args.output_dir)  # says which later ones it skips, and why
        check_checkpoint_files(checkpoint, advice)    # names a damaged optimizer.pt / scheduler.pt / rng_state.pth
        trainer.train(resume_from_checkpoint=checkpoint)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import time
import zipfile
from pathlib import Path
from typing import Optional

from filelock import FileLock, Timeout
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

logger = logging.getLogger(__name__)

LOCK_NAME = "_training.lock"
"""The lock file in the output dir (`Trainer.push_to_hub` uploads no `_*` file); it holds the holder's PID and host."""
SAVING_PREFIX = "_saving-"
"""What a save is written under before it is renamed: `_saving-checkpoint-N` becomes `checkpoint-N` once whole, and
the final model's files are written in `_saving-model/` (`trainer.SyntaxMTSeq2SeqTrainer`). A kill while saving leaves
such a folder; the next save of the same name replaces it. `Trainer.push_to_hub` uploads no `_*` file."""
TRAINER_STATE = "trainer_state.json"
"""The file of a checkpoint that the Trainer writes last: a checkpoint without it is a save cut short."""


class OutputDirInUseError(OSError):
    """Another training run holds the output directory's lock."""


class DamagedCheckpointError(ValueError):
    """A checkpoint file that resuming would load does not read (truncated, overwritten, not a torch file)."""


@contextlib.contextmanager
def locked_output_dir(output_dir, enabled: bool = True):
    """Hold `<output_dir>/_training.lock` for the block (the OS releases it if the process dies), so that a second run
    started into the same directory stops at once with `OutputDirInUseError` naming the process that holds it, instead
    of resuming from a checkpoint in progress and deleting checkpoints the first run still names. The lock file is
    removed when the block ends (filelock then takes a contender's lock on the removed file for none), so a finished
    model folder holds none. `enabled=False` (processes that do not write the output dir under data parallelism)
    holds nothing."""
    if not enabled:
        yield
        return
    path = Path(output_dir) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise OutputDirInUseError(
            f"{output_dir} is in use by another training run ({_holder(path)}): wait for it to finish, or give another "
            "--output_dir"
        ) from None
    try:
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())}
        path.write_text(json.dumps(holder) + "\n", encoding="utf-8")
        yield
    finally:
        path.unlink(missing_ok=True)  # while held: a contender that opened it finds it removed and tries again
        lock.release()


def _holder(path: Path) -> str:
    """'process 123 on host h, since ...' from the lock file, as far as it says."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return f"process {holder['pid']} on host {holder['host']}, since {holder['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"its lock is {path}"


def last_complete_checkpoint(output_dir) -> Optional[str]:
    """The last `checkpoint-N` of `output_dir` whose save finished (its trainer_state.json reads), or None; the later
    saves cut short (a `checkpoint-N` without it, a `_saving-checkpoint-N`) are skipped, named in one line with why
    (nothing is deleted)."""
    steps = {}
    for path in Path(output_dir).iterdir():
        match = re.fullmatch(rf"({re.escape(SAVING_PREFIX)})?{PREFIX_CHECKPOINT_DIR}-(\d+)", path.name)
        if match and path.is_dir():
            steps[path] = int(match.group(2)) - 0.5 * bool(match.group(1))  # a folder before its rename first
    chosen, skipped = None, []
    for path in sorted(steps, key=steps.get, reverse=True):
        if path.name.startswith(SAVING_PREFIX):
            skipped.append(f"{path.name} (a save cut short before its rename)")
        elif read_whole_json(path / TRAINER_STATE) is None:
            skipped.append(f"{path.name} (its {TRAINER_STATE}, written last, is missing or incomplete: a save cut "
                           "short)")
        else:
            chosen = str(path)
            break
    if skipped:
        logger.warning("skipped %s; %s", ", ".join(skipped),
                       f"resuming from {chosen}" if chosen else "no complete checkpoint: training starts from step 0")
    return chosen


def read_whole_json(path: Path):
    """What the JSON file `path` holds, or None when it is missing or not whole (a write cut short)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def check_checkpoint_files(checkpoint, advice: str) -> None:
    """Raise `DamagedCheckpointError` naming the first file of `checkpoint` that resuming loads and that does not read:
    a torch file (optimizer.pt, scheduler.pt, scaler.pt, rng_state*.pth: zip archives, read whole with their CRCs) or
    trainer_state.json. `advice` ends the message (what to do instead). The weights are checked by
    `check_weights_files`."""
    checkpoint = Path(checkpoint)
    for path in sorted([*checkpoint.glob("*.pt"), *checkpoint.glob("*.pth")]):
        try:
            with zipfile.ZipFile(path) as archive:
                bad_member = archive.testzip()
            problem = f"the data of {bad_member} does not match its checksum" if bad_member else None
        except (zipfile.BadZipFile, OSError, EOFError) as err:
            problem = f"not a complete torch file: {err}"
        if problem:
            raise DamagedCheckpointError(f"{path} is damaged ({problem}): it is incomplete or corrupted; {advice}")
    state = checkpoint / "trainer_state.json"
    if state.is_file():
        try:
            json.loads(state.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            raise DamagedCheckpointError(f"{state} is damaged (not JSON: {err}): it is incomplete or corrupted; "
                                         f"{advice}") from None


def resume_advice(checkpoint, output_dir) -> str:
    """The choices when `checkpoint` cannot be resumed: an earlier checkpoint of the run (named when there is one), or
    a fresh start."""
    checkpoint = Path(checkpoint)
    step = _step(checkpoint)
    checkpoints = [path for path in Path(output_dir).glob("checkpoint-*") if path.is_dir()]
    earlier = sorted((path for path in checkpoints if -1 < _step(path) < step), key=_step)
    if not earlier:
        return (f"there is no earlier checkpoint in {output_dir} to resume from: pass --overwrite_output_dir to start "
                "fresh")
    return (f"resume from an earlier checkpoint ({earlier[-1]}: delete {checkpoint}, or give --resume_from_checkpoint "
            f"{earlier[-1]}), or pass --overwrite_output_dir to start fresh")


def _step(checkpoint: Path) -> int:
    number = checkpoint.name.rsplit("-", 1)[-1]
    return int(number) if number.isdigit() else -1


__all__ = ["DamagedCheckpointError", "OutputDirInUseError", "SAVING_PREFIX", "check_checkpoint_files",
           "last_complete_checkpoint", "locked_output_dir", "read_whole_json", "resume_advice"]
