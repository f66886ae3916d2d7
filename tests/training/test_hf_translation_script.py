"""🤗's run_translation.py trains every preset family unchanged (issue 77): folders made by the package's training,
then the script's calls (tests/training/hf_translation_script.py) in a process that does not import hf_syntax_mt,
with `trust_remote_code=True`: the saved tokenizer of a model trained with GiNZA attaches the syntax features itself,
`DataCollatorForSeq2Seq` pads them, `Seq2SeqTrainer` trains a few updates and evaluates with generate."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hf_syntax_mt.features.training_data import build_annotator
from hf_syntax_mt.training.run import train
from training_helpers import scratch_dir, tiny_args

spacy_util = pytest.importorskip("spacy.util")
if not spacy_util.is_package("ja_ginza"):
    pytest.skip("ja_ginza is not installed", allow_module_level=True)

SCRIPT = Path(__file__).with_name("hf_translation_script.py")
PAIRS = [  # written for these tests
    ("私は赤い車を買った。", "I bought a red car ."),
    ("猫が庭で寝ている。", "The cat is sleeping in the garden ."),
    ("彼女は新しい本を読んだ。", "She read a new book ."),
    ("兄は毎朝公園を走る。", "My brother runs in the park every morning ."),
    ("先生が学生に質問をした。", "The teacher asked the student a question ."),
    ("父は古い時計を直した。", "My father fixed the old clock ."),
]
FAMILIES = {  # run name: (preset, config overrides, the features the script's tokenizer gives)
    "dep_labeled_rel": ("transformer_dep_labeled_rel", "", {"source_heads"}),
    "abs": ("transformer_abs", "", set()),
    "rel": ("transformer_rel", "", set()),
    "dep": ("transformer_dep", "", {"source_heads"}),
    "sla": ("transformer_sla", "", {"source_distances"}),
    "dbsa_enc": ("transformer_dbsa_enc", "", {"source_heads"}),
    "self_parsing": ("transformer_dep_labeled_rel", ",self_parsing=True,self_parsing_layers=1", {"source_heads"}),
}


@pytest.fixture(scope="module")
def folders():
    """One tiny model folder per family, trained 2 updates by the package with GiNZA (and one of transformer_dbsa_dec,
    whose decoder head needs the target's trees); the JSON lines file of the script's --train_file."""
    work = scratch_dir("hf_script")
    (work / "train.ja").write_text("".join(ja + "\n" for ja, _ in PAIRS), encoding="utf-8")
    (work / "train.en").write_text("".join(en + "\n" for _, en in PAIRS), encoding="utf-8")
    (work / "train.json").write_text("".join(json.dumps({"translation": {"ja": ja, "en": en}}, ensure_ascii=False)
                                             + "\n" for ja, en in PAIRS), encoding="utf-8")
    annotator = build_annotator("ja_ginza", "ja")
    made = {}
    for name, (preset, overrides, _) in FAMILIES.items():
        model_args, data_args, training_args = tiny_args(work / name, preset, parser="ja_ginza", data_dir=work,
                                                         max_steps=2, eval_strategy="no", save_strategy="no",
                                                         load_best_model_at_end=False)
        model_args.config_overrides += overrides
        model_args.vocab_size = 200
        data_args.source_lang, data_args.target_lang, data_args.validation_file = "ja", "en", None
        train(model_args, data_args, training_args, annotator=annotator)
        made[name] = work / name
    # a decoder parse head learns the target's trees: here the gold ones of the synthetic corpus
    train(*tiny_args(work / "dbsa_dec", "transformer_dbsa_dec", max_steps=1, eval_strategy="no", save_strategy="no",
                     load_best_model_at_end=False))
    made["dbsa_dec"] = work / "dbsa_dec"
    return work, made


def test_the_scripts_calls_train_and_evaluate_every_preset_family(folders):
    work, made = folders
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", HF_MODULES_CACHE=str(work / "modules"),
               HF_DATASETS_CACHE=str(work / "datasets"))
    done = subprocess.run([sys.executable, str(SCRIPT), str(work / "train.json"), str(work / "script_out"),
                           *(str(made[name]) for name in FAMILIES)], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    *runs, last = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"')]
    assert last["hf_syntax_mt_imported_by"]  # by the parsing tokenizers' own code, not by the script
    for (name, (preset, _, features)), run in zip(FAMILIES.items(), runs):
        assert "error" not in run, (name, run)
        assert set(run["columns"]) == {"input_ids", "attention_mask", "labels", *features}, name
        # the folder's remote code; once a parsing tokenizer's code has imported hf_syntax_mt (which registers its
        # classes with the Auto classes), AutoConfig and the Auto model take the package's own
        assert run["model_class"].startswith("transformers_modules.") or \
            run["model_class"] == "hf_syntax_mt.modeling_syntax_mt", name
        assert run["tokenizer_class"] == ("SyntaxMTParsingTokenizer" if features else "TokenizersBackend"), name
        assert run["train_loss"] > 0 and run["eval"]["eval_translated"] == len(PAIRS), name
        assert run["cached"], name  # the second identical map came from the datasets cache
    assert runs[0]["workers"] == 2  # dep_labeled_rel: mapped by 2 processes, each with its own GiNZA
    assert runs[0]["model_class"].startswith("transformers_modules.")  # before anything imported the package
    assert (work / "script_out" / "0" / "README.md").is_file()  # create_model_card


def test_dbsa_with_a_decoder_parse_head_says_why_the_script_cannot_train_it(folders):
    work, made = folders
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", HF_MODULES_CACHE=str(work / "modules"),
               HF_DATASETS_CACHE=str(work / "datasets"))
    done = subprocess.run([sys.executable, str(SCRIPT), str(work / "train.json"), str(work / "dbsa_out"),
                           str(made["dbsa_dec"])], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    run = next(json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"'))
    assert "needs `target_heads` during training" in run["error"] and "transformer_dbsa_enc" in run["error"]


def test_remote_code_without_the_package_loads_the_plain_tokenizer(folders):
    """A parsing tokenizer's code without hf_syntax_mt (its imports hidden): the plain tokenizer of the same vocabulary
    loads, as the model does, with one warning that it does not parse (transformers refused it before, naming a
    package the index does not have)."""
    work, made = folders
    hide = ("import sys, importlib.abc\n"
            "class Hide(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'hf_syntax_mt':\n"
            "            raise ModuleNotFoundError(f\"No module named '{name}'\")\n"
            "sys.meta_path.insert(0, Hide())\n"
            "from transformers import AutoTokenizer\n"
            f"tokenizer = AutoTokenizer.from_pretrained({str(made['dep_labeled_rel'])!r}, trust_remote_code=True)\n"
            "print(tokenizer('a b c')['input_ids'])\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(work / "modules_hidden"))
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "hf_syntax_mt is not installed, so this tokenizer does not parse" in done.stderr
    from transformers import AutoTokenizer

    expected = AutoTokenizer.from_pretrained(made["dep_labeled_rel"]).backend_tokenizer.encode("a b c").ids
    assert done.stdout.strip() == str(expected)
