"""The findings (RESULTS.md's summary, the README's "which preset" table, the figures a model card cites) equal the
result files': every figure recomputed from benchmarks/results/ (the dev hypotheses, external_scores.json)."""

import json
import sys
from pathlib import Path

import pytest

from hf_syntax_mt.hub import measured_results, model_card
from hf_syntax_mt.hub.model_card import measured_rows, write_model_card

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import results_md  # noqa: E402
from quality_lib import findings  # noqa: E402
from quality_lib.recipes import load_recipe  # noqa: E402
from quality_lib.scores import load_runs  # noqa: E402
from quality_lib.summary import budget_points  # noqa: E402

RESULTS_MD = REPO / "model_cards" / "RESULTS.md"
README = REPO / "README.md"
RESULTS = REPO / "benchmarks" / "results"
EXTERNAL = RESULTS / findings.EXTERNAL_SCORES
SHARED_DATA = REPO.parent / "shared" / "data"


def section(path: Path, name: str) -> str:
    text = path.read_text(encoding="utf-8")
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    assert begin in text and end in text, f"{path} has no {name} section"
    return text[text.index(begin): text.index(end)]


@pytest.fixture(scope="module")
def recomputed():
    if not (SHARED_DATA / "kftt").is_dir() or not (SHARED_DATA / "small_parallel_enja").is_dir():
        pytest.skip(f"the corpora's dev references are not in {SHARED_DATA}")
    return findings.collect(sorted((REPO / "benchmarks" / "recipes").glob("*.json")), REPO / "benchmarks" / "results")


def test_results_summary_and_readme_table_equal_the_result_files(recomputed):
    """Every row of RESULTS.md's summary and of the README's table is what the result files give now, and the
    package's measured_results (the model cards' figures) holds the same rows."""
    results, readme = section(RESULTS_MD, "findings"), section(README, "findings")
    assert recomputed["rows"], "no method has runs on both sides"
    for line in findings.row_lines(recomputed)[2:]:
        assert line in results, f"RESULTS.md's summary lacks or differs from: {line}"
    for line in findings.which_preset_lines(recomputed)[2:]:
        assert line in results and line in readme, f"which-preset line missing or different: {line}"
    every_row, budget_table = results.split(findings.BUDGET_TABLE_HEADING)
    table_rows = [line for line in every_row.splitlines() if line.startswith("| ") and " − `" in line]
    assert len(table_rows) == len(recomputed["rows"])  # no row that the files no longer give
    assert findings.budget_comparison_lines(recomputed)[2:] == [
        line for line in budget_table.splitlines() if line.startswith("| ") and " − `" in line]
    keys = ("system", "control", "preset", "recipe", "evidence", "seeds", "delta", "ci95", "verdict")
    assert [{k: r[k] for k in keys} for r in measured_results.ROWS] == [{k: r[k] for k in keys} for r in recomputed["rows"]]
    assert measured_results.VARIANT_SETTINGS == {
        name: model for r in recomputed["rows"] for name, model in r["variant_settings"].items() if model}


def test_held_out_rows_are_the_external_file_and_marked_as_scored_outside():
    """The held-out test figures come from external_scores.json, each with its set's provenance, and only for its
    recipe; every set's comparison that has runs on both sides is shown in place of dev."""
    sets = json.loads(EXTERNAL.read_text(encoding="utf-8"))["sets"]
    outside = {(f["recipe"], c["system"], c["baseline"]): (f, c) for f in sets for c in f["comparisons"]}
    rows = [r for r in measured_results.ROWS if r["scored_outside"]]
    assert {r["recipe"] for r in rows} >= {"kftt.ja-en", "small_parallel_enja.ja-en.12k5"}
    for r in rows:
        figures, c = outside[(r["recipe"], r["system"], r["control"])]
        assert (r["delta"], r["ci95"], r["seeds"], r["evidence"], r["issue"]) == \
            (c["delta"], c["ci95"], c["seeds"], figures["split"], figures["issue"])
        assert measured_results.EXTERNAL_PROVENANCE[r["issue"]] == figures["provenance"]
    dev = {(r["recipe"], r["system"], r["control"]) for r in measured_results.ROWS if not r["scored_outside"]}
    assert not dev & set(outside)  # a pair scored outside never shows its dev figure
    summary = section(RESULTS_MD, "findings")
    assert all(provenance in summary for provenance in measured_results.EXTERNAL_PROVENANCE.values())
    assert "scored outside the project on kftt's held-out test references" in sets[0]["provenance"].lower()
    (score,) = [s for f in sets for s in f["scores"] if "bleu_mean" in s]
    assert (f"`{score['system']}` on {sets[0]['recipe']}'s held-out test: {score['bleu_mean']:.2f} ± "
            f"{score['bleu_std']:.2f} BLEU (seeds 1,2,3).") in summary
    assert (RESULTS_MD.parent / findings.FOREST_PLOT).is_file()


def test_budget_runs_scored_outside_are_the_strongest_evidence_and_say_their_budget():
    """A held-out row of runs trained to their budget wins over one of runs stopped on the way with more seeds; its
    cell names the budget; every comparison of the budget set (those across budgets too) is in the summary."""
    sets = json.loads(EXTERNAL.read_text(encoding="utf-8"))["sets"]
    (budget_set,) = [f for f in sets if f["recipe"] == "kftt.ja-en.budget"]
    stopped = {"scored_outside": True, "trained_to_budget": False, "seeds": [1, 2, 3], "sentences": 1160}
    budget = {"scored_outside": True, "trained_to_budget": True, "seeds": [1], "sentences": 1160,
              "budget": budget_set["budget"]}
    dev_budget = {"scored_outside": False, "trained_to_budget": True, "seeds": [1, 2, 3], "sentences": 5000}
    assert findings.strongest([stopped, budget, dev_budget]) is budget
    assert findings.evidence_text(budget) == "test‡, budget B = 6,348 updates, seed 1"
    assert findings.evidence_text(stopped) == "test‡, seeds 1,2,3"
    recipes = {p.stem: findings.load_recipe(p) for p in (REPO / "benchmarks" / "recipes").glob("kftt*.json")}
    assert findings.trained_to_budget(recipes["kftt.ja-en.budget"]) and not findings.trained_to_budget(recipes["kftt.ja-en"])
    summary = section(RESULTS_MD, "findings")
    for c in budget_set["comparisons"]:
        assert (f"`{c['system']}` − `{c['baseline']}` | {','.join(map(str, c['seeds']))} | {c['delta']:+.2f} "
                f"[{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}] | {c['averaged']['delta']:+.2f}") in summary
    for score in budget_set["scores"]:
        assert f"`{score['system']}` on kftt.ja-en.budget's held-out test: {findings.score_text(score)}." in summary
    assert findings.score_text(budget_set["scores"][0]) == "9.49, 9.29 / averaged 9.35, 9.06 BLEU (seeds 1,2)"
    readme = section(README, "findings")
    assert "(test‡, budget B = 6,348 updates, seeds 1,2, KFTT ja→en, 50k pairs)" in readme


def test_external_scores_file_errors_name_the_missing_key(tmp_path):
    (tmp_path / findings.EXTERNAL_SCORES).write_text(json.dumps({"sets": [{"recipe": "kftt.ja-en", "split": "test"}]}))
    with pytest.raises(ValueError, match="set 0 has no key 'provenance'"):
        findings.load_external(tmp_path)
    (tmp_path / findings.EXTERNAL_SCORES).write_text(json.dumps({"recipe": "kftt.ja-en"}))
    with pytest.raises(ValueError, match="a list of figure sets under 'sets'"):
        findings.load_external(tmp_path)
    assert findings.load_external(tmp_path / "absent") == []


def test_verdict_follows_the_interval():
    assert findings.verdict([0.1, 0.9]) == "pays"
    assert findings.verdict([-0.9, -0.1]) == "hurts"
    assert findings.verdict([-0.1, 0.9]) == "no clear difference"


def test_a_verdict_cell_names_the_pair_it_was_measured_on_where_it_is_not_the_rows():
    """The SLA row compares against the flat control; a corpus where only abs was run says so in its cell, and a
    corpus measured with another system of the method names that system."""
    def row(system, control, regime, pairs, budget=False):
        return {"system": system, "control": control, "regime": regime, "train_pairs": pairs,
                "trained_to_budget": budget}
    kftt = "KFTT ja→en, 50k pairs (long Wikipedia sentences)"
    rows = [row("transformer_sla", "transformer_sla@flat", kftt, 50000),
            row("transformer_sla", "transformer_abs", kftt, 50000, budget=True),
            row("transformer_sla", "transformer_abs", "Multi30k en→de, 29k pairs (image captions)", 29000),
            row("transformer_dbsa_enc", "transformer_abs", "Multi30k en→de, 29k pairs (image captions)", 29000)]
    assert findings.compact_regimes(rows, ("transformer_sla", "transformer_sla@flat")) == (
        "KFTT ja→en 50k; KFTT ja→en 50k (budget runs; vs `transformer_abs`); Multi30k en→de 29k (vs `transformer_abs`); "
        "Multi30k en→de 29k (`transformer_dbsa_enc`, vs `transformer_abs`)")
    assert findings.compact_regimes(rows[2:3], ("transformer_sla", "transformer_abs")) == "Multi30k en→de 29k"
    assert findings.compact_regimes([], ("transformer_sla", "transformer_abs")) == "–"


def test_model_card_cites_the_preset_rows(tmp_path):
    """A model of a measured preset carries its summary rows (its language pair first); a self-parsing model the
    @self rows; a preset the project did not measure, none."""
    card = write_model_card(tmp_path / "a", preset="transformer_dep_labeled_rel",
                            config={"dependency_relations": "labeled"}, languages=("ja", "en")).read_text()
    rows = measured_rows("transformer_dep_labeled_rel", {}, ("ja", "en"))
    assert rows and rows[0]["direction"] == "ja-en"
    assert "\n## What `transformer_dep_labeled_rel` measured in the project's experiments\n" in card
    assert card.index("## Evaluation") < card.index("measured in the project's experiments") < card.index("## Use")
    for r in rows:
        assert f"| `{r['control']}` |" in card and f"{r['delta']:+.2f} [{r['ci95'][0]:+.2f}, {r['ci95'][1]:+.2f}]" in card
    assert any(r["scored_outside"] for r in rows) and "Held-out test rows: scored outside the project" in card
    own = measured_rows("transformer_dep_labeled_rel", {"self_parsing": True})
    assert own and {r["system"] for r in own} == {"transformer_dep_labeled_rel@self"}
    assert measured_rows("transformer_dep_labeled", {}, rows=[]) == []
    plain = write_model_card(tmp_path / "b", preset="transformer_dbsa_dec").read_text()
    assert "measured in the project's experiments" not in plain


def test_measured_rows_match_the_recipe_variant_a_model_was_trained_as():
    """A row applies to a model of its preset whose config has every setting the row's variant changes, and not to
    one that has the value of a setting some other measured variant changes (written from the rule, on rows made
    here: a self-parsing model of a preset measured only with a parser gets none)."""
    rows = [{"system": "p", "preset": "p", "direction": "ja-en"},
            {"system": "p@a", "preset": "p", "direction": "en-de"},
            {"system": "p@self", "preset": "p", "direction": "ja-en"},
            {"system": "q", "preset": "q", "direction": "ja-en"}]
    settings = {"p@a": {"layer": 1, "weight": 0.5}, "p@self": {"self_parsing": True}, "q@flat": {"distance": "flat"}}

    def systems(preset, config, languages=("", "")):
        return [r["system"] for r in measured_rows(preset, config, languages, rows=rows, variant_settings=settings)]

    assert systems("p", {}) == ["p"]
    assert systems("p", {"layer": 3}) == ["p"]  # a value no variant measured: the preset's rows
    assert systems("p", {"layer": 1, "weight": 0.5}) == ["p@a"]
    assert systems("p", {"layer": 1, "weight": 1.0}) == []  # half of @a's settings: neither p's runs nor @a's
    assert systems("p", {"self_parsing": True}) == ["p@self"]
    assert systems("q", {"self_parsing": True}) == []
    assert systems("q", {"distance": "flat"}) == []  # a control's setting (a variant with no row of its own)
    assert systems("p", {"self_parsing": False, "layer": 1, "weight": 0.5}, ("ja", "en")) == ["p@a"]


def test_model_card_of_a_recipe_variant_cites_that_variants_rows(tmp_path):
    """A model trained in DBSA's authors' setting (the recipes' `@authors` variant) cites the @authors rows, not those
    of the preset's default layer; a model of the default cites the default's; a flat-distance SLA model none of
    the tree's."""
    authors = json.loads((REPO / "benchmarks" / "recipes" / "kftt.ja-en.budget.json").read_text())["variants"][
        "transformer_dbsa@authors"]["model"]
    own = measured_rows("transformer_dbsa", authors)
    assert own and {r["system"] for r in own} == {"transformer_dbsa@authors"}
    card = write_model_card(tmp_path / "a", preset="transformer_dbsa", config=authors, languages=("ja", "en"))
    assert "\n## What `transformer_dbsa@authors` measured in the project's experiments\n" in card.read_text()
    for r in own:
        assert f"{r['delta']:+.2f} [{r['ci95'][0]:+.2f}, {r['ci95'][1]:+.2f}]" in card.read_text()
    default = measured_rows("transformer_dbsa", {"dbsa_encoder_layer": None, "dbsa_decoder_layer": None})
    assert default and {r["system"] for r in default} == {"transformer_dbsa"}
    assert measured_rows("transformer_sla", {"distance_source": "dependency"})
    assert measured_rows("transformer_sla", {"distance_source": "flat"}) == []


def test_model_card_shows_the_budget_chart_of_its_rows_recipe(tmp_path):
    """A card with a row of a recipe trained at several budgets shows that recipe's chart (RESULTS.md's, copied into
    the package by the summary) and ships it beside README.md; a card without such a row shows none."""
    recipe = "kftt.ja-en.budget"
    recipe_file = REPO / "benchmarks" / "recipes" / f"{recipe}.json"
    drawn = budget_points(load_recipe(recipe_file), load_runs(load_recipe(recipe_file), RESULTS)[1],
                          findings.load_external(RESULTS))
    assert {"transformer_abs", "transformer_dep_labeled_rel"} <= set(drawn)
    assert measured_results.BUDGET_CHARTS == {recipe: {"chart": f"budget_{recipe}.png", "presets": sorted(drawn)}}
    shipped = Path(model_card.__file__).with_name("templates") / measured_results.BUDGET_CHARTS[recipe]["chart"]
    assert shipped.read_bytes() == (RESULTS_MD.parent / f"quality_{recipe}_budget.png").read_bytes()
    card = write_model_card(tmp_path / "a", preset="transformer_dep_labeled_rel", languages=("ja", "en"))
    assert f"![BLEU on {recipe} against training updates and training hours, one line a preset](budget_{recipe}.png)" \
        in card.read_text()
    assert (tmp_path / "a" / f"budget_{recipe}.png").read_bytes() == shipped.read_bytes()
    assert not any(r["recipe"] == recipe for r in measured_rows("transformer_dep_labeled_rel", {"self_parsing": True}))
    own = write_model_card(tmp_path / "b", preset="transformer_dep_labeled_rel", config={"self_parsing": True})
    assert "BLEU by training budget" not in own.read_text() and not (tmp_path / "b" / f"budget_{recipe}.png").exists()
    assert any(r["recipe"] == recipe for r in measured_rows("transformer_dbsa", {}))  # a row of the recipe, not drawn
    dbsa = write_model_card(tmp_path / "c", preset="transformer_dbsa", languages=("ja", "en"))
    assert "BLEU by training budget" not in dbsa.read_text() and not (tmp_path / "c" / f"budget_{recipe}.png").exists()


def test_measured_results_copies_the_budget_charts_and_drops_older_ones(tmp_path):
    package = tmp_path / "hub"
    (package / "templates").mkdir(parents=True)
    (package / "templates" / "budget_gone.png").write_bytes(b"old")
    (package / "templates" / "app_screenshot.png").write_bytes(b"page")
    chart = tmp_path / "quality_r_budget.png"
    chart.write_bytes(b"chart")
    findings.write_measured_results({"rows": [], "external_provenance": {}}, package / "measured.py",
                                    {"r": (chart, ["transformer_abs"])})
    assert sorted(p.name for p in (package / "templates").iterdir()) == ["app_screenshot.png", "budget_r.png"]
    assert (package / "templates" / "budget_r.png").read_bytes() == b"chart"
    assert "BUDGET_CHARTS = {'r': {'chart': 'budget_r.png', 'presets': ['transformer_abs']}}" in \
        (package / "measured.py").read_text()


def test_write_section_at_top_and_refusal_without_markers(tmp_path):
    path = tmp_path / "R.md"
    path.write_text("# Results\n\nbody\n", encoding="utf-8")
    results_md.write_section(path, "findings", "summary", at_top=True)
    assert path.read_text() == "# Results\n\n<!-- findings:begin -->\nsummary\n<!-- findings:end -->\n\nbody\n"
    results_md.write_section(path, "findings", "again", at_top=True)  # replaced in place
    assert path.read_text().count("findings:begin") == 1 and "again" in path.read_text()
    readme = tmp_path / "README.md"
    readme.write_text("# x\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no <!-- findings:begin -->"):
        results_md.write_section(readme, "findings", "table", create=False)
    assert readme.read_text() == "# x\n"


def test_summary_without_recipes_regenerates_the_sections_the_file_holds(tmp_path, monkeypatch):
    """`quality.py summary` alone: the recipes of the sections in --output; a section without a recipe file is named."""
    import quality
    from quality_lib import summary

    written = []
    monkeypatch.setattr(summary, "summarize_recipe", lambda recipe, *a: written.append(recipe["name"]) or "table")
    monkeypatch.setattr(summary, "write_findings", lambda args: None)
    output = tmp_path / "RESULTS.md"
    output.write_text("# Results\n\n" + results_md.marked("quality:kftt.ja-en", "old") + "\n", encoding="utf-8")
    quality.main(["summary", "--output", str(output)])
    assert written == ["kftt.ja-en"] and "table" in output.read_text()
    output.write_text("# Results\n\n" + results_md.marked("quality:no.such-recipe", "old") + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="give --recipe .*no.such-recipe.json"):
        quality.main(["summary", "--output", str(output)])


def test_a_run_of_data_parallel_processes_is_marked_as_such_not_as_a_thread_count():
    """A `--processes 2` run records threads=1 (each process's); its cost cells say processes (∥), not § (a
    run with another thread count, e.g. two runs sharing the cores)."""
    from quality_lib.summary import main_table_lines

    recipe = {"bleu_tokenize": "13a", "final_num_beams": 4, "model": {}, "training": {}, "presets": ["transformer_abs"]}
    run = {"preset": "transformer_abs", "seed": 1, "dev": {"bleu": 7.81, "chrf": 30.04}, "steps": 6348,
           "train_runtime_seconds": 4932.0, "train_tokens_per_second": 4448.0, "threads": 1}
    table = lambda r: main_table_lines(recipe, [r], ["transformer_abs"], {"transformer_abs": [r]}, {}, 1166)  # noqa: E731
    one_thread, processes = table(run), table({**run, "processes": 2})
    assert "| 1.37§ | 4448§ |" in one_thread[4] and "∥" not in "".join(one_thread)
    assert "| 1.37∥ | 4448∥ |" in processes[4]
    assert processes[-1].endswith("∥ trained by data-parallel processes (`--processes N`, one torch thread each), on the "
                                  "cores of one machine: 2 processes.")


BUDGET_VARIANTS = {"transformer_abs@2B": {"preset": "transformer_abs", "training": {"max_steps": 12696}},
                   "transformer_dep_labeled_rel@2B": {"preset": "transformer_dep_labeled_rel",
                                                      "training": {"max_steps": 12696}},
                   "transformer_dep_labeled_rel@self": {"preset": "transformer_dep_labeled_rel",
                                                        "model": {"self_parsing": True}},
                   "transformer_dbsa@authors": {"preset": "transformer_dbsa", "model": {"dbsa_encoder_layer": 1},
                                                "training": {"max_grad_norm": 0}}}


@pytest.mark.parametrize("name, baseline, control", [
    ("transformer_dep_labeled_rel", "transformer_abs", "transformer_abs"),
    ("transformer_dep_labeled_rel@2B", "transformer_abs", "transformer_abs@2B"),  # the same budget
    ("transformer_dep_labeled_rel@2B", "transformer_rel", None),  # no rel@2B: no Δ across budgets
    ("transformer_abs@2B", "transformer_abs", None),  # the budget's own effect is the variant line's
    ("transformer_dep_labeled_rel@self", "transformer_abs", "transformer_abs"),  # a model switch abs lacks
    ("transformer_dbsa@authors", "transformer_abs", "transformer_abs"),  # a training change, not the budget
])
def test_a_variant_with_another_budget_is_measured_against_the_baseline_with_that_budget(name, baseline, control):
    from quality_lib.recipes import budget_control

    assert budget_control(BUDGET_VARIANTS, name, baseline) == control


def test_delta_vs_abs_of_a_budget_variant_is_against_the_baseline_at_that_budget():
    """The thirds-by-length table (the same rule as the main and averaged tables): a budget variant's Δ vs abs
    is its paired bootstrap against `transformer_abs@2B` on that third, named in the cell; abs@2B itself gets
    none."""
    from quality_lib.scores import bleu_statistics, compare_runs
    from quality_lib.summary import length_thirds_lines

    words = [f"w{i}" for i in range(40)]
    refs = [" ".join(words[i: i + 3 + i % 7]) for i in range(30)]
    drop = lambda k: [" ".join(r.split()[: -(i % k) or None]) for i, r in enumerate(refs)]  # noqa: E731
    hyps = {"transformer_abs": drop(2), "transformer_abs@2B": drop(3), "transformer_dep_labeled_rel@2B": drop(5)}
    stats = {p: {1: bleu_statistics(h, refs, "13a")} for p, h in hyps.items()}
    lines = length_thirds_lines(list(hyps), stats, refs, "13a", BUDGET_VARIANTS)
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in lines if line.startswith("| transformer_")}
    assert rows["transformer_abs@2B"][1] == "–"
    lengths = [len(s.split()) for s in refs]
    import numpy as np

    short = np.array_split(np.argsort(lengths, kind="stable"), 3)[0]
    t = compare_runs(stats, "transformer_dep_labeled_rel@2B", "transformer_abs@2B", "13a", short)
    assert t["delta"] != compare_runs(stats, "transformer_dep_labeled_rel@2B", "transformer_abs", "13a", short)["delta"]
    assert rows["transformer_dep_labeled_rel@2B"][1] == (f"{t['delta']:+.2f} [{t['ci95'][0]:+.2f}, {t['ci95'][1]:+.2f}] "
                                                         f"vs `transformer_abs@2B`, p {t['p_value']:.3f}")


def test_main_table_names_the_budget_control_and_says_why():
    from quality_lib.summary import main_table_lines

    recipe = {"bleu_tokenize": "13a", "final_num_beams": 4, "model": {}, "training": {}, "variants": BUDGET_VARIANTS,
              "presets": ["transformer_abs"]}
    run = {"preset": "transformer_dep_labeled_rel@2B", "seed": 1, "dev": {"bleu": 12.69, "chrf": 37.27}, "steps": 12696,
           "train_runtime_seconds": 12329.0, "train_tokens_per_second": 4400.0, "threads": 1}
    test = {"delta": 1.63, "ci95": [1.10, 2.18], "p_value": 0.0, "control": "transformer_abs@2B"}
    name = run["preset"]
    lines = main_table_lines(recipe, [run], [name], {name: [run]}, {(name, "transformer_abs"): test}, 1166)
    assert "| +1.63 [+1.10, +2.18] vs `transformer_abs@2B` | 0.000 | – | – |" in lines[4]
    assert "measured against the baseline's variant with the same budget" in lines[-1]


def test_a_key_only_models_card_cites_the_key_only_rows(tmp_path):
    """A model of transformer_dep_labeled_rel without value terms (the recipes' `@keys`) cites the @keys rows, not the
    full preset's "same preset and settings" (issue 109); a full-preset model cites none of the @keys rows."""
    from hf_syntax_mt import SyntaxMTConfig

    keys = json.loads((REPO / "benchmarks" / "recipes" / "kftt.ja-en.budget.json").read_text())["variants"][
        "transformer_dep_labeled_rel@keys"]["model"]
    config = SyntaxMTConfig.from_preset("transformer_dep_labeled_rel", **keys).to_dict()
    own = measured_rows("transformer_dep_labeled_rel", config, ("ja", "en"))
    assert own and {r["system"] for r in own} == {"transformer_dep_labeled_rel@keys"}
    card = write_model_card(tmp_path / "keys", preset="transformer_dep_labeled_rel", config=config,
                            languages=("ja", "en")).read_text()
    assert "\n## What `transformer_dep_labeled_rel@keys` measured in the project's experiments\n" in card
    full = measured_rows("transformer_dep_labeled_rel", SyntaxMTConfig.from_preset("transformer_dep_labeled_rel").to_dict())
    assert full and "transformer_dep_labeled_rel@keys" not in {r["system"] for r in full}
