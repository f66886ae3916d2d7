"""The package's layers (pyproject.toml, [tool.importlinter]): the contracts hold on the code, and they break on a
deliberately added upward import and on an import circle inside a folder."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, env={"PYTHONPATH": f"{root}:{root / 'benchmarks'}",
                                                                "PATH": "/usr/bin:/bin"}, timeout=120)


@pytest.fixture(scope="module")
def lint():
    if not LINT.is_file():
        pytest.skip("import-linter is not installed (pip install '.[test]')")
    return _lint


def test_the_contracts_hold(lint):
    done = lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("module, line, broken", [
    ("hf_syntax_mt/features/batching.py", "from ..training.threads import THREADS_HELP",
     "hf_syntax_mt.features is not allowed to import hf_syntax_mt.training"),
    ("hf_syntax_mt/modeling_syntax_mt.py", "from .syntax import trees",
     "hf_syntax_mt.modeling_syntax_mt is not allowed to import hf_syntax_mt.syntax"),
    ("hf_syntax_mt/syntax/trees.py", "import torch", "hf_syntax_mt.syntax is not allowed to import torch"),
    ("hf_syntax_mt/training/data_parallel.py", "from .run import main",
     "No cycles are allowed in hf_syntax_mt.training"),
    ("benchmarks/quality_lib/scores.py", "from .summary import summary",
     "quality_lib.scores is not allowed to import quality_lib.summary"),
])
def test_an_upward_import_or_a_circle_breaks_them(lint, tmp_path, module, line, broken):
    root = tmp_path / "repo"
    for part in ("hf_syntax_mt", "benchmarks/quality_lib"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    path = root / module
    text = path.read_text(encoding="utf-8")
    head, future, rest = text.partition("from __future__ import annotations\n")
    path.write_text(head + future + line + "\n" + rest if future else line + "\n" + text, encoding="utf-8")
    done = lint(root)
    assert done.returncode == 1, done.stdout[-3000:]
    assert broken in " ".join(done.stdout.split())
