"""benchmarks/self_parsing_eval.py on a tiny untrained self-parsing model of a synthetic recipe: it scores the model's
trees against the recipe's (gold) trees and the PUD-style treebank given, times the pipeline both ways, writes the JSON
it says, and the RESULTS table reads that JSON."""

import json
import sys
from pathlib import Path

import torch

from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import self_parsing_eval  # noqa: E402
from quality_lib.corpus import Corpus  # noqa: E402
from quality_lib.recipes import load_recipe  # noqa: E402


def test_self_parsing_eval_scores_the_model_s_trees_and_writes_its_row(tiny_recipe, tmp_path):
    recipe_path, root = tiny_recipe
    recipe = load_recipe(recipe_path)
    tokenizer = Corpus(recipe, root / "runs").tokenizer
    torch.manual_seed(0)
    config = SyntaxMTConfig.from_preset("transformer_dep_rel", self_parsing=True, vocab_size=len(tokenizer),
                                        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                        decoder_start_token_id=tokenizer.pad_token_id, **recipe["model"])
    model_dir = tmp_path / "transformer_dep_rel@self" / "seed1"
    model = SyntaxMTForConditionalGeneration(config)
    model.generation_config.max_length = 8  # untrained: the pipeline's translations stop there
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "results" / "synthetic.json"
    self_parsing_eval.main(["--recipe", str(recipe_path), "--model", str(model_dir), "--runs-dir", str(root / "runs"),
                            "--pud", str(root / "data" / "test.src.conllu"), "--rounds", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["dev_sentences"] == 6 and result["pud"]["sentences"] == 4 and result["pud"]["aligned"] == 100.0
    for score in (result["dev_subword_agreement"], result["dev_word_agreement_uas"], result["pud"]["uas"]):
        assert 0 <= score <= 100
    pipeline = result["pipeline"]
    assert pipeline["sentences"] == 6 and len(pipeline["own_parser"]["seconds"]) == 1
    assert result["parser"] == "CoNLL-U files (<text>.conllu)" and result["command"].endswith(f"--out {out}")
    row = self_parsing_eval.results_section(out.parent).splitlines()[-1]
    assert row.startswith(f"| `transformer_dep_rel@self/seed1` (synthetic.src-tgt) | {result['dev_subword_agreement']:.2f} |")
