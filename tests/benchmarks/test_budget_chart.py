"""The summary's BLEU-by-budget table and chart (issue 92): presets trained at several budgets, dev and the test
scored outside the project, against updates and training hours."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from quality_lib.summary import budget_lines, budget_points  # noqa: E402


def _run(steps, hours, dev):
    return {"steps": steps, "train_runtime_seconds": hours * 3600, "dev": {"bleu": dev}}


RECIPE = {"name": "toy.budget", "variants": {
    "transformer_abs@2B": {"preset": "transformer_abs", "training": {"max_steps": 200}},
    "transformer_rel@2B": {"preset": "transformer_rel", "training": {"max_steps": 200}},
    "transformer_rel@keys": {"preset": "transformer_rel", "model": {"relative_value_term": False}},
}}
BY_PRESET = {
    "transformer_abs": [_run(100, 1.0, 7.0), _run(100, 2.0, 8.0)],
    "transformer_abs@2B": [_run(200, 3.0, 11.0)],
    "transformer_rel": [_run(100, 1.5, 9.0)],
    "transformer_rel@keys": [_run(100, 1.5, 8.5)],
    "transformer_dep": [_run(100, 1.0, 7.5)],
}
EXTERNAL = [{"recipe": "toy.budget", "split": "test", "scores": [
    {"system": "transformer_abs", "bleu_by_seed": [9.0, 10.0]}, {"system": "transformer_abs@2B", "bleu_by_seed": [12.5]}]},
    {"recipe": "other", "split": "test", "scores": [{"system": "transformer_rel", "bleu_by_seed": [99.0]}]},
    {"recipe": "toy.budget", "split": "test", "scores": [{"system": "transformer_dep", "bleu_mean": 8.0, "bleu_std": 0.1}]}]


def test_budget_points_keep_presets_trained_at_several_budgets():
    points = budget_points(RECIPE, BY_PRESET, EXTERNAL)
    assert list(points) == ["transformer_abs"]  # rel has one budget (@keys changes the model, not the budget)
    assert points["transformer_abs"] == [
        {"name": "transformer_abs", "updates": 100, "hours": 1.5, "dev": 7.5, "test": 9.5},
        {"name": "transformer_abs@2B", "updates": 200, "hours": 3.0, "dev": 11.0, "test": 12.5}]


def test_budget_lines_write_the_table_and_the_chart(tmp_path):
    lines = budget_lines(RECIPE, BY_PRESET, EXTERNAL, tmp_path)
    assert "| transformer_abs@2B | 200 | 3.00 | 11.00 | 12.50 |" in lines
    assert (tmp_path / "quality_toy.budget_budget.png").stat().st_size > 10_000
    no_test = budget_lines(RECIPE, BY_PRESET, [], tmp_path)
    assert "| transformer_abs | 100 | 1.50 | 7.50 | – |" in no_test
    assert budget_lines(RECIPE, {"transformer_abs": BY_PRESET["transformer_abs"]}, EXTERNAL, tmp_path) == []
