"""`hf-syntax-mt`: translate, annotate, plot, train, average, demo.

    hf-syntax-mt translate --model DIR [--beams N [--n-best K]] [--scores] [--batch-size B] [--device cuda]
                           [--max-length-a A --max-length-b B] [--conllu FILE [--trees FILE]] [--reference REF]
                           [FILE] > out.txt
    hf-syntax-mt annotate --parser ja_ginza [--model DIR] [FILE] > features.jsonl
    hf-syntax-mt annotate --model SELF_PARSING_DIR [--conllu GOLD] [FILE] > parsed.conllu
    hf-syntax-mt plot --model DIR --sentence "..." --kind relations|sla|attention --out fig.png
    hf-syntax-mt train --preset transformer_dep_rel --train_file ... (all of training/train.py)
    hf-syntax-mt average --out DIR [--overwrite] (--checkpoints C1 C2 ... | --run-dir RUN --last K)
    hf-syntax-mt app --model DIR [--model DIR2] [--host 127.0.0.1] [--port P] [--share] [--device D] [--export SPACE_DIR]
    hf-syntax-mt demo

Input is one sentence a line (stdin when FILE is omitted); `translate` writes one line per input
line (`--n-best K`: K lines, best first, as OpenNMT-py's -n_best; `--scores`: each as `i ||| translation |||
logprob= L ||| S`, the Moses/Marian n-best format), batch by batch as they are done (in input order), with
progress on stderr when it is a terminal.
An empty, unparsable or not UTF-8 line gives an empty output line and one message on stderr (with its
1-based line number); the other lines are translated. Ctrl-C (SIGINT) or SIGTERM stops it after the lines
written so far, saying how many (exit status 128 + the signal). `--reference FILE` prints corpus BLEU and
chrF at the end. Pre-parsed input: `--conllu FILE [--trees FILE]`, one CoNLL-U sentence (and bracketed
tree) per input line that is not blank, in order (as `annotate` writes them); a sentence there that is
not one tree, or whose text, words or tree leaves are not its line's, fails its line alone, named by its
number in the file. A user error (a bad file or model) prints one line and exits with status 2, in every
command; a bad option prints a one-line usage and the error (`--help` lists every option).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Optional, Sequence

from safetensors import SafetensorError

from .syntax.annotation import DISTANCE_SOURCES, Annotation
from .training.command_line import ArgumentParser, positive_int
from .training.threads import THREADS_HELP


def _read_input(path: Optional[str]) -> list[bytes]:
    """The lines of FILE (or stdin) as bytes, split at \\n, \\r\\n and \\r only (as editors number lines),
    a UTF-8 byte-order mark dropped; `decode_line` (the pipeline's too) reports those that are not UTF-8."""
    if path is None or path == "-":
        data = sys.stdin.buffer.read()
    elif Path(path).is_dir():
        raise SystemExit(f"hf-syntax-mt: {path} is a directory, not an input file")
    elif not Path(path).is_file():
        raise SystemExit(f"hf-syntax-mt: input file not found: {path}")
    else:
        data = Path(path).read_bytes()
    return data.removeprefix(codecs.BOM_UTF8).splitlines()


@contextlib.contextmanager
def _silenced(logger_name: str):
    """Drop the warnings of a logger for the duration."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _check_parse_options(args) -> None:
    if getattr(args, "parser", None) and getattr(args, "conllu", None):
        raise SystemExit(f"hf-syntax-mt {args.command}: --parser {args.parser} and --conllu both give the parses: "
                         "--conllu reads them from the file, --parser parses the text; choose one")
    if getattr(args, "trees", None) and not getattr(args, "conllu", None):
        raise SystemExit(f"hf-syntax-mt {args.command}: --trees needs --conllu (the trees go with its sentences)")


def _annotator(args):
    """`--conllu/--trees` (pre-parsed, looked up by text), `--parser NAME [--lang L]`, or None."""
    from .features.training_data import build_annotator
    from .syntax import PreParsedAnnotator

    _check_parse_options(args)
    if getattr(args, "conllu", None):
        trees = Path(args.trees).read_text(encoding="utf-8").splitlines() if args.trees else None
        return PreParsedAnnotator.from_conllu(args.conllu, trees=trees)
    if getattr(args, "parser", None):
        return build_annotator(args.parser, args.lang, constituency=args.constituency)
    return None


def _add_parser_options(sub, constituency=True):
    sub.add_argument("--parser", help="stanza, a spaCy pipeline name (e.g. ja_ginza) or synthetic_grammar (the demo's); "
                                      "default: the model's")
    sub.add_argument("--lang", help="language of a stanza parser")
    sub.add_argument("--conllu", help="pre-parsed input: CoNLL-U with one sentence per input line")
    sub.add_argument("--trees", help="pre-parsed input: bracketed constituency trees, one a line")
    if constituency:
        sub.add_argument("--constituency", action="store_true", help="stanza: also run the constituency parser")


class _Stopped(Exception):
    """SIGINT / SIGTERM while translating (`signal_number` says which)."""

    def __init__(self, signal_number: int):
        super().__init__(signal_number)
        self.signal_number = signal_number


class _SignalStop:
    """A handler for SIGINT / SIGTERM that raises `_Stopped`, except inside `held()`: there the signal waits
    for the end of the block."""

    def __init__(self):
        self.holding = False
        self.pending: Optional[int] = None

    def __call__(self, number, frame):
        if self.holding:
            self.pending = number
        else:
            raise _Stopped(number)

    @contextlib.contextmanager
    def held(self):
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.pending is not None:
            raise _Stopped(self.pending)


@contextlib.contextmanager
def _stopping_on_signals():
    """Yields a `_SignalStop` that handles SIGINT and SIGTERM for the duration (main thread only); the old
    handlers come back after."""
    stop = _SignalStop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@dataclasses.dataclass
class _Written:
    """How far `translate` got: input lines whose translations are written to stdout, of `total` (None until
    the input is read)."""

    lines: int = 0
    total: Optional[int] = None


def cmd_translate(args) -> int:
    written = _Written()
    try:
        with _stopping_on_signals() as stop:
            return _translate(args, written, stop)
    except _Stopped as stopped:
        of = "" if written.total is None else f" of {written.total}"
        again = "; the same command with --continue translates the rest" if args.output else ""
        print(f"hf-syntax-mt translate: stopped by {signal.Signals(stopped.signal_number).name}: {written.lines}{of} "
              f"lines translated and written (the first ones, in input order){again}", file=sys.stderr)
        return 128 + stopped.signal_number


_PTB_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


def _preparsed_lines(args, lines: list[bytes]) -> list:
    """`--conllu FILE [--trees FILE]` matched to the input lines by position: the k-th sentence (and tree)
    goes with the k-th input line that is not blank (empty, whitespace-only or not UTF-8: `annotate`
    writes no sentence for those). Per line: its `Annotation`, the message that fails it (a sentence that
    is not one tree, a tree that cannot be read, a text or tree leaves that are not the line's words), or
    None for a blank line (the pipeline reports it). Another number of sentences than non-blank lines is
    a user error."""
    from .inference.pipeline import decode_line
    from .syntax import read_conllu_sentences, tree_leaves

    trees = Path(args.trees).read_text(encoding="utf-8").splitlines() if args.trees else None
    sentences = read_conllu_sentences(args.conllu, trees=trees)
    texts = [decode_line(line) for line in lines]
    targets = [i for i, (text, error) in enumerate(texts) if error is None and text.strip()]
    if len(sentences) != len(targets):
        raise SystemExit(f"hf-syntax-mt translate: --conllu {args.conllu} has {len(sentences)} sentences but the input "
                         f"has {len(targets)} lines that are not blank: one sentence per such line, in the same order")
    parsed: list = [None] * len(lines)
    for number, (i, sentence) in enumerate(zip(targets, sentences), 1):
        text = texts[i][0]
        if not isinstance(sentence, Annotation):
            parsed[i] = f"could not parse: {sentence}"
            continue
        name = f"CoNLL-U sentence {number}"
        if "".join(sentence.text.split()) != "".join(text.split()):
            parsed[i] = f"{name} is {sentence.text[:80]!r}, not this line's text: its words and the text disagree"
        elif sentence.trees and [_PTB_BRACKETS.get(leaf, leaf) for leaf in tree_leaves(sentence.trees[0])] != \
                [_PTB_BRACKETS.get(word, word) for word in sentence.words]:
            leaves = " ".join(tree_leaves(sentence.trees[0]))
            parsed[i] = f"tree {number} has the leaves {leaves[:80]!r}, not the words of {name}"
        else:
            parsed[i] = sentence
    return parsed


def _read_references(path: str, count: int) -> list[str]:
    lines = _read_input(path)
    if len(lines) != count:
        raise SystemExit(f"hf-syntax-mt translate: --reference {path} has {len(lines)} lines for {count} input lines")
    try:
        return [line.decode("utf-8") for line in lines]
    except UnicodeDecodeError as err:
        raise SystemExit(f"hf-syntax-mt translate: --reference {path} is not UTF-8 text ({err})") from None


def _scores(hypotheses: list[str], references: list[str], tokenize: str) -> str:
    """Corpus BLEU and chrF (sacrebleu) with BLEU's signature, in one line."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu = BLEU(tokenize=tokenize, force=True)
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = CHRF().corpus_score(hypotheses, [references])
    return f"BLEU {bleu_score.score:.2f}, chrF {chrf_score.score:.2f} ({bleu.get_signature()})"


def _translated_batches(translate, lines: list[bytes], parsed: Optional[list], batch_size: int, generate: dict):
    """(the n-best lists of one batch of input lines, in input order: each a list of `num_return_sequences`
    pipeline outputs), batch after batch. With pre-parsed lines, those whose parse fails get their message
    and the others their `Annotation`."""
    from .syntax.annotation import empty_annotation

    k = generate["num_return_sequences"]

    def n_best(outputs):
        return [out if k > 1 else [out] for out in outputs]

    for start in range(0, len(lines), batch_size):
        positions = range(start, min(start + batch_size, len(lines)))
        if parsed is None:
            yield n_best(translate(lines[start : start + batch_size], batch_size=batch_size, **generate))
            continue
        outputs = {i: [{"translation_text": "", "error": parsed[i]}] * k for i in positions if isinstance(parsed[i], str)}
        rest = [i for i in positions if i not in outputs]
        if rest:
            annotations = [parsed[i] or empty_annotation("") for i in rest]
            done = translate([lines[i] for i in rest], annotations=annotations, batch_size=batch_size, **generate)
            outputs.update(zip(rest, n_best(done)))
        yield [outputs[i] for i in positions]


def _device(name: Optional[str], command: str):
    """`resolve_device` of a `--device` option, its error a user error of `command`."""
    from .inference.pipeline import resolve_device

    try:
        return resolve_device(name)
    except ValueError as err:
        raise SystemExit(f"hf-syntax-mt {command}: --device {err}") from None


def _translate(args, written: _Written, stop: _SignalStop) -> int:
    from tqdm.auto import tqdm
    from transformers import pipeline

    import hf_syntax_mt  # noqa: F401  (registers the model classes)

    from .inference.length_cap import check_length_cap
    from .inference.pipeline import model_location  # importing it registers the task
    from .syntax import PreParsedAnnotator
    from .training.threads import set_torch_threads

    if args.n_best > args.beams:
        raise SystemExit(f"hf-syntax-mt translate: --n-best {args.n_best} needs --beams {args.n_best} or more (the beam "
                         f"keeps --beams translations; it is {args.beams})")
    set_torch_threads(args.threads)
    device = _device(args.device, "translate")
    length_cap = {}
    if args.max_length_a is not None or args.max_length_b is not None:
        try:
            check_length_cap(args.max_length_a, args.max_length_b)
        except ValueError as err:
            raise SystemExit(f"hf-syntax-mt translate: --max-length-a/--max-length-b: {err}") from None
        length_cap = {"max_length_a": args.max_length_a, "max_length_b": args.max_length_b}
    if args.reference:
        import sacrebleu

        from .inference.metrics import check_bleu_tokenize

        if args.bleu_tokenize not in sacrebleu.BLEU.TOKENIZERS:
            raise SystemExit(f"hf-syntax-mt translate: --bleu-tokenize {args.bleu_tokenize}: expected one of "
                             f"{', '.join(sorted(sacrebleu.BLEU.TOKENIZERS))}")
        check_bleu_tokenize(args.bleu_tokenize)
    model = model_location(args.model)
    lines = _read_input(args.input)
    written.total = len(lines)
    if not lines:
        print("hf-syntax-mt translate: no input lines (nothing to translate)", file=sys.stderr)
        return 0
    references = _read_references(args.reference, len(lines)) if args.reference else None
    written.lines, hypotheses = _translated_already(args, len(lines))
    if written.lines:
        rest = "nothing left to translate" if written.lines == len(lines) else "translating the rest"
        print(f"hf-syntax-mt translate: --output {args.output} holds the translations of the first {written.lines} of "
              f"{len(lines)} input lines: {rest}", file=sys.stderr)
    kwargs, parsed = {}, None
    if args.conllu:
        _check_parse_options(args)
        parsed = _preparsed_lines(args, lines)
        # the pipeline knows from an annotator that the parses come from outside (a self-parsing model uses them)
        kwargs["annotator"] = PreParsedAnnotator([a for a in parsed if isinstance(a, Annotation)])
    else:
        annotator = _annotator(args)
        if annotator is not None:
            kwargs["annotator"] = annotator
    translate = pipeline("syntax-translation", model=model, device=device, **kwargs)
    if translate.needs_parser and translate.annotator is None:
        raise SystemExit("hf-syntax-mt translate: this model needs parsed sources and records no parser (it was trained "
                         "on pre-parsed data): give --conllu FILE [--trees FILE] or --parser NAME")
    # --n-best lines an input line, whatever num_return_sequences the model's generation config sets
    generate = {"num_beams": args.beams, "num_return_sequences": args.n_best, **length_cap}
    if args.max_new_tokens:
        generate["max_new_tokens"] = args.max_new_tokens
    if args.scores:
        generate["return_scores"] = True
    empty = "empty output line" if args.n_best == 1 else f"{args.n_best} empty output lines"  # what a bad line gets
    done = written.lines
    sink = open(args.output, "a" if done else "w", encoding="utf-8") if args.output else \
        contextlib.nullcontext(sys.stdout)
    # progress (lines, lines/s, ETA) on a terminal only: a log file or pipe gets the messages alone
    with _silenced("hf_syntax_mt.inference.pipeline"), tqdm(total=len(lines), initial=done, unit=" lines",
                                                            file=sys.stderr, leave=False,
                                                            disable=not sys.stderr.isatty()) as progress, sink as out:
        rest = lines[done:]
        for outputs in _translated_batches(translate, rest, parsed and parsed[done:], args.batch_size, generate):
            for number, (best, *_) in enumerate(outputs, written.lines + 1):
                if "error" in best:
                    progress.write(f"hf-syntax-mt translate: line {number}: {best['error']} ({empty})", file=sys.stderr)
                elif "warning" in best:
                    progress.write(f"hf-syntax-mt translate: line {number}: {best['warning']} (translated anyway)",
                                   file=sys.stderr)
            with stop.held():  # a batch is written whole, and counted
                out.write("".join(_output_line(one, written.lines + n, args.scores)
                                  for n, n_best in enumerate(outputs) for one in n_best))
                out.flush()
                written.lines += len(outputs)
            hypotheses += [best["translation_text"] for best, *_ in outputs]
            progress.update(len(outputs))
    if references is not None:
        print(f"hf-syntax-mt translate: {_scores(hypotheses, references, args.bleu_tokenize)} against "
              f"{args.reference}", file=sys.stderr)
    return 0


def _translated_already(args, total: int) -> tuple[int, list[str]]:
    """(input lines `--output` FILE holds the translations of, those translations: the best of each) under
    `--continue`; (0, []) for a run that starts afresh, after refusing options that do not go together and an
    output FILE that holds something without --continue or --overwrite."""
    command = "hf-syntax-mt translate"
    if (args.continue_output or args.overwrite) and not args.output:
        raise SystemExit(f"{command}: --{'continue' if args.continue_output else 'overwrite'} needs --output FILE")
    if args.continue_output and args.overwrite:
        raise SystemExit(f"{command}: --continue appends to --output {args.output}, --overwrite replaces it: choose one")
    path = Path(args.output) if args.output else None
    if path is None or not path.exists() or args.overwrite:
        return 0, []
    if not path.is_file():
        raise SystemExit(f"{command}: --output {path} is not a file")
    data = path.read_bytes()
    if not data:
        return 0, []
    if not args.continue_output:
        raise SystemExit(f"{command}: --output {path} already holds translations: --continue translates the input "
                         "lines after them and appends, --overwrite replaces them")
    if not data.endswith(b"\n"):
        raise SystemExit(f"{command}: --output {path} ends in the middle of a line (a write cut short): remove its last, "
                         "incomplete line and run again")
    held = data.decode("utf-8", errors="replace").split("\n")[:-1]
    k = args.n_best
    if len(held) % k or len(held) // k > total:
        raise SystemExit(f"{command}: --output {path} has {len(held)} lines, which are not the translations of the "
                         f"first input lines ({k} a line with --n-best {k}, {total} input lines): is it this input's "
                         "output?")
    best = held[::k]
    if args.scores:
        best = [line.split(" ||| ")[1] if line.count(" ||| ") >= 3 else line for line in best]
    return len(held) // k, best


def _output_line(out: dict, index: int, scores: bool) -> str:
    """The translation's output line; with `scores`, `index ||| translation ||| logprob= L ||| S` (Moses and
    Marian's n-best format, index counted from 0), L and S nan for a line that was not translated."""
    if not scores:
        return out["translation_text"] + "\n"
    log_probability, score = out.get("log_probability", math.nan), out.get("score", math.nan)
    return f"{index} ||| {out['translation_text']} ||| logprob= {log_probability:.6f} ||| {score:.6f}\n"


def _decoded_lines(lines: list[bytes], command: str) -> list[str]:
    from .inference.pipeline import decode_line

    texts = []
    for number, line in enumerate(lines, 1):
        text, error = decode_line(line)
        if error is not None:
            print(f"hf-syntax-mt {command}: line {number}: {error} (annotated as an empty line)", file=sys.stderr)
        texts.append(text)
    return texts


def _annotate_with_own_parser(args, model_dir: str) -> int:
    """A self-parsing model's own word-level trees as CoNLL-U (`model_parsing.parse_with_model`); the
    words of `--conllu` (e.g. a treebank's gold tokens, placed by the file's spans, so a multi-word token
    such as "zum" = "zu" + "dem" keeps its place, when the model's `source_spacing` leaves the `# text`
    unchanged; else found by their forms) or the tokenizer's units. Empty lines and gold sentences that
    cannot be read give no sentence and one message on stderr; the others keep their numbers."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from .inference.model_parsing import parse_with_model
    from .syntax import apply_source_spacing, read_conllu_with_errors, to_conllu

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    words = spans = None
    unreadable = {}  # index of a gold sentence that cannot be read -> why
    if args.conllu:
        gold, errors = read_conllu_with_errors(args.conllu)
        unreadable = {err.number - 1: str(err) for err in errors}
        readable = iter(gold)
        gold = [None if i in unreadable else next(readable) for i in range(len(gold) + len(errors))]
        texts = ["" if a is None else a.text for a in gold]
        words = [[] if a is None else a.words for a in gold]
        if all(apply_source_spacing(text, model.config.source_spacing) == text for text in texts):
            spans = [[] if a is None else a.spans for a in gold]
    else:
        texts = _decoded_lines(_read_input(args.input), "annotate")
    keep = [i for i, text in enumerate(texts) if text.strip()]
    for i in sorted(set(range(len(texts))) - set(keep)):
        why = unreadable.get(i, f"line {i + 1} is empty")
        print(f"hf-syntax-mt annotate: {why} (no sentence written)", file=sys.stderr)
    parsed = parse_with_model(model, tokenizer, [texts[i] for i in keep],
                              words=None if words is None else [words[i] for i in keep],
                              spans=None if spans is None else [spans[i] for i in keep])
    for i, annotation in zip(keep, parsed):
        sys.stdout.write(to_conllu(annotation, sent_id=str(i + 1)) + "\n")
    return 0


def cmd_annotate(args) -> int:
    from .inference.pipeline import model_location

    tokenizer = config = None
    if args.model:
        from transformers import AutoConfig, AutoTokenizer

        import hf_syntax_mt  # noqa: F401

        model = model_location(args.model)
        config = AutoConfig.from_pretrained(model)
        if getattr(config, "self_parsing", False) and not args.parser:
            return _annotate_with_own_parser(args, model)
        tokenizer = AutoTokenizer.from_pretrained(model)
    lines = _read_input(args.input)
    annotator = _annotator(args)
    if args.model:
        if annotator is None and config.parser:
            from .syntax import load_annotator

            annotator = load_annotator(config.parser)
    if annotator is None:
        raise SystemExit("hf-syntax-mt annotate: give --parser, --conllu, or a --model whose config records a parser")
    from .features.syntax_features import SyntaxFeatureProcessor

    processor = None
    if tokenizer is not None:
        processor = SyntaxFeatureProcessor(tokenizer, needs_source_heads=True, needs_source_distances=True,
                                           distance_source=args.distance_source,
                                           source_spacing=getattr(config, "source_spacing", "as_is"))
    texts = _decoded_lines(lines, "annotate")
    annotations = annotator.annotate_each(processor.prepare_sources(texts) if processor is not None else texts)
    for number, (line, a) in enumerate(zip(texts, annotations), 1):
        if isinstance(a, ValueError):
            print(f"hf-syntax-mt annotate: line {number}: could not parse: {a} (its row gives the error)",
                  file=sys.stderr)
            sys.stdout.write(json.dumps({"line": number, "text": line, "error": str(a)}, ensure_ascii=False) + "\n")
            continue
        row = {"line": number, "text": line, "words": a.words, "heads": a.heads, "deprels": a.deprels,
               "sentence_ids": a.sentence_ids, "trees": a.trees}
        if a.words:
            row["word_distances"] = a.word_distances(args.distance_source)
            if processor is not None:
                features = processor(annotations=[a], return_tensors=None)
                row["tokens"] = tokenizer.convert_ids_to_tokens(features["input_ids"][0])
                row["source_heads"] = features["source_heads"][0]
                row["source_distances"] = features["source_distances"][0]
        sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
    return 0


def cmd_plot(args) -> int:
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_syntax_mt  # noqa: F401

    from .inference.pipeline import decode_line, model_location
    from .inference.plotting import plot_attention, plot_dependency_relations, plot_localized_mask, sentence_features
    from .syntax import load_annotator

    sentence, error = decode_line(args.sentence)
    if error is not None or not sentence.strip():
        raise SystemExit(f"hf-syntax-mt plot: --sentence is {error or 'empty'}: give the sentence to plot")
    model_dir = model_location(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir) if args.kind == "attention" else None
    config = model.config if model is not None else AutoConfig.from_pretrained(model_dir)
    if args.kind == "sla" and not config.sla_layers:
        raise SystemExit(f"hf-syntax-mt plot: --kind sla, but {model_dir} ({config.preset or 'this model'}) has no "
                         "localized attention (sla_layers is empty): choose --kind relations or attention")
    annotator = _annotator(args) or load_annotator(config.parser)
    if annotator is None:
        raise SystemExit("hf-syntax-mt plot: the model records no parser; give --parser or --conllu/--trees")
    features = sentence_features(sentence, tokenizer, annotator, distance_source=args.distance_source)
    if args.kind == "relations":
        scheme = config.dependency_relations or "depth"
        path = plot_dependency_relations(features, args.out, scheme, config.max_dependency_distance)
    elif args.kind == "sla":
        path = plot_localized_mask(features, args.out, config.sla_tau)
    else:
        path = plot_attention(model, features, args.out, layer=args.layer, head=args.head)
    print(path)
    return 0


def cmd_train(args, rest) -> int:
    """`hf-syntax-mt-train` (its flags, `--help` there)."""
    from .training.console import train_command

    return train_command(rest, prog="hf-syntax-mt train")


def cmd_average(args) -> int:
    from .training.checkpoint_averaging import average_checkpoints, last_checkpoints

    checkpoints = args.checkpoints if args.checkpoints else last_checkpoints(args.run_dir, args.last)
    print(average_checkpoints(checkpoints, args.out, overwrite=args.overwrite))
    return 0


def cmd_app(args) -> int:
    """`hf-syntax-mt app`: serve the page (until Ctrl-C), or write a Space folder with --export."""
    import importlib.util

    from .app import export_space, launch

    if len(args.model) > 2:
        raise SystemExit(f"hf-syntax-mt app: give one or two --model, not {len(args.model)}")
    if args.export:
        print(export_space(args.model, args.export))
        return 0
    if importlib.util.find_spec("gradio") is None:
        raise ImportError('the web page needs gradio: pip install "hf_syntax_mt[app]"')
    launch(args.model, host=args.host, port=args.port, share=args.share, device=_device(args.device, "app"))
    return 0


def cmd_demo(args) -> int:
    from .demo import DemoInterrupted, run_from_args

    try:
        run_from_args(args)
    except DemoInterrupted as stop:  # training printed where it stopped and how to resume
        return 128 + stop.signal_number
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="hf-syntax-mt", description="Syntax-aware Transformer NMT")
    subs = parser.add_subparsers(dest="command", required=True)  # subcommands: the same ArgumentParser class

    p = subs.add_parser("translate", help="translate sentences (one a line) from FILE or stdin")
    p.add_argument("--model", required=True, help="model directory or hub id")
    p.add_argument("--beams", type=positive_int, default=1, help="beam size (default 1 = greedy)")
    p.add_argument("--n-best", type=positive_int, default=1, metavar="K",
                   help="write the K best translations of each line, best first: K output lines an input line "
                        "(OpenNMT-py's -n_best; needs --beams K or more; --reference scores the best; default 1)")
    p.add_argument("--scores", action="store_true",
                   help="write each translation as 'i ||| translation ||| logprob= L ||| S' (Moses and Marian's "
                        "n-best format; i counts input lines from 0): L = log P(translation | source), S = L / its "
                        "length ** length_penalty, what the beam ranks by; nan for a line not translated")
    p.add_argument("--output", "-o", metavar="FILE", help="write the translations to FILE (default: stdout); an "
                                                           "existing FILE that is not empty is refused unless "
                                                           "--continue or --overwrite")
    p.add_argument("--continue", dest="continue_output", action="store_true",
                   help="with --output FILE: FILE holds the translations of the first input lines (a run that was "
                        "stopped; its lines are counted, K an input line with --n-best K): translate the rest and "
                        "append them")
    p.add_argument("--overwrite", action="store_true", help="with --output FILE: replace what FILE holds")
    p.add_argument("--batch-size", type=positive_int, default=16, help="sentences per batch (default 16)")
    p.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help="longest translation in subwords (default: the model's generation config)")
    p.add_argument("--max-length-a", type=float, help="cap each translation at A * source tokens + B subwords "
                                                       "(fairseq's --max-len-a/b; default: no cap)")
    p.add_argument("--max-length-b", type=float, help="the cap's offset B (default 0 when A is given)")
    p.add_argument("--threads", type=int, help=THREADS_HELP)
    p.add_argument("--device", help="where the model runs: cpu, cuda, cuda:1, mps (default: the first CUDA GPU if "
                                    "there is one, else the CPU, as fairseq does)")
    p.add_argument("--reference", metavar="FILE", help="reference translations (one a line): print corpus BLEU and chrF "
                                                       "(sacrebleu) on stderr at the end")
    p.add_argument("--bleu-tokenize", default="13a", help="sacrebleu's BLEU tokenizer for --reference (13a, intl, "
                                                          "ja-mecab, zh, char, none, ...; default 13a)")
    _add_parser_options(p)
    p.add_argument("input", nargs="?", help="input file (default: stdin)")

    p = subs.add_parser("annotate", help="dump parses and model features as JSON lines, or a self-parsing "
                                         "model's own trees as CoNLL-U")
    p.add_argument("--model", help="model directory: add subword tokens and the features the model gets; a "
                                   "self-parsing model without --parser prints its own trees as CoNLL-U (the words of "
                                   "--conllu, or the tokenizer's)")
    p.add_argument("--distance-source", default="auto", choices=DISTANCE_SOURCES)
    _add_parser_options(p)
    p.add_argument("input", nargs="?", help="input file (default: stdin)")

    p = subs.add_parser("plot", help="heatmap of dependency relations / SLA mask / an attention head for one sentence")
    p.add_argument("--model", required=True, help="model directory (tokenizer, config; weights for --kind attention)")
    p.add_argument("--sentence", required=True)
    p.add_argument("--kind", default="relations", choices=("relations", "sla", "attention"))
    p.add_argument("--layer", type=int, default=1, help="encoder layer (1-based) for --kind attention")
    p.add_argument("--head", type=int, default=0, help="head (0-based) for --kind attention")
    p.add_argument("--distance-source", default="auto", choices=DISTANCE_SOURCES)
    p.add_argument("--out", default="syntax_mt_plot.png")
    _add_parser_options(p)

    subs.add_parser("train", help="train a model (the flags of training/train.py; --help there)", add_help=False)

    p = subs.add_parser("average", help="average the weights of checkpoints into one model (prints its folder)")
    p.add_argument("--out", required=True, help="folder to write the averaged model to (a new or empty one)")
    p.add_argument("--overwrite", action="store_true", help="write into --out even if it is not empty (e.g. over the "
                                                            "run dir's trained model.safetensors)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoints", nargs="+", help="checkpoint folders to average")
    which.add_argument("--run-dir", help="a training output dir: average its last --last checkpoint-N folders")
    p.add_argument("--last", type=positive_int, help="with --run-dir: how many of the last checkpoints")

    p = subs.add_parser("app", help="a web page (Gradio) to translate with one or two models and see the parse and the "
                                    "attention; --export DIR writes a Hugging Face Space")
    p.add_argument("--model", action="append", required=True, help="model folder or Hub id (give two to compare them)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only; "
                                                      "0.0.0.0 for every network it is on)")
    p.add_argument("--port", type=positive_int, help="port (default: the first free one from 7860)")
    p.add_argument("--share", action="store_true", help="also ask Gradio for a public link (off by default)")
    p.add_argument("--device", help="where the models run: cpu, cuda, cuda:1, mps (default: the first CUDA GPU if "
                                    "there is one, else the CPU)")
    p.add_argument("--export", metavar="DIR", help="write a folder that runs as a Hugging Face Space instead of serving")

    p = subs.add_parser("demo", help="offline demo: synthetic corpus, abs vs. dep_rel, BLEU, sample translations")
    from .demo import add_arguments

    add_arguments(p)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] == "train":
        return cmd_train(None, argv[1:])
    args = parser.parse_args(argv)
    if args.command == "average" and (args.run_dir is None) != (args.last is None):
        parser.error("average: --run-dir and --last go together (or give --checkpoints)")
    if args.command != "demo":
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the weight-loading bar; the commands' own output is what counts
    commands = {"translate": cmd_translate, "annotate": cmd_annotate, "plot": cmd_plot, "average": cmd_average,
                "app": cmd_app, "demo": cmd_demo}
    try:
        return commands[args.command](args)
    except SystemExit as stop:
        if not isinstance(stop.code, str):
            raise
        print(stop.code, file=sys.stderr)  # a user error, explained in one line
        return 2
    except BrokenPipeError:  # the reader of stdout went away (`| head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush then writes nowhere
        return 128 + signal.SIGPIPE
    except (ValueError, ImportError, OSError, SafetensorError) as err:  # SafetensorError: a damaged weights file
        print(f"hf-syntax-mt {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside what a command handles itself (training saves a checkpoint)
        print(f"hf-syntax-mt {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
