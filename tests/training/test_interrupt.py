"""Ctrl-C / SIGTERM during training: a checkpoint after the current step, one line saying how to resume,
exit status 130 / 143, and a rerun that ends with the weights of an uninterrupted run."""

import logging
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from transformers import TrainerCallback

import hf_syntax_mt.training.interrupt as interrupt_module
from hf_syntax_mt.training.run import train
from hf_syntax_mt.training.run_safety import LOCK_NAME
from training_helpers import TINY_OVERRIDES, scratch_dir, started_until, stopped, synthetic_corpus, tiny_args

# 48 training pairs in batches of 16: 3 steps an epoch; 7 steps end in the middle of the third epoch
REPO = Path(__file__).resolve().parents[2]
STEPS = dict(max_steps=7, logging_steps=1, save_strategy="no", eval_strategy="no", load_best_model_at_end=False)


class SignalAtStep(TrainerCallback):
    """Sends `signals` to this process while step `step` runs (after its batch is drawn)."""

    def __init__(self, step, *signals):
        self.step, self.signals = step, signals

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            for number in self.signals:
                os.kill(os.getpid(), number)


def dropout_args(output_dir, **training):
    """The tiny run with dropout on, so that the resumed run must also restore the RNG state."""
    model_args, data_args, training_args = tiny_args(output_dir, **training)
    model_args.config_overrides += ",dropout=0.3"
    return model_args, data_args, training_args


def losses(result):
    return [(entry["step"], entry["loss"]) for entry in result.trainer.state.log_history if "loss" in entry]


def assert_same_weights(first, second):
    a, b = first.trainer.model.state_dict(), second.trainer.model.state_dict()
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different, different


@pytest.mark.parametrize("number, step", [(signal.SIGINT, 5), (signal.SIGTERM, 3)])  # mid-epoch; an epoch's end
def test_interrupted_run_resumes_to_the_weights_of_a_straight_run(number, step, caplog):
    straight = train(*dropout_args(scratch_dir("straight"), **STEPS))
    out = scratch_dir("interrupted")
    handlers = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    interrupted = train(*dropout_args(out, **STEPS), callbacks=[SignalAtStep(step, number)])
    assert {n: signal.getsignal(n) for n in handlers} == handlers  # the old handlers are back
    assert interrupted.interrupted_by == number and interrupted.trainer.state.global_step == step
    checkpoint = out / f"checkpoint-{step}"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [checkpoint.name]
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "rng_state.pth").is_file()
    # no final model, evaluation or record: the output dir is a run to resume, not a finished one
    assert not (out / "model.safetensors").exists() and not (out / "all_results.json").exists()
    assert interrupted.metrics.get("eval_bleu") is None
    assert f"interrupted at step {step}: checkpoint saved in {checkpoint}; rerun the same command to resume" \
        in caplog.text

    resumed = train(*dropout_args(out, **STEPS))
    assert resumed.interrupted_by is None and resumed.trainer.state.global_step == 7
    assert losses(resumed) == losses(straight)
    assert_same_weights(resumed, straight)


def test_interrupt_in_an_epoch_evaluated_each_epoch_skips_the_epoch_evaluation():
    """Stopped in the middle of an epoch under eval/save_strategy="epoch": the checkpoint is saved at the
    step without a dev evaluation there, and the resumed run evaluates where a straight run does."""
    epochs = dict(STEPS, eval_strategy="epoch", save_strategy="epoch", load_best_model_at_end=True)
    straight = train(*dropout_args(scratch_dir("straight"), **epochs))
    out = scratch_dir("interrupted")
    interrupted = train(*dropout_args(out, **epochs), callbacks=[SignalAtStep(4, signal.SIGINT)])
    assert interrupted.interrupted_by == signal.SIGINT
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]
    assert [e["step"] for e in interrupted.trainer.state.log_history if "eval_bleu" in e] == [3]
    resumed = train(*dropout_args(out, **epochs))

    def evaluations(result):
        return [(e["step"], e["eval_loss"]) for e in result.trainer.state.log_history if "eval_loss" in e]

    assert [step for step, _ in evaluations(straight)] == [3, 6, 7]
    assert evaluations(resumed) == evaluations(straight)
    assert losses(resumed) == losses(straight)
    assert resumed.trainer.state.best_model_checkpoint.rsplit("-", 1)[1] == \
        straight.trainer.state.best_model_checkpoint.rsplit("-", 1)[1]


def test_signal_at_the_last_step_lets_the_run_finish():
    out = scratch_dir("last")
    result = train(*tiny_args(out, **STEPS), callbacks=[SignalAtStep(7, signal.SIGINT)])
    assert result.interrupted_by is None and result.trainer.state.global_step == 7
    assert (out / "all_results.json").is_file() and (out / "model.safetensors").is_file()


def test_second_signal_aborts_at_once(monkeypatch):
    """A second Ctrl-C (after `FOLLOW_UP_SECONDS`, here 0) raises KeyboardInterrupt at once. The test gives SIGINT
    Python's default handler first: a test run started as a background job (`cmd &` in a script) inherits SIGINT
    ignored, as shells do for those."""
    monkeypatch.setattr(interrupt_module, "FOLLOW_UP_SECONDS", 0.0)
    out = scratch_dir("twice")
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        handlers = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
        with pytest.raises(KeyboardInterrupt):
            train(*tiny_args(out, **STEPS), callbacks=[SignalAtStep(2, signal.SIGINT, signal.SIGINT)])
        assert {n: signal.getsignal(n) for n in handlers} == handlers
        assert not list(out.glob("checkpoint-*"))
    finally:
        signal.signal(signal.SIGINT, inherited)


@pytest.mark.parametrize("follow_up", [signal.SIGINT, signal.SIGTERM])
def test_a_launchers_follow_up_signal_is_part_of_the_same_stop(caplog, follow_up):
    """torch elastic passes the Ctrl-C that reached the group on to its processes (`accelerate launch --multi_gpu`,
    `torchrun`) and may follow it with SIGTERM: a signal within `FOLLOW_UP_SECONDS` of the first is the same stop,
    and the run still saves its checkpoint (it was a second Ctrl-C: KeyboardInterrupt, or death by SIGTERM, nothing
    saved). SIGTERM's old handler stands in for the default, which would end the test's process."""
    out = scratch_dir("follow_up")
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    came = []
    old_sigterm = signal.signal(signal.SIGTERM, lambda number, frame: came.append(number))
    try:
        with caplog.at_level(logging.INFO, logger="hf_syntax_mt.training.interrupt"):
            result = train(*tiny_args(out, **{**STEPS, "save_strategy": "steps", "save_steps": 100}),
                           callbacks=[SignalAtStep(2, signal.SIGINT, follow_up)])
        assert result.interrupted_by == signal.SIGINT and came == []
        assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
        assert f"{signal.Signals(follow_up).name} received again" in caplog.text and "the same stop" in caplog.text
    finally:
        signal.signal(signal.SIGINT, inherited)
        signal.signal(signal.SIGTERM, old_sigterm)


@pytest.mark.parametrize("launched", [False, True], ids=["one_process", "process_of_a_processes_run"])
def test_a_second_sigterm_aborts_except_in_a_process_of_a_processes_run(monkeypatch, launched):
    """A `--processes` launcher passes SIGTERM on to its processes, so one sent to the whole group reaches each
    process twice: there a later SIGTERM is the same request (Ctrl-C aborts); in one process a second SIGTERM after
    `FOLLOW_UP_SECONDS` (here 0) goes to the handler that was there before."""
    from hf_syntax_mt.training.interrupt import InterruptCallback

    monkeypatch.setattr(interrupt_module, "FOLLOW_UP_SECONDS", 0.0)
    if launched:
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    else:
        monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    before = {n: signal.getsignal(n) for n in (signal.SIGINT, signal.SIGTERM)}
    came = []
    signal.signal(signal.SIGTERM, lambda number, frame: came.append(number))  # stands for the default (death)
    try:
        interrupt = InterruptCallback()
        with interrupt.handling_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert interrupt.signal_number == signal.SIGTERM
            assert came == ([] if launched else [signal.SIGTERM])
        assert signal.getsignal(signal.SIGINT) == before[signal.SIGINT]
        os.kill(os.getpid(), signal.SIGTERM)  # after training: the old handler again
        assert came == [signal.SIGTERM] if launched else [signal.SIGTERM, signal.SIGTERM]
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_train_command_exits_130_or_143_with_one_line_saying_how_to_resume(tmp_path, number):
    """The signal comes from outside (as Ctrl-C or a scheduler sends it), once the first step is logged."""
    data = synthetic_corpus()
    args = ["--preset", "transformer_abs", "--parser", "preparsed", "--config_overrides", TINY_OVERRIDES,
            "--train_file", str(data / "train"), "--vocab_size", "120", "--max_target_length", "8",
            "--output_dir", str(tmp_path / "out"), "--max_steps", "3000", "--logging_steps", "1",
            "--eval_strategy", "no", "--save_strategy", "no", "--per_device_train_batch_size", "16",
            "--disable_tqdm", "true", "--cache_dir", str(tmp_path / "cache")]
    code = "import sys; from hf_syntax_mt.training.run import main; sys.argv[0] = 'hf-syntax-mt-train'; sys.exit(main())"
    process = started_until([sys.executable, "-c", code, *args], "'loss'")  # the Trainer's log of step 1
    output, _ = stopped(process, lambda: process.send_signal(number), timeout=120)
    assert process.returncode == 128 + number, output[-3000:]
    assert "Traceback" not in output
    [checkpoint] = (tmp_path / "out").glob("checkpoint-*")
    step = int(checkpoint.name.split("-")[1])
    assert 1 < step < 3000
    assert output.rstrip().endswith(
        f"interrupted at step {step}: checkpoint saved in {checkpoint}; rerun the same command to resume")


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_ctrl_c_under_accelerate_launch_saves_a_checkpoint(tmp_path, processes):
    """`accelerate launch` (the README's multi-process route; one process on the CPU, or two under torch elastic as
    training/train.py's docstring gives it): SIGINT to the launcher's whole process group, as a terminal's Ctrl-C
    sends it, once training runs. The launcher passes it on (two processes) or exits at once (one); the training
    processes save a checkpoint, print how to resume, and leave no lock."""
    data = synthetic_corpus()
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    launch = ["--cpu", "--num_processes", "1"] if processes == 1 else ["--multi_gpu", "--num_processes", "2"]
    args = ["--preset", "transformer_dep_labeled_rel", "--parser", "preparsed", "--config_overrides", TINY_OVERRIDES,
            "--train_file", str(data / "train"), "--vocab_size", "120", "--max_target_length", "8",
            "--output_dir", str(tmp_path / "out"), "--max_steps", "3000", "--logging_steps", "1",
            "--eval_strategy", "no", "--save_strategy", "no", "--per_device_train_batch_size", "16", "--use_cpu", "true",
            "--disable_tqdm", "true", "--cache_dir", str(tmp_path / "cache")]
    command = [accelerate, "launch", *launch, "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               str(REPO / "training" / "train.py"), *args]
    process = started_until(command, "'loss'")
    output, _ = stopped(process, lambda: os.killpg(process.pid, signal.SIGINT), timeout=240)
    [checkpoint] = (tmp_path / "out").glob("checkpoint-*")
    step = int(checkpoint.name.split("-")[1])
    assert f"interrupted at step {step}: checkpoint saved in {checkpoint}; rerun the same command to resume" in output
    assert (checkpoint / "trainer_state.json").is_file() and not (tmp_path / "out" / LOCK_NAME).exists()
