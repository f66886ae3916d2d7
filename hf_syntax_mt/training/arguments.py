"""The argument dataclasses of `hf_syntax_mt.training.run.train` (and `training/train.py`'s `HfArgumentParser`):
`ModelArguments` (preset, config overrides, tokenizer, parser), `DataArguments` (hub dataset or local files,
languages, lengths, metric tokenizer) and `SyntaxMTTrainingArguments` (`Seq2SeqTrainingArguments` with this
package's recipe defaults), and `parse_config_overrides` for `--config_overrides`."""

from __future__ import annotations

import ast
import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Optional

from transformers import HfArgumentParser, Seq2SeqTrainingArguments
from transformers.trainer_utils import IntervalStrategy, SaveStrategy, SchedulerType
from transformers.utils import is_torch_bf16_gpu_available, is_torch_cuda_available, is_torch_xla_available

from ..features.joint_bpe import SPECIAL_TOKENS
from ..inference.length_cap import check_length_cap
from .budget import checkpoints_kept_for_averaging, last_checkpoint_steps
from .command_line import ArgumentParser
from .data_parallel import PROCESSES_HELP
from .progress import DEFAULT_WARMUP_STEPS
from .threads import THREADS_HELP

logger = logging.getLogger(__name__)

RECIPE_LABEL_SMOOTHING = 0.1  # the seeds' ε; the model's own default is plain cross-entropy (SPEC §1)


def require_at_least(arguments, minimum: int, names: tuple[str, ...], what: str) -> None:
    """Raise `ValueError` naming the first of the fields `names` of `arguments` set below `minimum` (None is
    unset), so that a bad length or count fails when the arguments are parsed, not after hours of work."""
    for name in names:
        value = getattr(arguments, name)
        if value is not None and (isinstance(value, bool) or value < minimum):
            raise ValueError(f"--{name} {value}: expected {what} >= {minimum}")


@dataclass
class ModelArguments:
    """What to train: preset + overrides (or an existing model), tokenizer, parser."""

    preset: str = field(
        default="transformer_abs",
        metadata={"help": "Preset name(s) joined with '+', e.g. transformer_dep_rel+transformer_dbsa+transformer_sla"},
    )
    config_overrides: Optional[str] = field(
        default=None,
        metadata={"help": "Config overrides 'key=value,...', e.g. 'd_model=256,encoder_layers=3,sla_layers=[1,2]'"},
    )
    model_name_or_path: Optional[str] = field(
        default=None,
        metadata={"help": "Continue from a saved SyntaxMT model instead of a fresh preset, or start from a MarianMT "
                  "checkpoint (local or Hub, e.g. Helsinki-NLP/opus-mt-ja-en): converted to --preset, then fine-tuned"},
    )
    tokenizer_name: Optional[str] = field(
        default=None, metadata={"help": "Existing tokenizer; default: the model's, or a joint BPE trained on the data"}
    )
    vocab_size: int = field(default=8000, metadata={"help": "Size of the joint BPE vocabulary trained on the data"})
    split_punctuation: bool = field(
        default=False,
        metadata={"help": "Joint BPE: split every punctuation character off its word (raw, untokenized text)"},
    )
    parser: Optional[str] = field(
        default=None,
        metadata={
            "help": "Source parser: 'stanza', a spaCy pipeline name (e.g. ja_ginza), 'synthetic_grammar' (the demo's "
            "source language), 'preparsed' (CoNLL-U next to the data: <source file>.conllu and optional <source "
            "file>.tree) or 'none'. Default: none unless the preset needs syntax."
        },
    )
    parser_lang: Optional[str] = field(default=None, metadata={"help": "Language of the stanza parser (default: source_lang)"})
    parser_pretokenized: bool = field(
        default=False, metadata={"help": "stanza: the text is whitespace-tokenized, one sentence a line"}
    )
    parser_disable: Optional[str] = field(
        default=None, metadata={"help": "spaCy: comma-separated pipeline components to disable (e.g. ner)"}
    )
    parser_model_dir: Optional[str] = field(default=None, metadata={"help": "stanza: model directory"})
    target_parser: Optional[str] = field(
        default=None, metadata={"help": "Target parser for the DBSA decoder parse loss (same syntax as --parser)"}
    )
    target_parser_lang: Optional[str] = field(default=None, metadata={"help": "Language of a stanza target parser"})
    distance_source: str = field(
        default="auto",
        metadata={"help": "SLA distances from 'constituency' trees, the 'dependency' tree, 'auto' (trees if any), or "
                  "'flat' (one node over all words: localized attention without syntax, a control); "
                  "recorded in the config, so translation derives them the same way"},
    )

    def __post_init__(self):
        """A joint BPE vocabulary needs room beyond its special tokens."""
        require_at_least(self, len(SPECIAL_TOKENS) + 1, ("vocab_size",), "a vocabulary size (special tokens included)")


@dataclass
class DataArguments:
    """Where the sentence pairs come from and how they are cut and scored."""

    dataset_name: Optional[str] = field(default=None, metadata={"help": "Hub dataset name (datasets.load_dataset)"})
    dataset_config_name: Optional[str] = field(default=None, metadata={"help": "Hub dataset configuration"})
    source_lang: str = field(default="src", metadata={"help": "Source language code / file suffix"})
    target_lang: str = field(default="tgt", metadata={"help": "Target language code / file suffix"})
    train_file: Optional[str] = field(
        default=None,
        metadata={"help": "Local training data: a .tsv, a .json/.jsonl, or a prefix P of P.<source_lang> + P.<target_lang>"},
    )
    validation_file: Optional[str] = field(default=None, metadata={"help": "Local dev data (same formats)"})
    test_file: Optional[str] = field(default=None, metadata={"help": "Local test data (same formats)"})
    max_source_length: int = field(default=128, metadata={"help": "Source truncation length (subwords)"})
    max_target_length: int = field(default=128, metadata={"help": "Target truncation and generation length"})
    max_train_samples: Optional[int] = field(default=None, metadata={"help": "Use only the first N training pairs"})
    max_eval_samples: Optional[int] = field(default=None, metadata={"help": "Use only the first N dev pairs"})
    max_predict_samples: Optional[int] = field(default=None, metadata={"help": "Use only the first N test pairs"})
    bleu_tokenize: str = field(
        default="13a", metadata={"help": "sacrebleu tokenizer: 13a, intl, char, zh, ja-mecab (Japanese targets), ..."}
    )
    preprocessing_num_workers: Optional[int] = field(default=None, metadata={"help": "Processes for Dataset.map"})
    overwrite_cache: bool = field(default=False, metadata={"help": "Recompute cached features"})
    cache_dir: Optional[str] = field(
        default=None, metadata={"help": "Feature cache for local files (default: the datasets cache)"}
    )
    source_spacing: str = field(
        default="auto",
        metadata={"help": "How source text is spaced, recorded in the config and applied at inference: 'despace_cjk' "
                  "(remove whitespace next to CJK characters, so the model reads natural Japanese/Chinese and "
                  "segmented input alike), 'as_is', 'segmented' (keep a segmented corpus's spaces; the model then "
                  "expects segmented input), or 'auto' (despace_cjk when the training source contains CJK text, "
                  "else as_is; a continued model keeps its own)"},
    )

    def __post_init__(self):
        """Lengths and counts below 1 are refused before any data is read."""
        require_at_least(self, 1, ("max_source_length", "max_target_length"), "a length in subwords")
        require_at_least(self, 1, ("max_train_samples", "max_eval_samples", "max_predict_samples"), "a number of pairs")
        require_at_least(self, 1, ("preprocessing_num_workers",), "a number of processes")


def launched_processes() -> int:
    """How many processes a launcher (torch elastic under `--processes`, `torchrun`) started for this run: its
    `$WORLD_SIZE`, 1 without a launcher."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launched_rank() -> int:
    """This process's global rank among them (`$RANK`), 0 without a launcher."""
    return int(os.environ.get("RANK", "0"))


class DefaultSaveSteps(float):
    """The default of `--save_steps` (transformers' 500): a value the user did not give, so the default save
    strategy stays `epoch`; any number given (500 included) is a plain float and makes it `steps`."""


DEFAULT_SAVE_STEPS = DefaultSaveSteps(500)


@dataclass
class SyntaxMTTrainingArguments(Seq2SeqTrainingArguments):
    """`Seq2SeqTrainingArguments` with the package's recipe as defaults (all overridable):
    AdamW β2 = 0.98, lr 7e-4, 800 warm-up steps then inverse-sqrt decay, evaluation by generation
    each epoch, best checkpoint by BLEU. Label smoothing lives in the model config: a new model is
    trained with `label_smoothing=RECIPE_LABEL_SMOOTHING` (0.1, unless `--config_overrides` sets it),
    inside the model's loss with the DBSA parse terms, so `label_smoothing_factor` stays 0."""

    learning_rate: float = field(default=7e-4, metadata={"help": "Peak learning rate"})
    adam_beta2: float = field(default=0.98, metadata={"help": "AdamW beta2"})
    lr_scheduler_type: SchedulerType | str = field(default="inverse_sqrt", metadata={"help": "Scheduler (inverse_sqrt: see the hf_syntax_mt.training.run doc)"})
    warmup_steps: float = field(
        default=DEFAULT_WARMUP_STEPS,
        metadata={"help": "Linear warm-up steps (a number < 1: a share of the run); default: 800, or a tenth of a "
                  "shorter run"},
    )
    logging_steps: float = field(
        default=50,
        metadata={"help": "Log the training loss every N updates (a number < 1: a share of the run), and at every "
                  "checkpoint and the last step; the log is also written to <output_dir>/training_log.csv. As in "
                  "transformers, --eval_strategy steps without --eval_steps evaluates this often too"},
    )
    predict_with_generate: bool = field(default=True, metadata={"help": "Evaluate by generating (BLEU/chrF)"})
    eval_strategy: IntervalStrategy | str = field(default="epoch", metadata={"help": "When to evaluate (no evaluation without dev data)"})
    save_strategy: SaveStrategy | str = field(
        default=None,
        metadata={"help": "When to save checkpoints: no, steps, epoch or best. Default: epoch, or steps when "
                  "--save_steps is given (a save interval means steps, as in transformers' run_translation.py)"},
    )
    save_steps: float = field(
        default=DEFAULT_SAVE_STEPS,
        metadata={"help": "Save a checkpoint every N updates (a number < 1: a share of the run); given without "
                  "--save_strategy, it saves by steps. Default: 500"},
    )
    hub_strategy: str = field(
        default="end",
        metadata={"help": "With --push_to_hub, when to upload: end (once, the final model with its card and scores), "
                  "every_save, checkpoint or all_checkpoints (as in transformers, whose default is every_save; each "
                  "upload is a folder that loads, with the model's code and a card)"},
    )
    save_total_limit: Optional[int] = field(default=2, metadata={"help": "Checkpoints kept (the best is never deleted)"})
    load_best_model_at_end: bool = field(default=True, metadata={"help": "Keep the best checkpoint by metric_for_best_model"})
    metric_for_best_model: Optional[str] = field(default="bleu", metadata={"help": "Metric that picks the best checkpoint"})
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Train from scratch in an output_dir that holds an earlier run (its checkpoints and tokenizer "
                  "are replaced); without it the run resumes from the last checkpoint there"},
    )
    max_tokens_per_batch: Optional[int] = field(
        default=None,
        metadata={"help": "Token-budget batches (as fairseq --max-tokens): each training batch holds at most this many "
                  "padded positions, sentences x the longest side of its longest pair, after sorting by length "
                  "(batches shuffled with the seed every epoch; a longer pair gets a batch of its own). Replaces "
                  "--per_device_train_batch_size; under --processes the budget of all the processes together (each "
                  "batch is split between them), under torchrun / accelerate launch each process's own. Default: "
                  "fixed-size batches"},
    )
    eval_max_tokens_per_batch: Optional[int] = field(
        default=None,
        metadata={"help": "Token budget of evaluation batches (sorted by length) and prediction batches (consecutive "
                  "pairs in corpus order); under --processes each process generates whole batches of this budget, "
                  "dealt out in turn. Default: --max_tokens_per_batch"},
    )
    syntax_lr_multiplier: Optional[float] = field(
        default=None,
        metadata={"help": "Learning rate of the syntax parameters (relation tables and W_rel, the U and u of DBSA "
                  "parse heads, the self-parsing parse module: those a converted MarianMT checkpoint does not have) "
                  "as a multiple of --learning_rate, e.g. 10 so that zero-initialised relation tables of a warm start "
                  "can catch up; the scheduler scales both rates alike. Default: 1 (one learning rate)"},
    )
    syntax_learning_rate: Optional[float] = field(
        default=None,
        metadata={"help": "Peak learning rate of the syntax parameters as an absolute value (instead of "
                  "--syntax_lr_multiplier); default: --learning_rate"},
    )
    generation_max_length_a: Optional[float] = field(
        default=1.5,
        metadata={"help": "In-training evaluation: each translation stops after floor(a * source tokens + b) subwords "
                  "(hf_syntax_mt.inference.length_cap, as fairseq's --max-len-a/b), besides --generation_max_length; 0 with "
                  "--generation_max_length_b 0: no source-relative cap"},
    )
    generation_max_length_b: Optional[float] = field(default=10, metadata={"help": "The cap's b (see a)"})
    save_last_checkpoints: int = field(
        default=0,
        metadata={"help": "Also save this many checkpoints evenly over the last --save_last_span of the budget "
                  "(--max_steps; hf_syntax_mt.training.budget), so that averaging the last k averages trained models; "
                  "with --lr_scheduler_type linear the learning rate decays to zero at the budget"},
    )
    save_last_span: float = field(default=0.25, metadata={"help": "Share of the budget --save_last_checkpoints covers"})

    def __post_init__(self):
        """The recipe saves and evaluates each epoch to keep the best checkpoint; `--save_steps` without
        `--save_strategy` saves by steps; when only one of `eval_strategy` / `save_strategy` is changed, the other
        follows it (best-checkpoint selection needs a checkpoint at every evaluation), and `eval_strategy="no"`
        turns it off.
        `--bf16` on a machine without a GPU trains on the CPU (sets `use_cpu`), and so do processes that a launcher
        (`--processes`, `torchrun`) started on such a machine: they are data-parallel CPU processes."""
        def value(strategy):
            return str(getattr(strategy, "value", strategy))

        if self.save_strategy is None:
            self.save_strategy = "epoch" if isinstance(self.save_steps, DefaultSaveSteps) else "steps"
        if self.load_best_model_at_end:
            eval_strategy, save_strategy = value(self.eval_strategy), value(self.save_strategy)
            if eval_strategy == "no":
                self.load_best_model_at_end = False
            elif save_strategy == "epoch" and eval_strategy == "steps":
                self.save_strategy, self.save_steps = "steps", self.eval_steps or self.logging_steps
            elif eval_strategy == "epoch" and save_strategy == "steps":
                self.eval_strategy, self.eval_steps = "steps", self.save_steps
        if self.bf16 and self.fp16:
            raise ValueError("--bf16 and --fp16 both set the mixed precision: give one of them")
        if (self.bf16 or self.bf16_full_eval) and not self.use_cpu and not is_torch_bf16_gpu_available() \
                and not is_torch_xla_available():
            if is_torch_cuda_available():
                raise ValueError("--bf16: this GPU does not compute in bf16 (an Ampere or newer GPU does): use --fp16, "
                                 "or add --use_cpu to train on the CPU in bf16")
            self.use_cpu = True  # no GPU: bf16 autocast on the CPU, which transformers only allows with use_cpu
        if not self.use_cpu and launched_processes() > 1 and not is_torch_cuda_available() \
                and not is_torch_xla_available():
            self.use_cpu = True  # else accelerate sees one process in each: every process would be process 0
        super().__post_init__()
        for name in ("max_tokens_per_batch", "eval_max_tokens_per_batch"):
            budget = getattr(self, name)
            if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
                raise ValueError(f"--{name} {budget!r}: expected a positive number of tokens")
        if self.max_tokens_per_batch is not None and value(self.train_sampling_strategy) == "group_by_length":
            raise ValueError("--max_tokens_per_batch already groups pairs by length: drop "
                             "--train_sampling_strategy group_by_length")
        if self.eval_max_tokens_per_batch is None:
            self.eval_max_tokens_per_batch = self.max_tokens_per_batch
        for name in ("syntax_lr_multiplier", "syntax_learning_rate"):
            rate = getattr(self, name)
            if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float))
                                     or not math.isfinite(rate) or rate < 0):
                raise ValueError(f"--{name} {rate!r}: expected a finite number >= 0")
        if self.generation_max_length_a or self.generation_max_length_b:
            check_length_cap(self.generation_max_length_a, self.generation_max_length_b)
        if self.save_last_checkpoints:
            self._keep_the_last_checkpoints()
        if self.syntax_lr_multiplier is not None and self.syntax_learning_rate is not None:
            raise ValueError("--syntax_lr_multiplier and --syntax_learning_rate both set the syntax parameters' "
                             "learning rate: give one of them")

    def _keep_the_last_checkpoints(self) -> None:
        """`--save_last_checkpoints k` saves k checkpoints (fewer when the last `--save_last_span` of `--max_steps`
        holds fewer updates: said in one line) and raises a `--save_total_limit` that would delete some of them."""
        count, span = self.save_last_checkpoints, self.save_last_span
        steps = last_checkpoint_steps(max(self.max_steps, 1), count, span)
        if self.max_steps > 0 and len(steps) < count:
            logger.warning("--save_last_checkpoints %d: the last %g%% of the %d updates holds %d of them; saving "
                           "those %d", count, 100 * span, self.max_steps, len(steps), len(steps))
        needed = checkpoints_kept_for_averaging(self.max_steps, count, span, keeps_best=self.load_best_model_at_end)
        if self.save_total_limit is not None and self.save_total_limit < needed:
            logger.warning("--save_last_checkpoints %d: --save_total_limit raised from %d to %d so that the "
                           "rotation keeps them%s", count, self.save_total_limit, needed,
                           " and the best checkpoint" if self.load_best_model_at_end else "")
            self.save_total_limit = needed

    @property
    def syntax_parameter_learning_rate(self) -> float:
        """Peak learning rate of the model's `syntax_parameter_names()`: --syntax_learning_rate, else
        --learning_rate x --syntax_lr_multiplier (x 1 by default)."""
        if self.syntax_learning_rate is not None:
            return float(self.syntax_learning_rate)
        return self.learning_rate * (1.0 if self.syntax_lr_multiplier is None else self.syntax_lr_multiplier)


def parse_config_overrides(text: Optional[str]) -> dict:
    """'d_model=256,encoder_layers=3,sla_layers=[1,2],activation_function=gelu' -> dict.

    Values are Python literals where they parse (numbers, lists, True/None), else strings."""
    if not text:
        return {}
    out = {}
    for item in re.split(r",(?=\s*[A-Za-z_]\w*\s*=)", text.strip()):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"config override {item!r} is not of the form key=value")
        value = value.strip()
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def train_argument_parser(prog: Optional[str] = None):
    """The parser of `hf-syntax-mt-train`: `transformers.HfArgumentParser` over `ModelArguments`, `DataArguments`
    and `SyntaxMTTrainingArguments`, with `--traceback`, `--threads` and `--processes`, and the two-line usage
    error of `command_line.ArgumentParser`."""

    class TrainArgumentParser(ArgumentParser, HfArgumentParser):
        pass

    parser = TrainArgumentParser((ModelArguments, DataArguments, SyntaxMTTrainingArguments), prog=prog)
    parser.add_argument("--traceback", action="store_true", help="On an error, show the traceback, not only the message")
    parser.add_argument("--threads", type=int, help=THREADS_HELP)
    parser.add_argument("--processes", type=int, help=PROCESSES_HELP)
    return parser
