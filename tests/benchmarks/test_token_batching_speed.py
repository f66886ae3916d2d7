"""benchmarks/token_batching_speed.py on a tiny synthetic recipe: both batchings cover the epoch, their padding is
counted as by hand, and the JSON it writes holds the figures it prints."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import token_batching_speed  # noqa: E402


def test_padded_positions_pad_each_side_to_its_longest_sentence():
    sources, targets = [3, 5, 2], [4, 1, 6]
    # batch [0, 1]: sources 3 + 5 padded to 2 x 5, targets 4 + 1 to 2 x 4; batch [2]: no padding
    assert token_batching_speed.padded_positions([[0, 1], [2]], sources, targets) == (3 + 5 + 4 + 1 + 2 + 6,
                                                                                    10 + 8 + 2 + 6)


def test_fixed_batches_cover_every_pair_once():
    batches = token_batching_speed.fixed_batches(10, 4, seed=1)
    assert [len(b) for b in batches] == [4, 4, 2] and sorted(i for b in batches for i in b) == list(range(10))


def test_token_batching_writes_both_batchings(tiny_recipe, tmp_path, capsys):
    recipe, root = tiny_recipe
    output = tmp_path / "token_batching.json"
    token_batching_speed.main(["--recipe", str(recipe), "--runs-dir", str(root / "runs"), "--batch-size", "8",
                               "--steps", "1", "--rounds", "1", "--output", str(output)])
    result = json.loads(output.read_text())
    fixed, budget = result["batchings"]["fixed"], result["batchings"]["token_budget"]
    assert result["pairs"] == 40 and result["budget"] == 96 and fixed["batches_per_epoch"] == 5
    assert fixed["real_tokens_per_epoch"] == budget["real_tokens_per_epoch"]  # the same pairs, once each
    assert 0 <= budget["padding_share"] < fixed["padding_share"] < 1  # sorted by length: less padding
    assert result["machine"]["cpu"] and result["threads"] == 1
    assert f"×{result['epoch_time_ratio']}" in capsys.readouterr().out
