"""`hf-syntax-mt --help` loads neither torch nor transformers (the package is lazy), and `import hf_syntax_mt` still
registers the Auto classes and the `syntax-translation` pipeline before they are used, whatever is imported first."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from training_helpers import trained_model

ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


def run_python(code: str) -> str:
    """stdout of `code` in a fresh interpreter (nothing imported yet); fails with its stderr."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=ENV,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("argv", [["--help"], ["translate", "--help"], ["annotate", "--help"], ["plot", "--help"],
                                  ["average", "--help"], ["demo", "--help"], ["translate", "--beams", "x"]])
def test_help_and_usage_errors_do_not_import_torch(argv):
    out = run_python(f"""
        import sys
        from hf_syntax_mt.cli import main
        try:
            main({argv!r})
        except SystemExit as stop:
            print(stop.code, sorted(name for name in ("torch", "transformers") if name in sys.modules))
        """)
    assert out.split("\n")[-2] == ("0 []" if "--help" in argv else "2 []")


@pytest.fixture(scope="module")
def model_dir():
    return str(trained_model("transformer_abs")[0])


def test_import_then_auto_classes_and_pipeline(model_dir):
    out = run_python(f"""
        import sys
        import hf_syntax_mt
        print("torch" in sys.modules)
        from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
        model = AutoModelForSeq2SeqLM.from_pretrained({model_dir!r})
        print(type(model).__name__, type(AutoTokenizer.from_pretrained({model_dir!r})).__name__)
        print(type(pipeline("syntax-translation", model={model_dir!r})).__name__)
        print(type(AutoConfig.for_model("syntax_mt")).__name__)
        """)
    assert out.split("\n")[:4] == ["False", "SyntaxMTForConditionalGeneration TokenizersBackend",
                                   "SyntaxTranslationPipeline", "SyntaxMTConfig"]


def test_auto_tokenizer_after_import_neither_prompts_nor_warns(model_dir):
    """Without the package, transformers asks whether to run the config's custom code (AutoTokenizer reads the
    config first, whatever tokenizer_config.json says), the model card's `trust_remote_code=True` avoids that."""
    done = subprocess.run([sys.executable, "-c", "import hf_syntax_mt; from transformers import AutoTokenizer; "
                           f"print(AutoTokenizer.from_pretrained({model_dir!r})('a').input_ids[-1])"],
                          capture_output=True, text=True, env=ENV, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and done.stdout.strip().isdigit(), done.stderr
    assert "custom code" not in done.stderr and "model of type" not in done.stderr


def test_transformers_first_then_import(model_dir):
    out = run_python(f"""
        from transformers import pipeline
        import hf_syntax_mt
        translate = pipeline("syntax-translation", model={model_dir!r})
        print(type(translate).__name__, hasattr(hf_syntax_mt.SyntaxMTForConditionalGeneration, "from_marian"))
        """)
    assert out.split("\n")[0] == "SyntaxTranslationPipeline True"


def test_a_submodule_alone_registers_and_saves_the_auto_map(tmp_path):
    out = run_python(f"""
        from hf_syntax_mt.modeling_syntax_mt import SyntaxMTForConditionalGeneration
        from hf_syntax_mt.configuration_syntax_mt import SyntaxMTConfig
        from transformers import AutoModelForSeq2SeqLM
        SyntaxMTConfig.from_preset("transformer_abs").save_pretrained({str(tmp_path)!r})
        print(AutoModelForSeq2SeqLM._model_mapping[SyntaxMTConfig].__name__)
        """)
    assert out.split("\n")[0] == "SyntaxMTForConditionalGeneration"
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"]["AutoConfig"].endswith(".SyntaxMTConfig")


def test_public_names_are_there():
    import hf_syntax_mt

    assert hf_syntax_mt.__all__ and all(hasattr(hf_syntax_mt, name) for name in hf_syntax_mt.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        hf_syntax_mt.nothing
