#!/usr/bin/env bash
# Create .venv (if missing) and install hf_syntax_mt with what the demo, the tests and the Japanese recipe use:
# the extras ja (GiNZA, MeCab for BLEU), plot (matplotlib, a CJK font), app (gradio) and test.
# torch is installed first, at the tested version, from $TORCH_INDEX_URL when it is set: e.g.
# https://download.pytorch.org/whl/cpu for the CPU-only build (PyPI's Linux wheel is the CUDA build; this
# project's machines hold a local CPU wheel), so that nothing pulls another build later;
# scripts/constraints.txt holds every other package at the version last tested with the package.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
# -W: without setuptools' "Editable installation" notice, which pip relays as a BuildBackendWarning block
.venv/bin/python -W "ignore:Editable installation" -m pip install -q -e ".[ja,plot,app,test]" -c scripts/constraints.txt
# hf-syntax-mt-train --help reads its text from a cache filled once here (hf_syntax_mt.training.console), not torch
.venv/bin/hf-syntax-mt-train --help > /dev/null
