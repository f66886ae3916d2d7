"""Using a trained model: the `syntax-translation` pipeline (`pipeline`), the source-relative length cap of
generation (`length_cap`), the self-parsing model as a parser (`model_parsing`), the plots of relations,
localized attention and attention heads (`plotting`) and the BLEU / chrF metric (`metrics`)."""
