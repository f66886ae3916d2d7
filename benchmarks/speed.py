"""Training throughput, peak memory, decoding time and raw-text pipeline throughput of every preset,
relative to `transformer_abs` and to a same-size `MarianMTModel`, measured in one run of this script.

    python benchmarks/speed.py [--lengths 32 64 128 256] [--batch-size 16] [--rounds 5]
        [--presets transformer_abs transformer_rel ...] [--pipeline-text FILE --pipeline-parser ja_ginza]
        [--output benchmarks/results/speed.json]

Size as the issue-6 recipe (d_model 256, 3+3 layers, 4 heads, ffn 1024, vocab 8000), 2 threads,
source length n, target length n, random dependency trees and distances as syntax features.

- Time: every system is built in ONE process and timed in interleaved rounds (one AdamW step of
  each system per round, the order rotating), so that the machine's drift hits all systems
  alike; a ratio is the median over rounds of the per-round ratio. Training tokens/s counts
  source + target tokens of the batch.
- Memory: each system runs in its own subprocess with `MALLOC_MMAP_THRESHOLD_` fixed, so that
  freed tensors return to the OS and the peak resident set of a step (VmHWM after resetting it
  through /proc/self/clear_refs, minus the resident set before the step) is its peak memory.
- Decoding: beam 4 (and greedy), 32 sentences × 30 new tokens, interleaved like training.
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
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results_md import write_section

SIZE = dict(
    vocab_size=8000,
    d_model=256,
    encoder_layers=3,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=1024,
    decoder_ffn_dim=1024,
    dropout=0.1,
    max_position_embeddings=1024,
)
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
    if system.endswith(CHECKPOINTED):
        model, config = _build(system[: -len(CHECKPOINTED)], size)
        model.activation_checkpointing_enable()
        return model, config
    from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration

    if system.endswith(SELF_PARSING):
        config = SyntaxMTConfig.from_preset(system[: -len(SELF_PARSING)], self_parsing=True, **size)
        return SyntaxMTForConditionalGeneration(config), config
    config = SyntaxMTConfig.from_preset(system, **size)
    return SyntaxMTForConditionalGeneration(config), config


def _batch(config, batch_size, length, seed=0, target_length=None):
    """Random ids and syntax features: source `length`, target `target_length` (default `length`)."""
    import torch

    from hf_syntax_mt.synthetic import random_dependency_tree

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
    return batch


def recipe_training_step(preset, bf16, attn_implementation="sdpa"):
    """One AdamW step of `preset` at the recipe size (SIZE) on a typical ja–en batch: 64 sentences,
    source 16 / target 14 subwords; warmed up once, ready to time."""
    import torch

    torch.manual_seed(0)
    model, config = _build(preset, {**SIZE, "attn_implementation": attn_implementation})
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = _training_step(model, optimizer, _batch(config, 64, 16, target_length=14), bf16=bf16)
    step()
    return step


def _training_step(model, optimizer, batch, bf16=False):
    import torch

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
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


def measure_memory(system, lengths, batch_size, size):
    """Peak memory of one training step at every length (runs alone in a subprocess)."""
    import torch

    torch.set_num_threads(2)
    model, config = _build(system, size)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    memory = {}
    for length in lengths:
        step = _training_step(model, optimizer, _batch(config, batch_size, length))
        step()  # warm-up, creates the optimizer state
        _reset_peak_memory()  # VmHWM := VmRSS; the kernel syncs RSS counters lazily, so a tiny
        before = _memory_kb("VmRSS")  # step can still read a few pages below 0
        step()
        memory[length] = (_memory_kb("VmHWM") - before) / 1024
    return memory


def measure_time(systems, lengths, batch_size, rounds, size):
    """Interleaved training-step and decoding times of all systems (one process)."""
    import torch

    torch.set_num_threads(2)
    built = {system: _build(system, size) for system in systems}
    train = {system: {} for system in systems}
    for length in lengths:
        steps = {}
        for system, (model, config) in built.items():
            model.train()
            steps[system] = _training_step(model, torch.optim.AdamW(model.parameters(), lr=1e-4), _batch(config, batch_size, length))
            steps[system]()  # warm-up
        times = _interleaved(steps, rounds)
        for system in systems:
            train[system][length] = {"step_s": times[system], "tokens": 2 * batch_size * length}
        print(f"timed n={length}", file=sys.stderr, flush=True)

    decode = {system: {} for system in systems}
    with torch.no_grad():
        for beams in (1, 4):
            calls = {}
            for system, (model, config) in built.items():
                model.eval()
                inputs = {k: v for k, v in _batch(config, 32, 30, seed=1).items() if k not in ("labels", "target_heads")}
                calls[system] = lambda model=model, inputs=inputs: model.generate(
                    **inputs, num_beams=beams, max_new_tokens=30, min_new_tokens=30
                )
                calls[system]()  # warm-up
            for system, seconds in _interleaved(calls, max(2, rounds // 2)).items():
                decode[system][f"beam{beams}_s"] = seconds
    return {"train": train, "decode": decode}


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
    import torch
    from transformers import pipeline

    from hf_syntax_mt import train_joint_bpe_tokenizer

    torch.set_num_threads(2)
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


def format_tables(results, lengths, presets):
    """Markdown tables: training tokens/s and memory, decoding, pipeline (see module doc); a system missing
    from a part's results (added after that part was last measured) has no row there."""
    train, memory = results["time"]["train"], results["memory"]
    systems = [MARIAN] + presets
    header = ["| system | " + " | ".join(f"n={n} tokens/s ×abs / ×Marian" for n in lengths)
              + " | " + " | ".join(f"n={n} memory ×abs / ×Marian" for n in lengths) + " |",
              "|---|" + "---|" * (2 * len(lengths))]
    rows = []
    for system in systems:
        if system not in train or system not in memory:  # not measured in the run that made the JSON
            continue
        speed_cells = [
            f"{_median_ratio(train[BASELINE][n]['step_s'], train[system][n]['step_s']):.2f} / "
            f"{_median_ratio(train[MARIAN][n]['step_s'], train[system][n]['step_s']):.2f}"
            for n in lengths
        ]
        memory_cells = [f"{_ratio(memory[system][n], memory[BASELINE][n])} / {_ratio(memory[system][n], memory[MARIAN][n])}" for n in lengths]
        rows.append(f"| {system} | " + " | ".join(speed_cells + memory_cells) + " |")
    absolute = ["", "Absolute figures of the baselines (medians):"]
    for system in (MARIAN, BASELINE):
        absolute.append(f"- {system}: " + ", ".join(
            f"n={n}: {train[system][n]['tokens'] / statistics.median(train[system][n]['step_s']):,.0f} tokens/s "
            f"({statistics.median(train[system][n]['step_s']) * 1000:.0f} ms/step), {memory[system][n]:.0f} MB"
            for n in lengths))

    decode = results["time"]["decode"]
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


def _describe_size(size):
    return (f"d_model {size['d_model']}, {size['encoder_layers']}+{size['decoder_layers']} layers, "
            f"{size['encoder_attention_heads']} heads, ffn {size['encoder_ffn_dim']}, vocab {size['vocab_size']}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds")
    parser.add_argument("--presets", nargs="+", default=DEFAULT_PRESETS)
    parser.add_argument("--size", default=None, help="model size overrides, key=value,... (tests)")
    parser.add_argument("--pipeline-text", default=str(DEFAULT_PIPELINE_TEXT), help="raw sentences, one a line ('' to skip)")
    parser.add_argument("--pipeline-sentences", type=int, default=256)
    parser.add_argument("--pipeline-despace", action=argparse.BooleanOptionalAction, default=None,
                        help="remove spaces from the text (default: on for the default ja text)")
    parser.add_argument("--pipeline-parser", default="ja_ginza", help="spaCy pipeline name or a .conllu file")
    parser.add_argument("--parts", default="memory,time,pipeline",
                        help="what to measure ('none': only rewrite the tables); the other parts are read from the --output JSON")
    parser.add_argument("--output", default="benchmarks/results/speed.json")
    parser.add_argument("--results-md", default="model_cards/RESULTS.md", help="write the tables there ('' to skip)")
    parser.add_argument("--worker", choices=["memory", "time", "pipeline"], help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size = _parse_size(args.size)
    presets = list(dict.fromkeys([BASELINE] + args.presets))

    if args.worker == "memory":
        print(json.dumps(measure_memory(args.system, args.lengths, args.batch_size, size)))
        return None
    if args.worker == "time":
        print(json.dumps(measure_time([MARIAN] + presets, args.lengths, args.batch_size, args.rounds, size)))
        return None
    texts, despace = None, False
    if args.pipeline_text and Path(args.pipeline_text).exists():
        lines = Path(args.pipeline_text).read_text(encoding="utf-8").splitlines()[: args.pipeline_sentences]
        despace = args.pipeline_despace if args.pipeline_despace is not None else Path(args.pipeline_text) == DEFAULT_PIPELINE_TEXT
        texts = [line.replace(" ", "") if despace else line for line in lines]
    if args.worker == "pipeline":
        print(json.dumps(measure_pipeline(presets, texts, args.pipeline_parser, max(3, args.rounds // 2), size)))
        return None

    base = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:])]
    parts = set(args.parts.split(",")) - {"none"}
    command = "python benchmarks/speed.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results = {}
    if parts != {"memory", "time", "pipeline"}:  # the other parts come from the previous run's JSON
        results = json.loads(Path(args.output).read_text())["results"]
        results["memory"] = {system: _int_keys(memory) for system, memory in results["memory"].items()}
        results["time"]["train"] = {system: _int_keys(times) for system, times in results["time"]["train"].items()}
    if "memory" in parts:
        results["memory"] = {}
        for system in [MARIAN] + presets:
            command_line = base + ["--worker", "memory", "--system", system]
            results["memory"][system] = _int_keys(_worker_output(command_line, _worker_environment("memory")))
            print(f"memory measured: {system}", file=sys.stderr, flush=True)
    if "time" in parts:
        results["time"] = _worker_output(base + ["--worker", "time"], _worker_environment("time"))
        results["time"]["train"] = {system: _int_keys(times) for system, times in results["time"]["train"].items()}
    if "pipeline" in parts and texts:
        results["pipeline"] = _worker_output(base + ["--worker", "pipeline"], _worker_environment("pipeline"))
    elif "pipeline" in parts:
        print(f"pipeline skipped: no text at {args.pipeline_text!r}", file=sys.stderr)

    results["commands"] = {**results.get("commands", {}), **{part: command.strip() for part in parts}}
    tables = format_tables(results, args.lengths, presets)
    print(f"batch {args.batch_size} sentences, source = target length n, {args.rounds} interleaved rounds, 2 threads\n")
    print(tables)
    if args.results_md:
        commands = "; ".join(f"{part}: `{results['commands'][part]}`" for part in ("memory", "time", "pipeline")
                             if part in results["commands"])
        write_section(args.results_md, "speed", "\n".join([
            "## Speed and memory", "",
            f"Generated on {time.strftime('%Y-%m-%d')} by {commands} (2 CPU threads); raw figures in "
            f"`{args.output}`. Model of the issue-6 recipe size ({_describe_size(size)}); training: one AdamW step "
            f"on a batch of {args.batch_size} sentences with source = target length n, timed in {args.rounds} "
            "interleaved rounds in one process (cells: median over rounds of the ratio to `transformer_abs` / to a "
            "same-size `MarianMTModel`; tokens/s ratios, so > 1 is faster; step time ×abs = 1 / the first figure); "
            "memory: peak resident set of one step above the set before it, each system alone in a subprocess "
            "(ratio < 1 uses less). Decoding: 32 sentences × 30 new tokens. Pipeline: "
            f"{len(texts or [])} raw sentences of `{os.path.relpath(args.pipeline_text, REPO)}`"
            f"{' (spaces removed)' if texts and despace else ''} parsed by `{args.pipeline_parser}`, untrained "
            "models, beam 4, 20 new tokens, batch 32.", "", tables]))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k not in ("worker", "system")} | {"size": size}
    output.write_text(json.dumps({"settings": settings, "results": results, "tables": tables}, indent=1))
    return results


if __name__ == "__main__":
    main()
