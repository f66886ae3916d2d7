"""`hf-syntax-mt app`: a web page (Gradio) to translate with one or two models and see what the syntax does.

    hf-syntax-mt app --model out/ja_en_abs --model out/ja_en_dep_labeled_rel   # http://127.0.0.1:7860
    hf-syntax-mt app --model owner/model --export space/                       # a folder that runs as a HF Space

The page: a box for source sentences (one a line; Japanese typed as it is written, without spaces), beam size and
length settings, a Translate button, and the translations, side by side for two models (each with its score, log P
per subword, when asked: how sure each model is of its own translation); then, for a sentence, the
parse each model was given drawn as a dependency tree (the parser's, or a self-parsing model's own) and a heatmap
of one encoder layer and head (its attention, or the relations the tree gives it, or the SLA mask). Everything a
request can get wrong is answered in the page (`AppError`): no sentence, invalid characters, more lines than
`MAX_LINES`, a line longer than the model takes (`config.max_position_embeddings` subwords) or one the parser cannot
parse (the other lines are translated). By default the page listens on 127.0.0.1 only and makes no public link;
requests wait in Gradio's queue, one translation at a time, instead of running side by side.

Only `build_app`, `launch` and the Space's `app.py` import gradio (the `app` extra: `pip install ".[app]"`); the
rest is plain Python over the `syntax-translation` pipeline, tested without a browser.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import textwrap
import unicodedata
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Callable, Optional, Sequence

MAX_LINES = 64
"""Sentences one request translates at most."""
HEATMAPS = ("attention", "relations", "localized attention mask")
DEFAULT_HOST = "127.0.0.1"
EXAMPLE = "私は駅で友達を待った。\n猫が庭で寝ている。"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""Where pip finds torch's CPU builds (the `+cpu` versions)."""


class AppError(ValueError):
    """What the page says instead of translating (a user error, in one sentence)."""


@dataclass
class Translator:
    """One model of the page: its `syntax-translation` pipeline and how it gets its parse."""

    name: str
    pipeline: object
    label: str = ""
    _parse_cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, model: str, device=None) -> "Translator":
        """The pipeline of `model` (a folder or a Hub id) on `device` (`resolve_device`: by default the first CUDA
        GPU if there is one), which parses with the parser its config records; `AppError` for a model that needs
        parsed sources but records no parser (the page has only raw text to give it)."""
        from transformers import pipeline

        import hf_syntax_mt  # noqa: F401  (registers the model classes and the task)

        from .inference.pipeline import model_location, resolve_device

        translate = pipeline("syntax-translation", model=model_location(model), device=resolve_device(device))
        if translate.needs_parser and translate.annotator is None:
            raise AppError(f"{model} needs parsed sources and records no parser (it was trained on pre-parsed data), "
                           "so the page cannot translate raw text with it")
        config = translate.model.config
        source, target = getattr(config, "source_lang", None), getattr(config, "target_lang", None)
        languages = f" ({source or '?'}→{target or '?'})" if source or target else ""
        return cls(name=model, pipeline=translate, label=(config.preset or Path(model).name) + languages)

    @property
    def config(self):
        return self.pipeline.model.config

    @property
    def max_source_tokens(self) -> int:
        return int(self.config.max_position_embeddings)

    def tree_source(self) -> Optional[str]:
        """Where this model's tree comes from: "parser", "model" (self-parsing) or None (it reads no parse)."""
        if self.pipeline.needs_parser:
            return "parser"
        if getattr(self.config, "self_parsing", False):
            return "model"
        return None

    def parse(self, sentence: str):
        """The word-level `Annotation` this model is given for `sentence`: the parser's, or its own tree."""
        if sentence not in self._parse_cache:
            if self.tree_source() == "parser":
                annotation = self.pipeline.annotator.annotate([sentence])[0]
            elif self.tree_source() == "model":
                from .inference.model_parsing import parse_with_model

                annotation = parse_with_model(self.pipeline.model, self.pipeline.tokenizer, [sentence])[0]
            else:
                annotation = None
            self._parse_cache = {sentence: annotation}  # the last sentence only: memory stays flat
        return self._parse_cache[sentence]


def read_sentences(text: Optional[str], max_lines: int = MAX_LINES) -> list[str]:
    """The lines of `text` read as `hf-syntax-mt translate` reads a file's (`split_lines`, `normalize_line`: a form
    feed or a zero-width space is a space, not a line end or a word), stripped, the empty ones left out; `AppError`
    for no sentence or too many. (A line with a character that is not text is refused alone: `check_sentence`.)"""
    from .syntax.lines import normalize_line, split_lines

    lines = [normalize_line(line).strip() for line in split_lines(text or "")]
    sentences = [line for line in lines if line]
    if not sentences:
        raise AppError("Type one or more sentences to translate, one a line.")
    if len(sentences) > max_lines:
        raise AppError(f"{len(sentences)} sentences: the page translates at most {max_lines} at a time.")
    return sentences


def check_sentence(number: int, sentence: str) -> None:
    """`AppError` naming sentence `number` when it holds a character a text cannot hold (a control character such as
    NUL, a lone surrogate, U+FFFD from a broken encoding)."""
    bad = next((c for c in sentence if _invalid(c)), None)
    if bad is not None:
        raise AppError(f"Sentence {number} holds a character that is not text (U+{ord(bad):04X}): remove it.")


def _invalid(character: str) -> bool:
    category = unicodedata.category(character)
    return character == "\ufffd" or category == "Cs" or (category == "Cc" and character != "\t")


def translate_all(translators: Sequence[Translator], sentences: Sequence[str], *, beams: int = 4,
                  max_new_tokens: Optional[int] = None, length_a: Optional[float] = None,
                  length_b: Optional[float] = None, batch_size: int = 8, scores: bool = False,
                  progress: Optional[Callable[[int, int], None]] = None) -> tuple[list[list[str]], list[str]]:
    """Rows `[number, source, one translation per model]` (with `scores`, each translation followed by its score,
    log P(translation | source) / length ** length_penalty as beam search ranks it, to 3 decimals) and the
    messages of the lines that were not translated (a character that is not text, too long, not parsable: their
    cells are empty) and the notes of those translated anyway (subwords unknown to a model, several sentences on one
    line); `progress(done, total)` after each
    batch. Columns: `table_headers`."""
    if not isinstance(beams, int) or beams < 1:
        raise AppError(f"The beam size must be a whole number of at least 1, not {beams!r}.")
    if max_new_tokens is not None and (int(max_new_tokens) != max_new_tokens or max_new_tokens < 1):
        raise AppError(f"The longest translation must be a whole number of subwords of at least 1, not {max_new_tokens!r}.")
    generate = {"num_beams": beams, "num_return_sequences": 1}  # one cell a sentence, whatever the model's config
    if max_new_tokens:
        generate["max_new_tokens"] = int(max_new_tokens)
    if length_a or length_b:
        from .inference.length_cap import check_length_cap

        try:
            check_length_cap(length_a or 0.0, length_b or 0.0)
        except ValueError as err:
            raise AppError(f"Length cap: {err}") from None
        generate.update(max_length_a=length_a or 0.0, max_length_b=length_b or 0.0)
    width = 2 if scores else 1
    rows = [[str(number), sentence, *[""] * (width * len(translators))] for number, sentence in enumerate(sentences, 1)]
    messages, todo = [], []
    for number, sentence in enumerate(sentences, 1):
        try:
            check_sentence(number, sentence)
            todo.append(number - 1)
        except AppError as err:
            messages.append(str(err))
    total, done = len(todo) * len(translators), 0
    for model, translator in enumerate(translators):
        cell = 2 + width * model  # the model's first column
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            outputs = translator.pipeline([sentences[i] for i in batch], batch_size=batch_size, return_scores=scores,
                                          **generate)
            for i, out in zip(batch, outputs):
                rows[i][cell] = out.get("translation_text", "")
                if scores and "score" in out:
                    rows[i][cell + 1] = f"{out['score']:.3f}"
                if "error" in out:
                    messages.append(f"{translator.label}, sentence {i + 1}: {out['error']}")
                elif "warning" in out:
                    messages.append(f"{translator.label}, sentence {i + 1}: {out['warning']} (translated anyway)")
            done += len(batch)
            if progress is not None:
                progress(done, total)
    return rows, messages


def table_headers(names: Sequence[str], scores: bool = False) -> list[str]:
    """The columns of `translate_all`'s rows for models named `names`."""
    return ["#", "source", *(column for name in names for column in ([name, f"{name} score"] if scores else [name]))]


def sentence_views(translator: Translator, sentence: str, out_dir: Path, *, heatmap: str = "attention",
                   layer: int = 1, head: int = 0) -> tuple[Optional[Path], Path, str]:
    """For one sentence and model: the tree it is given (None when it reads no parse), the heatmap asked for
    (`HEATMAPS`) of encoder `layer` (1-based) and `head` (0-based), and a line saying what they show."""
    from .inference.plotting import (
        plot_attention,
        plot_dependency_relations,
        plot_dependency_tree,
        plot_localized_mask,
        sentence_features,
    )

    config = translator.config
    if heatmap not in HEATMAPS:
        raise AppError(f"Choose a heatmap among {', '.join(HEATMAPS)}.")
    if not 1 <= layer <= config.encoder_layers:
        raise AppError(f"{translator.label} has encoder layers 1 to {config.encoder_layers}.")
    if not 0 <= head < config.encoder_attention_heads:
        raise AppError(f"{translator.label} has heads 0 to {config.encoder_attention_heads - 1}.")
    if heatmap == "relations" and config.dependency_relations is None:
        raise AppError(f"{translator.label} reads no dependency relations: choose its attention.")
    if heatmap == "localized attention mask" and not config.sla_layers:
        raise AppError(f"{translator.label} has no syntax-guided localized attention: choose its attention.")
    try:
        annotation = translator.parse(sentence)
    except ValueError as err:
        raise AppError(f"The parser could not parse this sentence: {err}") from None
    source = translator.tree_source()
    tree = None
    if annotation is not None:
        what = "GiNZA" if "ginza" in json.dumps(getattr(config, "parser", None) or {}) else "the parser"
        title = "the model's own tree" if source == "model" else f"the tree from {what}"
        tree = plot_dependency_tree(annotation, out_dir / "tree.png", title=title)
    features = sentence_features(sentence, translator.pipeline.tokenizer, annotation=annotation,
                                 heads=annotation is not None, distances=bool(config.sla_layers),
                                 distance_source=getattr(config, "distance_source", "auto"))
    path = out_dir / "heatmap.png"
    if heatmap == "relations":
        scheme = config.dependency_relations
        plot_dependency_relations(features, path, scheme=scheme, max_distance=config.max_dependency_distance)
    elif heatmap == "localized attention mask":
        plot_localized_mask(features, path, tau=float(config.sla_tau))
    else:
        plot_attention(translator.pipeline.model, features, path, layer=layer, head=head)
    said = {"parser": "the tree the parser gives it", "model": "the tree it parses itself",
            None: "no tree (it reads no parse)"}[source]
    return tree, path, f"{translator.label}: {said}; {heatmap}" + (f", layer {layer}, head {head}"
                                                                   if heatmap == "attention" else "")


def language_warning(translators: Sequence[Translator]) -> Optional[str]:
    """A sentence saying that the models read different source languages (as their configs record them), or None."""
    sources = {t.label: getattr(t.config, "source_lang", None) for t in translators}
    if len({language for language in sources.values() if language}) < 2:
        return None
    listed = ", ".join(f"{name}: {language or 'not recorded'}" for name, language in sources.items())
    return f"These models read different source languages ({listed}): a sentence suits one of them only."


class ViewFolders:
    """The folders of the page's tree and heatmap pictures under `root`: each view gets a new one, and only the
    `kept` newest stay (a page up for days made one a view and never removed any). Gradio serves a returned picture
    from its own cache, a copy, so a folder can go once its view is answered."""

    def __init__(self, root, kept: int = 8):
        self.root, self.kept = Path(root), kept

    def new(self) -> Path:
        folder = Path(tempfile.mkdtemp(dir=self.root))
        older = sorted((p for p in self.root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime_ns)
        for old in older[:-self.kept]:
            shutil.rmtree(old, ignore_errors=True)
        return folder


def build_app(translators: Sequence[Translator]):
    """The Gradio `Blocks` page over `translators` (one or two); a warning on it when their source languages
    differ (`language_warning`). Its pictures: the last few views' (`ViewFolders`), and Gradio's copies of them
    deleted after an hour. A value out of a slider's range sent through the API is answered with Gradio's message,
    without a traceback in the log."""
    import gradio as gr

    def slider_checked_quietly(*args, **kwargs):
        """gr.Slider whose out-of-range value is the caller's error, not the server's (no traceback logged). Its
        check is wrapped on the instance: a subclass of a Gradio component makes Gradio write a .pyi file beside
        this module."""
        slider = gr.Slider(*args, **kwargs)
        check = slider.preprocess

        def preprocess(payload):
            try:
                return check(payload)
            except gr.Error as err:
                raise gr.Error(err.message, print_exception=False) from None

        slider.preprocess = preprocess
        return slider

    if len({t.label for t in translators}) < len(translators):  # the same preset twice: name the folders too
        for t in translators:
            t.label = f"{t.label} ({t.name})"
    names = [t.label for t in translators]
    warning = language_warning(translators)
    views = ViewFolders(tempfile.mkdtemp(prefix="hf_syntax_mt_app_"))

    def translate(text, beams, max_new_tokens, length_a, length_b, scores=False, progress=gr.Progress()):
        try:
            sentences = read_sentences(text)
            rows, messages = translate_all(
                translators, sentences, beams=int(beams), max_new_tokens=int(max_new_tokens) or None,
                length_a=float(length_a or 0) or None, length_b=float(length_b or 0) or None, scores=bool(scores),
                progress=lambda done, total: progress((done, total), desc="translating", unit="sentences"))
        except AppError as err:
            return gr.update(value=[]), f"**{err}**"
        return {"data": rows, "headers": table_headers(names, bool(scores))}, "\n\n".join(f"- {m}" for m in messages)

    def show(text, number, model, heatmap, layer, head):
        try:
            sentences = read_sentences(text)
            if not 1 <= int(number) <= len(sentences):
                raise AppError(f"Choose a sentence from 1 to {len(sentences)}.")
            check_sentence(int(number), sentences[int(number) - 1])
            folder = views.new()
            tree, heatmap_path, said = sentence_views(translators[names.index(model)], sentences[int(number) - 1],
                                                      folder, heatmap=heatmap, layer=int(layer), head=int(head))
        except AppError as err:
            return None, None, f"**{err}**"
        return (str(tree) if tree else None), str(heatmap_path), said

    with gr.Blocks(title="hf_syntax_mt: syntax-aware translation", delete_cache=(3600, 3600)) as page:
        gr.Markdown("# Syntax-aware translation\n" + " · ".join(f"**{n}**" for n in names)
                    + (f"\n\n⚠️ {warning}" if warning else ""), elem_id="models")
        text = gr.Textbox(label="Source sentences, one a line", lines=5, value=EXAMPLE, elem_id="source")
        with gr.Row():
            beams = slider_checked_quietly(1, 8, value=4, step=1, label="Beam size")
            max_new = gr.Number(value=0, precision=0, label="Longest translation in subwords (0: the model's)")
            length_a = gr.Number(value=1.5, label="Length cap a (a × source subwords + b; 0 and 0: none)")
            length_b = gr.Number(value=10, label="Length cap b")
            scores = gr.Checkbox(value=False, label="Scores: log P(translation | source) / length (higher: surer)",
                                 elem_id="scores")
        button = gr.Button("Translate", variant="primary", elem_id="translate")
        table = gr.Dataframe(headers=table_headers(names), label="Translations", wrap=True, elem_id="translations",
                             interactive=False)
        messages = gr.Markdown(elem_id="messages")
        gr.Markdown("## Inside the model")
        with gr.Row():
            number = gr.Number(value=1, precision=0, label="Sentence #")
            model = gr.Dropdown(names, value=names[-1], label="Model")
            heatmap = gr.Dropdown(list(HEATMAPS), value="attention", label="Heatmap")
            layer = slider_checked_quietly(1, max(t.config.encoder_layers for t in translators), value=1, step=1,
                                           label="Layer")
            head = slider_checked_quietly(0, max(t.config.encoder_attention_heads for t in translators) - 1, value=0,
                                          step=1, label="Head")
        said = gr.Markdown(elem_id="view")
        with gr.Row():
            tree = gr.Image(label="Dependency tree", type="filepath", elem_id="tree")
            heat = gr.Image(label="Heatmap", type="filepath", elem_id="heatmap")
        button.click(translate, [text, beams, max_new, length_a, length_b, scores], [table, messages],
                     api_name="translate") \
            .then(show, [text, number, model, heatmap, layer, head], [tree, heat, said])
        gr.Button("Show").click(show, [text, number, model, heatmap, layer, head], [tree, heat, said],
                                api_name="show")
    return page.queue(default_concurrency_limit=1, max_size=256)


def launch(models: Sequence[str], *, host: str = DEFAULT_HOST, port: Optional[int] = None, share: bool = False,
           block: bool = True, device=None, port_option: str = "--port"):
    """Load `models` (one or two) on `device` (default: the first CUDA GPU if there is one, else the CPU) and serve
    the page on `host`:`port` (Gradio picks a free port from 7860 when `port` is None); `share=True` asks Gradio for
    a public link. A port in use is an `AppError` that names `port_option`, the caller's way to choose another.
    Returns the page (serving, when `block=False`)."""
    if not 1 <= len(models) <= 2:
        raise AppError(f"give one or two models (--model DIR), not {len(models)}")
    translators = [Translator.load(model, device) for model in models]
    warning = language_warning(translators)
    if warning:
        print(f"hf-syntax-mt app: warning: {warning}", file=sys.stderr)
    page = build_app(translators)
    try:
        page.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=not block, show_error=False)
    except OSError as err:  # gradio's advice names its own settings (GRADIO_SERVER_PORT, server_port)
        ports = re.search(r"empty port in range: (\d+)-(\d+)", str(err))
        if ports is None:
            raise
        first, last = ports.groups()
        busy = f"port {first} on {host} is in use" if first == last else f"ports {first} to {last} on {host} are in use"
        raise AppError(f"{busy}: give a free one with {port_option}") from None
    return page


SPACE_APP = '''"""A Hugging Face Space: the hf_syntax_mt translation page over {models}.

It listens where Spaces and Gradio say (GRADIO_SERVER_NAME, GRADIO_SERVER_PORT; default 0.0.0.0:7860)."""
import os
import sys
from pathlib import Path

from hf_syntax_mt.app import AppError, launch

HERE = Path(__file__).resolve().parent  # the models folder is beside this file, wherever it is run from
try:
    launch([{entries}], host=os.environ.get("GRADIO_SERVER_NAME", "0.0.0.0"),
           port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), port_option="GRADIO_SERVER_PORT=PORT")
except AppError as err:
    sys.exit(f"app.py: {{err}}")
'''


def export_space(models: Sequence[str], out_dir) -> Path:
    """Write a folder that runs as a Hugging Face Space (Gradio SDK): `app.py`, `requirements.txt`, `README.md`
    with the front matter a Space reads, and the package itself (`hf_syntax_mt/`, which Spaces cannot install
    from PyPI); a model given as a local folder is copied into `models/` (a Hub id is loaded by `from_pretrained`
    when the Space starts). Refuses a folder that is not empty."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise AppError(f"{out} is not empty: give a new folder for the Space")
    out.mkdir(parents=True, exist_ok=True)
    package = Path(__file__).resolve().parent
    shutil.copytree(package, out / "hf_syntax_mt", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    names, parsers = [], set()
    for model in models:
        folder = Path(model)
        if folder.is_dir():
            target = out / "models" / folder.name
            shutil.copytree(folder, target, ignore=shutil.ignore_patterns("checkpoint-*", "_*", "*.bin", "runs"))
            names.append(f"models/{folder.name}")
            parser = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("parser") or {}
            if parser.get("model") == "ja_ginza":
                parsers.add("ja-ginza")
        else:
            names.append(model)
    entries = ", ".join(f"str(HERE / {name!r})" if name.startswith("models/") else repr(name) for name in names)
    (out / "app.py").write_text(SPACE_APP.format(models=", ".join(names), entries=entries), encoding="utf-8")
    (out / "requirements.txt").write_text("\n".join(_space_requirements(parsers)) + "\n", encoding="utf-8")
    (out / "README.md").write_text(textwrap.dedent(f"""\
        ---
        title: Syntax-aware translation
        emoji: 🌳
        colorFrom: green
        colorTo: blue
        sdk: gradio
        sdk_version: {_version("gradio") or "5"}
        app_file: app.py
        pinned: false
        license: apache-2.0
        ---

        Translation with hf_syntax_mt models ({", ".join(names)}): the translations side by side, the dependency tree
        each model is given and its attention. Made by `hf-syntax-mt app --export`.
        """), encoding="utf-8")
    return out


def _space_requirements(parsers) -> list[str]:
    """hf_syntax_mt's own dependencies (its metadata: the core, and the `app` and `plot` extras), the parsers'
    packages, each pinned at the version installed here when there is one. A CPU build of torch (a `+cpu` version)
    is pinned as it is, with PyTorch's CPU index, where pip finds it (PyPI's Linux wheel is the multi-GB CUDA
    build)."""
    wanted = []
    for requirement in metadata.requires("hf_syntax_mt") or []:
        name, _, marker = requirement.partition(";")
        if marker and not any(f'extra == "{extra}"' in marker for extra in ("app", "plot")):
            continue
        wanted.append(name.strip())
    wanted += sorted(parsers)
    pinned, index = [], []
    for requirement in wanted:
        base = requirement.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()
        version = _version(base)
        if base == "torch" and version and version.endswith("+cpu"):
            index = [f"--extra-index-url {TORCH_CPU_INDEX}"]
            pinned.append(f"torch=={version}")
        else:
            pinned.append(f"{base}=={version}" if version and "+" not in version else requirement)
    return index + pinned


def _version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


__all__ = ["AppError", "EXAMPLE", "HEATMAPS", "MAX_LINES", "Translator", "ViewFolders", "build_app", "check_sentence", "export_space",
           "language_warning", "launch", "read_sentences", "sentence_views", "translate_all"]
