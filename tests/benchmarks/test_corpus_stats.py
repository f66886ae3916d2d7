"""benchmarks/corpus_stats.py on a tiny synthetic recipe: it writes the figures it says, and they count the corpus."""

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import corpus_stats  # noqa: E402


def test_distribution_reads_the_values():
    values = [5, 1, 4, 2, 3, 10, 7, 6, 9, 8]
    assert corpus_stats.distribution(values) == {"mean": statistics.fmean(values), "median": 6, "p90": 10, "p99": 10,
                                                 "max": 10}


def test_corpus_stats_writes_each_split_and_the_alignment(tiny_recipe, capsys):
    recipe, root = tiny_recipe
    corpus_stats.main(["--recipe", str(recipe), "--runs-dir", str(root / "runs"), "--results-dir", str(root / "out")])
    stats = json.loads((root / "out" / "synthetic.src-tgt" / "corpus_stats.json").read_text())
    splits = stats["splits"]
    assert [splits[s]["pairs"] for s in ("train", "dev", "test (blind, source only)")] == [40, 6, 4]
    train_lines = (root / "data" / "train.src").read_text().splitlines()
    assert splits["train"]["source_characters"]["max"] == max(len(line) for line in train_lines)
    assert "target_subwords" not in splits["test (blind, source only)"]
    assert len(stats["dev_source_subwords"]) == 6
    assert stats["dev_alignment"]["words"] == sum(len(line.split()) for line in
                                                  (root / "data" / "dev.src").read_text().splitlines())
    assert '"dev_source_subwords"' not in capsys.readouterr().out  # printed without that list
