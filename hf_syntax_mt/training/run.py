"""Training syntax-aware NMT models with `Seq2SeqTrainer` (the API behind `training/train.py`).

Modelled on HF's `examples/pytorch/translation/run_translation.py`, with three argument dataclasses
for `HfArgumentParser` (`training_args`): `ModelArguments` (preset, config overrides, tokenizer, parser),
`DataArguments` (hub dataset or local files, languages, lengths, metric tokenizer) and
`SyntaxMTTrainingArguments` (`Seq2SeqTrainingArguments` with this package's recipe defaults). Data files
and parsers are read by `training_data`, the trainer is `trainer.SyntaxMTSeq2SeqTrainer`; this module holds
`train()`.

    train(model_args, data_args, training_args) -> TrainingResult

1. data: a hub dataset (`datasets.load_dataset`) or local files — plain-text pairs given by a
   prefix (`PREFIX.{source_lang}` / `PREFIX.{target_lang}`, one sentence a line), TSV
   (`source<TAB>target`) or JSON lines (`{"translation": {src: .., tgt: ..}}` or flat keys);
2. tokenizer: given (`--tokenizer_name`), taken from `--model_name_or_path` (a Marian checkpoint's
   source.spm / target.spm / vocab.json become a fast `SyntaxMTTokenizer`), or a joint BPE
   trained on the training source + target text (`train_joint_bpe_tokenizer`), saved with the model;
3. features: `Dataset.map(add_syntax_features)`, cached on disk (a re-run does not parse again);
   the parser is `--parser stanza|<spaCy model>|preparsed|none`; its settings go to `config.parser`
   so that the `syntax-translation` pipeline can re-create it (`preparsed` records `None`);
4. `SyntaxMTSeq2SeqTrainer` (`hf_syntax_mt.training.trainer`): logs token_loss / encoder_parse_loss / decoder_parse_loss
   (means over the logging window), evaluates in dataset order with `predict_with_generate` (BLEU + chrF
   from `hf_syntax_mt.inference.metrics`), keeps the best checkpoint by BLEU, resumes from checkpoints, batches by
   tokens under `--max_tokens_per_batch`; Ctrl-C / SIGTERM save a resumable checkpoint (`interrupt`);
5. output dir: model + generation config, tokenizer, code files for remote loading, training
   arguments, `all_results.json`, and a model card (`README.md`, from `templates/model_card.md`).

Model: `--preset` with `--config_overrides` builds a new one; `--model_name_or_path` continues a saved
SyntaxMT model, or converts a MarianMT checkpoint (local or on the Hub) to `--preset`
(`SyntaxMTForConditionalGeneration.from_marian`; `--config_overrides` then sets syntax and training
settings only) and fine-tunes it.

Learning rate: `lr_scheduler_type="inverse_sqrt"` with `warmup_steps=W` is linear warm-up to the
peak over W steps, then lr · sqrt(W / step) (transformers' timescale defaults to W, so the decay
is continuous at W: the schedule of Vaswani et al. / fairseq `inverse_sqrt`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import sacrebleu
import torch
from safetensors import SafetensorError
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    Seq2SeqTrainingArguments,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState, TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, IntervalStrategy

from ..configuration_syntax_mt import SyntaxMTConfig
from ..fast_ops import use_huge_pages_for_large_tensors
from ..features.joint_bpe import add_cjk_despacing, clear_call_state, train_joint_bpe_tokenizer
from ..features.parsing_tokenizer import SyntaxMTParsingTokenizer
from ..features.syntax_features import DataCollatorForSyntaxSeq2Seq, add_syntax_features
from ..features.training_data import (
    build_annotator,
    column_texts,
    load_raw_datasets,
    preparsed_annotator,
    read_parallel_file,
    skip_texts_too_long_for,
    text_columns,
    warn_truncated_pairs,
)
from ..hub.convert_marian import is_marian_checkpoint
from ..hub.model_card import NOT_LANGUAGE_CODES, write_model_card
from ..inference.metrics import check_bleu_tokenize
from ..inference.pipeline import DamagedModelFileError, check_weights_files, model_location
from ..modeling_syntax_mt import SyntaxMTForConditionalGeneration
from ..syntax import (
    SOURCE_SPACINGS,
    Annotator,
    PreParsedAnnotator,
    apply_source_spacing,
    detect_source_spacing,
    load_annotator,
)
from ..syntax.annotators import check_parser_installed
from .arguments import (
    RECIPE_LABEL_SMOOTHING,
    DataArguments,
    ModelArguments,
    SyntaxMTTrainingArguments,
    launched_rank,
    parse_config_overrides,
    require_at_least,
    train_argument_parser,
)
from .data_parallel import (
    PROCESS_LOGS,
    STOPPED_WHILE_LOADING,
    check_processes,
    failed_process,
    launch,
    report_failure,
    worker_arguments,
)
from .interrupt import InterruptCallback
from .progress import RunLogCallback, resolve_default_warmup
from .run_safety import (
    check_checkpoint_files,
    last_complete_checkpoint,
    locked_output_dir,
    read_whole_json,
    resume_advice,
)
from .threads import set_torch_threads
from .trainer import SyntaxMTSeq2SeqTrainer, bleu_metric_fn

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# train()
# ---------------------------------------------------------------------------------------------


@dataclass
class TrainingResult:
    """What `train` produced: the output dir, the merged metrics and the live trainer (whose
    `predict(dataset, num_beams=4)` translates more data with the best model); `interrupted_by` is the
    signal (SIGINT / SIGTERM) that stopped training at a checkpoint, None for a run that finished."""

    output_dir: str
    metrics: dict
    trainer: SyntaxMTSeq2SeqTrainer
    datasets: dict
    interrupted_by: Optional[int] = None


def _logged_evaluation(trainer) -> Optional[dict]:
    """The dev metrics that training logged for the model the trainer holds now (the best checkpoint's
    evaluation after load-best, else one at the last step), so that the dev set is not decoded again, with
    that model's epoch as `eval_epoch` (`epoch` stays the run's); None when training logged none for it."""
    state = trainer.state
    if trainer.args.load_best_model_at_end and state.best_model_checkpoint:
        step = TrainerState.load_from_json(str(Path(state.best_model_checkpoint) / TRAINER_STATE_NAME)).global_step
    else:
        step = state.global_step
    for entry in reversed(state.log_history):
        if entry.get("step") == step and any(key.startswith("eval_") for key in entry):
            logged = {key: value for key, value in entry.items() if key.startswith("eval_")}
            return {**logged, "eval_epoch": entry["epoch"]} if "epoch" in entry else logged
    return None


def _check_checkpoint_config(checkpoint: str, config) -> None:
    """Refuse to resume a checkpoint of a different model (another preset, size or vocabulary)."""
    path = Path(checkpoint) / "config.json"
    if not path.is_file():
        return
    saved = json.loads(type(config).from_json_file(str(path)).to_json_string(use_diff=False))
    current = json.loads(config.to_json_string(use_diff=False))
    keys = SyntaxMTConfig.setting_names() - {"parser", "use_cache", "source_lang", "target_lang"}
    differences = [f"{key} {saved.get(key)!r} there, {current.get(key)!r} now" for key in sorted(keys)
                   if saved.get(key) != current.get(key)]
    if differences:
        raise ValueError(
            f"{checkpoint} is a checkpoint of a different model ({'; '.join(differences)}): choose another "
            "--output_dir, or pass --overwrite_output_dir to train this model there from scratch"
        )


def _load_tokenizer(model_args: ModelArguments, training_args, train_texts, split_cjk_scripts: bool = False,
                    marian: bool = False):
    """--tokenizer_name, else the tokenizer of --model_name_or_path (its embeddings index that
    vocabulary; a Marian checkpoint's SentencePiece pair converted to a fast `SyntaxMTTokenizer`), else
    the one saved in output_dir by the run being resumed, else a new joint BPE (cut at CJK script
    changes when the source is despaced CJK text)."""
    from ..hub.convert_marian import convert_marian_tokenizer

    if marian and not model_args.tokenizer_name:
        return convert_marian_tokenizer(model_args.model_name_or_path)
    name = model_args.tokenizer_name or model_args.model_name_or_path
    if name:
        name = model_location(name, "tokenizer" if model_args.tokenizer_name else "model")
        try:
            return AutoTokenizer.from_pretrained(name)
        except (OSError, ValueError) as err:
            raise ValueError(
                f"could not load a tokenizer from {name!r} ({err}); pass --tokenizer_name (a model's embeddings only "
                "fit the vocabulary it was trained with)"
            ) from None
    resumable = not getattr(training_args, "overwrite_output_dir", False)
    if resumable and (Path(training_args.output_dir) / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(training_args.output_dir)
    if train_texts is None:
        raise ValueError("no tokenizer given (--tokenizer_name) and no training data to train one on")
    logger.info("training a joint BPE tokenizer (vocab_size=%d)", model_args.vocab_size)
    return train_joint_bpe_tokenizer(
        train_texts, vocab_size=model_args.vocab_size, split_punctuation=model_args.split_punctuation,
        split_cjk_scripts=split_cjk_scripts,
    )


def _tokenizer_signature(tokenizer) -> list:
    """What makes two tokenizers encode alike (a reloaded tokenizer hashes like the one saved)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return [repr(tokenizer)]
    state = json.loads(backend.to_str())
    state.pop("truncation", None)  # set by each call (max_length), not part of the vocabulary
    state.pop("padding", None)
    return [state, tokenizer.model_max_length, tokenizer.padding_side, tokenizer.truncation_side]


def _source_spacing(data_args: DataArguments, raw, config, *, continuing: bool) -> str:
    """`--source_spacing`, checked: a continued model keeps the spacing it was trained with, and
    "auto" detects CJK training text (`hf_syntax_mt.syntax.spacing`)."""
    asked = data_args.source_spacing
    if asked != "auto" and asked not in SOURCE_SPACINGS:
        raise ValueError(f"--source_spacing {asked}: expected auto or one of {', '.join(SOURCE_SPACINGS)}")
    if continuing:
        if asked not in ("auto", config.source_spacing):
            raise ValueError(f"--source_spacing {asked}, but the model being continued was trained with "
                             f"source_spacing={config.source_spacing!r}: drop --source_spacing")
        return config.source_spacing
    if asked != "auto":
        return asked
    if "train" not in raw:
        return "as_is"
    src_col, _ = text_columns(raw["train"], data_args)
    sample = column_texts(raw["train"].select(range(min(2000, len(raw["train"])))), src_col)
    spacing = detect_source_spacing(sample)
    if spacing == "despace_cjk":
        logger.info("the training source is CJK text: source_spacing='despace_cjk' (whitespace next to CJK characters "
                    "is removed in training and at inference, so the model reads natural and segmented text alike; "
                    "--source_spacing segmented keeps a segmented corpus's spaces)")
    return spacing


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN has bf16 kernels for this CPU (AVX512 / AVX512-BF16 / AMX). Elsewhere (e.g. AVX2 only)
    bf16 autocast is emulated: training steps measured 21x slower than fp32 on an AVX2 AMD EPYC."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def _check_training_arguments(training_args, data_args: DataArguments) -> None:
    """Refuse settings that would fail late (a beam size, batch size or length < 1, nothing to train, a step
    interval <= 0, an unknown BLEU tokenizer or one whose extra is missing) and adapt the arguments to a CPU (no
    pinned memory; a warning where bf16 autocast would be emulated)."""
    if training_args.generation_num_beams is not None and training_args.generation_num_beams < 1:
        raise ValueError(f"--generation_num_beams {training_args.generation_num_beams}: the beam size must be >= 1 "
                         "(1 = greedy)")
    require_at_least(training_args, 1, ("per_device_train_batch_size", "per_device_eval_batch_size"), "a batch size")
    require_at_least(training_args, 1, ("gradient_accumulation_steps",), "a number of batches")
    require_at_least(training_args, 1, ("generation_max_length",), "a length in subwords")
    require_at_least(training_args, 0, ("dataloader_num_workers",), "a number of processes")
    if training_args.max_steps == 0:
        raise ValueError("--max_steps 0: a run of no update; give --max_steps >= 1, or leave it at -1 (the default) to "
                         "train for --num_train_epochs")
    if training_args.learning_rate <= 0:
        raise ValueError(f"--learning_rate {training_args.learning_rate:g}: the peak learning rate must be > 0 (at 0 "
                         "no update changes the model)")
    if training_args.max_steps <= 0 and training_args.num_train_epochs <= 0:
        raise ValueError(f"--num_train_epochs {training_args.num_train_epochs} and --max_steps {training_args.max_steps}"
                         ": nothing to train; give --num_train_epochs > 0 or --max_steps >= 1")
    for kind in ("eval", "save", "logging"):
        strategy = getattr(training_args, f"{kind}_strategy")
        steps = getattr(training_args, f"{kind}_steps")
        if str(getattr(strategy, "value", strategy)) == "steps" and steps is not None and steps <= 0:
            raise ValueError(f"--{kind}_steps {steps}: expected a number of steps >= 1 (or a fraction of the run "
                             f"< 1) with --{kind}_strategy steps")
    if data_args.bleu_tokenize not in sacrebleu.BLEU.TOKENIZERS:
        raise ValueError(f"--bleu_tokenize {data_args.bleu_tokenize}: expected one of "
                         f"{', '.join(sorted(sacrebleu.BLEU.TOKENIZERS))}")
    if training_args.predict_with_generate:
        check_bleu_tokenize(data_args.bleu_tokenize)  # a missing extra fails now, not at the first evaluation
    on_cpu = training_args.use_cpu or not torch.cuda.is_available()
    if on_cpu:
        training_args.dataloader_pin_memory = False  # pinned memory only helps copies to an accelerator
    if training_args.bf16 and on_cpu and not cpu_has_native_bf16():
        logger.warning("bf16 autocast on a CPU without native bf16 (torch reports %s): its matmuls are emulated and "
                       "training runs many times slower than fp32 (21x measured on AVX2); drop --bf16 to train in fp32",
                       torch.backends.cpu.get_cpu_capability())


def _config_and_model(model_args: ModelArguments):
    """(config, model or None, whether it is a converted Marian checkpoint): a new config from `--preset` and
    `--config_overrides` (the model is built once the tokenizer fixes the vocabulary), a saved SyntaxMT model
    to continue, or a MarianMT checkpoint converted to `--preset`."""
    location = model_args.model_name_or_path
    if location and is_marian_checkpoint(location):
        model = SyntaxMTForConditionalGeneration.from_marian(location, preset=model_args.preset,
                                                             **_config_overrides(model_args))
        return model.config, model, True
    if location:
        if model_args.config_overrides:
            raise ValueError("--config_overrides builds a new model; it cannot change --model_name_or_path's config")
        model = AutoModelForSeq2SeqLM.from_pretrained(model_location(location))
        if model_args.preset != ModelArguments.preset and model_args.preset != model.config.preset:
            raise ValueError(f"--preset {model_args.preset} but --model_name_or_path is a "
                             f"{model.config.preset or 'custom'} model; drop --preset to continue that model")
        return model.config, model, False
    return SyntaxMTConfig.from_preset(model_args.preset, **_config_overrides(model_args)), None, False


def _config_overrides(model_args: ModelArguments) -> dict:
    """`--config_overrides` on top of the recipe's label smoothing."""
    return {"label_smoothing": RECIPE_LABEL_SMOOTHING, **parse_config_overrides(model_args.config_overrides)}


def _parser_name(model_args: ModelArguments, config) -> Optional[str]:
    """`--parser`, or 'none' where the model reads no source syntax."""
    if model_args.parser:
        return model_args.parser
    return None if config.needs_source_parse else "none"


def _annotators(model_args: ModelArguments, data_args: DataArguments, config, parser_name: Optional[str],
                annotator: Optional[Annotator], target_annotator: Optional[Annotator]):
    """The source and target parsers the features need (those given win), checked to be installed before
    anything is tokenized: a missing or unsuitable parser fails fast, with the option to change. A continued
    model without --parser parses with the parser its config records."""
    recorded = annotator is None and parser_name is None and config.needs_source_parse and bool(config.parser)
    if recorded:
        annotator = load_annotator(config.parser)
    if annotator is None and config.needs_source_parse:
        if parser_name is None:
            raise ValueError(
                f"preset {config.preset!r} needs source syntax: choose --parser stanza|<spaCy model>|preparsed"
            )
        if parser_name.lower() == "none":
            raise ValueError(f"preset {config.preset!r} needs source syntax but --parser is 'none'")
    if annotator is None:
        annotator = build_annotator(
            parser_name, model_args.parser_lang or data_args.source_lang,
            constituency=config.needs_source_distances and config.distance_source in ("auto", "constituency"),
            pretokenized=model_args.parser_pretokenized, disable=model_args.parser_disable,
            model_dir=model_args.parser_model_dir,
        )
    if target_annotator is None and config.needs_target_heads:
        target_parser = model_args.target_parser or parser_name
        if target_parser is None or target_parser.lower() == "none":
            raise ValueError(f"preset {config.preset!r} trains a decoder parse head on target trees: "
                             "choose --target_parser stanza|<spaCy model>|preparsed")
        if model_args.target_parser is None and target_parser.lower() not in ("stanza", "preparsed"):
            raise ValueError(f"preset {config.preset!r} needs target trees, and --parser {target_parser} is a spaCy "
                             "pipeline for the source language: give the target language's parser with --target_parser")
        target_annotator = build_annotator(target_parser, model_args.target_parser_lang or data_args.target_lang,
                                           disable=model_args.parser_disable)
    source_role = "the parser in the model's config (config.parser)" if recorded else "--parser"
    for role, parser in ((source_role, annotator), ("--target_parser", target_annotator)):
        if parser is not None and not isinstance(parser, PreParsedAnnotator):
            check_parser_installed(parser.to_dict(), role)
    return annotator, target_annotator


def _record_parser(config, annotator: Optional[Annotator], *, new_model: bool) -> None:
    """`config.parser`: the settings of the parser that made the source features (a pre-parsed
    annotator's `made_by`), so the pipeline re-creates it; None for a new model trained on parses
    nobody recorded (users then pass annotations to the pipeline); a loaded model keeps its own."""
    made_by = annotator.made_by if isinstance(annotator, PreParsedAnnotator) else \
        annotator.to_dict() if annotator is not None else None
    if made_by:
        # a local model directory means nothing on the machines the model is shared with
        config.parser = {k: v for k, v in made_by.items() if k != "model_dir"}
    elif new_model:
        config.parser = None


def _prepared_tokenizer(model_args: ModelArguments, data_args: DataArguments, training_args, raw, config,
                        tokenizer, *, fitted_model: bool, marian: bool):
    """The tokenizer (given, loaded or trained on the spaced-as-the-model-reads training text), checked
    against the embeddings of a loaded model; a new config takes its vocabulary and special ids."""
    if tokenizer is None:
        texts = None
        if "train" in raw:
            src_col, tgt_col = text_columns(raw["train"], data_args)
            sources = [apply_source_spacing(t, config.source_spacing) for t in column_texts(raw["train"], src_col)]
            texts = sources + column_texts(raw["train"], tgt_col)
        with training_args.main_process_first(desc="tokenizer"):
            tokenizer = _load_tokenizer(model_args, training_args, texts,
                                        split_cjk_scripts=config.source_spacing == "despace_cjk", marian=marian)
    if config.source_spacing == "despace_cjk":
        add_cjk_despacing(tokenizer)  # the saved tokenizer alone reads spaced CJK text as the model does
    if fitted_model and len(tokenizer) != config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but {model_args.model_name_or_path} has "
                         f"{config.vocab_size} embeddings: give the model's own tokenizer")
    tokenizer.model_max_length = config.max_position_embeddings  # the longest input the model takes
    if config.parser and config.needs_source_parse and not isinstance(tokenizer, SyntaxMTParsingTokenizer):
        tokenizer = SyntaxMTParsingTokenizer.from_tokenizer(tokenizer, config)  # parses as the model was trained
    if not fitted_model:
        config.vocab_size = len(tokenizer)
        config.pad_token_id = tokenizer.pad_token_id
        config.eos_token_id = tokenizer.eos_token_id
        config.decoder_start_token_id = tokenizer.pad_token_id
    return tokenizer


def _feature_datasets(raw, data_args: DataArguments, model_args: ModelArguments, config, tokenizer,
                      annotator: Optional[Annotator], target_annotator: Optional[Annotator],
                      parser_name: Optional[str], split_files: dict, training_args) -> dict:
    """`Dataset.map(add_syntax_features)` over the train / validation / test splits, cached on disk
    (in-memory data under `<cache_dir>/hf_syntax_mt_features`, keyed by the data, the settings and the
    tokenizer); `--parser preparsed` reads each split's CoNLL-U beside its file."""
    import datasets

    cache_dir = Path(data_args.cache_dir or datasets.config.HF_DATASETS_CACHE) / "hf_syntax_mt_features"
    preparsed = (parser_name or "").lower() == "preparsed"
    target_preparsed = (model_args.target_parser or parser_name) == "preparsed"
    processed = {}
    for split, dataset in raw.items():
        if split not in ("train", "validation", "test"):
            continue
        src_col, tgt_col = text_columns(dataset, data_args)
        split_annotator, split_target_annotator = annotator, target_annotator
        if preparsed and annotator is None and config.needs_source_parse:
            split_annotator = preparsed_annotator(split_files[split], data_args.source_lang)
        if config.needs_target_heads and target_annotator is None and target_preparsed:
            split_target_annotator = preparsed_annotator(split_files[split], data_args.target_lang)
        fn_kwargs = dict(
            tokenizer=tokenizer,
            annotator=split_annotator if config.needs_source_parse else None,
            source_column=src_col,
            target_column=tgt_col,
            max_source_length=data_args.max_source_length,
            max_target_length=data_args.max_target_length,
            source_heads=config.needs_source_heads,
            source_distances=config.needs_source_distances,
            target_heads=config.needs_target_heads,
            target_annotator=split_target_annotator if config.needs_target_heads else None,
            distance_source=config.distance_source,
            distance_binarize=config.sla_binarize,
            source_spacing=config.source_spacing,
        )
        map_kwargs = dict(batched=True, fn_kwargs=fn_kwargs, remove_columns=dataset.column_names,
                          num_proc=data_args.preprocessing_num_workers,
                          load_from_cache_file=not data_args.overwrite_cache, desc=f"syntax features ({split})")
        if not dataset.cache_files:  # in-memory local data: cache the features explicitly
            settings = {k: v for k, v in fn_kwargs.items() if k != "tokenizer"}
            key = datasets.fingerprint.Hasher.hash(
                [dataset._fingerprint, add_syntax_features, settings, _tokenizer_signature(tokenizer)]
            )
            cache_dir.mkdir(parents=True, exist_ok=True)
            map_kwargs.update(cache_file_name=str(cache_dir / f"{split}-{key}.arrow"), new_fingerprint=key)
        with training_args.main_process_first(desc=f"features {split}"):
            processed[split] = dataset.map(add_syntax_features, **map_kwargs)
    return processed


def _set_generation_defaults(model, tokenizer, data_args: DataArguments, training_args) -> None:
    """The generation config saved with the model (length limit, beam size of the evaluations, special ids)."""
    generation = model.generation_config
    generation.max_length = data_args.max_target_length
    generation.num_beams = training_args.generation_num_beams or generation.num_beams or 1
    generation.pad_token_id = tokenizer.pad_token_id
    generation.eos_token_id = tokenizer.eos_token_id
    generation.decoder_start_token_id = model.config.decoder_start_token_id
    if training_args.generation_max_length is None:
        training_args.generation_max_length = data_args.max_target_length


def _card_info(config, raw, data_args: DataArguments, split_files: dict, *, preparsed: bool, target_annotator,
               command: Optional[str]) -> dict:
    """What the model card says besides the scores: preset, data, parsers, config, command, languages and
    an example source sentence (`write_model_card`'s arguments)."""
    parser_text = "none (not needed)"
    if config.needs_source_parse:
        parser_text = (json.dumps(config.parser) if config.parser else "pre-parsed CoNLL-U" if preparsed
                       else "pre-parsed (no parser recorded)")
    if config.needs_target_heads:
        target = ("pre-parsed CoNLL-U" if target_annotator is None else "pre-parsed"
                  if isinstance(target_annotator, PreParsedAnnotator) else json.dumps(target_annotator.to_dict()))
        parser_text += f"; target: {target}"
    data_text = data_args.dataset_name or ", ".join(f"{k}: `{os.path.normpath(v)}` ({len(raw[k])} pairs)"
                                                    for k, v in split_files.items() if v and k in raw)
    example_split = next((split for split in ("validation", "train") if split in raw and len(raw[split])), None)
    example = None
    if example_split is not None:
        example = column_texts(raw[example_split].select(range(1)), text_columns(raw[example_split], data_args)[0])[0]
    return dict(
        preset=config.preset or "", data=data_text, parser=parser_text, config=config.to_dict(),
        command=command or " ".join(sys.argv), languages=(data_args.source_lang, data_args.target_lang),
        example=example,
    )


def _restore_callback_states(trainer: SyntaxMTSeq2SeqTrainer, checkpoint_state: TrainerState, checkpoint: str) -> None:
    """Give the trainer's stateful callbacks (`EarlyStoppingCallback`'s count of evaluations without a gain) the
    state `checkpoint` saved (`checkpoint_state`, its trainer state), so that a resumed run stops where a straight
    run would. The Trainer's own `restore_callback_states_from_checkpoint` would also restore the control flags,
    and a run stopped by a deadline or a signal saved `should_training_stop`: it would stop again at once."""
    saved = checkpoint_state.stateful_callbacks or {}
    for callback in trainer.callback_handler.callbacks:
        states = saved.get(type(callback).__name__)
        if not isinstance(callback, ExportableState) or not states:
            continue
        state = states[0] if isinstance(states, list) else states
        for attribute, value in state.get("attributes", {}).items():
            setattr(callback, attribute, value)
        logger.info("%s restored from %s: %s", type(callback).__name__, checkpoint, state.get("attributes"))


def _finish_from_checkpoint(trainer: SyntaxMTSeq2SeqTrainer, checkpoint: str, checkpoint_state: TrainerState,
                            run_log: Optional[RunLogCallback]) -> dict:
    """The end of a run whose `checkpoint` is at its last step, without a training step: the checkpoint's weights
    and state (the best checkpoint's weights under `--load_best_model_at_end`, as `Trainer.train` ends), saved as
    the final model. Returns the training metrics of the whole run (as far as `run_log` kept them)."""
    trainer._load_from_checkpoint(checkpoint)
    trainer.state = checkpoint_state
    best = checkpoint_state.best_model_checkpoint
    if trainer.args.load_best_model_at_end and best and Path(best).is_dir():
        trainer._load_best_model()
    metrics = {"train_runtime": 0.0, "train_steps_per_second": 0.0, "total_flos": checkpoint_state.total_flos,
               "epoch": checkpoint_state.epoch}
    if run_log is not None:
        run_log.on_train_begin(trainer.args, trainer.state, trainer.control)  # the curve of the checkpoint's steps
        metrics = run_log.whole_run_metrics(metrics, trainer.state)
    trainer.save_model(_internal_call=True)
    trainer.save_state()
    return metrics


def _final_model_gone(output_dir: Path) -> Optional[str]:
    """Why the final model in `output_dir` cannot be loaded (its config or weights file missing, a weights file
    damaged), or None."""
    if not (output_dir / "config.json").is_file():
        return "no config.json"
    weights = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
    if not any((output_dir / name).is_file() for name in weights):
        return "no model.safetensors"
    try:
        check_weights_files(output_dir)
    except DamagedModelFileError as err:
        return str(err)
    return None


def _train_or_resume(trainer: SyntaxMTSeq2SeqTrainer, training_args, tokenizer,
                     interrupt: Optional[InterruptCallback] = None, run_log: Optional[RunLogCallback] = None) -> dict:
    """Train from scratch or from the output dir's last complete checkpoint (`last_complete_checkpoint`: a save
    cut short is skipped, saying so; `--overwrite_output_dir` deletes the checkpoints instead), refusing a
    checkpoint of another model or with a damaged file; a run that already finished is loaded with its recorded
    metrics, not trained again, and one whose last checkpoint is at its last step is finished from it without
    training (never past its steps). The default warm-up is scaled to the run.
    `interrupt` (one of the trainer's callbacks) catches SIGINT / SIGTERM while training: a run it stopped is
    left at its checkpoint, with no final model saved. Returns the training metrics, of the whole run after a
    resume when `run_log` (another of the callbacks) kept its log."""
    output_dir = Path(training_args.output_dir)
    record = output_dir / "all_results.json"
    checkpoint = training_args.resume_from_checkpoint
    if checkpoint is None and output_dir.is_dir():
        if getattr(training_args, "overwrite_output_dir", False):
            if training_args.should_save:
                for old in output_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
                    shutil.rmtree(old)
        else:
            checkpoint = last_complete_checkpoint(output_dir)
            if checkpoint:
                logger.info("resuming from %s", checkpoint)
    if checkpoint:
        _check_checkpoint_config(checkpoint, trainer.model.config)
        advice = resume_advice(checkpoint, output_dir)
        check_weights_files(checkpoint, advice=advice)
        check_checkpoint_files(checkpoint, advice)
    checkpoint_state = TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME)) if checkpoint else None
    steps_done = checkpoint_state.global_step if checkpoint else 0
    run_steps = trainer.set_initial_training_values(training_args, trainer.get_train_dataloader())[-1]
    recorded = read_whole_json(record)
    gone = _final_model_gone(output_dir) if checkpoint and recorded is not None and steps_done >= run_steps else None
    if gone:
        logger.warning("%s finished training at step %d in an earlier run, but its final model is gone (%s): restoring "
                       "it from %s, the checkpoint of the run's last step (the best checkpoint's weights under "
                       "--load_best_model_at_end, as the run ended); its %s is kept", output_dir, steps_done, gone,
                       checkpoint, record.name)
        _finish_from_checkpoint(trainer, checkpoint, checkpoint_state, None)
        return recorded
    if checkpoint and recorded is not None and steps_done >= run_steps:
        logger.warning("%s finished training at step %d in an earlier run: nothing to train; its model and %s are "
                       "kept (train longer with a larger --max_steps / --num_train_epochs, or start again with "
                       "--overwrite_output_dir)", output_dir, steps_done, record.name)
        trainer.model = trainer.model_wrapped = AutoModelForSeq2SeqLM.from_pretrained(output_dir).to(training_args.device)
        trainer.state = TrainerState.load_from_json(str(output_dir / TRAINER_STATE_NAME))
        return recorded
    if training_args.should_save:
        clear_call_state(tokenizer)
        tokenizer.save_pretrained(output_dir)  # a resumed run re-uses exactly this tokenizer
    if checkpoint:
        _restore_callback_states(trainer, checkpoint_state, checkpoint)
    if checkpoint and steps_done >= run_steps:  # stopped after its last checkpoint, before its final model was whole
        logger.warning("%s is at step %d, the end of this run (%d steps): nothing left to train; finishing the run "
                       "from it (final model, evaluation)", checkpoint, steps_done, run_steps)
        return _finish_from_checkpoint(trainer, checkpoint, checkpoint_state, run_log)
    resolve_default_warmup(training_args, run_steps)
    with interrupt.handling_signals() if interrupt is not None else contextlib.nullcontext():
        result = trainer.train(resume_from_checkpoint=checkpoint)
    metrics = dict(result.metrics)
    if run_log is not None:
        metrics = run_log.whole_run_metrics(metrics, trainer.state)
    if interrupt is not None and interrupt.step is not None:
        return metrics
    trainer.save_model(_internal_call=True)  # pushed once at the end, with the final card
    trainer.save_state()
    return metrics


def _evaluate_and_predict(trainer: SyntaxMTSeq2SeqTrainer, processed: dict, tokenizer, metrics: dict) -> None:
    """Add the dev metrics (those logged for the model held, else a new evaluation) and the test split's
    metrics to `metrics`; the test translations go to `test_predictions.txt` in the output dir."""
    if "validation" in processed and not any(key.startswith("eval_") for key in metrics):
        metrics.update(_logged_evaluation(trainer) or trainer.evaluate(metric_key_prefix="eval"))
    if "test" in processed:
        prediction = trainer.predict(processed["test"], metric_key_prefix="test")
        metrics.update(prediction.metrics)
        if trainer.is_world_process_zero():
            ids = [[t for t in row if t >= 0] for row in prediction.predictions.tolist()]
            hyps = tokenizer.batch_decode(ids, skip_special_tokens=True)
            path = Path(trainer.args.output_dir) / "test_predictions.txt"
            path.write_text("".join(h.strip() + "\n" for h in hyps), encoding="utf-8")


def train(model_args: ModelArguments, data_args: DataArguments, training_args: Seq2SeqTrainingArguments,
          *, tokenizer=None, annotator: Optional[Annotator] = None, target_annotator: Optional[Annotator] = None,
          raw_datasets=None, callbacks=None, command: Optional[str] = None) -> TrainingResult:
    """Train (and evaluate / test) one model; see the module docstring.

    `tokenizer`, `annotator` / `target_annotator` (e.g. a `PreParsedAnnotator` shared by runs) and
    `raw_datasets` (a `DatasetDict` with `source`/`target` columns) override what the arguments
    would build, so a runner can share one tokenizer and parses across many runs. The output dir is locked
    for the run (`run_safety.locked_output_dir`): a second run into it raises `OutputDirInUseError`.
    """
    start = time.time()
    use_huge_pages_for_large_tensors()  # before the model's first large tensor (hf_syntax_mt.fast_ops)
    _check_training_arguments(training_args, data_args)
    # one holder for the whole run: the process that saves, and only process 0 of a launched run
    with locked_output_dir(training_args.output_dir, enabled=training_args.should_save and launched_rank() == 0):
        return _train(model_args, data_args, training_args, start, tokenizer=tokenizer, annotator=annotator,
                      target_annotator=target_annotator, raw_datasets=raw_datasets, callbacks=callbacks,
                      command=command)


def _train(model_args: ModelArguments, data_args: DataArguments, training_args, start: float, *, tokenizer,
           annotator: Optional[Annotator], target_annotator: Optional[Annotator], raw_datasets, callbacks,
           command: Optional[str]) -> TrainingResult:
    """`train` once its arguments are checked and its output dir is locked; `start` is when it began."""
    torch.manual_seed(training_args.seed)
    split_files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    raw = raw_datasets if raw_datasets is not None else load_raw_datasets(data_args)
    for split, limit in (("train", data_args.max_train_samples), ("validation", data_args.max_eval_samples),
                         ("test", data_args.max_predict_samples)):
        if split in raw and limit is not None:
            raw[split] = raw[split].select(range(min(limit, len(raw[split]))))
    if training_args.do_train is False and "train" in raw:
        training_args.do_train = True  # HfArgumentParser leaves it False; training data means train

    config, model, marian = _config_and_model(model_args)
    config.source_spacing = _source_spacing(data_args, raw, config, continuing=model is not None and not marian)
    if model_args.distance_source != "auto":
        config.distance_source = model_args.distance_source  # recorded: translation derives distances alike
    for side in ("source_lang", "target_lang"):  # recorded (not the file suffixes src / tgt): the page shows them
        code = getattr(data_args, side)
        if code and code not in NOT_LANGUAGE_CODES:
            setattr(config, side, code)

    parser_name = _parser_name(model_args, config)  # parsers before the tokenizer: a missing one fails fast
    annotator, target_annotator = _annotators(model_args, data_args, config, parser_name, annotator, target_annotator)
    for side, parser in ((0, annotator), (1, target_annotator)):
        skip_texts_too_long_for(parser, raw, data_args, side, split_files)
    _record_parser(config, annotator, new_model=model is None)

    tokenizer = _prepared_tokenizer(model_args, data_args, training_args, raw, config, tokenizer,
                                    fitted_model=model is not None, marian=marian)
    processed = _feature_datasets(raw, data_args, model_args, config, tokenizer, annotator, target_annotator,
                                  parser_name, split_files, training_args)
    warn_truncated_pairs(raw, processed, data_args, tokenizer, config.source_spacing)
    if model is None:
        model = AutoModelForSeq2SeqLM.from_config(config)
    _set_generation_defaults(model, tokenizer, data_args, training_args)

    eval_dataset = processed.get("validation")
    training_args.do_eval = eval_dataset is not None
    if eval_dataset is None:
        training_args.eval_strategy = IntervalStrategy.NO
        training_args.load_best_model_at_end = False
    card_info = _card_info(model.config, raw, data_args, split_files, target_annotator=target_annotator,
                           preparsed=(parser_name or "").lower() == "preparsed", command=command)
    interrupt, run_log = InterruptCallback(), RunLogCallback()
    trainer = SyntaxMTSeq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=processed.get("train"),
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=DataCollatorForSyntaxSeq2Seq(tokenizer, pad_to_multiple_of=None, model_config=model.config),
        compute_metrics=bleu_metric_fn(tokenizer, data_args.bleu_tokenize) if training_args.predict_with_generate else None,
        callbacks=[*(callbacks or []), interrupt],
        model_card_info=card_info,
    )
    trainer.add_callback(run_log)  # after those the trainer adds itself: it logs at the saves the others ask for

    if training_args.do_train and "train" in processed:
        metrics = _train_or_resume(trainer, training_args, tokenizer, interrupt, run_log)
        if interrupt.step is not None:  # stopped early: no final model, evaluation or record; the rerun resumes
            logger.warning(interrupt.message())
            return TrainingResult(output_dir=str(training_args.output_dir), metrics=metrics, trainer=trainer,
                                  datasets=processed, interrupted_by=interrupt.signal_number)
    else:
        trainer.save_model(_internal_call=True)
        metrics = {}
    _evaluate_and_predict(trainer, processed, tokenizer, metrics)
    metrics.setdefault("wall_time_seconds", round(time.time() - start, 1))  # an earlier run's record keeps its own
    if trainer.is_world_process_zero():
        trainer.save_metrics("all", metrics, combined=False)
        card_info["config"] = trainer.model.config.to_dict()
        card_info["scores"] = {k: v for k, v in metrics.items() if k.startswith(("eval_", "test_"))
                               and k.split("_", 1)[-1] in ("bleu", "chrf", "loss", "gen_len")}
        write_model_card(training_args.output_dir, **card_info)
    if training_args.push_to_hub:
        trainer.push_to_hub(commit_message="End of training")  # writes the card from card_info (scores included)
    return TrainingResult(output_dir=str(training_args.output_dir), metrics=metrics, trainer=trainer,
                          datasets=processed)


def train_in_processes(processes: int, model_args, data_args, training_args, *, threads: int = 1,
                       **train_kwargs) -> dict:
    """`train(model_args, data_args, training_args, **train_kwargs)` in `processes`
    data-parallel processes (`data_parallel.launch`) on the one-process batches (accelerate's `split_batches` is turned on),
    for a program that calls `train` itself (as the quality runner does); `train_kwargs` (tokenizer, annotators,
    raw_datasets, callbacks, command) must pickle. The trainer lives in the processes, so what comes back is
    process 0's summary: `metrics`, `global_step`, `steps_per_epoch` (batches an epoch), `train_tokens` (source +
    target subwords of the training set), `log_history`, `best_model_checkpoint`, `interrupted_by`, and the
    `processes` and `threads` used; the model is saved in `training_args.output_dir`."""
    check_processes(processes, threads, training_args, data_args)
    settings = {f.name: getattr(training_args, f.name) for f in dataclasses.fields(training_args) if f.init}
    settings["accelerator_config"] = {**training_args.accelerator_config.to_dict(), "split_batches": True}
    return launch(_train_summary, model_args, data_args, type(training_args), settings, train_kwargs,
                  processes=processes, threads=threads)


def _train_summary(model_args, data_args, arguments_class, settings: dict, train_kwargs: dict) -> dict:
    """One process of `train_in_processes`: the training arguments made anew here (their distributed state is
    this process's), `train`, and what the caller needs of the result."""
    training_args = arguments_class(**settings)
    result = train(model_args, data_args, training_args, **train_kwargs)
    trainer, features = result.trainer, result.datasets.get("train")
    return {
        "metrics": result.metrics, "output_dir": result.output_dir, "global_step": trainer.state.global_step,
        "steps_per_epoch": len(trainer.get_train_dataloader()) if features is not None else None,
        "train_tokens": (sum(map(len, features["input_ids"])) + sum(map(len, features["labels"]))
                         if features is not None else None),
        "log_history": trainer.state.log_history, "best_model_checkpoint": trainer.state.best_model_checkpoint,
        "interrupted_by": result.interrupted_by, "processes": training_args.world_size,
        "threads": torch.get_num_threads(),
    }


def train_with_processes(argv: list[str], processes: int, threads: Optional[int], training_args, data_args) -> int:
    """`hf-syntax-mt-train ... --processes N`: check the setting, run `main` in N processes
    (`data_parallel.launch`) on `worker_arguments(argv)` and return process 0's exit status (1 when a process failed, 130 when one
    was stopped by Ctrl-C while it loaded, 128 + the signal when the launcher was stopped by one; 0, saying so, when that came only after the run had finished)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    check_processes(processes, threads, training_args, data_args)
    logger.info("training with %d data-parallel processes, %d torch thread(s) each", processes, threads or 1)
    log_dir = Path(training_args.output_dir) / PROCESS_LOGS
    start = time.time()
    try:
        return launch(main, worker_arguments(argv, training_args), processes=processes, threads=threads or 1,
                      log_dir=log_dir)
    except (ChildFailedError, SignalException) as err:
        stopped = failed_process(err) if isinstance(err, ChildFailedError) else \
            f"the launcher was stopped by {signal.Signals(int(err.sigval)).name}"
        if _finished_since(training_args.output_dir, start):  # e.g. Ctrl-C while the processes were exiting
            print(f"hf-syntax-mt-train: the run finished: {training_args.output_dir} holds its model and its "
                  f"all_results.json; {stopped} only after that (nothing to resume)", file=sys.stderr)
            return 0
        if isinstance(err, SignalException):
            return 128 + int(err.sigval)
        print(f"hf-syntax-mt-train: error: {report_failure(err, training_args.output_dir, log_dir)}", file=sys.stderr)
        stopped_while_loading = err.get_first_failure()[1].exitcode == STOPPED_WHILE_LOADING
        return STOPPED_WHILE_LOADING if stopped_while_loading else 1


def _finished_since(output_dir, since: float) -> bool:
    """Whether a run into `output_dir` finished after `since`: its all_results.json whole and written since, and its
    model card (the last file a run writes) written after it."""
    record, card = Path(output_dir) / "all_results.json", Path(output_dir) / "README.md"
    return (read_whole_json(record) is not None and record.stat().st_mtime >= since and card.is_file()
            and card.stat().st_mtime >= record.stat().st_mtime)


def main(argv: Optional[list[str]] = None, prog: Optional[str] = None) -> int:
    """`hf-syntax-mt-train` / `training/train.py`: parse arguments (or one JSON file), train, print the
    metrics; returns the exit status. `--threads N` (else $HF_SYNTAX_MT_THREADS) sets torch's CPU threads
    (`hf_syntax_mt.training.threads`); `--processes N` trains with N data-parallel CPU processes
    (`hf_syntax_mt.training.data_parallel`). A user error (bad data, setting or parser: `ValueError`,
    `OSError`, `ImportError`) prints its message and returns 2; `--traceback` re-raises it instead.
    Ctrl-C / SIGTERM during training saves a checkpoint after the current step and returns 130 / 143
    (128 + the signal); Ctrl-C at any other time (or a second one) stops at once, also with 130. A bad or
    unknown option prints a one-line usage (of `prog`, default the program's name) and the error."""
    parser = train_argument_parser(prog=prog)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        threads = processes = None
        if len(argv) == 1 and argv[0].endswith(".json"):
            model_args, data_args, training_args = parser.parse_json_file(os.path.abspath(argv[0]))
        else:
            model_args, data_args, training_args, extra, unknown = parser.parse_args_into_dataclasses(
                args=argv, return_remaining_strings=True)
            if unknown:
                parser.error(f"unrecognized arguments: {' '.join(unknown)}")
            threads, processes = extra.threads, extra.processes
        set_torch_threads(threads)
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO,
                            handlers=[logging.StreamHandler(sys.stdout)])
        if processes is not None:  # N data-parallel processes run this command (hf_syntax_mt.training.data_parallel)
            return train_with_processes(argv, processes, threads, training_args, data_args)
        result = train(model_args, data_args, training_args, command="hf-syntax-mt-train " + " ".join(argv))
    except (ValueError, OSError, ImportError, SafetensorError) as err:  # SafetensorError: a damaged weights file
        if "--traceback" in argv:
            raise
        print(f"hf-syntax-mt-train: error: {err}\n(--traceback shows where it was raised)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hf-syntax-mt-train: interrupted (what was done since the last checkpoint is lost; rerun the same "
              "command to resume from it)", file=sys.stderr)
        return 128 + signal.SIGINT
    if result.interrupted_by is not None:
        return 128 + result.interrupted_by
    if result.trainer.is_world_process_zero():
        print(json.dumps({k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}, indent=1))
    return 0


__all__ = [
    "DataArguments",
    "ModelArguments",
    "SyntaxMTSeq2SeqTrainer",
    "SyntaxMTTrainingArguments",
    "TrainingResult",
    "bleu_metric_fn",
    "build_annotator",
    "load_raw_datasets",
    "main",
    "parse_config_overrides",
    "preparsed_annotator",
    "read_parallel_file",
    "train",
    "train_in_processes",
    "train_with_processes",
]
