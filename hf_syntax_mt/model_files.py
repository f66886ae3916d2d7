"""Checks of a model's files before transformers reads them, so that a folder that is no (whole) SyntaxMT model says
what is wrong instead of loading half a model or failing deep inside transformers.

`SyntaxMTPreTrainedModel.from_pretrained` runs `check_model_files` (through the Auto classes and `pipeline()` too,
with the weights check only: they have read the config already). Imported by `modeling_syntax_mt` and copied with
it next to saved models (`trust_remote_code`): it needs safetensors and transformers only.
"""

import os
from pathlib import Path

from safetensors import SafetensorError, safe_open
from transformers import PreTrainedConfig
from transformers.utils import CONFIG_NAME

HUB_KWARGS = ("cache_dir", "force_download", "proxies", "local_files_only", "token", "revision")
"""The `from_pretrained` arguments that find a Hub checkpoint's files."""


class DamagedModelFileError(SafetensorError):
    """A weights file that safetensors cannot read (truncated, overwritten, not a safetensors file). A
    `SafetensorError`, as safetensors raises for it, and not an `OSError`: transformers' `pipeline()` would
    bury that in a dump of tracebacks."""


def check_weights_files(directory, advice: str = "copy it again, or save the model again") -> None:
    """Raise `DamagedModelFileError` naming the first `*.safetensors` file in `directory` whose header
    does not read or does not cover the file (a truncated copy); reads the headers only."""
    for path in sorted(Path(directory).glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except SafetensorError as err:
            raise DamagedModelFileError(f"{path} is damaged ({err}): it is incomplete or corrupted; {advice}") from None


def check_model_files(name_or_path, model_type=None, **from_pretrained_kwargs) -> None:
    """Raise before a model is built from `name_or_path` (a local folder or a Hub id) when

    - a local folder has no config.json: `FileNotFoundError` (transformers would say "Should have a `model_type`
      key in its config.json", or build a model of the default size);
    - the checkpoint's config.json is of a model type other than `model_type`: `ValueError`, for a MarianMT
      checkpoint pointing to `from_marian` (loaded as it is, its feed-forward weights would be left at random);
    - a `*.safetensors` file of a local folder is damaged: `DamagedModelFileError` (`check_weights_files`).

    `model_type` None (the caller has the config, e.g. `config=` was given) checks the weights files only; of the
    other `from_pretrained` arguments, `subfolder` and `HUB_KWARGS` are used.
    """
    if not isinstance(name_or_path, (str, os.PathLike)) or not os.fspath(name_or_path):
        return
    subfolder = from_pretrained_kwargs.get("subfolder") or ""
    hub_kwargs = {key: from_pretrained_kwargs[key] for key in HUB_KWARGS if key in from_pretrained_kwargs}
    folder = Path(name_or_path, subfolder)
    if model_type is not None:
        if folder.is_dir() and not (folder / CONFIG_NAME).is_file():
            raise FileNotFoundError(
                f"{folder} has no {CONFIG_NAME}, so it is no saved model (save_pretrained writes the config next to "
                "the weights; pass the folder that has both)"
            )
        try:
            config, _ = PreTrainedConfig.get_config_dict(name_or_path, subfolder=subfolder, **hub_kwargs)
        except OSError:  # not found: from_pretrained says so
            config = None
        found = (config or {}).get("model_type", model_type)
        if found == "marian":
            raise ValueError(
                f"{name_or_path} is a MarianMT checkpoint: from_pretrained would leave the weights SyntaxMT names "
                "differently (the feed-forward layers) at random; convert it with "
                f"SyntaxMTForConditionalGeneration.from_marian({str(name_or_path)!r}, preset=...)"
            )
        if found != model_type:
            raise ValueError(f"{name_or_path} holds a {found!r} model, not a {model_type!r} one")
    if folder.is_dir():
        check_weights_files(folder)


__all__ = ["DamagedModelFileError", "check_model_files", "check_weights_files"]
