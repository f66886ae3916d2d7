"""benchmarks/speed.py end to end on a tiny model: every table is produced from real measurements
(interleaved timing, per-subprocess memory, pipeline with a pre-parsed CoNLL-U parser)."""

import json
import sys
from pathlib import Path

from hf_syntax_mt.synthetic import write_synthetic_corpus

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import speed  # noqa: E402

TINY = "d_model=32,encoder_layers=1,decoder_layers=1,encoder_ffn_dim=64,decoder_ffn_dim=64,vocab_size=200,max_position_embeddings=64"


def test_interleaved_rotates_order_and_times_every_call():
    calls = []
    times = speed._interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3} and all(t >= 0 for v in times.values() for t in v)


def test_median_ratio_pairs_rounds():
    assert speed._median_ratio([2.0, 4.0, 100.0], [1.0, 2.0, 10.0]) == 2.0


def test_only_memory_workers_get_the_small_mmap_threshold(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")  # e.g. left over in the user's shell
    assert speed._worker_environment("memory")["MALLOC_MMAP_THRESHOLD_"] == "65536"
    for part in ("time", "pipeline"):
        environment = speed._worker_environment(part)
        assert "MALLOC_MMAP_THRESHOLD_" not in environment and environment["HF_HUB_OFFLINE"] == "1"


def test_speed_benchmark_tables_on_tiny_model(tmp_path):
    paths = write_synthetic_corpus(tmp_path / "data", n_train=0, n_dev=12, n_test=0, seed=5, max_words=8)
    output = tmp_path / "speed.json"
    results = speed.main([
        "--lengths", "8", "12", "--batch-size", "2", "--rounds", "2", "--size", TINY,
        "--presets", "transformer_dep_rel", "transformer_dbsa", "transformer_sla",
        "--pipeline-text", str(paths["dev"]["src"]), "--pipeline-parser", str(paths["dev"]["src.conllu"]),
        "--pipeline-sentences", "10", "--output", str(output), "--results-md", str(tmp_path / "RESULTS.md"),
    ])
    systems = ["marian", "transformer_abs", "transformer_dep_rel", "transformer_dbsa", "transformer_sla"]
    assert set(results["memory"]) == set(systems) and set(results["time"]["train"]) == set(systems)
    for system in systems:
        for n in (8, 12):
            step = results["time"]["train"][system][n]
            assert len(step["step_s"]) == 2 and min(step["step_s"]) > 0 and step["tokens"] == 2 * 2 * n
            # a tiny model's step peak is within the kernel's lazily synced RSS counters (~64 pages a thread)
            assert results["memory"][system][n] > -1.0
        assert len(results["time"]["decode"][system]["beam4_s"]) == 2
    pipeline = results["pipeline"]
    assert set(pipeline) == set(systems[1:])
    assert pipeline["transformer_abs"]["parser_s"] == 0.0 and pipeline["transformer_dbsa"]["parser_s"] == 0.0
    for system in ("transformer_dep_rel", "transformer_sla"):  # each pipeline's own parse time, within its total
        assert 0.0 < pipeline[system]["parser_s"] < min(pipeline[system]["total_s"]) and pipeline[system]["sentences"] == 10
    saved = json.loads(output.read_text())
    tables = saved["tables"]
    assert "n=12 tokens/s ×abs / ×Marian" in tables and "beam-4 decode time ×Marian" in tables
    assert "pipeline sentences/s" in tables and "| transformer_dep_rel |" in tables
    # the baseline's own ratios are exactly 1 (same rounds divided by themselves)
    assert "| transformer_abs | 1.00 / " in tables
    # --parts: re-measure only the pipeline, keep memory and training times from the JSON
    again = speed.main([
        "--lengths", "8", "12", "--batch-size", "2", "--rounds", "2", "--size", TINY,
        "--presets", "transformer_dep_rel", "transformer_dbsa", "transformer_sla", "--parts", "pipeline",
        "--pipeline-text", str(paths["dev"]["src"]), "--pipeline-parser", str(paths["dev"]["src.conllu"]),
        "--pipeline-sentences", "10", "--output", str(output), "--results-md", str(tmp_path / "RESULTS.md"),
    ])
    assert again["memory"] == results["memory"] and again["time"]["train"] == results["time"]["train"]
    assert again["pipeline"]["transformer_sla"]["total_s"] != results["pipeline"]["transformer_sla"]["total_s"]
    written = (tmp_path / "RESULTS.md").read_text()
    assert written.count("<!-- speed:begin -->") == 1 and "--parts pipeline" in written
    assert json.loads(output.read_text())["tables"] in written
