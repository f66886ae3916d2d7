"""Training throughput, peak memory, decoding time and raw-text pipeline throughput of every preset,
relative to `transformer_abs` and to a same-size `MarianMTModel`, measured in one run of this script.

    python benchmarks/speed.py [--lengths 32 64 128 256] [--memory-lengths ...] [--batch-size 16 | --tokens-per-batch 2048]
        [--rounds 5] [--threads 2] [--presets transformer_abs transformer_rel ...]
        [--parts memory,time,decode,pipeline,long_decode] [--pipeline-text FILE --pipeline-parser ja_ginza]
        [--output benchmarks/results/speed.json]

Size as the issue-6 recipe (d_model 256, 3+3 layers, 4 heads, ffn 1024, vocab 8000), 2 threads,
source length n, target length n, random dependency trees and distances as syntax features; a batch
of `--batch-size` sentences, or of `--tokens-per-batch` // n sentences (the same tokens at every n).

- Time: every system is built in ONE process and timed in interleaved rounds (one AdamW step of
  each system per round, the order rotating), so that the machine's drift hits all systems
  alike; a ratio is the median over rounds of the per-round ratio. Training tokens/s counts
  source + target tokens of the batch.
- Memory: each system runs in its own subprocess with `MALLOC_MMAP_THRESHOLD_` fixed, so that
  freed tensors return to the OS and the peak resident set of a step (VmHWM after resetting it
  through /proc/self/clear_refs, minus the resident set before the step) is its peak memory.
- Decoding: beam 4 (and greedy), `--decode-sentences` sentences of 30 tokens × `--decode-new` new tokens (32 × 30),
  interleaved like training.
- Long-sentence decoding (`long_decode`, not a default part): beam-4 translation of the first
  `--long-sentences` lines of KFTT dev (`--long-source`, tokenized by `--long-tokenizer`), batches of
  `--long-batch-size` sentences sorted by source length, random trees and distances of the right
  lengths as syntax features; each batch generates exactly as many tokens as its longest reference
  (`--long-reference`) has (min_new_tokens = max_new_tokens), so every system decodes the same number
  of steps. Interleaved like training; sentences/s.
- Pipeline: raw sentences → translations through `pipeline("syntax-translation")` (beam 4, 20 new
  tokens, batch 32), with the time spent in the parser measured separately; presets that need no
  parser at inference (abs, DBSA, and `<preset>@self`, the preset with its own parse module, SPEC §9,
  whose untrained parser decodes a tree of random scores) skip it. The text defaults to ../shared's small_parallel_enja dev
  set with its spaces removed (raw Japanese) parsed by GiNZA; `--pipeline-parser` may also name a
  CoNLL-U file of pre-parsed sentences. The models are untrained, hence the fixed output length.
"""

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import SIZE, cpu_name, describe_size, machine, write_json
from results_md import write_section

DEFAULT_PRESETS = [
    "transformer_abs",
    "transformer_rel",
    "transformer_dep",
    "transformer_dep_rel",
    "transformer_dep_labeled",
    "transformer_dep_labeled_rel",
    "transformer_dbsa_enc",
    "transformer_dbsa_dec",
    "transformer_dbsa",
    "transformer_sla",
    "transformer_dep_rel+transformer_dbsa+transformer_sla",
    "transformer_dep_rel@self",
]
MARIAN = "marian"
CHECKPOINTED = "@checkpointed"  # suffix of a preset: the same model under activation_checkpointing_enable()
SELF_PARSING = "@self"  # suffix of a preset: the same model with its own source parser (self_parsing=True)
KEYS = "@keys"  # suffix of a preset: its relation terms on the keys only (no value terms, seed 000's Table 3)
KEYS_ONLY = {"relative_value_term": False, "dependency_value_term": False}
FLEX = "@flex"  # suffix: attn_implementation="flex_attention", relation ids made with the batch (the GPU recipe)
BASELINE = "transformer_abs"
REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DEFAULT_PIPELINE_TEXT = SHARED / "data" / "small_parallel_enja" / "dev.ja"
GINZA_DISABLE = ["ner", "morphologizer", "compound_splitter", "bunsetu_recognizer"]


def _memory_kb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_memory():
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def _build(system, size):
    import torch

    torch.manual_seed(0)
    if system == MARIAN:
        from transformers import MarianConfig, MarianMTModel

        config = MarianConfig(
            **size,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
            forced_eos_token_id=None,
            share_encoder_decoder_embeddings=True,
        )
        return MarianMTModel(config), config
    if system.endswith(FLEX):
        model, config = _build(system[: -len(FLEX)], size)
        model.set_attn_implementation("flex_attention")
        return model, config
    if system.endswith(CHECKPOINTED):
        model, config = _build(system[: -len(CHECKPOINTED)], size)
        model.activation_checkpointing_enable()
        return model, config
    from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration

    if system.endswith(SELF_PARSING):
        config = SyntaxMTConfig.from_preset(system[: -len(SELF_PARSING)], self_parsing=True, **size)
        return SyntaxMTForConditionalGeneration(config), config
    if system.endswith(KEYS):
        config = SyntaxMTConfig.from_preset(system[: -len(KEYS)], **size, **KEYS_ONLY)
        return SyntaxMTForConditionalGeneration(config), config
    config = SyntaxMTConfig.from_preset(system, **size)
    return SyntaxMTForConditionalGeneration(config), config


def _batch(config, batch_size, length, seed=0, target_length=None):
    """Random ids and syntax features: source `length`, target `target_length` (default `length`)."""
    import torch

    from hf_syntax_mt.features.synthetic import random_dependency_tree

    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    words, target_length = length - 1, target_length or length
    input_ids = torch.randint(3, config.vocab_size, (batch_size, length), generator=generator)
    input_ids[:, -1] = 1
    labels = torch.randint(3, config.vocab_size, (batch_size, target_length), generator=generator)
    labels[:, -1] = 1
    batch = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels)
    if getattr(config, "needs_source_heads", False):
        batch["source_heads"] = torch.tensor([random_dependency_tree(words, rng) + [-100] for _ in range(batch_size)])
    if getattr(config, "needs_source_distances", False):
        distances = torch.randint(1, 8, (batch_size, length), generator=generator).float()
        distances[:, -2:] = 2000.0
        batch["source_distances"] = distances
    if getattr(config, "needs_target_heads", False):
        batch["target_heads"] = torch.tensor([random_dependency_tree(target_length - 1, rng) + [-100]
                                              for _ in range(batch_size)])
    if getattr(config, "_attn_implementation", None) == "flex_attention":  # `FLEX`: ids made as the collator does
        from hf_syntax_mt.relation_attention import SourceRelationIds

        batch = SourceRelationIds(config)(batch)
    return batch


def _training_step(model, optimizer, batch, bf16=False, device_type="cpu"):
    import torch

    def step():
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _interleaved(functions, rounds):
    """Run each function once per round, the order rotating; returns {name: [seconds per round]}."""
    names = list(functions)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            start = time.perf_counter()
            functions[name]()
            times[name].append(time.perf_counter() - start)
    return times


def measure_memory(system, lengths, batch_size, size, tokens_per_batch=None):
    """Peak memory of one training step at every length (runs alone in a subprocess)."""
    import torch

    model, config = _build(system, size)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    memory = {}
    for length in lengths:
        step = _training_step(model, optimizer, _batch(config, _batch_size(length, batch_size, tokens_per_batch), length))
        step()  # warm-up, creates the optimizer state
        _reset_peak_memory()  # VmHWM := VmRSS; the kernel syncs RSS counters lazily, so a tiny
        before = _memory_kb("VmRSS")  # step can still read a few pages below 0
        step()
        memory[length] = (_memory_kb("VmHWM") - before) / 1024
    return memory


def _batch_size(length, batch_size, tokens_per_batch):
    return max(1, tokens_per_batch // length) if tokens_per_batch else batch_size


def measure_time(systems, lengths, batch_size, rounds, size, tokens_per_batch=None):
    """Interleaved training-step times of all systems (one process)."""
    import torch

    built = {system: _build(system, size) for system in systems}
    train = {system: {} for system in systems}
    for length in lengths:
        steps = {}
        sentences = _batch_size(length, batch_size, tokens_per_batch)
        for system, (model, config) in built.items():
            model.train()
            steps[system] = _training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-4), _batch(config, sentences, length))
            steps[system]()  # warm-up
        times = _interleaved(steps, rounds)
        for system in systems:
            train[system][length] = {"step_s": times[system], "tokens": 2 * sentences * length}
        print(f"timed n={length}", file=sys.stderr, flush=True)
    return {"train": train}


def measure_decode(systems, rounds, size, sentences=32, new_tokens=30):
    """Interleaved beam-4 and greedy decoding times of all systems (one process): `sentences` of 30 tokens, exactly
    `new_tokens` new tokens each (recorded with the times)."""
    import torch

    built = {system: _build(system, size) for system in systems}
    decode = {system: {"sentences": sentences, "new_tokens": new_tokens} for system in systems}
    with torch.no_grad():
        for beams in (1, 4):
            calls = {}
            for system, (model, config) in built.items():
                model.eval()
                inputs = {k: v for k, v in _batch(config, sentences, 30, seed=1).items()
                          if k not in ("labels", "target_heads")}
                calls[system] = lambda model=model, inputs=inputs: model.generate(
                    **inputs, num_beams=beams, max_new_tokens=new_tokens, min_new_tokens=new_tokens
                )
                calls[system]()  # warm-up
            for system, seconds in _interleaved(calls, max(2, rounds // 2)).items():
                decode[system][f"beam{beams}_s"] = seconds
    return decode


def _long_batches(size, source, reference, tokenizer_path, sentences, batch_size):
    """Token ids of the first `sentences` lines of `source` in batches sorted by length, each with the number of
    tokens to generate (its longest reference's length) and random syntax features of the right lengths."""
    import torch
    from transformers import AutoTokenizer

    from hf_syntax_mt.features.synthetic import random_dependency_tree

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    if len(tokenizer) > size["vocab_size"]:
        raise ValueError(f"{tokenizer_path} has {len(tokenizer)} tokens; the model has {size['vocab_size']}")
    sources = Path(source).read_text(encoding="utf-8").splitlines()[:sentences]
    references = Path(reference).read_text(encoding="utf-8").splitlines()[:sentences]
    source_ids = [tokenizer(line)["input_ids"] for line in sources]
    target_lengths = [len(tokenizer(line)["input_ids"]) for line in references]
    order = sorted(range(len(source_ids)), key=lambda i: len(source_ids[i]))
    rng, generator, batches = random.Random(0), torch.Generator().manual_seed(0), []
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(source_ids[i]) for i in rows)
        input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
        attention_mask = torch.zeros_like(input_ids)
        heads = torch.full_like(input_ids, -100)
        distances = torch.full((len(rows), width), 2000.0)
        for row, i in enumerate(rows):
            length = len(source_ids[i])
            input_ids[row, :length] = torch.tensor(source_ids[i])
            attention_mask[row, :length] = 1
            heads[row, : length - 1] = torch.tensor(random_dependency_tree(length - 1, rng))
            distances[row, : length - 2] = torch.randint(1, 8, (max(length - 2, 0),), generator=generator).float()
        features = dict(input_ids=input_ids, attention_mask=attention_mask, source_heads=heads, source_distances=distances)
        batches.append((features, max(target_lengths[i] for i in rows)))
    return batches


def measure_long_decode(systems, rounds, size, source, reference, tokenizer_path, sentences, batch_size):
    """Interleaved beam-4 translation of long real sentences (see the module doc) by all systems (one process)."""
    import torch

    batches = _long_batches(size, source, reference, tokenizer_path, sentences, batch_size)

    def translate(model, config, selected=batches, new_tokens=None):
        names = {"input_ids", "attention_mask"}
        names |= {"source_heads"} if getattr(config, "needs_source_heads", False) else set()
        names |= {"source_distances"} if getattr(config, "needs_source_distances", False) else set()
        with torch.no_grad():
            for features, batch_tokens in selected:
                tokens = new_tokens or batch_tokens
                model.generate(**{k: v for k, v in features.items() if k in names}, num_beams=4,
                               max_new_tokens=tokens, min_new_tokens=tokens)

    calls = {}
    for system in systems:
        model, config = _build(system, size)
        model.eval()
        translate(model, config, batches[:1], new_tokens=2)  # warm-up
        calls[system] = lambda model=model, config=config: translate(model, config)
    times = _interleaved(calls, rounds)
    generated = sum(features["input_ids"].shape[0] * new_tokens for features, new_tokens in batches)
    return {system: {"sentences": sum(f["input_ids"].shape[0] for f, _ in batches), "generated_tokens": generated,
                     "total_s": times[system]} for system in systems}


def _pipeline_annotator(parser):
    from hf_syntax_mt import PreParsedAnnotator, SpacyAnnotator

    if parser.endswith(".conllu"):
        return PreParsedAnnotator.from_conllu(Path(parser))
    return SpacyAnnotator(parser, disable=GINZA_DISABLE if parser == "ja_ginza" else ())


def _timed_annotator(annotator):
    """An annotator that delegates to `annotator` (one parser in memory for every pipeline) and adds
    up the seconds spent in it."""
    from hf_syntax_mt import Annotator

    class TimedAnnotator(Annotator):
        name = "timed"

        def __init__(self):
            self.seconds = 0.0

        def settings(self):
            return {}

        def annotate(self, texts):
            start = time.perf_counter()
            out = annotator.annotate(texts)
            self.seconds += time.perf_counter() - start
            return out

    return TimedAnnotator()


def measure_pipeline(systems, texts, parser, rounds, size, batch_size=32, new_tokens=20):
    """Raw text -> translation through the pipeline, interleaved; parser time recorded separately."""
    from transformers import pipeline

    from hf_syntax_mt import train_joint_bpe_tokenizer

    tokenizer = train_joint_bpe_tokenizer(texts, vocab_size=size["vocab_size"])
    annotator = _pipeline_annotator(parser)
    timers, calls = {}, {}
    for system in systems:
        model, config = _build(system, size)
        model.eval()
        if config.needs_parser_at_inference:
            timers[system] = _timed_annotator(annotator)
        translate = pipeline("syntax-translation", model=model, tokenizer=tokenizer, annotator=timers.get(system))
        calls[system] = lambda translate=translate: translate(
            texts, batch_size=batch_size, num_beams=4, max_new_tokens=new_tokens, min_new_tokens=new_tokens
        )
        translate(texts[:batch_size], batch_size=batch_size, max_new_tokens=2)  # warm-up, loads the parser
    for timer in timers.values():
        timer.seconds = 0.0
    times = _interleaved(calls, rounds)
    return {
        system: {"sentences": len(texts), "total_s": times[system],
                 "parser_s": timers[system].seconds / rounds if system in timers else 0.0}
        for system in systems
    }


def _median_ratio(numerators, denominators):
    return statistics.median(a / b for a, b in zip(numerators, denominators))


def _ratio(numerator, denominator):
    return f"{numerator / denominator:.2f}" if denominator else "n/a"


def format_tables(results, lengths, presets, memory_lengths=None):
    """Markdown tables: training step time and memory, decoding, pipeline, long-sentence decoding (see module doc);
    a system missing from a part's results (added after that part was last measured) has no row there."""
    train, memory = results["time"]["train"], results["memory"]
    memory_lengths = memory_lengths or lengths
    systems = [MARIAN] + presets
    header = ["| system | " + " | ".join(f"n={n} step time ×abs / ×Marian" for n in lengths)
              + " | " + " | ".join(f"n={n} memory ×abs / ×Marian" for n in memory_lengths) + " |",
              "|---|" + "---|" * (len(lengths) + len(memory_lengths))]
    rows = []
    for system in systems:
        if system not in train or system not in memory:  # not measured in the run that made the JSON
            continue
        speed_cells = [
            f"{_median_ratio(train[system][n]['step_s'], train[BASELINE][n]['step_s']):.2f} / "
            f"{_median_ratio(train[system][n]['step_s'], train[MARIAN][n]['step_s']):.2f}"
            if all(n in train[s] for s in (system, BASELINE, MARIAN)) else "–"
            for n in lengths
        ]
        memory_cells = [f"{_ratio(memory[system][n], memory[BASELINE][n])} / {_ratio(memory[system][n], memory[MARIAN][n])}"
                        if all(n in memory[s] for s in (system, BASELINE, MARIAN)) else "–" for n in memory_lengths]
        rows.append(f"| {system} | " + " | ".join(speed_cells + memory_cells) + " |")
    absolute = ["", "Absolute figures of the baselines (medians):"]
    for system in (MARIAN, BASELINE):
        timed, measured = train.get(system, {}), memory.get(system, {})  # a run of some parts has the others empty
        absolute.append(f"- {system}: " + ", ".join(
            f"n={n}: {timed[n]['tokens'] / statistics.median(timed[n]['step_s']):,.0f} tokens/s "
            f"({statistics.median(timed[n]['step_s']) * 1000:.0f} ms/step)" for n in lengths if n in timed)
            + "; peak memory " + ", ".join(f"n={n}: {measured[n]:.0f} MB" for n in memory_lengths if n in measured))

    decode = results["time"].get("decode", {})
    decode_lines = ["", "| system | beam-4 decode time ×Marian | ×abs | greedy ×Marian | beam-4 s (median) |", "|---|---|---|---|---|"]
    for system in systems:
        if system not in decode:
            continue
        d = decode[system]
        decode_lines.append(
            f"| {system} | {_median_ratio(d['beam4_s'], decode[MARIAN]['beam4_s']):.2f} | "
            f"{_median_ratio(d['beam4_s'], decode[BASELINE]['beam4_s']):.2f} | "
            f"{_median_ratio(d['beam1_s'], decode[MARIAN]['beam1_s']):.2f} | {statistics.median(d['beam4_s']):.2f} |"
        )

    lines = header + rows + absolute + decode_lines
    long_decode = results.get("long_decode")
    if long_decode:
        lines += ["", "| system | long-sentence beam-4 sentences/s | ×abs | ×Marian |", "|---|---|---|---|"]
        for system in systems:
            if system not in long_decode:
                continue
            d = long_decode[system]
            lines.append(
                f"| {system} | {d['sentences'] / statistics.median(d['total_s']):.2f} | "
                f"{_median_ratio(long_decode[BASELINE]['total_s'], d['total_s']):.2f} | "
                f"{_median_ratio(long_decode[MARIAN]['total_s'], d['total_s']):.2f} |"
            )
    pipeline = results.get("pipeline")
    if pipeline:
        lines += ["", "| system | pipeline sentences/s | ×abs | parser s / model s per call | parser share |", "|---|---|---|---|---|"]
        for system in presets:
            if system not in pipeline:
                continue
            p = pipeline[system]
            total = statistics.median(p["total_s"])
            lines.append(
                f"| {system} | {p['sentences'] / total:.1f} | {_median_ratio(pipeline[BASELINE]['total_s'], p['total_s']):.2f} | "
                f"{p['parser_s']:.2f} / {total - p['parser_s']:.2f} | {p['parser_s'] / total:.0%} |"
            )
    return "\n".join(lines)


def _worker_environment(part):
    """Environment of a worker subprocess. Memory workers only get a 64 KB mmap threshold: glibc then
    maps every larger block on its own and unmaps it when freed, so the resident set follows the live
    tensors. Not for timing: re-mapping every large tensor each step added ≈45% to abs's step time and
    inflated the ratios of presets with more n×n tensors (rel ×abs at n=256: 1.22 with it, 1.16 without)."""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    environment.pop("MALLOC_MMAP_THRESHOLD_", None)
    if part == "memory":
        environment["MALLOC_MMAP_THRESHOLD_"] = "65536"
    return environment


def _worker_output(command, environment):
    completed = subprocess.run(command, capture_output=True, text=True, env=environment)
    if completed.returncode:
        raise RuntimeError(f"{' '.join(command[2:5])} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _int_keys(table):
    return {int(k): v for k, v in table.items()}


def _parse_size(text):
    size = dict(SIZE)
    for item in filter(None, (text or "").split(",")):
        key, value = item.split("=")
        if key not in SIZE:
            raise ValueError(f"unknown size key {key!r}; expected one of {sorted(SIZE)}")
        size[key] = type(SIZE[key])(value)
    return size


def _merge(old, new):
    """Per-system, per-length results of a part: the new lengths replace the old ones, the others stay."""
    merged = {system: _int_keys(lengths) for system, lengths in (old or {}).items()}
    for system, lengths in new.items():
        merged.setdefault(system, {}).update(_int_keys(lengths))
    return merged


DEFAULT_PARTS = "memory,time,decode,pipeline"
KFTT = SHARED / "data" / "kftt"
DEFAULT_LONG_TOKENIZER = next(iter(sorted((REPO.parent / "runs" / "quality" / "kftt.ja-en").glob("tokenizer-*"))), None)


def recorded_command(argv: list[str]) -> str:
    """The arguments as a shell would take them back (quoted), without `--note`, whose text is written beside
    the tables anyway."""
    from hf_syntax_mt.training.command_line import without_option

    return shlex.join(without_option(argv, "--note"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--memory-lengths", type=int, nargs="+", default=None, help="default: --lengths")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--tokens-per-batch", type=int, default=None, help="batch of this // n sentences at length n")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every worker")
    parser.add_argument("--presets", nargs="+", default=DEFAULT_PRESETS)
    parser.add_argument("--size", default=None, help="model size overrides, key=value,... (tests)")
    parser.add_argument("--decode-sentences", type=int, default=32)
    parser.add_argument("--decode-new", type=int, default=30, help="new tokens each decoded sentence gets")
    parser.add_argument("--pipeline-text", default=str(DEFAULT_PIPELINE_TEXT), help="raw sentences, one a line ('' to skip)")
    parser.add_argument("--pipeline-sentences", type=int, default=256)
    parser.add_argument("--pipeline-despace", action=argparse.BooleanOptionalAction, default=None,
                        help="remove spaces from the text (default: on for the default ja text)")
    parser.add_argument("--pipeline-parser", default="ja_ginza", help="spaCy pipeline name or a .conllu file")
    parser.add_argument("--long-source", default=str(KFTT / "dev.ja"))
    parser.add_argument("--long-reference", default=str(KFTT / "dev.en"))
    parser.add_argument("--long-tokenizer", default=str(DEFAULT_LONG_TOKENIZER or ""))
    parser.add_argument("--long-sentences", type=int, default=200)
    parser.add_argument("--long-batch-size", type=int, default=32)
    parser.add_argument("--parts", default=DEFAULT_PARTS,
                        help="what to measure, of memory,time,decode,pipeline,long_decode ('none': only rewrite the "
                             "tables); the other parts (and other lengths of memory and time) are read from --output")
    parser.add_argument("--note", default="", help="a sentence on the conditions, written with the tables")
    parser.add_argument("--output", default="benchmarks/results/speed.json")
    parser.add_argument("--results-md", default="model_cards/RESULTS.md", help="write the tables there ('' to skip)")
    parser.add_argument("--worker", choices=["memory", "time", "decode", "pipeline", "long_decode"], help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size = _parse_size(args.size)
    presets = list(dict.fromkeys([BASELINE] + args.presets))
    memory_lengths = args.memory_lengths or args.lengths
    texts, despace = None, False
    if args.pipeline_text and Path(args.pipeline_text).exists():
        lines = Path(args.pipeline_text).read_text(encoding="utf-8").splitlines()[: args.pipeline_sentences]
        despace = args.pipeline_despace if args.pipeline_despace is not None else Path(args.pipeline_text) == DEFAULT_PIPELINE_TEXT
        texts = [line.replace(" ", "") if despace else line for line in lines]

    if args.worker:
        import torch

        torch.set_num_threads(args.threads)
        systems = [MARIAN] + presets
        work = {
            "memory": lambda: measure_memory(args.system, memory_lengths, args.batch_size, size, args.tokens_per_batch),
            "time": lambda: measure_time(systems, args.lengths, args.batch_size, args.rounds, size, args.tokens_per_batch),
            "decode": lambda: measure_decode(systems, args.rounds, size, args.decode_sentences, args.decode_new),
            "pipeline": lambda: measure_pipeline(presets, texts, args.pipeline_parser, max(3, args.rounds // 2), size),
            "long_decode": lambda: measure_long_decode(systems, args.rounds, size, args.long_source, args.long_reference,
                                                       args.long_tokenizer, args.long_sentences, args.long_batch_size),
        }
        print(json.dumps(work[args.worker]()))
        return None

    base = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
    parts = set(args.parts.split(",")) - {"none"}
    command = "python benchmarks/speed.py " + recorded_command(argv if argv is not None else sys.argv[1:])
    results = {}
    if not parts >= set(DEFAULT_PARTS.split(",")):  # the other parts come from the previous run's JSON
        results = json.loads(Path(args.output).read_text())["results"]
        results["memory"] = _merge(results["memory"], {})
        results["time"]["train"] = _merge(results["time"]["train"], {})
    if "memory" in parts:
        for system in [MARIAN] + presets:
            command_line = base + ["--worker", "memory", "--system", system]
            measured = {system: _worker_output(command_line, _worker_environment("memory"))}
            results["memory"] = _merge(results.get("memory"), measured)
            print(f"memory measured: {system}", file=sys.stderr, flush=True)
    if "time" in parts:
        train = _worker_output(base + ["--worker", "time"], _worker_environment("time"))["train"]
        results.setdefault("time", {})["train"] = _merge(results.get("time", {}).get("train"), train)
    if "decode" in parts:
        results.setdefault("time", {})["decode"] = _worker_output(base + ["--worker", "decode"], _worker_environment("time"))
    if "pipeline" in parts and texts:
        results["pipeline"] = _worker_output(base + ["--worker", "pipeline"], _worker_environment("pipeline"))
    elif "pipeline" in parts:
        print(f"pipeline skipped: no text at {args.pipeline_text!r}", file=sys.stderr)
    if "long_decode" in parts:
        results["long_decode"] = _worker_output(base + ["--worker", "long_decode"], _worker_environment("time"))

    commands = results.get("commands", {})
    for part in parts:  # memory and time keep the commands of the lengths measured earlier
        previous = commands.get(part, []) if part in ("memory", "time") else []
        previous = [previous] if isinstance(previous, str) else previous
        commands[part] = list(dict.fromkeys(previous + [command.strip()]))
    results["commands"] = commands
    settings = {k: v for k, v in vars(args).items() if k not in ("worker", "system")} | {"size": size,
                                                                                       "machine": machine()}
    write_json(args.output, {"settings": settings, "results": results})  # kept should the tables fail
    tables = format_tables(results, args.lengths, presets, memory_lengths)
    batch = f"{args.tokens_per_batch} tokens per batch" if args.tokens_per_batch else f"batch {args.batch_size} sentences"
    print(f"{batch}, source = target length n, {args.rounds} interleaved rounds, {args.threads} threads\n")
    print(tables)
    if args.results_md:
        listed = []
        for part in ("memory", "time", "decode", "pipeline", "long_decode"):
            part_commands = commands.get(part)
            if part_commands:
                part_commands = [part_commands] if isinstance(part_commands, str) else part_commands
                listed.append(f"{part}: " + ", ".join(f"`{c}`" for c in part_commands))
        batch_text = (f"a batch of {args.tokens_per_batch} // n sentences (the same tokens at every n)" if args.tokens_per_batch
                      else f"a batch of {args.batch_size} sentences")
        long_text = ""
        decoded = next(iter(results["time"]["decode"].values()))  # the run that measured it (older JSONs: 32 × 30)
        if "long_decode" in results:
            first = next(iter(results["long_decode"].values()))
            long_text = (f" Long-sentence decoding: the first {first['sentences']} lines of "
                         f"`{os.path.relpath(args.long_source, REPO)}` tokenized by the KFTT recipe's tokenizer, beam 4, batches of "
                         f"{args.long_batch_size} sorted by source length, each generating exactly the subword length of "
                         f"its longest reference ({first['generated_tokens']:,} tokens in all), random trees and distances "
                         "of the right lengths, untrained models.")
        write_section(args.results_md, "speed", "\n".join([
            "## Speed and memory", "",
            f"Generated on {time.strftime('%Y-%m-%d')} by {'; '.join(listed)} ({args.threads} CPU thread{'s' if args.threads != 1 else ''}, {cpu_name()}). "
            f"{args.note + ' ' if args.note else ''}Raw figures in "
            f"`{args.output}`. Model of the issue-6 recipe size ({describe_size(size)}); training: one AdamW step "
            f"on {batch_text} with source = target length n, timed in {args.rounds} "
            "interleaved rounds in one process (cells: median over rounds of the step time's ratio to `transformer_abs` / "
            "to a same-size `MarianMTModel`, so < 1 is faster); "
            "memory: peak resident set of one step above the set before it, each system alone in a subprocess "
            f"(ratio < 1 uses less). Decoding: {decoded.get('sentences', 32)} sentences × "
            f"{decoded.get('new_tokens', 30)} new tokens. "
            "Pipeline: "
            f"{len(texts or [])} raw sentences of `{os.path.relpath(args.pipeline_text, REPO)}`"
            f"{' (spaces removed)' if texts and despace else ''} parsed by `{args.pipeline_parser}`, untrained "
            f"models, beam 4, 20 new tokens, batch 32.{long_text}", "", tables]))
    write_json(args.output, {"settings": settings, "results": results, "tables": tables})
    return results


if __name__ == "__main__":
    main()
