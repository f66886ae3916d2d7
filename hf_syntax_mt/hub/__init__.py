"""Models in and out of the 🤗 Hub's world: the model card (`model_card`, from `templates/model_card.md`), the
measured results it cites (`measured_results`, written by `benchmarks/quality.py summary`) and the MarianMT
converter (`convert_marian`, the warm start)."""
