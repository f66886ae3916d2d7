"""benchmarks/relation_cost.py: before → after ratios to abs from op_count and speed JSONs, known by construction."""

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import relation_cost  # noqa: E402


def _ops(abs_total, rel_total):
    return {"training_step": {"transformer_abs": {"mm": abs_total}, "transformer_rel": {"mm": rel_total - 1, "add": 1}},
            "decoding": {"transformer_abs": {"mm": 2 * abs_total}, "transformer_rel": {"mm": 3 * abs_total}}}


def _speed(rel_factor, rel_memory):
    abs_steps = [1.0, 2.0, 10.0]
    return {"results": {
        "time": {"train": {"transformer_abs": {"64": {"step_s": abs_steps}},
                           "transformer_rel": {"64": {"step_s": [rel_factor * s for s in abs_steps]}}}},
        "memory": {"transformer_abs": {"512": 400.0}, "transformer_rel": {"512": rel_memory}}}}


def test_cells_read_before_then_after(tmp_path, capsys):
    paths = {}
    for name, content in {"ops0": _ops(100, 263), "ops1": _ops(100, 134), "speed0": _speed(1.5, 600.0),
                          "speed1": _speed(1.1, 420.0)}.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(content), encoding="utf-8")
    md = tmp_path / "RESULTS.md"
    md.write_text("# Results\n", encoding="utf-8")
    lines = relation_cost.main(["--ops", str(paths["ops0"]), str(paths["ops1"]), "--speed", str(paths["speed0"]),
                                str(paths["speed1"]), "--note", "measured alone", "--results-md", str(md)])
    assert lines[0].startswith("| system | training-step operations ×abs (before → after)")
    assert "| n=64 step time ×abs | n=512 memory ×abs |" in lines[0]
    assert lines[3] == "| transformer_rel | 2.63 → 1.34 | 1.50 → 1.50 | 1.50 → 1.10 | 1.50 → 1.05 |"
    text = md.read_text(encoding="utf-8")
    assert "<!-- relation-cost:begin -->" in text and "measured alone" in text
    assert "abs: 100 operations a training step, 200 a greedy decoding (before)" in capsys.readouterr().out


def test_budget_costs_price_each_run_at_its_preset_s_gpu_ratio(tmp_path):
    for variant, preset, steps, seconds in (("transformer_abs@4B", "transformer_abs", 400, 720.0),
                                            ("transformer_rel", "transformer_rel", 100, 90.0)):
        (tmp_path / variant).mkdir()
        run = {"preset": variant, "variant_of": preset if preset != variant else None, "seed": 1, "steps": steps,
               "train_runtime_seconds": seconds}
        (tmp_path / variant / "seed1.json").write_text(json.dumps(run), encoding="utf-8")
    gpu = {"train": {"fp32": {"transformer_abs": {"64": {"step_s": [0.03, 0.03, 0.03]}},
                              "transformer_rel": {"64": {"step_s": [0.06, 0.06, 0.06]}}}}}
    lines, abs_step = relation_cost.budget_costs(tmp_path, gpu)
    assert abs_step == 0.03
    assert lines[2] == "| transformer_abs@4B | 1 | 400 | 0.20 | 1.80 | 1.00 | 0.2 |"  # 400 × 0.03 s = 12 s
    assert lines[3] == "| transformer_rel | 1 | 100 | 0.03 | 0.90 | 2.00 | 0.1 |"  # 100 × 0.03 × 2 = 6 s


def test_the_paths_table_gives_each_path_s_ratios_in_its_own_column(tmp_path):
    paths = {}
    for name, content in {"ops0": _ops(100, 263), "ops1": _ops(100, 134), "gpu": _ops(80, 88), "speed0": _speed(1.5, 600.0),
                          "speed1": _speed(1.1, 420.0)}.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(content), encoding="utf-8")
    lines = relation_cost.main(["--ops", str(paths["ops0"]), str(paths["ops1"]), "--speed", str(paths["speed0"]),
                                str(paths["speed1"]), "--paths", f"CPU={paths['ops1']}", f"GPU path={paths['gpu']}"])
    header = lines.index("| system | training step ×abs, CPU | training step ×abs, GPU path | decoding ×abs, CPU | "
                         "decoding ×abs, GPU path |")
    assert lines[header + 3] == "| transformer_rel | 1.34 | 1.10 | 1.50 | 1.50 |"  # 88 / 80; 3 × 80 / (2 × 80)
