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
    from hf_syntax_mt import convert_marian

    assert SyntaxMTForConditionalGeneration.from_marian.__func__ is convert_marian.from_marian
