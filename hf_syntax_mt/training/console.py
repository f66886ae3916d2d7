"""The `hf-syntax-mt-train` console script (and `hf-syntax-mt train`): `--help` without importing torch, the rest
`run.main`.

The train parser is built from transformers' `Seq2SeqTrainingArguments`, whose module imports torch: 3-8 s before a
word of help. So the first `--help` builds it and stores what its help is made of (each option's strings, help,
default, choices, metavar: `describe_parser`) in a cache file, keyed by the versions of hf_syntax_mt, transformers
and Python and by the source of the modules that define the options; a later `--help` rebuilds a plain argparse
parser from that file (`parser_from_description`) and prints its help at the terminal's width, the same text the
live parser prints (tests/training/test_console.py), in a fraction of a second. The cache lives in
`$HF_SYNTAX_MT_CACHE`, else `$XDG_CACHE_HOME/hf_syntax_mt`, else `~/.cache/hf_syntax_mt`; `scripts/setup.sh` fills
it. Any other command line goes to `run.main`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence

HELP_FLAGS = ("-h", "--help")
OPTION_SOURCES = ("arguments.py", "command_line.py", "data_parallel.py", "threads.py", "budget.py", "progress.py")
"""The modules (in this folder) whose text defines the train options and their help."""


def train_command(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """`hf-syntax-mt-train [FLAGS]`: the help (from the cache when it holds it) on `-h` / `--help`, else
    `run.main(argv, prog)`; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(flag in argv for flag in HELP_FLAGS):
        sys.stdout.write(train_help(prog))
        return 0
    from .run import main

    return main(argv, prog=prog)


def train_help(prog: Optional[str] = None) -> str:
    """The train parser's help for `prog` (default: the program's name), at the terminal's width."""
    prog = prog or os.path.basename(sys.argv[0])
    path = _cache_dir() / f"train-help-{_options_key()}.json"
    try:
        description = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        from .arguments import train_argument_parser

        description = describe_parser(train_argument_parser(prog="PROG"))
        _write_atomically(path, json.dumps(description, ensure_ascii=False))
    return parser_from_description(description, prog).format_help()


def describe_parser(parser: argparse.ArgumentParser) -> dict:
    """What `parser.format_help()` is made of, as JSON: its description and epilog, and per argument group its
    title, description and actions (option strings, dest, nargs, default as text, help, metavar, choices as text,
    required), `-h` left out (every parser adds its own)."""
    def action(a: argparse.Action) -> dict:
        return {"option_strings": a.option_strings, "dest": a.dest, "nargs": a.nargs,
                "default": a.default if a.default is argparse.SUPPRESS else str(a.default), "help": a.help,
                "metavar": a.metavar, "choices": None if a.choices is None else [str(c) for c in a.choices],
                "required": a.required}

    groups = [{"title": group.title, "description": group.description,
               "actions": [action(a) for a in group._group_actions if not isinstance(a, argparse._HelpAction)]}
              for group in parser._action_groups]
    return {"description": parser.description, "epilog": parser.epilog, "groups": groups,
            "formatter": parser.formatter_class.__name__}


class _Shown(argparse.Action):
    """An action that is only shown in a help: any nargs, 0 included (a flag)."""

    def __call__(self, parser, namespace, values, option_string=None):
        raise NotImplementedError("a help-only parser parses nothing")


def parser_from_description(description: dict, prog: str) -> argparse.ArgumentParser:
    """A plain argparse parser that prints the help `describe_parser` described, for `prog`."""
    formatter = getattr(argparse, description["formatter"], argparse.HelpFormatter)
    parser = argparse.ArgumentParser(prog=prog, description=description["description"],
                                     epilog=description["epilog"], formatter_class=formatter)
    default_groups = {group.title: group for group in parser._action_groups}
    for group in description["groups"]:
        target = default_groups.get(group["title"]) or parser.add_argument_group(group["title"], group["description"])
        for a in group["actions"]:
            names, dest = (a["option_strings"], {"dest": a["dest"]}) if a["option_strings"] else ([a["dest"]], {})
            target.add_argument(*names, **dest, action=_Shown, nargs=a["nargs"], default=a["default"], help=a["help"],
                                metavar=a["metavar"], choices=a["choices"],
                                **({"required": a["required"]} if a["option_strings"] else {}))
    return parser


def _options_key() -> str:
    """What the help depends on: the versions of hf_syntax_mt, transformers and Python, and the option modules' text."""
    digest = hashlib.sha256()
    for name in ("hf_syntax_mt", "transformers"):
        try:
            digest.update(f"{name}={metadata.version(name)};".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name}=?;".encode())
    digest.update(sys.version.encode())
    here = Path(__file__).resolve().parent
    for name in OPTION_SOURCES:
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:20]


def _cache_dir() -> Path:
    if os.environ.get("HF_SYNTAX_MT_CACHE"):
        return Path(os.environ["HF_SYNTAX_MT_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hf_syntax_mt"


def _write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file (a concurrent reader sees the whole file or none); a cache
    that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, delete=False, suffix=".tmp") as tmp:
            tmp.write(text)
        os.replace(tmp.name, path)
    except OSError:
        pass


__all__ = ["describe_parser", "parser_from_description", "train_command", "train_help"]
