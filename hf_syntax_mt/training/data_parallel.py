"""Data-parallel training on the cores of one CPU: `hf-syntax-mt-train --processes N`.

`--processes N` starts N local processes with torch elastic (the launcher behind `torchrun --standalone`), which
train one model as the Trainer does under `torchrun`: DDP over gloo on localhost, one torch thread each
(`--threads` sets more). The batch stays the one-process batch: accelerate's `split_batches=True` splits each
batch of `--per_device_train_batch_size` pairs, and each token-budget batch of `--max_tokens_per_batch`
(`TokenBudgetBatchSampler(split_batches=True)`), between the processes, and the loss of a step is the mean over
the target tokens of all processes (`token_share`), as one process computes it; so N processes give one
process's losses (tests/training/test_data_parallel.py), only faster. Two exceptions: the parse losses of the DBSA and
self-parsing presets are weighted by target tokens too, not by their own arcs; and a fixed-size epoch's last,
smaller batch is filled up with the epoch's first pairs (accelerate's `even_batches`) unless the number of
training pairs is a multiple of the batch size. Evaluation and prediction under `--eval_max_tokens_per_batch` deal
the one-process token-budget batches out whole (`TokenBudgetBatchSampler(shuffle=False)`: each process generates its
own, and `gather_rows` gathers batches of different sizes), so they give one process's outputs; without the budget
the Trainer splits its fixed-size batches. DDP looks for parameters without a gradient after each forward pass only
where a model has some (`every_parameter_trained`; `--ddp_find_unused_parameters` overrides it). Only process 0
prints and writes the outputs; the others' output goes to log files that are shown if a process fails. Ctrl-C
reaches every process (one process group), SIGTERM too or the launcher passes it on: each saves its checkpoint after
the same step, as one process does.

Why processes and not threads: torch's threads wait for each other at every operation, N processes only once a
step (the gradient all-reduce). On an idle Intel Xeon (the KFTT recipe's model, 2,048-token batches) one process
with 2 threads trained 12,600 tokens/s, two processes with 1 thread each 14,600, one thread 8,100; with another
busy process on the machine 2 threads fell to 2,000 (`benchmarks/processes_speed.py` at f8780a1, retired since:
benchmarks/README.md).

    launch(entrypoint, *args, processes=N)  # entrypoint(*args) in N processes; rank 0's return value
    train_in_processes(N, model_args, data_args, training_args, **train_kwargs)  # `train` in N processes
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

from ..syntax.trees import IGNORE_INDEX
from .command_line import without_option

logger = logging.getLogger(__name__)

PROCESSES_HELP = ("Train with N data-parallel CPU processes (torch elastic, gloo), one torch thread each (--threads "
                  "sets more per process); each batch (--per_device_train_batch_size / --max_tokens_per_batch) is "
                  "split between them, so the run trains on one process's batches. Default: one process")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_processes(processes, threads: Optional[int], training_args, data_args=None) -> None:
    """Refuse a `--processes` that cannot work: not a number >= 1, more processes than cores (they would wait
    for each other, as oversubscribed threads do), a GPU run (launch GPUs with `accelerate launch` / `torchrun`),
    or a fixed batch size that the processes cannot split evenly (token-budget batches need no such size). Warns
    when processes x threads > cores."""
    import torch

    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"--processes {processes!r}: expected a number of processes >= 1")
    cores = available_cores()
    if processes > cores:
        raise ValueError(f"--processes {processes}: this machine gives the run {cores} cores, and processes beyond one "
                         f"per core only wait for each other; use --processes {cores} or fewer")
    if processes * (threads or 1) > cores:
        logger.warning("--processes %d x --threads %d = %d threads on %d cores: they will wait for each other; "
                       "--threads 1 is faster", processes, threads, processes * threads, cores)
    if not training_args.use_cpu and torch.cuda.is_available():
        raise ValueError("--processes starts CPU processes: on GPUs launch with `accelerate launch` or `torchrun`, "
                         "or pass --use_cpu true to train on the CPU")
    sizes = [] if getattr(training_args, "max_tokens_per_batch", None) else ["per_device_train_batch_size"]
    evaluates = data_args is None or data_args.validation_file or data_args.test_file or data_args.dataset_name
    if evaluates and not getattr(training_args, "eval_max_tokens_per_batch", None):
        sizes.append("per_device_eval_batch_size")  # fixed-size evaluation batches are split too
    for name in sizes:
        size = getattr(training_args, name)
        if size % processes:
            raise ValueError(f"--{name} {size}: each batch is split between the --processes {processes}, so it must "
                             f"be a multiple of {processes}")


def worker_arguments(argv: list[str], training_args) -> list[str]:
    """The command line of each process: `argv` without `--processes`, with accelerate's `split_batches` on
    (the other `--accelerator_config` settings as given)."""
    accelerator_config = {**training_args.accelerator_config.to_dict(), "split_batches": True}
    return without_option(argv, "--processes") + ["--accelerator_config", json.dumps(accelerator_config)]


def token_share(labels, accelerator):
    """N · (this process's target tokens) / (all N processes' target tokens): the factor that makes this process's
    per-token mean loss its part of the mean over every process's tokens, once DDP averages the N gradients."""
    import torch

    count = (labels != IGNORE_INDEX).sum().to(torch.float32)
    total = accelerator.reduce(count.clone(), reduction="sum")
    return count * accelerator.num_processes / total.clamp(min=1.0)


def prepare_presplit(accelerator, dataloader):
    """`accelerator.prepare(dataloader)` for a DataLoader whose batch sampler already gives this process its part
    of each batch: accelerate's `split_batches` is off for it (it would need a fixed batch size to cut)."""
    config = accelerator.dataloader_config
    split, config.split_batches = config.split_batches, False
    try:
        return accelerator.prepare(dataloader)
    finally:
        config.split_batches = split


def gather_rows(accelerator, data, skip: bool = False):
    """`accelerator.gather` for batches that hold different numbers of rows on different processes (the evaluation
    batches dealt out whole, `TokenBudgetBatchSampler(shuffle=False)`): every process's rows, in process order, and
    none of this process's when `skip` (a batch that only keeps it in step). The other dimensions must agree (the
    Trainer pads them across processes before it gathers)."""
    import torch
    from accelerate.utils import recursively_apply

    def gather(tensor):
        if skip:
            tensor = tensor[:0]
        rows = accelerator.gather(torch.tensor([tensor.shape[0]], device=tensor.device)).tolist()
        most = max(rows)
        padded = torch.cat([tensor, tensor.new_zeros((most - tensor.shape[0], *tensor.shape[1:]))])
        gathered = accelerator.gather(padded)
        return torch.cat([gathered[rank * most: rank * most + count] for rank, count in enumerate(rows)])

    return recursively_apply(gather, data)


RELATION_TERMS = ("relative_key_term", "relative_value_term", "dependency_key_term", "dependency_value_term")


def every_parameter_trained(model) -> bool:
    """Whether every training step gives each parameter of `model` a gradient, so that DDP need not search the graph
    for unused ones after each forward pass (`find_unused_parameters`): true of a SyntaxMT model with all its relation
    terms on (every preset, self-parsing and a MarianMT warm start too: tests/training/test_data_parallel.py); a
    relation term switched off leaves its table without a gradient."""
    config = getattr(model, "config", None)
    return getattr(config, "model_type", None) == "syntax_mt" and all(getattr(config, name) for name in RELATION_TERMS)


def _worker(entrypoint: Callable, threads: int, *args) -> Any:
    """One process: `threads` torch threads (also for code that reads `$HF_SYNTAX_MT_THREADS`, and
    `$OMP_NUM_THREADS`, without which accelerate sets its own count), then the work."""
    import torch

    from .threads import THREADS_ENV

    os.environ[THREADS_ENV] = os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    return entrypoint(*args)


STOPPED_WHILE_LOADING = 128 + signal.SIGINT
"""The exit status of a process of `launch` that a Ctrl-C reached before its work handled one (while it loaded)."""


def _launched_worker(entrypoint: Callable, threads: int, *args) -> Any:
    """`_worker` in a process of `launch`: a Ctrl-C that reaches it before the work handles one ends it with
    `STOPPED_WHILE_LOADING`. torch's spawn wrapper would take the KeyboardInterrupt for its parent's and exit 0
    without a return value, which torch elastic's agent then waits on forever."""
    try:
        return _worker(entrypoint, threads, *args)
    except KeyboardInterrupt:
        sys.exit(STOPPED_WHILE_LOADING)


LAUNCHER_LOGGERS = ("torch.distributed.elastic", "torch.distributed.launcher", "torch.multiprocessing")


@contextlib.contextmanager
def _launcher_log_to(path: Optional[Path]):
    """While the processes run, torch elastic's own log (its tracebacks of a failed process and its report) goes to
    `path` instead of the console (None: left as it is). Also keeps the launcher's resource tracker quiet about the
    semaphores a killed process leaves."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(name) for name in LAUNCHER_LOGGERS]
    propagate = [log.propagate for log in loggers]
    warnings = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [warnings, "ignore::UserWarning:multiprocessing.resource_tracker"]))
    for log in loggers:
        log.addHandler(handler)
        log.propagate = False
    try:
        yield
    finally:
        for log, value in zip(loggers, propagate):
            log.removeHandler(handler)
            log.propagate = value
        handler.close()
        if warnings is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = warnings


@contextlib.contextmanager
def _signals_left_to_workers():
    """While the processes run, stopping them is theirs to handle: each saves a checkpoint after the same step.
    Ctrl-C reaches the whole process group; SIGTERM may come to the group (`kill -TERM -- -PGID`, a job scheduler)
    or to this process alone (`kill PID`, a container's stop), so it is passed on to the processes, which take a
    second SIGTERM as the same request. torch elastic's launcher would otherwise shut them down with a second signal
    while they save."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def pass_on(number, frame):
        for process in multiprocessing.active_children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, number)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, lambda number, frame: None),
                signal.SIGTERM: signal.signal(signal.SIGTERM, pass_on)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def launch(entrypoint: Callable, *args, processes: int, threads: int = 1, log_dir: Optional[Path] = None) -> Any:
    """Run `entrypoint(*args)` in `processes` local processes started by torch elastic (as `torchrun --standalone
    --nproc-per-node N` would: `RANK`, `WORLD_SIZE`, `MASTER_ADDR` set; the Trainer then trains with DDP, gloo
    on the CPU), `threads` torch threads each; returns process 0's return value. `entrypoint` and `args` must
    pickle (the processes are spawned). Only process 0's output reaches the console; a failed process raises
    torch's `ChildFailedError`. The other processes' output and torch elastic's log go to `log_dir` (`LAUNCHER_LOG`
    there; removed after a run that succeeded), else to a temporary folder and elastic's log to the console. One
    process is this one: no launcher, no DDP."""
    if processes == 1:
        return _worker(entrypoint, threads, *args)
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    with contextlib.ExitStack() as stack:
        if log_dir is None:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="hf_syntax_mt_processes_"))
        else:
            folder = tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=_made(Path(log_dir)))
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=processes, run_id=uuid.uuid4().hex, rdzv_backend="c10d",
            rdzv_endpoint="localhost:0", max_restarts=0, signals_to_handle="SIGHUP,SIGQUIT",
            logs_specs=DefaultLogsSpecs(log_dir=folder, redirects={rank: Std.ALL for rank in range(1, processes)}),
        )
        with _signals_left_to_workers(), _launcher_log_to(None if log_dir is None else Path(folder) / LAUNCHER_LOG):
            returned = elastic_launch(config, _launched_worker)(entrypoint, threads, *args)
        if log_dir is not None:
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                Path(log_dir).rmdir()  # unless an earlier run's failure is kept there
    return returned[0]


LAUNCHER_LOG = "launcher.log"


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


PROCESS_LOGS = "_processes"
"""The folder of the output dir where a failed `--processes` run keeps its processes' output and torch elastic's
report (`Trainer.push_to_hub` uploads no `_*` file)."""


def report_failure(err, output_dir, log_dir: Path) -> str:
    """Add torch elastic's report of a `ChildFailedError` to the launcher log in `log_dir` and return one line:
    which process failed and how (its exit status or signal), the last checkpoint and the command that resumes
    from it, and where the processes' logs are."""
    from .run_safety import last_complete_checkpoint

    reports = sorted(Path(log_dir).glob(f"*/{LAUNCHER_LOG}"))  # the newest: this run's (named by its start)
    logs = reports[-1].parent if reports else log_dir
    if reports:
        with reports[-1].open("a", encoding="utf-8") as log:
            log.write(err.format_msg() + "\n")
    checkpoint = last_complete_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    resume = (f"the last checkpoint is {checkpoint}: rerun the same command to resume from it" if checkpoint else
              "no checkpoint was saved: rerun the same command to start again")
    return f"{failed_process(err)}; {resume} (the processes' output and torch elastic's report: {logs})"


def failed_process(err) -> str:
    """'training process 1 (pid 123) was killed by SIGINT' (or 'exited with status 1') of a `ChildFailedError`."""
    rank, failure = err.get_first_failure()
    how = (f"was killed by {failure.signal_name()}" if failure.exitcode < 0 else
           f"was stopped by SIGINT while it loaded (status {STOPPED_WHILE_LOADING})"
           if failure.exitcode == STOPPED_WHILE_LOADING else
           f"exited with status {failure.exitcode}")
    return f"training process {rank} (pid {failure.pid}) {how}"


__all__ = ["PROCESS_LOGS", "PROCESSES_HELP", "STOPPED_WHILE_LOADING", "available_cores", "check_processes",
           "every_parameter_trained", "failed_process", "gather_rows", "launch", "prepare_presplit", "report_failure", "token_share", "worker_arguments"]
