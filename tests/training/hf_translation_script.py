"""The calls transformers' examples/pytorch/translation/run_translation.py makes, on each model folder given, in a
process that never imports hf_syntax_mt itself (as the script does not): `python hf_translation_script.py DATA.json
OUT_DIR FOLDER...` prints one JSON line per folder. The first folder's training data is mapped with 2 processes
(`--preprocessing_num_workers 2`); every training set is mapped again, to show the second map is served from the
`datasets` cache."""

import json
import sys

import datasets
import numpy as np
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)


def run(folder: str, data: str, out: str, workers) -> dict:
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, use_fast=True, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, config=config, trust_remote_code=True)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    raw = datasets.load_dataset("json", data_files={"train": data, "validation": data})

    def preprocess_function(examples):
        inputs = [ex["ja"] for ex in examples["translation"]]
        targets = [ex["en"] for ex in examples["translation"]]
        model_inputs = tokenizer(inputs, max_length=64, padding=False, truncation=True)
        labels = tokenizer(text_target=targets, max_length=64, padding=False, truncation=True)
        model_inputs["labels"] = labels["input_ids"]
        return model_inputs

    def mapped(split, num_proc=None):
        return raw[split].map(preprocess_function, batched=True, num_proc=num_proc, remove_columns=["translation"])

    train_dataset, eval_dataset = mapped("train", workers), mapped("validation")
    again = mapped("train", workers)
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=None)

    def compute_metrics(eval_preds):
        preds, _ = eval_preds
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        return {"translated": len(tokenizer.batch_decode(preds, skip_special_tokens=True))}

    args = Seq2SeqTrainingArguments(output_dir=out, max_steps=2, per_device_train_batch_size=4,
                                    per_device_eval_batch_size=4, predict_with_generate=True, report_to=[],
                                    use_cpu=True, save_strategy="no", disable_tqdm=True)
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                             processing_class=tokenizer, data_collator=collator, compute_metrics=compute_metrics)
    try:
        result = trainer.train()
    except ValueError as err:
        return {"folder": folder, "error": str(err)}
    trainer.save_model()
    metrics = trainer.evaluate(max_length=20, num_beams=2, metric_key_prefix="eval")
    trainer.create_model_card(tasks="translation", language=["ja", "en"])
    return {"folder": folder, "columns": sorted(train_dataset.column_names), "train_loss": result.metrics["train_loss"],
            "eval": metrics, "model_class": type(model).__module__, "tokenizer_class": type(tokenizer).__name__,
            "cached": again._fingerprint == train_dataset._fingerprint and again.cache_files == train_dataset.cache_files,
            "workers": workers}


if __name__ == "__main__":
    data, out, *folders = sys.argv[1:]
    for number, folder in enumerate(folders):
        print(json.dumps(run(folder, data, f"{out}/{number}", workers=2 if number == 0 else None)), flush=True)
    print(json.dumps({"hf_syntax_mt_imported_by": "the parsing tokenizers' remote code"
                      if "hf_syntax_mt" in sys.modules else None}))
