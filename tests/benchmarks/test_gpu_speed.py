"""benchmarks/gpu_speed.py: its tables from a GPU run's JSON, and the same code run on the CPU at a tiny size (a GPU is
lent to some sessions only)."""

import json
import sys
from pathlib import Path

import model_helpers

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_speed  # noqa: E402

TINY = ",".join(f"{key}={value}" for key, value in model_helpers.TINY.items())  # speed.py's --size


def test_gpu_speed_tables_are_the_median_per_round_ratios_of_the_json(tmp_path):
    """benchmarks/gpu_speed.py --tables-from (run on a lent GPU; the tables are written here): every cell is the
    median over rounds of the per-round ratio, from the JSON's string keys, and RESULTS.md gets one section."""
    systems, lengths = ["marian", "transformer_abs", "transformer_rel"], [32, 64]
    seconds = {"marian": [1.0, 2.0, 4.0], "transformer_abs": [2.0, 2.0, 2.0], "transformer_rel": [3.0, 8.0, 2.0]}
    train = {p: {s: {str(n): {"step_s": [t * n for t in seconds[s]], "tokens": 4096} for n in lengths} for s in systems}
             for p in gpu_speed.PRECISIONS}
    results = {"settings": {"lengths": lengths, "presets": systems[1:], "tokens_per_batch": 4096, "rounds": 3,
                            "date": "2026-12-04", "command": "python benchmarks/gpu_speed.py", "gpu": "a GPU",
                            "torch": "2", "cuda": "13"},
               "train": train, "decode": {s: {"beam1_s": seconds[s], "beam4_s": seconds[s]} for s in systems},
               "recipe_step_s": {"fp32": [0.02, 0.03, 0.01], "bf16": [0.01, 0.01, 0.01]}}
    path = tmp_path / "gpu_speed.json"
    path.write_text(json.dumps(results))
    gpu_speed.main(["--tables-from", str(path), "--results-md", str(tmp_path / "RESULTS.md")])
    written = (tmp_path / "RESULTS.md").read_text()
    # rel / abs per round: 1.5, 4, 1 -> median 1.5; rel / marian: 3, 4, 0.5 -> 3; marian / abs: 0.5, 1, 2 -> 1
    assert "| transformer_rel | 1.50 / 3.00 | 1.50 / 3.00 | 1.50 / 3.00 | 1.50 / 3.00 |" in written
    assert "| marian | 1.00 / 1.00 |" in written and "### T = 4,096 tokens per batch" in written
    assert "fp32 20.0 ms, bf16 10.0 ms" in written and "at least 4.2 min" in written  # 25,392 × 10 ms
    assert written.count("<!-- gpu-speed:begin -->") == 1


def test_gpu_speed_runs_on_the_cpu_and_writes_the_tables_it_prints(tmp_path, capsys):
    output = tmp_path / "gpu_speed.json"
    gpu_speed.main(["--device", "cpu", "--size", TINY, "--lengths", "8", "--tokens-per-batch", "32", "--rounds", "1",
                    "--presets", "transformer_dep_labeled_rel@keys", "transformer_rel@keys@flex", "--output", str(output)])
    results = json.loads(output.read_text())
    systems = ["marian", "transformer_abs", "transformer_dep_labeled_rel@keys", "transformer_rel@keys@flex"]
    for precision in gpu_speed.PRECISIONS:
        assert {s: results["train"][precision][s]["8"]["tokens"] for s in systems} == dict.fromkeys(systems, 64)
    assert list(results["decode"]) == systems and len(results["recipe_step_s"]["bf16"]) == 3
    assert results["settings"]["device"] == "cpu" and results["settings"]["cpu"]
    assert capsys.readouterr().out.strip() == gpu_speed.format_tables(results)


def test_gpu_speed_profiles_each_precision_on_the_cpu(capsys):
    gpu_speed.main(["--device", "cpu", "--size", TINY, "--profile", "transformer_rel", "--lengths", "8",
                    "--tokens-per-batch", "32"])
    out = capsys.readouterr().out
    assert "## transformer_rel, fp32, n=8, 32 tokens:" in out and "## transformer_rel, bf16, n=8" in out
    assert "aten::" in out  # the operators' table
