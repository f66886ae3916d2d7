"""What `from_pretrained` refuses before loading (issue 69: a MarianMT checkpoint, a folder without config.json), and
what the model file needs next to it when it is copied for `trust_remote_code` (issue 70: no import of the converter)."""

import ast
from pathlib import Path

import pytest
import torch
from transformers import MarianConfig, MarianMTModel

import hf_syntax_mt.modeling_syntax_mt as modeling
from hf_syntax_mt import SyntaxMTForConditionalGeneration, SyntaxMTModel
from model_helpers import TINY, tiny_config

PACKAGE = Path(modeling.__file__).parent


@pytest.fixture
def marian_dir(tmp_path):
    torch.manual_seed(0)
    config = MarianConfig(vocab_size=40, d_model=TINY["d_model"], encoder_layers=1, decoder_layers=1,
                          encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
                          max_position_embeddings=32, pad_token_id=39, eos_token_id=0, decoder_start_token_id=39)
    MarianMTModel(config).save_pretrained(tmp_path / "marian")
    return tmp_path / "marian"


def test_from_pretrained_refuses_a_marian_checkpoint_and_points_to_from_marian(marian_dir):
    for model_class in (SyntaxMTForConditionalGeneration, SyntaxMTModel):
        with pytest.raises(ValueError, match=rf"^{marian_dir} is a MarianMT checkpoint: .*feed-forward.*convert it "
                                             rf"with SyntaxMTForConditionalGeneration\.from_marian\('{marian_dir}'"):
            model_class.from_pretrained(marian_dir)
    converted = SyntaxMTForConditionalGeneration.from_marian(marian_dir)  # the way that is pointed to works
    assert converted.config.d_model == TINY["d_model"]


def test_from_pretrained_names_a_missing_config_json(tmp_path):
    config = tiny_config()
    SyntaxMTForConditionalGeneration(config).save_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=rf"^{tmp_path} has no config\.json, so it is no saved model"):
        SyntaxMTForConditionalGeneration.from_pretrained(tmp_path)
    # weights alone are a model when the config is given
    model = SyntaxMTForConditionalGeneration.from_pretrained(tmp_path, config=config)
    assert model.config.d_model == TINY["d_model"]


def _imported_modules(path):
    """(relative imports, absolute imports, importlib.import_module targets) of a module's source."""
    relative, absolute, dynamic = set(), set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            (relative if node.level else absolute).add(node.module or "")
        elif isinstance(node, ast.Import):
            absolute.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__"):
            dynamic.update(arg.value for arg in node.args if isinstance(arg, ast.Constant))
    return relative, absolute, dynamic


def test_the_model_file_and_what_it_imports_are_saved_with_the_model_and_need_no_converter(tmp_path):
    needed, todo = set(), ["modeling_syntax_mt"]
    while todo:
        name = todo.pop()
        needed.add(name)
        relative, absolute, dynamic = _imported_modules(PACKAGE / f"{name}.py")
        assert not any("convert_marian" in module or module.startswith("hf_syntax_mt")
                       for module in absolute | dynamic), (name, absolute, dynamic)
        todo.extend(module for module in relative if module not in needed)
    assert "convert_marian" not in needed and {"relation_attention", "model_files"} <= needed
    SyntaxMTForConditionalGeneration(tiny_config()).save_pretrained(tmp_path)
    assert {f"{name}.py" for name in needed} <= {path.name for path in tmp_path.glob("*.py")}
    # from_marian is the converter's, on the class
    from hf_syntax_mt.hub import convert_marian

    assert SyntaxMTForConditionalGeneration.from_marian.__func__ is convert_marian.from_marian


SAVED_BEFORE_THE_LAYERS = Path(__file__).resolve().parents[1] / "fixtures" / "model_saved_before_the_layers"
LOAD_AND_RUN = """
import json, sys, torch
if sys.argv[2] == "without the package":
    sys.modules["hf_syntax_mt"] = None  # `import hf_syntax_mt` fails: only the folder's own code can build the model
else:
    import hf_syntax_mt  # registered with the Auto classes, as a user of the package has it
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
folder = sys.argv[1]
expected = json.load(open(sys.argv[3]))
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
tokens = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)(["the small dog saw a cat"], return_tensors="pt")["input_ids"].tolist()
with torch.no_grad():
    out = model(**{k: torch.tensor(expected[k]) for k in ("input_ids", "attention_mask", "source_heads", "labels")})
print(json.dumps({"module": type(model).__module__, "tokens": tokens, "loss": out.loss.item(),
                  "logits": out.logits.tolist()}))
"""


def _load_and_run(folder: Path, how: str, tmp_path: Path) -> dict:
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(folder), how,
                           str(SAVED_BEFORE_THE_LAYERS / "expected_outputs.json")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("how", ["without the package", "with the package"])
def test_a_model_saved_before_the_layers_loads_with_remote_code_and_computes_what_it_did(how, tmp_path):
    """A tiny trained folder saved at commit 951ab91 (before the package's folders, issue 74) loads with
    `trust_remote_code=True`, without hf_syntax_mt importable and with it imported, and gives the logits it gave
    then."""
    import json

    expected = json.loads((SAVED_BEFORE_THE_LAYERS / "expected_outputs.json").read_text())
    got = _load_and_run(SAVED_BEFORE_THE_LAYERS, how, tmp_path)
    # without the package: the folder's own modeling_syntax_mt.py; with it, transformers takes the registered class
    assert got["module"].startswith("transformers_modules.") if how == "without the package" else \
        got["module"] == "hf_syntax_mt.modeling_syntax_mt"
    assert got["tokens"] == expected["input_ids"]
    assert got["loss"] == pytest.approx(expected["loss"], abs=1e-5)
    assert torch.allclose(torch.tensor(got["logits"]), torch.tensor(expected["logits"]), atol=1e-5)


def test_a_model_saved_now_loads_with_remote_code_alone_and_computes_what_the_package_does(tmp_path):
    """The same weights saved by today's package: its remote code (the model files at the package root) builds
    them without hf_syntax_mt, with the package's outputs."""
    import json
    import shutil

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    model = AutoModelForSeq2SeqLM.from_pretrained(SAVED_BEFORE_THE_LAYERS).eval()
    assert type(model) is SyntaxMTForConditionalGeneration  # the package's class, not the folder's code
    saved = tmp_path / "saved_now"
    model.save_pretrained(saved)
    AutoTokenizer.from_pretrained(SAVED_BEFORE_THE_LAYERS).save_pretrained(saved)
    before = {path.name for path in SAVED_BEFORE_THE_LAYERS.glob("*.py")}
    assert {path.name for path in saved.glob("*.py")} == before | {"attention_functions.py"}  # its own file (issue 107)
    expected = json.loads((SAVED_BEFORE_THE_LAYERS / "expected_outputs.json").read_text())
    with torch.no_grad():
        out = model(**{k: torch.tensor(expected[k]) for k in ("input_ids", "attention_mask", "source_heads", "labels")})
    got = _load_and_run(saved, "without the package", tmp_path)
    assert got["module"].startswith("transformers_modules.")
    assert torch.allclose(torch.tensor(got["logits"]), out.logits, atol=1e-6)
    assert out.loss.item() == pytest.approx(expected["loss"], abs=1e-5)
    shutil.rmtree(saved)
