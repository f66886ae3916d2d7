"""`scripts/kftt_campaign.sh start` runs one queue at a time: a second `start` while the first one sets up (or while
its queue runs) starts none. The campaign here is a stand-in: a git folder whose `scripts/setup.sh` takes a while and
whose `.venv/bin/python` only sleeps; its queues are found by their folder and ended by their process group."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kftt_campaign.sh"


def _queues(campaign: Path) -> list:
    """The queue processes of the stand-in campaign (their bash runs in its folder)."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        if "_queue" in (process.info["cmdline"] or []) and process.info["cwd"] == str(campaign):
            found.append(process)
    return found


def test_a_second_start_during_the_first_ones_setup_starts_no_second_queue(tmp_path):
    campaign, runs = tmp_path / "campaign", tmp_path / "runs"
    (campaign / "scripts").mkdir(parents=True)
    (campaign / "scripts" / "setup.sh").write_text(
        "touch setup_started\nsleep 3\nmkdir -p .venv/bin\n"
        "printf '#!/bin/sh\\nexec sleep 60\\n' > .venv/bin/python\nchmod +x .venv/bin/python\n")
    subprocess.run(["git", "init", "-q", str(campaign)], check=True)
    subprocess.run(["git", "-C", str(campaign), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "stand-in"], check=True)
    env = dict(os.environ, CAMPAIGN=str(campaign), HF_SYNTAX_MT_RUNS=str(runs))
    command = ["bash", str(SCRIPT), "start"]
    try:
        first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(300):
            if (campaign / "setup_started").exists():
                break
            time.sleep(0.1)
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert first.wait(timeout=60) == 0 and second.returncode == 0
        assert second.stdout.strip() == f"kftt_campaign: the queue of {campaign} is already running or starting"
        assert "queue started" in first.stdout.read()
        time.sleep(1)
        assert len(_queues(campaign)) == 1
        third = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)  # while it runs
        [queue] = _queues(campaign)
        assert third.stdout.strip() == (f"kftt_campaign: the queue of {campaign} is already running "
                                        f"(pid {queue.pid}) or starting")
    finally:
        for queue in _queues(campaign):
            os.killpg(os.getpgid(queue.pid), signal.SIGKILL)


def _git(folder: Path, *arguments: str) -> str:
    command = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *arguments]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def test_start_fast_forwards_past_results_the_run_wrote_and_this_checkout_committed(tmp_path):
    """A finished run's files in the clone, collected and committed here since, do not stop the fast-forward; a file
    of the clone's that differs from the commit's is kept (and the clone stays where it was)."""
    here, campaign, runs = tmp_path / "main", tmp_path / "campaign", tmp_path / "runs"
    (here / "scripts").mkdir(parents=True)
    (here / "scripts" / "kftt_campaign.sh").write_bytes(SCRIPT.read_bytes())
    (here / "scripts" / "setup.sh").write_text(
        "mkdir -p .venv/bin\nprintf '#!/bin/sh\\nexec sleep 60\\n' > .venv/bin/python\nchmod +x .venv/bin/python\n")
    _git(here.parent, "init", "-q", str(here))
    _git(here, "add", "-A")
    _git(here, "commit", "-q", "-m", "before the run")
    _git(tmp_path, "clone", "-q", str(here), str(campaign))
    results = Path("benchmarks/results/kftt.ja-en.budget/transformer_dbsa")
    (campaign / results).mkdir(parents=True)
    (campaign / results / "seed1.json").write_text('{"bleu": 5.15}\n')   # what the run wrote in the clone
    (here / results).mkdir(parents=True)
    (here / results / "seed1.json").write_text('{"bleu": 5.15}\n')       # collected and committed here
    _git(here, "add", "-A")
    _git(here, "commit", "-q", "-m", "collected")
    env = dict(os.environ, CAMPAIGN=str(campaign), HF_SYNTAX_MT_RUNS=str(runs))
    command = ["bash", str(here / "scripts" / "kftt_campaign.sh"), "start"]
    try:
        started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert started.returncode == 0 and "could not fast-forward" not in started.stdout, started.stdout
        assert _git(campaign, "rev-parse", "HEAD") == _git(here, "rev-parse", "HEAD")
        assert _git(campaign, "status", "--porcelain", "--", "benchmarks") == ""
        for queue in _queues(campaign):
            os.killpg(os.getpgid(queue.pid), signal.SIGKILL)
        (campaign / results / "seed2.json").write_text('{"bleu": 5.0}\n')   # the clone's own, not committed here
        (here / results / "seed2.json").write_text('{"bleu": 4.9}\n')
        _git(here, "add", "-A")
        _git(here, "commit", "-q", "-m", "another seed2")
        (runs / "campaign.lock").unlink()
        started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert "could not fast-forward" in started.stdout
        assert (campaign / results / "seed2.json").read_text() == '{"bleu": 5.0}\n'
        assert _git(campaign, "rev-parse", "HEAD") != _git(here, "rev-parse", "HEAD")
    finally:
        for queue in _queues(campaign):
            os.killpg(os.getpgid(queue.pid), signal.SIGKILL)


def test_stop_right_after_start_ends_a_queue_that_is_not_training_yet(tmp_path):
    """A `stop` before the run trains (the queue still skips finished runs or prepares data) ends the queue: it does
    not start with SIGINT ignored, as a script's background job otherwise does. The stand-in python only sleeps."""
    campaign, runs = tmp_path / "campaign", tmp_path / "runs"
    (campaign / ".venv" / "bin").mkdir(parents=True)
    (campaign / ".venv" / "bin" / "python").write_text("#!/bin/sh\nexec sleep 60\n")
    (campaign / ".venv" / "bin" / "python").chmod(0o755)
    _git(tmp_path, "init", "-q", str(campaign))
    _git(campaign, "commit", "-q", "--allow-empty", "-m", "stand-in")
    env = dict(os.environ, CAMPAIGN=str(campaign), HF_SYNTAX_MT_RUNS=str(runs))
    try:
        started = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=60)
        assert "queue started" in started.stdout, started.stdout + started.stderr
        for _ in range(100):   # setsid forks: its parent, with the same command line, may still be there
            queues = _queues(campaign)
            if len(queues) == 1 and queues[0].name() == "bash":
                break
            time.sleep(0.1)
        [queue] = queues
        ignored = int(Path(f"/proc/{queue.pid}/status").read_text().split("SigIgn:")[1].split()[0], 16)
        assert not ignored & (1 << (signal.SIGINT - 1))
        stopped = subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=60)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert not _queues(campaign)
    finally:
        for queue in _queues(campaign):
            os.killpg(os.getpgid(queue.pid), signal.SIGKILL)
