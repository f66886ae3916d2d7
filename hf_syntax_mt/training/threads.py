"""How many CPU threads torch computes with: `--threads N` of `hf-syntax-mt-train`, `hf-syntax-mt translate`
and `hf-syntax-mt demo`, else the environment variable `HF_SYNTAX_MT_THREADS`, else torch's default (one
per core, or `OMP_NUM_THREADS`).

On a machine whose cores other jobs also use, fewer threads are faster: torch's threads wait for each
other at every operation, so one busy core holds all of them back. Issue 50 measured a training step on 2
cores with one busy at 4.29 s with 2 threads and 0.43 s with 1; `benchmarks/threads_speed.py` (at 9215983, retired
since: benchmarks/README.md; recipe size, batch 32 x 30) on 2 cores shared with other jobs (load average 6): 0.62
steps/s with 1 thread, 0.19 with 2.

To train on several cores, `hf-syntax-mt-train --processes N` (`hf_syntax_mt.training.data_parallel`) is faster than N
threads: N data-parallel processes with one thread each wait for each other once a step, not at every operation
(on an idle Intel Xeon, the KFTT recipe: 2 processes 14,600 tokens/s, 2 threads 12,600, 1 thread 8,100).
"""

from __future__ import annotations

import os
from typing import Optional

THREADS_ENV = "HF_SYNTAX_MT_THREADS"
THREADS_HELP = (f"CPU threads for torch (default: ${THREADS_ENV}, else one per core); on a machine shared with other "
                "jobs use fewer, e.g. 1 on 2 cores with one busy")


def parse_threads(text: str, source: str = "--threads") -> int:
    """`text` as a number of threads >= 1; `ValueError` naming `source` otherwise."""
    try:
        threads = int(str(text).strip())
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"{source} {text!r}: expected a number of threads >= 1")
    return threads


def set_torch_threads(threads: Optional[int] = None) -> Optional[int]:
    """`torch.set_num_threads` to `threads` (a command's `--threads`), else to `$HF_SYNTAX_MT_THREADS`; torch's
    default stays when neither is given. Returns the number set, or None."""
    import torch

    if threads is None:
        text = os.environ.get(THREADS_ENV, "").strip()
        if not text:
            return None
        threads = parse_threads(text, THREADS_ENV)
    elif isinstance(threads, bool) or threads < 1:
        raise ValueError(f"--threads {threads}: expected a number of threads >= 1")
    torch.set_num_threads(threads)
    return threads


__all__ = ["THREADS_ENV", "THREADS_HELP", "parse_threads", "set_torch_threads"]
