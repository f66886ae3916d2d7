#!/usr/bin/env python
"""Train a syntax-aware NMT model with `Seq2SeqTrainer` (also the `hf-syntax-mt-train` console script).

A thin `HfArgumentParser` wrapper around `hf_syntax_mt.training.run.train` over `ModelArguments`,
`DataArguments` and `SyntaxMTTrainingArguments`; `--help` lists every flag. Examples:

    # synthetic corpus with gold (pre-parsed) trees: train.src, train.src.conllu, train.src.tree, ...
    python training/train.py --preset transformer_dep_rel --parser preparsed \
        --train_file data/train --validation_file data/dev --output_dir out/dep_rel

    # Japanese -> English, source parsed with GiNZA, joint BPE 8k, the issue-6 recipe
    python training/train.py --preset transformer_dep_rel --parser ja_ginza \
        --source_lang ja --target_lang en --train_file corpus/train --validation_file corpus/dev \
        --config_overrides d_model=256,encoder_layers=3,decoder_layers=3,encoder_attention_heads=4,\
decoder_attention_heads=4,encoder_ffn_dim=1024,decoder_ffn_dim=1024 \
        --per_device_train_batch_size 64 --num_train_epochs 8 --output_dir out/ja_en

    # two data-parallel CPU processes, one thread each, on the one-process batches (hf_syntax_mt.training.data_parallel)
    python training/train.py --processes 2 ...

    # or launched by accelerate (each process then takes its own --per_device_train_batch_size batch)
    accelerate launch --multi_gpu --num_processes 2 training/train.py --use_cpu true ...
"""

import sys

from hf_syntax_mt.training.console import train_command

if __name__ == "__main__":
    sys.exit(train_command())
