"""Text → model inputs: the syntax features of a sentence pair (`syntax_features`: parser → subword alignment →
`source_heads` / labels / distances, the `datasets` map function and the collator), the training data
(`training_data`), token-budget batches (`batching`), the joint BPE tokenizer (`joint_bpe`) and the synthetic
corpus with gold trees (`synthetic`). Below the training and inference layers, above the model and `syntax`."""
