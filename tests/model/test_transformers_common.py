"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`) on the model family (issue 23).

The two test modules are taken from the sdist of the installed transformers version, fetched with pip
into a cache directory (`~/.cache/hf_syntax_mt/transformers-sdist/<version>`, or under
`$HF_SYNTAX_MT_CACHE`) on first use; this module skips with the reason when that fails. The tester
follows Marian's (`tests/models/marian/test_modeling_marian.py`), with the syntax features among the
inputs. The sdist lacks three modules that `test_modeling_common.py` / `test_configuration_common.py`
import; they are replaced by the stand-ins below (no test code of transformers is kept here):
`tests/generation/test_utils.py` (generation tests: covered by tests/test_modeling.py),
`tests/exporters/test_export.py` (torch.export tests) and `tests/utils/test_configuration_utils.py`
(the dict of common config kwargs, written here for `check_config_arguments_init`).
"""

import importlib
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import types
import unittest
from pathlib import Path

import pytest
import torch
import transformers
from transformers.models.auto import modeling_auto

from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration, SyntaxMTModel
from hf_syntax_mt.features.synthetic import random_dependency_tree

COMMON_FILES = ("test_modeling_common.py", "test_configuration_common.py")
PACKAGE = "_transformers_sdist_tests"


def _sdist_tests_dir():
    """The tests/ folder of the installed transformers' sdist (cached); raises RuntimeError with the cause."""
    version = transformers.__version__
    root = Path(os.environ.get("HF_SYNTAX_MT_CACHE", Path.home() / ".cache" / "hf_syntax_mt"))
    target = root / "transformers-sdist" / version / "tests"
    if all((target / name).is_file() for name in (*COMMON_FILES, "__init__.py")):
        return target
    with tempfile.TemporaryDirectory() as download:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--timeout", "30",
                   "--disable-pip-version-check", "-q", "-d", download, f"transformers=={version}"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise RuntimeError(f"pip download of transformers=={version} failed: {error}") from error
        archives = list(Path(download).glob("transformers-*.tar.gz"))
        if result.returncode or not archives:
            pip_error = " | ".join(result.stderr.strip().splitlines())[-300:]
            raise RuntimeError(f"pip download of the transformers=={version} sdist failed: {pip_error}")
        with tarfile.open(archives[0]) as archive:
            members = {Path(m.name).name: m for m in archive.getmembers() if Path(m.name).parts[1:-1] == ("tests",)}
            missing = [name for name in COMMON_FILES if name not in members]
            if missing:
                raise RuntimeError(f"the transformers=={version} sdist has no tests/{', tests/'.join(missing)}")
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=target.parent))
            for name in COMMON_FILES:
                (staging / name).write_bytes(archive.extractfile(members[name]).read())
            # test_configuration_common.py loads the folder's __init__.py (empty in transformers' repository)
            (staging / "__init__.py").write_text("")
    try:
        staging.rename(target)  # atomic: a concurrent run sees both files or none
    except OSError:  # another run got there first
        shutil.rmtree(staging, ignore_errors=True)
    return target


# Common config kwargs with non-default values (stand-in for tests/utils/test_configuration_utils.py)
CONFIG_COMMON_KWARGS = {
    "return_dict": False,
    "output_hidden_states": True,
    "output_attentions": True,
    "dtype": "float16",
    "chunk_size_feed_forward": 5,
    "architectures": ["SyntaxMTForConditionalGeneration"],
    "id2label": {0: "label"},
    "label2id": {"label": "0"},
    "problem_type": "regression",
    "tie_word_embeddings": False,
    "bos_token_id": 6,
    "pad_token_id": 7,
    "eos_token_id": 8,
    "decoder_start_token_id": 10,
}


def _import_common_tests():
    tests_dir = _sdist_tests_dir()
    package = types.ModuleType(PACKAGE)
    package.__path__ = [str(tests_dir)]
    stand_ins = {
        "exporters": {"test_export": {"ExportTesterMixin": type("ExportTesterMixin", (), {})}},
        "generation": {"test_utils": {"GenerationTesterMixin": type("GenerationTesterMixin", (), {})}},
        "utils": {"test_configuration_utils": {"config_common_kwargs": CONFIG_COMMON_KWARGS}},
    }
    sys.modules[PACKAGE] = package
    for subpackage, modules in stand_ins.items():
        sys.modules[f"{PACKAGE}.{subpackage}"] = types.ModuleType(f"{PACKAGE}.{subpackage}")
        for name, attributes in modules.items():
            module = types.ModuleType(f"{PACKAGE}.{subpackage}.{name}")
            module.__dict__.update(attributes)
            sys.modules[module.__name__] = module
    modeling = importlib.import_module(f"{PACKAGE}.test_modeling_common")
    configuration = importlib.import_module(f"{PACKAGE}.test_configuration_common")
    return modeling, configuration


pytest.importorskip("parameterized", reason="transformers' common tests need `parameterized` (pip install '.[test]')")
try:
    common, common_config = _import_common_tests()
except (RuntimeError, OSError, ImportError) as error:
    pytest.skip(f"transformers' common tests are unavailable: {error}", allow_module_level=True)

ModelTesterMixin, ids_tensor, ConfigTester = common.ModelTesterMixin, common.ids_tensor, common_config.ConfigTester


class SyntaxMTModelTester:
    """Marian's tester (tiny sizes) with the syntax features of a preset among the inputs."""

    def __init__(self, parent, preset, batch_size=13, seq_length=7, vocab_size=99, hidden_size=16, **config_overrides):
        self.parent = parent
        self.preset = preset
        self.config_overrides = config_overrides
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.is_training = True

    def get_config(self):
        return SyntaxMTConfig.from_preset(
            self.preset,
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=4,
            decoder_ffn_dim=4,
            dropout=0.1,
            attention_dropout=0.1,
            max_position_embeddings=100,
            eos_token_id=2,
            pad_token_id=1,
            bos_token_id=0,
            decoder_start_token_id=3,
            **self.config_overrides,
        )

    def prepare_config_and_inputs(self):
        config = self.get_config()
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = config.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        inputs = {
            "input_ids": input_ids,
            "attention_mask": input_ids.ne(config.pad_token_id),
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_input_ids.ne(config.pad_token_id),
        }
        rng = random.Random(0)
        words = self.seq_length - 1  # eos is outside the tree (-100)
        if config.needs_source_heads:
            heads = [random_dependency_tree(words, rng) + [-100] for _ in range(self.batch_size)]
            inputs["source_heads"] = torch.tensor(heads, device=input_ids.device)
        if config.needs_source_distances:
            distances = [[float(rng.randint(1, 6)) for _ in range(words - 1)] + [2000.0, 2000.0]
                         for _ in range(self.batch_size)]
            inputs["source_distances"] = torch.tensor(distances, device=input_ids.device)
        if config.needs_target_heads:  # label-side input of the LM model's parse loss (see `_prepare_for_class`)
            self.target_heads = torch.tensor([random_dependency_tree(words, rng) + [-100] for _ in range(self.batch_size)])
        return config, inputs

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class SyntaxMTCommonTests(ModelTesterMixin):
    """The battery for one preset (subclasses below set `preset`)."""

    preset = None
    config_overrides = {}
    all_model_classes = (SyntaxMTModel, SyntaxMTForConditionalGeneration)
    is_encoder_decoder = True
    test_can_init_all_missing_weights_before_2023 = True  # run it: the file has no copyright year to go by
    additional_model_inputs = ["source_heads", "source_distances"]  # taken along by the eager/sdpa comparison

    @classmethod
    def setUpClass(cls):
        # a third-party model is not in transformers' auto-mapping name tables that the tests read
        # (`test_training` asks the bare model for a loss otherwise): add the family's names for the run
        cls._added_names = []
        for table, name in (
            (modeling_auto.MODEL_MAPPING_NAMES, "SyntaxMTModel"),
            (modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "SyntaxMTForConditionalGeneration"),
        ):
            if SyntaxMTConfig.model_type not in table:
                table[SyntaxMTConfig.model_type] = name
                cls._added_names.append(table)

    @classmethod
    def tearDownClass(cls):
        for table in cls._added_names:
            del table[SyntaxMTConfig.model_type]

    def setUp(self):
        self.model_tester = SyntaxMTModelTester(self, self.preset, **self.config_overrides)
        self.config_tester = ConfigTester(self, config_class=SyntaxMTConfig, d_model=16, encoder_layers=2)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        """The common inputs, plus `target_heads` (the gold heads of the decoder parse loss, aligned with
        the labels) for the LM model of a DBSA-dec preset; the bare model has no loss and no such input."""
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels)
        if model_class is SyntaxMTForConditionalGeneration and getattr(self.model_tester, "target_heads", None) is not None:
            inputs_dict["target_heads"] = self.model_tester.target_heads.clone()
        return inputs_dict

    def test_config(self):
        self.config_tester.run_common_tests()

    @unittest.skip(
        reason="GenerationTesterMixin (tests/generation/test_utils.py) is not in the transformers sdist, so the tester "
        "cannot inherit it; generate (greedy, beam, cache, padding) is tested in tests/test_modeling.py"
    )
    def test_generation_tester_mixin_inheritance(self):
        pass


def _battery(preset, name_suffix="", **attributes):
    name = "".join(part.capitalize() for part in preset.split("_")) + name_suffix + "CommonTest"
    return type(name, (SyntaxMTCommonTests, unittest.TestCase), {"preset": preset, "__module__": __name__, **attributes})


TransformerAbsCommonTest = _battery("transformer_abs")
TransformerRelCommonTest = _battery("transformer_rel")
TransformerDepRelCommonTest = _battery("transformer_dep_rel")
TransformerDepLabeledRelCommonTest = _battery("transformer_dep_labeled_rel")
TransformerSlaCommonTest = _battery("transformer_sla")
# a model with its own source parser (SPEC §9): trained on the parser's trees (source_heads given, as here)
SELF_PARSING = {"self_parsing": True, "self_parsing_layers": 1}
TransformerDepRelSelfParsingCommonTest = _battery(
    "transformer_dep_rel",
    "SelfParsing",
    config_overrides=SELF_PARSING,
    test_attention_outputs=unittest.skip(
        reason="a self-parsing model's outputs carry two more fields than the test's fixed count: source_tree_logits "
        "and source_heads; test_attention_outputs_beside_parse_scores below checks its attentions"
    )(lambda self: None),
)
TransformerDbsaCommonTest = _battery(
    "transformer_dbsa",
    test_attention_outputs=unittest.skip(
        reason="the DBSA outputs carry two more fields than the test's fixed count of 5 (+ cache) for an encoder-"
        "decoder output: encoder_parse_logits and decoder_parse_logits; the attentions of DBSA models are checked by "
        "test_attention_outputs_beside_parse_scores below"
    )(lambda self: None),
)


@pytest.mark.parametrize("preset, overrides", [("transformer_dbsa", {}), ("transformer_dep_rel", SELF_PARSING)],
                         ids=["dbsa", "self_parsing"])
def test_attention_outputs_beside_parse_scores(preset, overrides):
    """What test_attention_outputs checks, for a model whose outputs carry parse scores (DBSA parse heads, or a
    self-parsing model's parse module and the tree it read): attentions on request (argument or config) with
    the shapes of the other presets, and a tuple when return_dict=False, beside the parse scores."""
    tester = SyntaxMTModelTester(None, preset, **overrides)
    batch, length, heads, layers = tester.batch_size, tester.seq_length, tester.num_attention_heads, 2
    for attn_implementation in ("eager", "sdpa"):  # transformers allows config.output_attentions with eager only
        config, inputs = tester.prepare_config_and_inputs()
        model = SyntaxMTForConditionalGeneration._from_config(config, attn_implementation=attn_implementation).eval()
        with torch.no_grad():
            quiet = model(**inputs)
            if attn_implementation == "eager":
                model.config.output_attentions = True
                loud, as_tuple = model(**inputs), model(**inputs, return_dict=False)
            else:
                loud = model(**inputs, output_attentions=True)
                as_tuple = model(**inputs, output_attentions=True, return_dict=False)
        assert quiet.encoder_attentions is None
        for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
            attentions = getattr(loud, name)
            assert len(attentions) == layers and all(a.shape == (batch, heads, length, length) for a in attentions)
        if config.dbsa_encoder_layer:  # the parse head's attention is the softmax of its (masked) parse scores
            assert quiet.encoder_parse_logits.shape == (batch, length, length)
            parse_layer = config.dbsa_encoder_layer - 1
            torch.testing.assert_close(loud.encoder_attentions[parse_layer][:, 0], loud.encoder_parse_logits.softmax(-1))
        if config.self_parsing:  # the parse module's scores, and the tree the encoder read: the one given
            assert quiet.source_tree_logits.shape == (batch, length, length)
            assert torch.equal(quiet.source_heads, inputs["source_heads"])
        assert isinstance(as_tuple, tuple) and len(as_tuple) == len(loud.to_tuple())
