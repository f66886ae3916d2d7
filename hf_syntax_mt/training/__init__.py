"""Training: the run entry point (`run`: `train`, `main`, and `--processes` runs), its arguments and parser
(`arguments`), the `Seq2SeqTrainer` subclass (`trainer`), data-parallel CPU processes (`data_parallel`), a fixed budget
of updates (`budget`), Ctrl-C / SIGTERM (`interrupt`), the output dir's lock and checkpoint checks (`run_safety`), the
run log and warm-up (`progress`), torch threads (`threads`), checkpoint averaging (`checkpoint_averaging`), the
torch-free command-line plumbing (`command_line`) and the `hf-syntax-mt-train` console script (`console`).

`from hf_syntax_mt.training import train, main, ...` imports `run`'s names when first used (PEP 562), so that the
light modules here (`command_line`, `console`, `threads`) load without torch.
"""

import importlib

_RUN_NAMES = ("DataArguments", "ModelArguments", "SyntaxMTSeq2SeqTrainer", "SyntaxMTTrainingArguments", "TrainingResult",
              "bleu_metric_fn", "build_annotator", "load_raw_datasets", "main", "parse_config_overrides",
              "preparsed_annotator", "read_parallel_file", "train", "train_in_processes", "train_with_processes")

__all__ = list(_RUN_NAMES)


def __getattr__(name):
    if name not in _RUN_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(".run", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted([*globals(), *_RUN_NAMES])
