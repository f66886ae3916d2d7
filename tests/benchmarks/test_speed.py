"""benchmarks/speed.py end to end on a tiny model: every table is produced from real measurements
(interleaved timing, per-subprocess memory, pipeline with a pre-parsed CoNLL-U parser)."""

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from hf_syntax_mt import PreParsedAnnotator
from hf_syntax_mt.features.synthetic import write_synthetic_corpus

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import speed  # noqa: E402

TINY = "d_model=32,encoder_layers=1,decoder_layers=1,encoder_ffn_dim=64,decoder_ffn_dim=64,vocab_size=200,max_position_embeddings=64"


def test_interleaved_rotates_order_and_times_every_call(monkeypatch):
    clock, calls = [0.0], []
    monkeypatch.setattr(speed, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def call(name, seconds):  # takes `seconds` on the benchmark's (fake) clock
        calls.append(name)
        clock[0] += seconds

    times = speed._interleaved({"a": lambda: call("a", 1.0), "b": lambda: call("b", 10.0)}, rounds=3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert times == {"a": [1.0] * 3, "b": [10.0] * 3}  # each call's own time, whatever its place in the round


def test_recorded_command_quotes_and_leaves_out_the_note():
    argv = ["--parts", "pipeline", "--note", "beside two runs; 4 rounds", "--presets", "a+b", "--note=x y"]
    assert speed.recorded_command(argv) == "--parts pipeline --presets a+b"
    assert speed.recorded_command(["--pipeline-text", "my file.txt"]) == "--pipeline-text 'my file.txt'"


def test_median_ratio_pairs_rounds():
    assert speed._median_ratio([2.0, 4.0, 100.0], [1.0, 2.0, 10.0]) == 2.0


def test_memory_worker_reads_a_known_allocation():
    # measure_memory in a worker subprocess and environment, on a step that touches 64 MiB and frees it
    script = "\n".join([
        "import json, sys, torch",
        f"sys.path.insert(0, {str(REPO / 'benchmarks')!r})",
        "import speed",
        "speed._training_step = lambda *args, **kwargs: lambda: torch.ones(64 << 20, dtype=torch.uint8)",
        f"print(json.dumps(speed.measure_memory('transformer_abs', [8], 2, speed._parse_size({TINY!r}))))",
    ])
    memory = speed._worker_output([sys.executable, "-c", script], speed._worker_environment("memory"))
    assert abs(memory["8"] - 64.0) < 2.0  # give or take the lazily synced RSS counters


def test_format_tables_ratios_known_by_construction():
    presets = ["transformer_abs", "transformer_sla"]
    results = {
        "time": {
            "train": {s: {8: {"step_s": [t, t], "tokens": 32}} for s, t in zip(["marian"] + presets, [1.0, 2.0, 4.0])},
            "decode": {s: {"beam4_s": [b4], "beam1_s": [b1]} for s, b4, b1 in zip(["marian"] + presets, [1.0, 2.0, 3.0], [0.5, 1.0, 2.0])},
        },
        "memory": {"marian": {8: 10.0}, "transformer_abs": {8: 20.0}, "transformer_sla": {8: 30.0}},
        "pipeline": {"transformer_abs": {"sentences": 10, "total_s": [2.0], "parser_s": 0.0},
                     "transformer_sla": {"sentences": 10, "total_s": [5.0], "parser_s": 1.0}},
    }
    results["long_decode"] = {s: {"sentences": 8, "generated_tokens": 80, "total_s": [t]}
                              for s, t in zip(["marian"] + presets, [1.0, 2.0, 4.0])}
    lines = speed.format_tables(results, [8], presets).splitlines()
    # step time ×abs / ×Marian; memory ×abs / ×Marian
    assert "| transformer_sla | 2.00 / 4.00 | 1.50 / 3.00 |" in lines
    assert "| transformer_abs | 1.00 / 2.00 | 1.00 / 2.00 |" in lines
    assert "- marian: n=8: 32 tokens/s (1000 ms/step); peak memory n=8: 10 MB" in lines
    assert "| transformer_sla | 2.00 | 0.50 | 0.25 |" in lines  # long-sentence sentences/s, ×abs, ×Marian
    assert "| transformer_sla | 3.00 | 1.50 | 4.00 | 3.00 |" in lines  # beam-4 ×Marian, ×abs, greedy ×Marian, s
    assert "| transformer_sla | 2.0 | 0.40 | 1.00 / 4.00 | 20% |" in lines  # sentences/s, ×abs, parser / model s


def test_pipeline_parser_time_is_part_of_each_round(tmp_path, monkeypatch):
    paths = write_synthetic_corpus(tmp_path / "data", n_train=0, n_dev=8, n_test=0, seed=5, max_words=8)
    texts = Path(paths["dev"]["src"]).read_text().splitlines()
    clock = [0.0]
    monkeypatch.setattr(speed, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # keep the test process's threads

    class ClockedParser(PreParsedAnnotator):
        """Pre-parsed sentences; each call takes one second of the benchmark's clock, nothing else does."""

        calls = 0

        def annotate(self, texts):
            ClockedParser.calls += 1
            clock[0] += 1.0
            return super().annotate(texts)

    monkeypatch.setattr(speed, "_pipeline_annotator", lambda parser: ClockedParser.from_conllu(Path(parser)))
    results = speed.measure_pipeline(["transformer_abs", "transformer_sla"], texts, str(paths["dev"]["src.conllu"]),
                                     rounds=2, size=speed._parse_size(TINY), batch_size=4, new_tokens=2)
    per_round = results["transformer_sla"]["parser_s"]
    assert per_round >= 1.0 and ClockedParser.calls == 1 + 2 * per_round  # warm-up, then every round's parses
    assert results["transformer_sla"]["total_s"] == [per_round] * 2  # timed inside each round's total
    assert results["transformer_abs"]["total_s"] == [0.0] * 2 and results["transformer_abs"]["parser_s"] == 0.0


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
        "--lengths", "8", "12", "--memory-lengths", "8", "12", "16", "--tokens-per-batch", "16", "--rounds", "2", "--size", TINY,
        "--presets", "transformer_dbsa", "transformer_sla", "--decode-sentences", "4", "--decode-new", "3",
        "--pipeline-text", str(paths["dev"]["src"]), "--pipeline-parser", str(paths["dev"]["src.conllu"]),
        "--pipeline-sentences", "10", "--output", str(output), "--results-md", str(tmp_path / "RESULTS.md"),
    ])
    systems = ["marian", "transformer_abs", "transformer_dbsa", "transformer_sla"]
    assert set(results["memory"]) == set(systems) and set(results["time"]["train"]) == set(systems)
    for system in systems:
        for n in (8, 12):
            step = results["time"]["train"][system][n]
            assert len(step["step_s"]) == 2 and min(step["step_s"]) > 0 and step["tokens"] == 2 * (16 // n) * n
            # a tiny model's step peak is within the kernel's lazily synced RSS counters (~64 pages a thread);
            # the reading itself: test_memory_worker_reads_a_known_allocation
        for n in (8, 12, 16):
            assert results["memory"][system][n] > -1.0
        assert len(results["time"]["decode"][system]["beam4_s"]) == 2
    pipeline = results["pipeline"]
    assert set(pipeline) == set(systems[1:])
    assert pipeline["transformer_abs"]["parser_s"] == 0.0 and pipeline["transformer_dbsa"]["parser_s"] == 0.0
    assert pipeline["transformer_sla"]["parser_s"] > 0.0 and pipeline["transformer_sla"]["sentences"] == 10
    saved = json.loads(output.read_text())
    tables = saved["tables"]
    assert "n=12 step time ×abs / ×Marian" in tables and "n=16 memory ×abs / ×Marian" in tables
    assert "n=16 step time" not in tables and "beam-4 decode time ×Marian" in tables
    assert "pipeline sentences/s" in tables and "| transformer_sla |" in tables
    # --parts: re-measure only the decoding, keep memory, training times and the pipeline from the JSON
    again = speed.main([
        "--lengths", "8", "12", "--memory-lengths", "8", "12", "16", "--rounds", "2", "--size", TINY,
        "--presets", "transformer_dbsa", "transformer_sla", "--parts", "decode", "--decode-sentences", "2",
        "--decode-new", "2",
        "--pipeline-text", str(paths["dev"]["src"]), "--pipeline-parser", str(paths["dev"]["src.conllu"]),
        "--pipeline-sentences", "10", "--output", str(output), "--results-md", str(tmp_path / "RESULTS.md"),
    ])
    assert again["memory"] == results["memory"] and again["time"]["train"] == results["time"]["train"]
    assert again["pipeline"] == results["pipeline"] and again["time"]["decode"] != results["time"]["decode"]
    written = (tmp_path / "RESULTS.md").read_text()
    assert written.count("<!-- speed:begin -->") == 1 and "--parts decode" in written
    assert "Decoding: 2 sentences × 2 new tokens." in written  # what the decoding in the JSON measured
    assert json.loads(output.read_text())["tables"] in written
    # --parts time at some lengths: those are measured again, the other lengths and parts are kept
    third = speed.main(["--lengths", "12", "--tokens-per-batch", "16", "--rounds", "1", "--size", TINY,
                        "--presets", "transformer_dbsa", "transformer_sla", "--parts", "time", "--pipeline-text", "",
                        "--output", str(output), "--results-md", ""])
    for system in systems:
        assert third["time"]["train"][system][8] == results["time"]["train"][system][8]
        assert third["time"]["train"][system][12] != results["time"]["train"][system][12]
    assert third["time"]["decode"] == again["time"]["decode"] and third["memory"] == results["memory"]
    assert third["pipeline"] == again["pipeline"] and len(third["commands"]["time"]) == 2


def test_long_sentence_decoding_generates_each_batch_s_longest_reference(tmp_path):
    from hf_syntax_mt import train_joint_bpe_tokenizer

    paths = write_synthetic_corpus(tmp_path / "data", n_train=0, n_dev=10, n_test=0, seed=3, max_words=12)
    sources = Path(paths["dev"]["src"]).read_text().splitlines()
    references = Path(paths["dev"]["tgt"]).read_text().splitlines()
    tokenizer = train_joint_bpe_tokenizer(sources + references, vocab_size=150, min_frequency=1)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    size = speed._parse_size(TINY)
    batches = speed._long_batches(size, paths["dev"]["src"], paths["dev"]["tgt"], tmp_path / "tokenizer", 9, 4)
    lengths = [len(tokenizer(line)["input_ids"]) for line in sources[:9]]
    assert [f["input_ids"].shape[0] for f, _ in batches] == [4, 4, 1]
    assert sorted(int(f["attention_mask"].sum(1)[i]) for f, _ in batches for i in range(f["input_ids"].shape[0])) == sorted(lengths)
    for features, new_tokens in batches:
        rows = {tuple(r[m.bool()].tolist()) for r, m in zip(features["input_ids"], features["attention_mask"])}
        expected = max(len(tokenizer(ref)["input_ids"]) for src, ref in zip(sources[:9], references)
                       if tuple(tokenizer(src)["input_ids"]) in rows)
        assert new_tokens == expected
        assert (features["source_heads"][features["attention_mask"] == 0] == -100).all()
    results = speed.measure_long_decode(["marian", "transformer_abs", "transformer_dep_labeled_rel"], 2, size,
                                        paths["dev"]["src"], paths["dev"]["tgt"], tmp_path / "tokenizer", 9, 4)
    for system in results.values():
        assert system["sentences"] == 9 and len(system["total_s"]) == 2
        assert system["generated_tokens"] == sum(f["input_ids"].shape[0] * t for f, t in batches)
