"""Training-step time, peak memory and decoding time of every preset, relative to
`transformer_abs` and to a same-size `MarianMTModel`, measured in one run of this script.

    python benchmarks/speed.py [--lengths 32 64 128 256] [--batch-size 16] [--steps 4]
        [--presets transformer_abs transformer_rel ...] [--output benchmarks/results/speed.json]

Size as the issue-6 recipe (d_model 256, 3+3 layers, 4 heads, ffn 1024, vocab 8000), 2 threads,
source length n, target length n, random dependency trees and distances as syntax features.
Each system runs in its own subprocess with `MALLOC_MMAP_THRESHOLD_` fixed, so that freed
tensors return to the OS and the peak resident set of a step (VmHWM after resetting it through
/proc/self/clear_refs, minus the resident set before the step) measures its peak memory.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

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
]
MARIAN = "marian"


def _memory_kb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak_memory():
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def _random_tree(length, rng):
    order = list(range(length))
    rng.shuffle(order)
    heads = [0] * length
    heads[order[0]] = order[0]
    for position, token in enumerate(order[1:], start=1):
        heads[token] = order[rng.randrange(position)]
    return heads


def _build(system):
    import torch

    if system == MARIAN:
        from transformers import MarianConfig, MarianMTModel

        config = MarianConfig(
            **{k: v for k, v in SIZE.items()},
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
            forced_eos_token_id=None,
            share_encoder_decoder_embeddings=True,
        )
        return MarianMTModel(config), config
    from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration

    config = SyntaxMTConfig.from_preset(system, **SIZE)
    torch.manual_seed(0)
    return SyntaxMTForConditionalGeneration(config), config


def _batch(config, batch_size, length, seed=0):
    import torch

    rng = random.Random(seed)
    words = length - 1
    input_ids = torch.randint(3, 8000, (batch_size, length))
    input_ids[:, -1] = 1
    labels = torch.randint(3, 8000, (batch_size, length))
    labels[:, -1] = 1
    batch = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels)
    if getattr(config, "needs_source_heads", False):
        batch["source_heads"] = torch.tensor([_random_tree(words, rng) + [-100] for _ in range(batch_size)])
    if getattr(config, "needs_source_distances", False):
        distances = torch.randint(1, 8, (batch_size, length)).float()
        distances[:, -2:] = 2000.0
        batch["source_distances"] = distances
    if getattr(config, "needs_target_heads", False):
        batch["target_heads"] = torch.tensor([_random_tree(words, rng) + [-100] for _ in range(batch_size)])
    return batch


def run_system(system, lengths, batch_size, steps):
    """Measure one system at every length (runs inside the subprocess)."""
    import torch

    torch.set_num_threads(2)
    model, config = _build(system)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    results = {}
    for length in lengths:
        batch = _batch(config, batch_size, length)

        def step():
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()  # warm-up, creates the optimizer state
        before = _memory_kb("VmRSS")
        _reset_peak_memory()
        step()
        peak_mb = (_memory_kb("VmHWM") - before) / 1024
        start = time.perf_counter()
        for _ in range(steps):
            step()
        step_ms = (time.perf_counter() - start) / steps * 1000
        results[length] = {"step_ms": step_ms, "peak_mb": peak_mb}

    model.eval()
    generate_batch = _batch(config, 32, 30, seed=1)
    inputs = {k: v for k, v in generate_batch.items() if k not in ("labels", "target_heads")}
    decode = {}
    with torch.no_grad():
        for beams in (1, 4):
            model.generate(**inputs, num_beams=beams, max_new_tokens=30, min_new_tokens=30)
            start = time.perf_counter()
            for _ in range(2):
                model.generate(**inputs, num_beams=beams, max_new_tokens=30, min_new_tokens=30)
            decode[f"beam{beams}_s"] = (time.perf_counter() - start) / 2
    return {"train": results, "decode": decode}


def _format_table(results, lengths, presets):
    lines = [
        "| system | " + " | ".join(f"n={n} step ×abs / ×Marian" for n in lengths) + " | "
        + " | ".join(f"n={n} mem ×abs / ×Marian" for n in lengths) + " | beam-4 decode ×Marian |",
        "|---|" + "---|" * (2 * len(lengths) + 1),
    ]
    abs_train, marian_train = results["transformer_abs"]["train"], results[MARIAN]["train"]
    for system in [MARIAN] + presets:
        train = results[system]["train"]
        steps = [
            f"{train[n]['step_ms'] / abs_train[n]['step_ms']:.2f} / {train[n]['step_ms'] / marian_train[n]['step_ms']:.2f}"
            for n in lengths
        ]
        memory = [
            f"{train[n]['peak_mb'] / abs_train[n]['peak_mb']:.2f} / {train[n]['peak_mb'] / marian_train[n]['peak_mb']:.2f}"
            for n in lengths
        ]
        decode = results[system]["decode"]["beam4_s"] / results[MARIAN]["decode"]["beam4_s"]
        lines.append(f"| {system} | " + " | ".join(steps) + " | " + " | ".join(memory) + f" | {decode:.2f} |")
    absolute = ["", "Absolute figures of the baselines:"]
    for system in (MARIAN, "transformer_abs"):
        train = results[system]["train"]
        absolute.append(
            f"- {system}: "
            + ", ".join(f"n={n}: {train[n]['step_ms']:.0f} ms/step, {train[n]['peak_mb']:.0f} MB" for n in lengths)
            + f"; beam-4 decode {results[system]['decode']['beam4_s']:.2f} s, greedy {results[system]['decode']['beam1_s']:.2f} s"
        )
    return "\n".join(lines + absolute)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--presets", nargs="+", default=DEFAULT_PRESETS)
    parser.add_argument("--output", default="benchmarks/results/speed.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(run_system(args.worker, args.lengths, args.batch_size, args.steps)))
        return

    presets = list(dict.fromkeys(["transformer_abs"] + args.presets))
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "HF_HUB_OFFLINE": "1"}
    results = {}
    for system in [MARIAN] + presets:
        command = [sys.executable, __file__, "--worker", system, "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--lengths", *map(str, args.lengths)]
        completed = subprocess.run(command, capture_output=True, text=True, env=environment)
        if completed.returncode:
            raise RuntimeError(f"{system} failed:\n{completed.stderr[-3000:]}")
        results[system] = json.loads(completed.stdout.strip().splitlines()[-1])
        results[system]["train"] = {int(n): v for n, v in results[system]["train"].items()}
        print(f"measured {system}", file=sys.stderr, flush=True)

    table = _format_table(results, args.lengths, presets)
    print(f"batch {args.batch_size} sentences, source = target length n, {args.steps} timed steps, 2 threads\n")
    print(table)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps({"settings": vars(args) | {"size": SIZE}, "results": results, "table": table}, indent=1))


if __name__ == "__main__":
    main()
