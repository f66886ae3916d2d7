#!/usr/bin/env bash
# Create .venv (if missing) and install hf_syntax_mt with its test extras.
# torch is installed first, pinned to the CPU build on this machine, so that nothing pulls a CUDA build;
# scripts/constraints.txt holds every other package at the version last tested with the package.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[test]" -c scripts/constraints.txt
