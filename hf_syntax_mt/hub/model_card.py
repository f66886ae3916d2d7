"""The model card of a trained model (`README.md` beside the weights, the Hub model card): the package's
template (`templates/model_card.md`) filled with the preset, the syntax settings, the data, the parser,
the dev/test scores, what the preset measured in the project's experiments (`measured_results`, the summary
of model_cards/RESULTS.md), how to translate with and without the package, and the training command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

from ..syntax.annotators import spacy_install_hint

MODEL_CARD_TEMPLATE = Path(__file__).resolve().with_name("templates") / "model_card.md"
APP_SCREENSHOT = MODEL_CARD_TEMPLATE.with_name("app_screenshot.png")
"""The page of `hf-syntax-mt app` (taken by tests/apps/test_app.py's browser), copied beside every card."""


def _format_scores(scores: dict) -> str:
    if not scores:
        return "No evaluation was run."
    rows = ["| split | metric | value |", "|---|---|---|"]
    for key in sorted(scores):
        split, _, name = key.partition("_")
        split = "validation" if split == "eval" else split  # the Trainer's eval_ metrics: the validation file
        value = scores[key]
        rows.append(f"| {split} | {name} | {value:.2f} |" if isinstance(value, float) else f"| {split} | {name} | {value} |")
    return "\n".join(rows)


USE_HEADING = "## Use\n"


def measured_rows(preset: str, config: dict, languages: tuple = ("", ""), rows=None,
                  variant_settings=None) -> list[dict]:
    """The rows of the project's summary measured on a model like this one, those of its language pair first: rows
    of its preset whose run's recipe variant settings (`VARIANT_SETTINGS`: e.g. `@authors`' DBSA layers, `@self`'s
    self_parsing=True) all equal the config's, and which leave no setting that a measured variant changes at the
    value this config has (a self-parsing model is not the preset's parser-fed runs, a flat-distance SLA not the
    tree's)."""
    if rows is None:
        from .measured_results import ROWS as rows
    if variant_settings is None:
        from .measured_results import VARIANT_SETTINGS as variant_settings
    varied = {(key, repr(value)) for settings in variant_settings.values() for key, value in settings.items()}

    def measured_like_this(row: dict) -> bool:
        settings = variant_settings.get(row["system"], {})
        return (row["preset"] == preset
                and all(config.get(key) == value for key, value in settings.items())
                and not any(key not in settings and repr(config.get(key)) == value for key, value in varied))

    direction = "-".join(languages) if all(languages) else ""
    mine = [r for r in rows if measured_like_this(r)]
    return sorted(mine, key=lambda r: r["direction"] != direction)


def _format_measured(preset: str, config: dict, languages: tuple) -> tuple[str, list[Path]]:
    """The card's "what this preset is worth" part: Δ BLEU [95% CI] against each control, per corpus, and the chart
    of BLEU by training budget of each recipe of its rows whose chart draws this model's run; returns the text and
    the charts it shows."""
    from .measured_results import BUDGET_CHARTS, EXTERNAL_PROVENANCE

    rows = measured_rows(preset, config, languages)
    if not rows:
        return "", []
    name = "`, `".join(dict.fromkeys(r["system"] for r in rows))
    lines = [f"## What `{name}` measured in the project's experiments", "",
             "The same preset and settings trained by the package's recipes (`benchmarks/recipes/`, recipe-size "
             "models: d_model 256, 3+3 layers), against the control it is judged by; from the summary of the package's "
             "`model_cards/RESULTS.md`:", "",
             "| recipe | regime | control | evidence | Δ BLEU [95% CI] | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        evidence = ("held-out test, scored outside the project" if r["scored_outside"] else "dev") + \
            (f", {r['budget']}" if r.get("budget") else "") + \
            f", seed{'s' if len(r['seeds']) > 1 else ''} {','.join(map(str, r['seeds']))}"
        lines.append(f"| {r['recipe']} | {r['regime']} | `{r['control']}` | {evidence} | {r['delta']:+.2f} "
                     f"[{r['ci95'][0]:+.2f}, {r['ci95'][1]:+.2f}] | {r['verdict']} |")
    for issue in dict.fromkeys(r["issue"] for r in rows if r["scored_outside"]):
        provenance = EXTERNAL_PROVENANCE[issue]
        lines += ["", f"Held-out test rows: {provenance[0].lower()}{provenance[1:]}"]
    charts = []
    drawn = [r["recipe"] for r in rows if r["system"] in BUDGET_CHARTS.get(r["recipe"], {}).get("presets", ())]
    for recipe in dict.fromkeys(drawn):
        chart = BUDGET_CHARTS[recipe]["chart"]
        charts.append(MODEL_CARD_TEMPLATE.with_name(chart))
        lines += ["", f"BLEU by training budget on {recipe}, the recipe of the budget rows above (each preset it trained "
                      "at several budgets; dev solid, held-out test‡ dashed where scored outside the project):", "",
                  f"![BLEU on {recipe} against training updates and training hours, one line a preset]({chart})"]
    return "\n".join(lines), charts


EXAMPLE_SENTENCES = {"ja": "私は赤い車を買った。", "en": "I bought a red car.", "de": "Ich habe ein rotes Auto gekauft."}
"""The model card's example input for these source languages (else a source sentence of the data)."""
NOT_LANGUAGE_CODES = ("src", "tgt")  # DataArguments' defaults: file suffixes, not languages


def _syntax_settings(config: dict) -> str:
    """The syntax switches that are on, as `key=value` (relation_combination only where two kinds of
    relation combine)."""
    keys = ["relative_positions", "dependency_relations", "dbsa_encoder_layer", "dbsa_decoder_layer", "sla_layers"]
    if config.get("relative_positions") and config.get("dependency_relations"):
        keys.insert(2, "relation_combination")
    if config.get("sla_layers"):
        keys += ["sla_tau", "distance_source", "sla_binarize"]
    return ", ".join(f"{k}={config[k]}" for k in keys if config.get(k) not in (None, False))


def _inference_notes(config: dict) -> tuple[str, str]:
    """What translating with this model needs: with the package (its parser), and without it."""
    needs_parse = config.get("dependency_relations") is not None or bool(config.get("sla_layers"))
    if needs_parse and config.get("self_parsing"):
        return ("It parses its source itself (`self_parsing`: a small parse module decodes one tree per sentence), "
                "so the pipeline needs no parser; `hf-syntax-mt annotate --model` prints its trees as CoNLL-U.",
                "As the model derives its source tree itself, `model.generate(**tokenizer(sentences, return_tensors=\"pt\", "
                "padding=True), num_beams=4)` translates (load it with `trust_remote_code=True`).")
    if not needs_parse:
        return ("It needs no parser at inference (its syntax, if any, is learnt in training).",
                "As the model needs no syntax at inference, `model.generate(**tokenizer(sentences, return_tensors=\"pt\", "
                "padding=True), num_beams=4)` translates.")
    parser = config.get("parser") or {}
    kind = parser.get("type") or "preparsed"
    if kind.startswith("spacy"):
        with_package = (f"The pipeline parses each sentence with the spaCy pipeline `{parser.get('model')}` recorded in "
                        f"the config: `{spacy_install_hint(parser.get('model'))}`.")
    elif kind == "stanza":
        with_package = (f"The pipeline parses each sentence with stanza (`{parser.get('lang')}`, recorded in the config), "
                        "which downloads its models on first use.")
    elif kind == "synthetic_grammar":
        with_package = ("The pipeline parses each sentence with the package's synthetic grammar (`synthetic_grammar`, "
                        "recorded in the config; the grammar of the demo's corpus, nothing to install).")
    elif kind == "preparsed":
        with_package = ("It was trained on pre-parsed sources, so the pipeline needs the parses: "
                        "`pipeline(..., annotator=hf_syntax_mt.PreParsedAnnotator.from_conllu(path))`, or "
                        "`annotations=[...]` per call.")
    else:
        with_package = f"The pipeline parses each sentence with the parser recorded in the config (`{kind}`)."
    features = "`source_heads` (batch, n): for every source subword the position of its head word's first subword " \
               "in the same row, the root pointing to itself, -100 outside the tree"
    if config.get("sla_layers"):
        features += "; `source_distances` (batch, n): the syntactic distance of the gap after each subword"
    return with_package, f"Its inputs include the syntax of each source sentence, to be built by hand and passed to " \
                         f"`generate` beside `input_ids`: {features}."


def write_model_card(output_dir, *, preset: str = "", config: Optional[dict] = None, data: str = "",
                     parser: str = "", scores: Optional[dict] = None, command: str = "",
                     languages: tuple = ("", ""), model_id: Optional[str] = None, example: str = "",
                     extra: str = "") -> Path:
    """Render the package's model card template (`templates/model_card.md`) into `output_dir/README.md`,
    the Hub model card. `model_id` names the model in the usage snippet (default: `output_dir`);
    `example` is its input when the source language has none of `EXAMPLE_SENTENCES`."""
    template = MODEL_CARD_TEMPLATE.read_text(encoding="utf-8")
    config = config or {}
    sizes = {k: config.get(k) for k in ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                                         "encoder_ffn_dim", "vocab_size")}
    codes = [code for code in languages if code and code not in NOT_LANGUAGE_CODES]
    with_package, without_package = _inference_notes(config)
    values = {
        "preset": preset or "custom",
        "language_tags": "language:\n" + "".join(f"- {code}\n" for code in codes) if codes else "",
        "source_lang": languages[0] or "",
        "target_lang": languages[1] or "",
        "data": data or "(not recorded)",
        "parser": parser or "none",
        "sizes": ", ".join(f"{k}={v}" for k, v in sizes.items() if v is not None),
        "syntax": _syntax_settings(config) or "none (absolute positions only)",
        "scores": _format_scores(scores or {}),
        "model_id": model_id or str(output_dir),
        "example": json.dumps(EXAMPLE_SENTENCES.get(languages[0], example or "..."), ensure_ascii=False),
        "inference_note": with_package,
        "without_package": without_package,
        "command": command or "(not recorded)",
        "extra": extra,
    }
    card = template
    for key, value in values.items():
        card = card.replace("{{" + key + "}}", str(value))
    measured, charts = _format_measured(preset, config, languages)
    if measured:  # after the model's own scores, before how to use it
        card = card.replace(USE_HEADING, f"{measured}\n\n{USE_HEADING}", 1) if USE_HEADING in card \
            else f"{card.rstrip()}\n\n{measured}\n"
    path = Path(output_dir) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(card, encoding="utf-8")
    for picture in (APP_SCREENSHOT, *charts):  # the card shows the page (hf-syntax-mt app) and the budget charts
        shutil.copyfile(picture, path.with_name(picture.name))
    return path


__all__ = ["EXAMPLE_SENTENCES", "measured_rows", "write_model_card"]
