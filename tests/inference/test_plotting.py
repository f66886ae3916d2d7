"""Plots of Japanese sentences: every label glyph is drawn (no missing-glyph boxes)."""

import logging
import warnings

import pytest
import torch

pytest.importorskip("matplotlib")

from hf_syntax_mt.inference import plotting  # noqa: E402
from hf_syntax_mt.inference.plotting import plot_dependency_relations, plot_localized_mask  # noqa: E402

# 私は赤い車を買った。 as subwords, with GiNZA's tree (私→買っ は→私 赤い→車 車→買っ を→車 買っ=ROOT た→買っ 。→買っ)
TOKENS = ["▁私", "は", "▁赤い", "▁車", "を", "▁買っ", "た", "。", "</s>"]
FEATURES = {
    "tokens": TOKENS,
    "source_heads": torch.tensor([[5, 0, 3, 5, 3, 5, 5, 5, -100]]),
    "source_distances": torch.tensor([[1.0, 2.0, 1.0, 2.0, 3.0, 1.0, 1.0, 1e4, 1e4]]),
}


def _missing_glyph_warnings(draw) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        draw()
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


@pytest.mark.parametrize("plot", ["relations", "sla"])
def test_japanese_labels_have_every_glyph(tmp_path, plot):
    if plotting.cjk_font_family() is None:
        pytest.skip('no CJK font: pip install "hf_syntax_mt[plot]" (scripts/setup.sh does)')
    if plot == "relations":
        draw = lambda: plot_dependency_relations(FEATURES, tmp_path / "relations.png", "labeled")  # noqa: E731
    else:
        draw = lambda: plot_localized_mask(FEATURES, tmp_path / "sla.png")  # noqa: E731
    assert _missing_glyph_warnings(draw) == []
    assert (tmp_path / f"{plot}.png").read_bytes()[:4] == b"\x89PNG"


def test_without_a_cjk_font_the_missing_glyphs_are_explained(tmp_path, monkeypatch, caplog):
    """The check above would catch boxes: without the CJK font matplotlib reports the glyphs missing,
    and the plot says what to install."""
    monkeypatch.setattr(plotting, "cjk_font_family", lambda: None)
    with caplog.at_level(logging.WARNING, logger="hf_syntax_mt.inference.plotting"):
        missing = _missing_glyph_warnings(lambda: plot_localized_mask(FEATURES, tmp_path / "boxes.png"))
    assert any(f"Glyph {ord('私')} " in message for message in missing)
    assert 'no installed font has CJK glyphs, so the labels show boxes: pip install "hf_syntax_mt[plot]"' in caplog.text


def test_plots_without_matplotlib_name_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r'plots need matplotlib: pip install "hf_syntax_mt\[plot\]"'):
        plot_localized_mask(FEATURES, tmp_path / "none.png")


FOREST = [
    {"group": "labeled tree relations: dep_labeled_rel − abs", "label": "KFTT ja→en 50k (test)", "delta": 1.21,
     "ci95": [0.91, 1.48], "highlight": True},
    {"group": "labeled tree relations: dep_labeled_rel − abs", "label": "私は赤い車を買った 50k (dev)", "delta": 1.06,
     "ci95": [-0.10, 2.11]},
    {"group": "DBSA", "label": "KFTT ja→en 50k (test)", "delta": -4.72, "ci95": [-5.15, -4.24], "highlight": True},
]


def test_forest_plot_draws_japanese_labels(tmp_path):
    """RESULTS.md's forest plot: a PNG whose Japanese labels have every glyph."""
    if plotting.cjk_font_family() is None:
        pytest.skip('no CJK font: pip install "hf_syntax_mt[plot]" (scripts/setup.sh does)')
    assert _missing_glyph_warnings(lambda: plotting.plot_forest(FOREST, tmp_path / "forest.png", title="Δ BLEU")) == []
    assert (tmp_path / "forest.png").read_bytes()[:4] == b"\x89PNG"


def test_forest_plot_refuses_rows_it_cannot_draw(tmp_path):
    with pytest.raises(ValueError, match="at least one row"):
        plotting.plot_forest([], tmp_path / "empty.png")
    bad = dict(FOREST[0], delta=2.0)
    with pytest.raises(ValueError, match=r"delta 2.0 lies outside its interval \[0.91, 1.48\]"):
        plotting.plot_forest([bad], tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()
