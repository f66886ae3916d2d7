"""`hf-syntax-mt-train --help` without torch (`hf_syntax_mt.training.console`): the help rebuilt from the cache is the
live parser's, at any width, and a `--help` with the cache filled loads neither torch nor transformers."""

import os
import subprocess
import sys

import pytest

from hf_syntax_mt.training.arguments import train_argument_parser
from hf_syntax_mt.training.console import describe_parser, parser_from_description

HELP = """
import sys
from hf_syntax_mt.training.console import train_command
code = train_command(["--output_dir", "x", "--help"], prog="hf-syntax-mt-train")
print("loaded:", sorted(m for m in ("torch", "transformers") if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.parametrize("columns", ["60", "100", "250"])
def test_the_help_rebuilt_from_its_description_is_the_live_parsers(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    live = train_argument_parser(prog="hf-syntax-mt-train")
    rebuilt = parser_from_description(describe_parser(live), "hf-syntax-mt-train")
    assert rebuilt.format_help() == live.format_help()
    assert "--processes" in rebuilt.format_help() and "--save_last_checkpoints" in rebuilt.format_help()


def test_help_with_the_cache_filled_loads_no_torch(tmp_path, monkeypatch):
    env = dict(os.environ, HF_SYNTAX_MT_CACHE=str(tmp_path / "cache"), COLUMNS="100")
    first = subprocess.run([sys.executable, "-c", HELP], capture_output=True, text=True, env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "loaded: ['torch', 'transformers']" in first.stderr  # the first one builds the parser
    assert len(list((tmp_path / "cache").glob("train-help-*.json"))) == 1
    second = subprocess.run([sys.executable, "-c", HELP], capture_output=True, text=True, env=env, timeout=300)
    assert second.returncode == 0 and "loaded: []" in second.stderr
    assert second.stdout == first.stdout
    assert second.stdout.startswith("usage: hf-syntax-mt-train [-h]")
    monkeypatch.setenv("COLUMNS", "100")
    assert second.stdout == train_argument_parser(prog="hf-syntax-mt-train").format_help()
