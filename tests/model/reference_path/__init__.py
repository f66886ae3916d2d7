"""Today's relation attention, frozen at commit af0d50e (before issue 91) as the tests' reference: the model file and
its relation terms (banded Toeplitz Shaw terms, labeled pairs, depth buckets, autograd functions in place), imported
next to the package's configuration. `tests/model/test_relation_path.py` loads a model's weights into it and compares
losses, gradients and decoding with the package's path. Not used by the package."""
