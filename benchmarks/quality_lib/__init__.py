"""The pieces of `benchmarks/quality.py`: recipes, corpus (parsers, parse caches, tokenizer), runs, summary."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository's hf_syntax_mt, not an installed one
