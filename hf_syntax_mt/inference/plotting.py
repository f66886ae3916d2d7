"""Heatmaps of what the model sees for one sentence (matplotlib, written to PNG).

- `plot_dependency_relations`: the relation id of every token pair derived from `source_heads`
  (seed 000 relative depth clip(depth_j − depth_i, l), or seed 002 labeled relations);
- `plot_localized_mask`: the SLA mask G = exp(log G) from `source_distances` (seed 003);
- `plot_attention`: one attention head (encoder self-attention of a layer) of a trained model;
- `plot_dependency_tree`: a sentence's dependency tree as arcs over its words (the parser's, or a self-parsing
  model's own), CJK words drawn with a CJK font;
- `plot_forest`: a forest plot of measured differences with their 95% intervals (RESULTS.md's summary).

`sentence_features` builds the subword tokens and features with the same `SyntaxFeatureProcessor`
as training and the pipeline.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import unicodedata
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..features.syntax_features import SyntaxFeatureProcessor

logger = logging.getLogger(__name__)


def sentence_features(text: str, tokenizer, annotator=None, annotation=None, *, heads: bool = True,
                      distances: bool = True, distance_source: str = "auto") -> dict:
    """Tensors (batch of one) + the subword strings of one sentence."""
    processor = SyntaxFeatureProcessor(tokenizer, annotator, needs_source_heads=heads,
                                       needs_source_distances=distances, distance_source=distance_source)
    batch = dict(processor(text, annotations=None if annotation is None else [annotation]))
    batch["tokens"] = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    return batch


CJK_FONT_FAMILIES = (
    "Noto Sans CJK JP", "Noto Sans CJK SC", "Noto Sans CJK TC", "Noto Sans CJK KR", "Source Han Sans JP",
    "Source Han Sans", "IPAexGothic", "IPAGothic", "Hiragino Sans", "Yu Gothic", "MS Gothic", "WenQuanYi Zen Hei",
    "Droid Sans Fallback",
)
"""Fonts with CJK glyphs, in order of preference; the first one installed draws the characters that
matplotlib's default font lacks (its DejaVu Sans has no CJK glyphs)."""
NOTO_CJK_PACKAGE = "notojp_matplotlib"  # ships Noto Sans CJK JP (the [plot] extra installs it)


@functools.lru_cache(maxsize=None)
def cjk_font_family() -> Optional[str]:
    """The first of `CJK_FONT_FAMILIES` that matplotlib can use, after registering the Noto Sans CJK JP
    file of the `notojp-matplotlib` package if it is installed (without importing that package, which
    would change matplotlib's default font for the whole process); None when there is none."""
    from matplotlib import font_manager

    spec = importlib.util.find_spec(NOTO_CJK_PACKAGE)
    if spec is not None and spec.origin:
        shipped = Path(spec.origin).with_name("fonts") / "NotoSansCJKjp-Regular.otf"
        if shipped.is_file():
            font_manager.fontManager.addfont(str(shipped))
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return next((family for family in CJK_FONT_FAMILIES if family in installed), None)


def _pyplot(path):
    """matplotlib's pyplot on the Agg backend, after checking that `path` names a file to write."""
    if Path(path).is_dir():
        raise IsADirectoryError(f"{path} is a directory: give the image file to write, e.g. {Path(path) / 'plot.png'}")
    try:
        import matplotlib
    except ImportError:
        raise ImportError('plots need matplotlib: pip install "hf_syntax_mt[plot]"') from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return matplotlib, plt


def _font_family(matplotlib, texts: Sequence[str]) -> list[str]:
    """The font family list that draws `texts`: the default one, plus a CJK font when they have CJK characters."""
    family = list(matplotlib.rcParams["font.family"])
    if any(unicodedata.east_asian_width(c) in "WF" for text in texts for c in text):
        cjk = cjk_font_family()
        if cjk is None:
            logger.warning('no installed font has CJK glyphs, so the labels show boxes: pip install "hf_syntax_mt[plot]" '
                           "(or install a CJK font, e.g. Debian's fonts-noto-cjk)")
        else:
            family.append(cjk)  # drawn glyph by glyph where the default font has none
    return family


def _heatmap(matrix, tokens: Sequence[str], title: str, path, *, cmap="viridis", labels=None, value_format=None):
    matplotlib, plt = _pyplot(path)
    with matplotlib.rc_context({"font.family": _font_family(matplotlib, tokens)}):
        return _draw_heatmap(plt, matrix, tokens, title, path, cmap=cmap, labels=labels, value_format=value_format)


def _save(fig, plt, path, *, bbox_inches=None) -> Path:
    """Lay out and write `fig` (120 dpi; `bbox_inches="tight"` grows the image to every label), then close it."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a name without suffix: PNG, under that name
    fig.savefig(path, dpi=120, format=None if path.suffix else "png", bbox_inches=bbox_inches)
    plt.close(fig)
    return path


def _draw_heatmap(plt, matrix, tokens, title, path, *, cmap, labels, value_format):
    from matplotlib.colors import BoundaryNorm, ListedColormap

    n = len(tokens)
    size = max(4.0, 0.45 * n + 2.0)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    norm = None
    if labels is not None:  # one discrete colour per label
        cmap = ListedColormap(list(plt.get_cmap(cmap).colors[: len(labels)]))
        norm = BoundaryNorm([k - 0.5 for k in range(len(labels) + 1)], len(labels))
    image = ax.imshow(matrix, cmap=cmap, norm=norm)
    ax.set_xticks(range(n), tokens, rotation=90)
    ax.set_yticks(range(n), tokens)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
    ax.set_title(title)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if labels is not None:
        bar.set_ticks(range(len(labels)), labels=[str(x) for x in labels])
    if value_format is not None and n <= 30:
        for i in range(n):
            for j in range(n):
                rgba = image.cmap(image.norm(matrix[i][j]))
                light = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] > 0.5
                ax.text(j, i, value_format(matrix[i][j]), ha="center", va="center", fontsize=7,
                        color="black" if light else "white")
    return _save(fig, plt, path)


def plot_dependency_relations(features: dict, path, scheme: str = "depth", max_distance: int = 2):
    """Relation ids of `dependency_relation_ids` (rows: query i, columns: key j). Pairs outside
    the tree (e.g. `</s>`) show the no-relation id."""
    from ..modeling_syntax_mt import NO_RELATION, dependency_relation_ids, labeled_relation_names

    ids, count = dependency_relation_ids(features["source_heads"], scheme, max_distance)
    matrix = ids[0].numpy().copy()
    matrix[matrix == NO_RELATION] = count  # the zero vector, shown as the last colour
    if scheme == "depth":
        labels = list(range(-max_distance, max_distance + 1)) + ["none"]
        title = f"dependency relative depth clip(depth_j - depth_i, {max_distance})"
    else:
        labels = labeled_relation_names(max_distance) + ["none"]
        title = f"labeled tree relations (k = {max_distance})"

    def value(v):
        return str(labels[int(v)])

    return _heatmap(matrix, features["tokens"], title, path, cmap="tab10", labels=labels, value_format=value)


def plot_localized_mask(features: dict, path, tau: float = 10.0):
    """G of syntax-guided localized attention for τ (1 = attend freely, → 0 = masked)."""
    from ..modeling_syntax_mt import localized_attention_log_mask

    mask = localized_attention_log_mask(features["source_distances"], tau)[0].exp().numpy()
    return _heatmap(mask, features["tokens"], f"localized attention mask G (tau = {tau:g})", path, cmap="magma",
                    value_format=lambda v: f"{v:.1f}".lstrip("0") if v < 0.995 else "1")


@torch.no_grad()
def plot_attention(model, features: dict, path, layer: int = 1, head: int = 0):
    """Encoder self-attention probabilities of `layer` (1-based) and `head` (0-based)."""
    model.eval()
    inputs = {k: features[k].to(model.device) for k in ("input_ids", "attention_mask", "source_heads", "source_distances")
              if k in features}
    if model.config.dependency_relations is None and not model.config.dbsa_encoder_layer:
        inputs.pop("source_heads", None)
    if not model.config.sla_layers:
        inputs.pop("source_distances", None)
    outputs = model.get_encoder()(**inputs, output_attentions=True, return_dict=True)
    attentions = outputs.attentions
    if not 1 <= layer <= len(attentions):
        raise ValueError(f"layer {layer} outside 1..{len(attentions)}")
    probs = attentions[layer - 1][0]
    if not 0 <= head < probs.shape[0]:
        raise ValueError(f"head {head} outside 0..{probs.shape[0] - 1}")
    title = f"encoder layer {layer}, head {head}\n{model.config.preset or 'model'}"  # a long preset: its own line
    return _heatmap(probs[head].float().cpu().numpy(), features["tokens"], title, path, cmap="Blues")


def plot_dependency_tree(annotation, path, title: str = ""):
    """The words of `annotation` (an `Annotation`: words, 0-based heads, the root pointing to itself, deprels) on a
    line, each arc drawn from its head to its dependent above them (higher for longer arcs), with its label; the
    root is marked. One image for all the annotation's sentences."""
    matplotlib, plt = _pyplot(path)
    words, heads = list(annotation.words), list(annotation.heads)
    labels = list(annotation.deprels) if annotation.deprels is not None else [""] * len(words)
    with matplotlib.rc_context({"font.family": _font_family(matplotlib, words + labels)}):
        from matplotlib.patches import Arc

        widths = [max(1.0, 0.22 * unicodedata_width(word)) for word in words]
        centres, x = [], 0.0
        for width in widths:
            centres.append(x + width / 2)
            x += width + 0.35
        longest = max([abs(head - i) for i, head in enumerate(heads)] + [1])
        fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * x + 1.0), 1.4 + 0.45 * min(longest, 12)))
        for i, word in enumerate(words):
            ax.text(centres[i], 0, word, ha="center", va="top", fontsize=11)
        for i, head in enumerate(heads):
            if head == i:
                ax.annotate("root", xy=(centres[i], 0.15), xytext=(centres[i], 0.9 + 0.3 * min(longest, 12)),
                            ha="center", fontsize=8, color="firebrick",
                            arrowprops={"arrowstyle": "->", "color": "firebrick"})
                continue
            left, right = sorted((centres[head], centres[i]))
            height = 0.5 + 0.35 * min(abs(head - i), 12)
            ax.add_patch(Arc(((left + right) / 2, 0.15), right - left, 2 * height, theta1=0, theta2=180,
                             color="steelblue"))
            ax.annotate("", xy=(centres[i], 0.15), xytext=(centres[i] + (0.08 if head > i else -0.08), 0.45),
                        arrowprops={"arrowstyle": "->", "color": "steelblue"})
            if labels[i]:
                ax.text((left + right) / 2, 0.15 + height, labels[i], ha="center", va="bottom", fontsize=8,
                        color="dimgray")
        ax.set_xlim(-0.3, x)
        ax.set_ylim(-0.8, 1.4 + 0.4 * min(longest, 12))
        ax.axis("off")
        if title:
            ax.set_title(title, fontsize=10)
        return _save(fig, plt, path, bbox_inches="tight")


def unicodedata_width(text: str) -> int:
    """Display width in columns: 2 for East Asian wide and full-width characters, 1 for the others."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def plot_forest(rows: Sequence[dict], path, *, title: str = "", xlabel: str = "Δ BLEU (95% CI)"):
    """A forest plot: one line per row (`label`, `delta`, `ci95` = [low, high]; `group` heads a block of
    consecutive rows, written from the figure's left edge; `highlight` draws the row's marker filled dark), the estimate
    as a marker and its 95% interval as a bar, against a line at zero. Labels in Japanese are drawn with a CJK font (`cjk_font_family`)."""
    if not rows:
        raise ValueError("plot_forest needs at least one row")
    for row in rows:
        low, high = row["ci95"]
        if not low <= row["delta"] <= high:
            raise ValueError(f"row {row.get('label')!r}: delta {row['delta']} lies outside its interval [{low}, {high}]")
    matplotlib, plt = _pyplot(path)
    from matplotlib.transforms import blended_transform_factory

    lines, y = [], 0  # (y, row or group name) from the top
    for k, row in enumerate(rows):
        if row.get("group") and (k == 0 or rows[k - 1].get("group") != row["group"]):
            lines.append((y, row["group"]))
            y += 1
        lines.append((y, row))
        y += 1
    texts = [title] + [item if isinstance(item, str) else item["label"] for _, item in lines]
    with matplotlib.rc_context({"font.family": _font_family(matplotlib, texts)}):
        fig, ax = plt.subplots(figsize=(9.0, 0.25 * len(lines) + 1.0))
        for y, item in lines:
            if isinstance(item, str):
                ax.text(0.01, y, item, transform=blended_transform_factory(fig.transFigure, ax.transData), ha="left",
                        va="center", fontsize=8, fontweight="bold")
                continue
            low, high = item["ci95"]
            colour = "#1f4e8c" if item.get("highlight") else "#5f8fc9"
            ax.plot([low, high], [y, y], color=colour, linewidth=1.6)
            ax.plot([item["delta"]], [y], marker="D" if item.get("highlight") else "o", markersize=5, color=colour,
                    markerfacecolor=colour if item.get("highlight") else "white")
            ax.text(1.01, y, f"{item['delta']:+.2f} [{low:+.2f}, {high:+.2f}]", transform=ax.get_yaxis_transform(),
                    va="center", fontsize=7.5)
        rows_y = [y for y, item in lines if not isinstance(item, str)]
        ax.set_yticks(rows_y, [item["label"] for _, item in lines if not isinstance(item, str)], fontsize=7.5)
        ax.set_ylim(len(lines) - 0.4, -0.6)
        ax.axvline(0.0, color="grey", linewidth=0.8)
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
        ax.tick_params(axis="y", length=0)
        ax.set_xlabel(xlabel)
        if title:
            ax.set_title(title, fontsize=9)
        return _save(fig, plt, path, bbox_inches="tight")  # the group headings start at the figure's edge


__all__ = ["plot_attention", "plot_dependency_relations", "plot_forest", "plot_localized_mask", "sentence_features"]
