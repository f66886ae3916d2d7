"""Checkpoint averaging: one model whose weights are the element-wise mean of several checkpoints' weights.

As fairseq's `scripts/average_checkpoints.py`, OpenNMT's `average_models` and Marian's `average.py` do: the
last k checkpoints of a run (e.g. one per epoch) averaged give a model that no held-out split chose, usually
as good as the best single checkpoint or better.

    from hf_syntax_mt import average_checkpoints, last_checkpoints

    average_checkpoints(last_checkpoints("runs/abs/seed1", 5), "runs/abs/seed1/averaged")

or `hf-syntax-mt average --run-dir runs/abs/seed1 --last 5 --out runs/abs/seed1/averaged`. A folder that is
not empty (e.g. the run dir, whose trained `model.safetensors` the average would replace) is refused unless
`overwrite=True` (`--overwrite`); then its model card gets a note that the weights are the average.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence, Union

import torch

AVERAGING_RECORD = "averaged_checkpoints.json"
WEIGHTS_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# config entries that name where or by what a checkpoint was saved, not what the model is
_CONFIG_BOOKKEEPING = {"_name_or_path", "transformers_version", "architectures", "dtype", "torch_dtype"}
_CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)")
_CARD_NOTE = "> **Averaged weights.**"


def last_checkpoints(run_dir: Union[str, Path], k: int) -> list[Path]:
    """The `k` `checkpoint-N` folders of `run_dir` with the largest N, in increasing N (numerically:
    checkpoint-9 before checkpoint-10)."""
    run_dir = Path(run_dir)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k={k!r}: the number of checkpoints to take must be an integer >= 1")
    if not run_dir.is_dir():
        raise ValueError(f"run dir {run_dir} does not exist")
    found = sorted((int(match.group(1)), path) for path in run_dir.iterdir()
                   if path.is_dir() and (match := _CHECKPOINT_NAME.fullmatch(path.name)))
    if len(found) < k:
        raise ValueError(f"{run_dir} has {len(found)} checkpoint-N folders, fewer than the {k} asked for"
                         + (f" ({', '.join(path.name for _, path in found)})" if found else ""))
    return [path for _, path in found[-k:]]


def _check_checkpoint_files(checkpoint: Path) -> None:
    if not checkpoint.is_dir():
        raise ValueError(f"checkpoint {checkpoint} does not exist (or is not a folder)")
    if not (checkpoint / "config.json").is_file():
        raise ValueError(f"checkpoint {checkpoint} has no config.json")
    if not any((checkpoint / name).is_file() for name in WEIGHTS_FILES):
        raise ValueError(f"checkpoint {checkpoint} has no weights file ({' / '.join(WEIGHTS_FILES)})")


def _model_settings(config) -> dict:
    return {key: value for key, value in config.to_dict().items() if key not in _CONFIG_BOOKKEEPING}


def _check_same_model(first_path: Path, first_config: dict, path: Path, config: dict) -> None:
    for key in sorted(set(first_config) | set(config)):
        if first_config.get(key) != config.get(key):
            raise ValueError(f"checkpoints {first_path} and {path} are different models: config {key!r} is "
                             f"{first_config.get(key)!r} in the first and {config.get(key)!r} in the second")


def _tokenizer_dir(checkpoints: Sequence[Path]):
    """The first of the checkpoints, then the first checkpoint's parent (the run dir), that holds a tokenizer."""
    for folder in [*checkpoints, checkpoints[0].parent]:
        if any((folder / name).is_file() for name in TOKENIZER_FILES):
            return folder
    return None


def _check_output_dir(output_dir: Path, resolved: Sequence[Path], overwrite: bool) -> None:
    """Refuse a checkpoint as the output, and a folder that is not empty unless `overwrite`."""
    if output_dir.resolve() in resolved:
        raise ValueError(f"output dir {output_dir} is one of the checkpoints: choose another folder")
    if output_dir.exists() and not output_dir.is_dir():
        raise ValueError(f"output dir {output_dir} is a file, not a folder")
    if overwrite or not output_dir.is_dir() or not any(output_dir.iterdir()):
        return
    weights = [name for name in WEIGHTS_FILES if (output_dir / name).is_file()]
    holds = f"a model ({', '.join(weights)})" if weights else "files"
    raise ValueError(f"output dir {output_dir} is not empty: it holds {holds} that the average would replace; "
                     "choose a new folder, or pass overwrite=True (hf-syntax-mt average --overwrite) to write over it")


def _note_in_model_card(output_dir: Path, checkpoints: Sequence[Path]) -> None:
    """A model card (README.md) already in `output_dir` describes the model that was there: say, below its
    metadata, that the weights are now the average, so its scores are not read as the average's."""
    card = output_dir / "README.md"
    if not card.is_file():
        return
    text, metadata = card.read_text(encoding="utf-8"), ""
    if text.startswith("---\n") and "\n---\n" in text[3:]:
        end = text.index("\n---\n", 3) + len("\n---\n")
        metadata, text = text[:end] + "\n", text[end:]
    text = re.sub(rf"^\s*{re.escape(_CARD_NOTE)}.*\n\n", "", text)  # an earlier average's note
    names = ", ".join(path.name for path in checkpoints)
    note = (f"{_CARD_NOTE} `model.safetensors` here is the mean of {len(checkpoints)} checkpoint(s) ({names}; "
            f"`{AVERAGING_RECORD}`), written over the model this card describes: the scores below are that "
            "model's, not the average's.\n\n")
    card.write_text(metadata + note + text.lstrip("\n"), encoding="utf-8")


def average_checkpoints(checkpoints: Sequence[Union[str, Path]], output_dir: Union[str, Path],
                        overwrite: bool = False) -> Path:
    """Write to `output_dir` the model whose every weight is the mean over the checkpoints,

        W_avg = (1/k) · Σ_i W_i        (accumulated in float64, cast back to the tensor's dtype),

    as a loadable model folder: safetensors weights, config.json and generation_config.json (the first
    checkpoint's), the tokenizer (from a checkpoint or the first checkpoint's parent run dir, where one is
    saved) and `averaged_checkpoints.json` naming the checkpoints. Integer buffers are not averaged: they
    must be equal in every checkpoint. Tied weights stay tied (the first checkpoint's model receives the
    mean and is saved by `save_pretrained`). An `output_dir` that is not empty (a trained model, a run dir)
    is refused unless `overwrite`; a model card there then gets a note that the weights are the average.
    Returns `output_dir`."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_syntax_mt  # noqa: F401  (registers the Auto classes)

    paths = [Path(c) for c in checkpoints]
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint, got none")
    resolved = [p.resolve() for p in paths]
    repeated = sorted({str(p) for p in paths if resolved.count(p.resolve()) > 1})
    if repeated:
        raise ValueError(f"checkpoint given more than once: {', '.join(repeated)}")
    output_dir = Path(output_dir)
    _check_output_dir(output_dir, resolved, overwrite)
    for path in paths:
        _check_checkpoint_files(path)

    model = AutoModelForSeq2SeqLM.from_pretrained(paths[0])
    reference = model.state_dict()
    first_config = _model_settings(model.config)
    sums = {name: tensor.to(torch.float64, copy=True) if tensor.is_floating_point() else tensor.clone()
            for name, tensor in reference.items()}
    for path in paths[1:]:
        other = AutoModelForSeq2SeqLM.from_pretrained(path)
        _check_same_model(paths[0], first_config, path, _model_settings(other.config))
        state = other.state_dict()
        if set(state) != set(reference):
            names = sorted(set(state) ^ set(reference))
            raise ValueError(f"checkpoints {paths[0]} and {path} hold different weights: {names[0]!r} is in one only")
        for name, tensor in state.items():
            if tensor.shape != reference[name].shape or tensor.dtype != reference[name].dtype:
                raise ValueError(f"checkpoints {paths[0]} and {path} differ in {name!r}: "
                                 f"{tuple(reference[name].shape)} {reference[name].dtype} in the first, "
                                 f"{tuple(tensor.shape)} {tensor.dtype} in the second")
            if tensor.is_floating_point():
                sums[name] += tensor.to(torch.float64)
            elif not torch.equal(tensor, reference[name]):
                raise ValueError(f"integer buffer {name!r} differs between {paths[0]} and {path}: integer "
                                 "tensors cannot be averaged")
        del other, state
    averaged = {name: (total / len(paths)).to(reference[name].dtype) if total.is_floating_point() else total
                for name, total in sums.items()}
    model.load_state_dict(averaged)

    output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output_dir)  # config.json, generation_config.json, model.safetensors (tied: one copy)
    tokenizer_dir = _tokenizer_dir(paths)
    if tokenizer_dir is not None:
        AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(output_dir)
    record = {"method": "mean", "checkpoints": [str(p) for p in paths],
              "tokenizer_from": None if tokenizer_dir is None else str(tokenizer_dir)}
    (output_dir / AVERAGING_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    _note_in_model_card(output_dir, paths)
    return output_dir
