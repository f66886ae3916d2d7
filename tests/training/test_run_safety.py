"""The output dir of a run stays whole: a second run started into it while the first trains exits 2 naming the
process that holds it (the first keeps every checkpoint it names), and a damaged optimizer / scheduler / RNG file
of the checkpoint to resume is named with the choices left, before anything is loaded."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import TrainerCallback

from hf_syntax_mt.training.run import main, train
from hf_syntax_mt.training.run_safety import LOCK_NAME
from training_helpers import TINY_OVERRIDES, scratch_dir, synthetic_corpus, tiny_args

MAIN = "import sys; from hf_syntax_mt.training.run import main; sys.argv[0] = 'hf-syntax-mt-train'; sys.exit(main())"


def train_argv(out, *extra):
    """`hf-syntax-mt-train` arguments of the tiny transformer_abs run of `tiny_args` (4 steps, dev BLEU every 2)."""
    data = synthetic_corpus()
    return ["--preset", "transformer_abs", "--parser", "preparsed", "--config_overrides", TINY_OVERRIDES,
            "--train_file", str(data / "train"), "--validation_file", str(data / "dev"), "--vocab_size", "120",
            "--max_source_length", "32", "--max_target_length", "12", "--output_dir", str(out),
            "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "8", "--warmup_steps", "2",
            "--learning_rate", "3e-3", "--eval_strategy", "steps", "--eval_steps", "2", "--save_strategy", "steps",
            "--save_steps", "2", "--logging_steps", "2", "--use_cpu", "true", "--disable_tqdm", "true",
            "--cache_dir", str(out.parent / "cache"), "--max_steps", "4", *extra]


class SecondRunAtFirstSave(TrainerCallback):
    """Runs the same training command in another process once this run saved its first checkpoint."""

    def __init__(self, argv):
        self.argv, self.done = argv, None

    def on_save(self, args, state, control, **kwargs):
        if self.done is None:
            env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
            self.done = subprocess.run([sys.executable, "-c", MAIN, *self.argv], capture_output=True, text=True,
                                       env=env, timeout=300)


def test_a_second_run_into_a_busy_output_dir_exits_2_and_the_first_keeps_its_checkpoints():
    out = scratch_dir("busy") / "out"
    model_args, data_args, training_args = tiny_args(out, "transformer_abs")
    second = SecondRunAtFirstSave(train_argv(out))
    first = train(model_args, data_args, training_args, callbacks=[second])
    assert second.done.returncode == 2, second.done.stdout[-3000:] + second.done.stderr[-3000:]
    [line, hint] = second.done.stderr.splitlines()
    assert line.startswith(f"hf-syntax-mt-train: error: {out} is in use by another training run (process "
                           f"{os.getpid()} on host {socket.gethostname()}, since ")
    assert line.endswith("): wait for it to finish, or give another --output_dir")
    # the first run is whole: its checkpoints, its best one among them, and a record that names what exists
    state = first.trainer.state
    assert state.global_step == 4 and state.best_model_checkpoint is not None
    checkpoints = sorted(p.name for p in out.glob("checkpoint-*"))
    assert checkpoints == ["checkpoint-2", "checkpoint-4"]
    assert all((out / name / "trainer_state.json").is_file() for name in checkpoints)
    assert os.path.basename(state.best_model_checkpoint) in checkpoints
    assert (out / "all_results.json").is_file() and (out / "model.safetensors").is_file()
    # the lock goes with the run, its file too (no _training.lock in the finished model): the same command now
    # finds the run finished
    assert not (out / LOCK_NAME).exists()
    assert main(train_argv(out)) == 0
    assert not (out / LOCK_NAME).exists()


@pytest.mark.parametrize("damage", ["random bytes", "truncated"])
def test_resuming_with_a_damaged_optimizer_file_names_it_and_the_choices(damage, capsys):
    out = scratch_dir("damaged_optimizer") / "out"
    assert main(train_argv(out, "--eval_strategy", "no", "--load_best_model_at_end", "false")) == 0
    (out / "all_results.json").unlink()  # as if the run had been stopped after its checkpoint at step 4
    optimizer = out / "checkpoint-4" / "optimizer.pt"
    data = optimizer.read_bytes()
    optimizer.write_bytes(os.urandom(len(data)) if damage == "random bytes" else data[: len(data) // 2])
    capsys.readouterr()
    longer = train_argv(out, "--eval_strategy", "no", "--load_best_model_at_end", "false", "--max_steps", "6")
    assert main(longer) == 2
    [line, hint] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"hf-syntax-mt-train: error: {optimizer} is damaged (")
    assert line.endswith(f"it is incomplete or corrupted; resume from an earlier checkpoint ({out / 'checkpoint-2'}: "
                         f"delete {out / 'checkpoint-4'}, or give --resume_from_checkpoint {out / 'checkpoint-2'}), "
                         "or pass --overwrite_output_dir to start fresh")
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]  # nothing deleted
    # the first choice works
    assert main([*longer, "--resume_from_checkpoint", str(out / "checkpoint-2")]) == 0


@pytest.mark.parametrize("left", ["a checkpoint without its last file", "a save before its rename"])
def test_a_checkpoint_save_cut_short_is_skipped_in_one_line_and_the_run_resumes_from_the_one_before(left, caplog):
    """What a kill while checkpoint-4 was written leaves (transformers writes trainer_state.json last; this package
    writes `_saving-checkpoint-4` and renames it), and no final model: the rerun says what it skips and why, resumes
    from checkpoint-2 and ends at step 4 with checkpoint-4 whole."""
    out = scratch_dir("cut_short") / "out"
    argv = train_argv(out, "--eval_strategy", "no", "--load_best_model_at_end", "false")
    assert main(argv) == 0
    (out / "checkpoint-4" / "trainer_state.json").unlink()
    if left == "a save before its rename":
        (out / "checkpoint-4").rename(out / "_saving-checkpoint-4")
    for name in ("all_results.json", "model.safetensors", "trainer_state.json"):
        (out / name).unlink()
    caplog.clear()
    assert main(argv) == 0
    [line] = [message for message in caplog.messages if "skipped" in message]
    why = "a save cut short before its rename" if left == "a save before its rename" else \
        "its trainer_state.json, written last, is missing or incomplete: a save cut short"
    assert line.endswith(f"_saving-checkpoint-4 ({why}); resuming from {out / 'checkpoint-2'}"
                         if left == "a save before its rename" else
                         f"checkpoint-4 ({why}); resuming from {out / 'checkpoint-2'}")
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4
    assert (out / "checkpoint-4" / "trainer_state.json").is_file() and not list(out.glob("_saving-*"))


def test_a_checkpoint_is_written_aside_and_renamed_whole(monkeypatch):
    """A save that stops before its end (here an error where a kill could come) leaves no checkpoint-4 for a rerun to
    take for a whole one: only `_saving-checkpoint-4`, beside the intact checkpoint-2."""
    from hf_syntax_mt.training.trainer import SyntaxMTSeq2SeqTrainer

    def stopped_at_step_4(trainer, output_dir):
        if trainer.state.global_step == 4:
            raise KeyboardInterrupt("killed while saving")

    monkeypatch.setattr(SyntaxMTSeq2SeqTrainer, "_save_rng_state", stopped_at_step_4)
    out = scratch_dir("renamed") / "out"
    model_args, data_args, training_args = tiny_args(out, "transformer_abs", eval_strategy="no",
                                                     load_best_model_at_end=False)
    with pytest.raises(KeyboardInterrupt):
        train(model_args, data_args, training_args)
    assert sorted(p.name for p in out.glob("*checkpoint-*")) == ["_saving-checkpoint-4", "checkpoint-2"]
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()


def test_a_run_killed_while_its_final_model_was_written_finishes_without_training_past_its_steps(caplog):
    """Its last checkpoint is at max_steps and the final model and record are not whole (here: missing): the rerun
    finishes the run from that checkpoint at step 4 of 4, saying so, instead of training a fifth update."""
    out = scratch_dir("final_cut_short") / "out"
    argv = train_argv(out, "--eval_strategy", "no", "--load_best_model_at_end", "false")
    assert main(argv) == 0
    weights = (out / "checkpoint-4" / "model.safetensors").read_bytes()
    for name in ("all_results.json", "model.safetensors"):
        (out / name).unlink()
    caplog.clear()
    assert main(argv) == 0
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4
    err = "\n".join(caplog.messages)
    assert f"{out / 'checkpoint-4'} is at step 4, the end of this run (4 steps): nothing left to train" in err
    assert (out / "model.safetensors").read_bytes() == weights and (out / "all_results.json").is_file()
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


@pytest.mark.parametrize("best", [False, True])
def test_a_finished_run_whose_model_file_is_gone_restores_it_from_its_checkpoint(caplog, best):
    """model.safetensors deleted by hand after the run finished: the rerun restores the final model from the checkpoint
    of the last step (the best checkpoint's weights under --load_best_model_at_end, as the run ended), saying so, keeps
    the record, and trains nothing (it said the model was kept, then failed: no file named model.safetensors)."""
    out = scratch_dir("model_gone") / "out"
    argv = train_argv(out, *(() if best else ("--eval_strategy", "no", "--load_best_model_at_end", "false")))
    assert main(argv) == 0
    weights, record = (out / "model.safetensors").read_bytes(), (out / "all_results.json").read_text()
    (out / "model.safetensors").unlink()
    caplog.clear()
    assert main(argv) == 0
    err = "\n".join(caplog.messages)
    assert (f"{out} finished training at step 4 in an earlier run, but its final model is gone (no model.safetensors):"
            f" restoring it from {out / 'checkpoint-4'}, the checkpoint of the run's last step") in err
    assert (out / "model.safetensors").read_bytes() == weights
    assert json.loads((out / "all_results.json").read_text()) == json.loads(record)
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 4
    chosen = json.loads((out / "trainer_state.json").read_text())["best_model_checkpoint"] if best else None
    assert weights == (Path(chosen or out / "checkpoint-4") / "model.safetensors").read_bytes()


@pytest.mark.parametrize("finished", [True, False])
def test_a_process_stopped_after_a_data_parallel_run_finished_says_the_run_finished(finished, monkeypatch, capsys):
    """Ctrl-C reaching a `--processes 2` run while its processes exit, after the run saved everything: the command
    says the run finished and exits 0 (it said "rerun to resume", exit 1, and the rerun found nothing to train). Here
    the processes are this one (the run trained in it, or not at all) and then process 1 "dies of SIGINT"."""
    import signal

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from hf_syntax_mt.training import run

    def launched(entrypoint, worker_argv, **settings):
        if finished:
            assert entrypoint(worker_argv) == 0
        raise ChildFailedError("main", {1: ProcessFailure(local_rank=1, pid=4321, exitcode=-signal.SIGINT,
                                                           error_file="no error file")})

    monkeypatch.setattr(run, "launch", launched)
    out = scratch_dir("finished_then_stopped") / "out"
    capsys.readouterr()
    returned = main(train_argv(out, "--eval_strategy", "no", "--load_best_model_at_end", "false", "--processes", "2"))
    last = capsys.readouterr().err.rstrip().splitlines()[-1]
    if finished:
        assert returned == 0, last
        assert last == (f"hf-syntax-mt-train: the run finished: {out} holds its model and its all_results.json; "
                        "training process 1 (pid 4321) was killed by SIGINT only after that (nothing to resume)")
    else:
        assert returned == 1 and "was killed by SIGINT; no checkpoint was saved: rerun the same command" in last
