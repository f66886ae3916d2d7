"""The linter (ruff, pyproject.toml's [tool.ruff]): the code passes it, and it fails on an unused import, an undefined
name and imports out of order, so the check in CI can fail."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).with_name("ruff")


def _ruff(root: Path, *paths: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RUFF), "check", "--no-cache", "--output-format", "concise", *paths], cwd=root,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def ruff():
    if not RUFF.is_file():
        pytest.skip("ruff is not installed (pip install '.[test]')")
    return _ruff


def test_the_code_passes(ruff):
    done = ruff(REPO, ".")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


@pytest.mark.parametrize("text, rule", [
    ("import os\n\n\ndef f():\n    return 1\n", "F401"),          # unused import
    ("def f():\n    return undefined_name\n", "F821"),             # undefined name
    ("def f():\n    unused = 1\n    return 2\n", "F841"),          # unused local
    ("import sys\nimport os\n\nprint(os, sys)\n", "I001"),         # imports out of order
    ("import torch\n\nfrom hf_syntax_mt import SyntaxMTConfig\nimport os\n\nprint(os, torch, SyntaxMTConfig)\n",
     "I001"),                                                       # first-party before the standard library
])
def test_it_fails_on_what_it_checks(ruff, tmp_path, text, rule):
    root = tmp_path / "repo"
    (root / "hf_syntax_mt").mkdir(parents=True)
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    (root / "hf_syntax_mt" / "bad.py").write_text(text, encoding="utf-8")
    done = ruff(root, ".")
    assert done.returncode == 1, done.stdout
    assert "hf_syntax_mt/bad.py:" in done.stdout and f" {rule} " in done.stdout, done.stdout
