"""What the benchmark entries share: the model size they measure at, the machine a result records, and how a result
is written."""

import json
import os
from pathlib import Path

# The recipes' model (benchmarks/recipes/*.json "model", their 8k joint BPE vocabulary); speed.py's `--size`
# overrides it key by key
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


def describe_size(size):
    return (f"d_model {size['d_model']}, {size['encoder_layers']}+{size['decoder_layers']} layers, "
            f"{size['encoder_attention_heads']} heads, ffn {size['encoder_ffn_dim']}, vocab {size['vocab_size']}")


def cpu_name():
    """The CPU's model name, marked when it has native bf16 (avx512_bf16 or AMX), which makes bf16 autocast pay."""
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    name = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "unknown CPU")
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    native = [flag for flag in ("avx512_bf16", "amx_bf16") if flag in flags]
    return name + (f" ({', '.join(native)})" if native else "")


def machine(device="cpu"):
    """What a measurement ran on: the CPU, its cores and their load, torch's version (and on `cuda` the GPU and the
    CUDA version). Each entry records the threads it ran with itself."""
    import torch

    described = {"cpu": cpu_name(), "cores": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2),
                 "torch": torch.__version__}
    if device == "cuda":
        described.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    return described


def write_json(path, data):
    """`data` as indented JSON at `path` (its folder made), non-ASCII text kept as it is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
