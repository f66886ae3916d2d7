"""`SyntaxMTSeq2SeqTrainer`, the `Seq2SeqTrainer` that `hf_syntax_mt.training.run.train` trains with, and
`bleu_metric_fn`, its `compute_metrics`.

The trainer logs the loss components of the model's output, evaluates in dataset order, batches by tokens
under `--max_tokens_per_batch` (`hf_syntax_mt.features.batching`), gives the syntax parameters their own learning rate
under `--syntax_lr_multiplier` / `--syntax_learning_rate`, generates from the source and its features only, and
under data parallelism evaluates in token-budget batches too and spares DDP its search for unused parameters
(`hf_syntax_mt.training.data_parallel`).
"""

from __future__ import annotations

import logging
import os
import shutil
from functools import partial
from pathlib import Path
from typing import Optional

import torch
from accelerate.utils import DistributedDataParallelKwargs
from torch.utils.data import DataLoader, SequentialSampler
from transformers import Seq2SeqTrainer
from transformers.modeling_utils import unwrap_model
from transformers.trainer_callback import ExportableState
from transformers.trainer_optimizer import is_optimizer_factory
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, HubStrategy, SaveStrategy, rotate_checkpoints, seed_worker

from ..features.batching import TokenBudgetBatchSampler, pair_lengths
from ..features.joint_bpe import clear_call_state
from ..hub.model_card import write_model_card
from ..inference.length_cap import with_length_cap
from .budget import SaveLastCheckpointsCallback
from .data_parallel import every_parameter_trained, gather_rows, prepare_presplit, token_share
from .run_safety import SAVING_PREFIX

logger = logging.getLogger(__name__)

COMPONENT_LOSSES = ("token_loss", "encoder_parse_loss", "decoder_parse_loss")


class SyntaxMTSeq2SeqTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` for syntax-aware models.

    - logs the loss components of `SyntaxMTSeq2SeqLMOutput` (token_loss, encoder_parse_loss,
      decoder_parse_loss), each the mean over the micro-batches since the last log;
    - evaluates in dataset order (transformers 5.23 shuffles the eval set under
      `train_sampling_strategy="group_by_length"`, which pairs hypotheses with wrong references);
    - `generate` gets the source and its features only (no labels / target_heads);
    - loading the best checkpoint does not report the tied embeddings as missing keys;
    - `create_model_card` writes this package's card (used by `push_to_hub`);
    - `--syntax_lr_multiplier` / `--syntax_learning_rate` give the syntax parameters their own learning rate;
    - DDP does not search for unused parameters each step when the model has none (`every_parameter_trained`),
      unless `--ddp_find_unused_parameters` is given;
    - a checkpoint is written as `_saving-checkpoint-N` and renamed `checkpoint-N` once whole, and the final model's
      files are each written aside and moved into place (as fairseq writes to a temporary name and renames), so a
      kill while saving leaves the old state or the new one, never a `checkpoint-N` or a weights file cut short.
    """

    def __init__(self, *args, model_card_info: Optional[dict] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.model_card_info = model_card_info or {}
        if getattr(self.args, "save_last_checkpoints", 0):
            self.add_callback(SaveLastCheckpointsCallback(self.args.save_last_checkpoints, self.args.save_last_span))
        self._component_sums: dict[str, torch.Tensor] = {}  # on the device: read at log time, not every step
        self._component_counts: dict[str, int] = {}

    def _build_accelerator_args(self, **kwargs):
        args = super()._build_accelerator_args(**kwargs)
        if self.args.ddp_find_unused_parameters is None and every_parameter_trained(self.model):
            for handler in args["kwargs_handlers"]:
                if isinstance(handler, DistributedDataParallelKwargs):
                    handler.find_unused_parameters = False
        return args

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.get("labels")
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        share = 1.0
        if model.training and self.args.world_size > 1 and labels is not None:
            share = token_share(labels, self.accelerator)  # data parallel: the mean over all processes' tokens
            loss = loss * share
        if model.training:
            for name in COMPONENT_LOSSES:
                value = outputs.get(name) if isinstance(outputs, dict) else None
                if value is not None:
                    self._component_sums[name] = self._component_sums.get(name, 0.0) + value.detach().float() * share
                    self._component_counts[name] = self._component_counts.get(name, 0) + 1
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict, start_time: Optional[float] = None) -> None:
        if "loss" in logs and self._component_counts:
            for name in COMPONENT_LOSSES:
                if name in self._component_counts:
                    mean = self._component_sums[name] / self._component_counts[name]
                    if self.args.world_size > 1:
                        mean = self.accelerator.reduce(mean, reduction="mean")
                    logs[name] = round(mean.item(), 4)
            self._component_sums, self._component_counts = {}, {}
        super().log(logs, start_time)

    def create_optimizer(self, model=None):
        """The Trainer's optimizer, with the model's syntax parameters (`syntax_parameter_names()`) at their own
        peak learning rate under `--syntax_lr_multiplier` / `--syntax_learning_rate` (`syntax_parameter_groups`);
        the scheduler then scales every group alike."""
        syntax_lr = getattr(self.args, "syntax_parameter_learning_rate", self.args.learning_rate)
        if self.optimizer is not None or syntax_lr == self.args.learning_rate:
            return super().create_optimizer(model)
        model = self.model if model is None else model
        optimizer_cls, optimizer_kwargs = (self.optimizer_cls_and_kwargs
                                           or self.get_optimizer_cls_and_kwargs(self.args, model))
        if is_optimizer_factory(optimizer_cls) or {"params", "model", "optimizer_dict"} & set(optimizer_kwargs):
            raise ValueError(f"--optim {self.args.optim} builds its own parameter groups, so the syntax parameters "
                             "cannot get their own learning rate: drop --syntax_lr_multiplier / --syntax_learning_rate")
        groups = syntax_parameter_groups(model, self.get_decay_parameter_names(model), self.args.weight_decay,
                                         self.args.learning_rate, syntax_lr)
        syntax_values = sum(p.numel() for group in groups if group["lr"] == syntax_lr for p in group["params"])
        logger.info("peak learning rate %g for the %d syntax parameter values, %g for the others", syntax_lr,
                    syntax_values, self.args.learning_rate)
        self.optimizer = optimizer_cls(groups, **optimizer_kwargs)
        return self.optimizer

    def _get_eval_sampler(self, eval_dataset):
        if eval_dataset is None or not hasattr(eval_dataset, "__len__"):
            return None
        return SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

    def get_train_dataloader(self):
        """Token-budget batches under `--max_tokens_per_batch` (`hf_syntax_mt.features.batching`), else the Trainer's."""
        budget = getattr(self.args, "max_tokens_per_batch", None)
        if budget is None or self.train_dataset is None:
            return super().get_train_dataloader()
        sources, targets = dataset_lengths(self.train_dataset)
        sampler = TokenBudgetBatchSampler(
            pair_lengths(sources, targets), budget, shuffle=True, secondary_lengths=sources,
            seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed,
            num_replicas=self.args.world_size, rank=self.args.process_index, split_batches=self.accelerator.split_batches,
        )
        if sampler.oversized:
            logger.warning("%d training pairs are longer than --max_tokens_per_batch %d: each gets a batch of its own "
                           "(cap them with --max_source_length / --max_target_length)", sampler.oversized, budget)
        return self._token_budget_dataloader(self.train_dataset, "Training", sampler, is_training=True)

    def get_eval_dataloader(self, eval_dataset=None):
        dataset = self.eval_dataset[eval_dataset] if isinstance(eval_dataset, str) else \
            eval_dataset if eval_dataset is not None else self.eval_dataset
        loader = self._fixed_order_token_dataloader(dataset, "Evaluation", longest_first=True)
        return loader if loader is not None else super().get_eval_dataloader(eval_dataset)

    def get_test_dataloader(self, test_dataset):
        loader = self._fixed_order_token_dataloader(test_dataset, "test", longest_first=False)
        return loader if loader is not None else super().get_test_dataloader(test_dataset)

    def _fixed_order_token_dataloader(self, dataset, description: str, longest_first: bool):
        """Evaluation / prediction batches within `--eval_max_tokens_per_batch`: evaluation's sorted by length,
        longest first (its metrics are corpus-level, and a batch of similar lengths generates no longer than its
        own longest pair needs); prediction's consecutive pairs in corpus order (its outputs are written in that
        order). Under data parallelism the batches are dealt out whole, in turn (`evaluation_loop` gathers them).
        None (the Trainer's fixed-size batches) without a budget."""
        budget = getattr(self.args, "eval_max_tokens_per_batch", None)
        if budget is None or dataset is None or not hasattr(dataset, "__len__"):
            return None
        sampler = TokenBudgetBatchSampler(pair_lengths(*dataset_lengths(dataset)), budget, shuffle=False,
                                          longest_first=longest_first, num_replicas=self.args.world_size,
                                          rank=self.args.process_index)
        return self._token_budget_dataloader(dataset, description, sampler, is_training=False)

    def evaluation_loop(self, dataloader, *args, **kwargs):
        """The Trainer's loop; over batches dealt out between processes (`_fixed_order_token_dataloader`) it gathers
        batches of different sizes (`gather_rows`) and leaves out the batch of a process that had none left."""
        sampler = getattr(getattr(dataloader, "batch_sampler", None), "batch_sampler", None)
        if not isinstance(sampler, TokenBudgetBatchSampler) or sampler.num_replicas == 1:
            return super().evaluation_loop(dataloader, *args, **kwargs)
        state, previous = self.accelerator.gradient_state, self.gather_function
        self.gather_function = lambda data: gather_rows(
            self.accelerator, data, skip=sampler.pads_last_batch and state.end_of_dataloader)
        try:
            return super().evaluation_loop(dataloader, *args, **kwargs)
        finally:
            self.gather_function = previous

    def _token_budget_dataloader(self, dataset, description: str, batch_sampler, *, is_training: bool):
        """A DataLoader over `batch_sampler` with the Trainer's collator, workers and column removal, prepared by
        accelerate; the sampler already splits the batches between processes, so accelerate's `BatchSamplerShard`
        is made a passthrough (as the Trainer does for its `BatchRebalanceSampler`)."""
        import datasets

        collator = self.data_collator
        if isinstance(dataset, datasets.Dataset):
            dataset = self._remove_unused_columns(dataset, description=description)
        else:
            collator = self._get_collator_with_removed_columns(self.data_collator, description=description)
        params = dict(batch_sampler=batch_sampler, collate_fn=collator, num_workers=self.args.dataloader_num_workers,
                      pin_memory=self.args.dataloader_pin_memory,
                      persistent_workers=self.args.dataloader_persistent_workers)
        if self.args.dataloader_num_workers > 0:
            params["prefetch_factor"] = self.args.dataloader_prefetch_factor
        if is_training:
            params["worker_init_fn"] = partial(seed_worker, num_workers=self.args.dataloader_num_workers,
                                               rank=self.args.process_index)
        loader = prepare_presplit(self.accelerator, DataLoader(dataset, **params))
        wrapper = getattr(loader, "batch_sampler", None)
        if wrapper is not None and getattr(wrapper, "batch_sampler", None) is batch_sampler:
            wrapper.num_processes, wrapper.process_index = 1, 0
        return loader

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        if not self.args.predict_with_generate or prediction_loss_only:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        inputs = self._prepare_inputs(inputs)
        generation_inputs = {k: v for k, v in inputs.items() if k not in ("labels", "target_heads", "decoder_input_ids")}
        if len(gen_kwargs) == 0 and hasattr(self, "_gen_kwargs"):
            gen_kwargs = {k: v for k, v in self._gen_kwargs.items() if v is not None}
        cap_a, cap_b = getattr(self.args, "generation_max_length_a", 0), getattr(self.args, "generation_max_length_b", 0)
        if (cap_a or cap_b) and "attention_mask" in generation_inputs:  # each sentence's own source-relative cap
            gen_kwargs = with_length_cap(gen_kwargs, generation_inputs["attention_mask"], cap_a, cap_b,
                                         eos_token_id=self.model.config.eos_token_id)
        with torch.no_grad():
            generated = self.model.generate(**generation_inputs, **gen_kwargs)
            loss = None
            if "labels" in inputs:
                loss = model(**inputs).loss.detach().mean()
        labels = inputs.get("labels")
        width = max(generated.shape[-1], labels.shape[-1] if labels is not None else 0)
        generated = self._pad_tensors_to_max_len(generated, width)
        if labels is not None:
            labels = self._pad_tensors_to_max_len(labels, width)
        return loss, generated, labels

    def _issue_warnings_after_load(self, load_result) -> None:
        """Checkpoints store one copy of tied weights (`_tied_weights_keys`): the others are not missing,
        they are re-tied. Warn only about keys that really are missing."""
        tied = set(getattr(self.model, "_tied_weights_keys", None) or ())
        missing = [key for key in load_result.missing_keys if key not in tied]
        if len(missing) < len(load_result.missing_keys):
            self.model.tie_weights()
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing)
                                           if hasattr(load_result, "_replace") else load_result)

    def save_model(self, output_dir: Optional[str] = None, _internal_call: bool = False) -> None:
        """The Trainer's `save_model`; into the output dir itself (the final model), each file is written in
        `_saving-model/` first and then moved over the old one (`os.replace`: the old file or the new, whole)."""
        if self.processing_class is not None:
            clear_call_state(self.processing_class)  # the tokenizer saved beside the weights, without call state
        target = Path(output_dir or self.args.output_dir)
        if not self.args.should_save or target.resolve() != Path(self.args.output_dir).resolve():
            return super().save_model(output_dir, _internal_call)
        staging = target / f"{SAVING_PREFIX}model"
        if staging.exists():
            shutil.rmtree(staging)  # what a save cut short left
        super().save_model(str(staging), _internal_call=True)
        for path in sorted(staging.iterdir()):
            os.replace(path, target / path.name)
        staging.rmdir()
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save", revision=self.args.hub_revision)

    def _save_checkpoint(self, model, trial) -> None:
        """The Trainer's checkpoint (weights, optimizer, scheduler, RNG states, trainer state), written in
        `_saving-checkpoint-N` and renamed `checkpoint-N` once every process has written its files; a checkpoint of
        the same step already there is replaced. Then the Trainer's push and rotation."""
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        run_dir = Path(self._get_output_dir(trial=trial))
        final, staging = run_dir / name, run_dir / f"{SAVING_PREFIX}{name}"
        if self.args.should_save and staging.exists():
            shutil.rmtree(staging)  # what a save cut short left
        self.accelerator.wait_for_everyone()
        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        self.save_model(str(staging), _internal_call=True)
        best_step = self.state.best_global_step
        if self.args.save_strategy in (SaveStrategy.STEPS, SaveStrategy.EPOCH, SaveStrategy.BEST) and best_step:
            self.accelerator.wait_for_everyone()  # process 0 has saved the weights
            best = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{best_step}"
            if best_step == self.state.global_step or best.exists():
                self.state.best_model_checkpoint = str(best)
        if not self.args.save_only_model:
            self._save_optimizer_and_scheduler(str(staging))
            self._save_scaler(str(staging))
            self._save_rng_state(str(staging))
        if self.args.should_save:
            for callback in [*self.callback_handler.callbacks, self.control]:
                if isinstance(callback, ExportableState):
                    states = self.state.stateful_callbacks
                    if isinstance(states[type(callback).__name__], list):
                        states[type(callback).__name__].append(callback.state())
                    else:
                        states[type(callback).__name__] = callback.state()
            self.state.save_to_json(str(staging / "trainer_state.json"))
        self.accelerator.wait_for_everyone()  # every process's RNG state is written
        if self.args.should_save:
            if final.exists():
                replaced = run_dir / f"{SAVING_PREFIX}{name}.replaced"
                final.rename(replaced)
                staging.rename(final)
                shutil.rmtree(replaced)
            else:
                staging.rename(final)
        self.accelerator.wait_for_everyone()
        if self.args.push_to_hub:
            self._push_from_checkpoint(str(final))
        if self.args.should_save:
            rotate_checkpoints(output_dir=str(run_dir), save_total_limit=self.args.save_total_limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=True)

    def _push_from_checkpoint(self, checkpoint_folder: str) -> None:
        """The Trainer's upload of a checkpoint (`--hub_strategy` other than end), made a folder that loads: the
        model's code (`trust_remote_code`: the `*.py` files `config.json`'s `auto_map` points to), which the Trainer
        does not copy from the checkpoint, and a model card go up with the weights."""
        if self.is_world_process_zero() and self.args.hub_strategy != HubStrategy.END:
            for code in Path(checkpoint_folder).glob("*.py"):
                shutil.copy(code, Path(self.args.output_dir) / code.name)
            self.create_model_card()
        super()._push_from_checkpoint(checkpoint_folder)

    def create_model_card(self, **kwargs) -> None:
        if self.is_world_process_zero():
            model_id = getattr(self, "hub_model_id", None) or self.args.output_dir
            config = {"config": unwrap_model(self.model).config.to_dict()}  # mid-run: the info has it at the end
            write_model_card(self.args.output_dir, **{**config, **self.model_card_info, "model_id": model_id})


def syntax_parameter_groups(model, decay_parameter_names, weight_decay: float, learning_rate: float,
                            syntax_learning_rate: float) -> list[dict]:
    """Optimizer parameter groups: the Trainer's two (weight decay on `decay_parameter_names`, none on the rest),
    each split into the other parameters at `learning_rate` (these groups first: the Trainer logs the first
    group's rate) and the model's `syntax_parameter_names()` at `syntax_learning_rate`. Frozen parameters are
    left out, as the Trainer does; so are empty groups."""
    core = unwrap_model(model)
    if not hasattr(core, "syntax_parameter_names"):
        raise ValueError(f"a syntax learning rate needs a SyntaxMT model, not {type(core).__name__}: drop "
                         "--syntax_lr_multiplier / --syntax_learning_rate")
    syntax_names = set(core.syntax_parameter_names())
    syntax = {id(p) for name, p in core.named_parameters() if name in syntax_names}
    decays = set(decay_parameter_names)
    groups = []
    for is_syntax, lr in ((False, learning_rate), (True, syntax_learning_rate)):
        for with_decay in (True, False):
            params = [p for name, p in model.named_parameters()
                      if p.requires_grad and (id(p) in syntax) == is_syntax and (name in decays) == with_decay]
            if params:
                groups.append({"params": params, "weight_decay": weight_decay if with_decay else 0.0, "lr": lr})
    return groups


def dataset_lengths(dataset) -> tuple[list[int], Optional[list[int]]]:
    """(source, target) subwords of every row of a features dataset (`input_ids`, and `labels` when present,
    else None): what token-budget batches are filled by."""
    names = getattr(dataset, "column_names", None) or list(dataset[0])
    if "input_ids" not in names:
        raise ValueError("token-budget batches need an 'input_ids' column to measure the pairs")
    targets = [len(ids) for ids in dataset["labels"]] if "labels" in names else None
    return [len(ids) for ids in dataset["input_ids"]], targets


def bleu_metric_fn(tokenizer, bleu_tokenize: str = "13a"):
    """`compute_metrics` for `Seq2SeqTrainer(predict_with_generate=True)`: corpus BLEU and chrF
    (sacrebleu through `hf_syntax_mt.inference.metrics`) and the mean generated length."""
    from ..inference.metrics import load_metric

    metric = load_metric()

    def compute_metrics(eval_preds):
        predictions, labels = eval_preds.predictions, eval_preds.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        pad = tokenizer.pad_token_id
        predictions = [[t for t in row if t >= 0] for row in predictions.tolist()]
        labels = [[t for t in row if t >= 0] for row in labels.tolist()]
        hypotheses = [h.strip() for h in tokenizer.batch_decode(predictions, skip_special_tokens=True)]
        references = [r.strip() for r in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        scores = metric.compute(predictions=hypotheses, references=[[r] for r in references], tokenize=bleu_tokenize)
        lengths = [sum(t != pad for t in row) for row in predictions]
        return {
            "bleu": round(scores["bleu"], 2),
            "chrf": round(scores["chrf"], 2),
            "gen_len": round(sum(lengths) / max(1, len(lengths)), 2),
        }

    return compute_metrics
