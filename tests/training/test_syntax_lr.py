"""The syntax parameters' own learning rate (`--syntax_lr_multiplier` / `--syntax_learning_rate`): which
parameters it covers (exactly those a converted Marian checkpoint lacks), the optimizer groups and their
schedule, the updates of a real training step, and the argument checks."""

import math
import warnings

import pytest
import torch
from transformers import HfArgumentParser, MarianMTModel, TrainerCallback

from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration
from hf_syntax_mt.training.run import SyntaxMTTrainingArguments
from hf_syntax_mt.training.trainer import SyntaxMTSeq2SeqTrainer, syntax_parameter_groups
from marian_helpers import PAD, make_marian, random_trees
from training_helpers import scratch_dir

CONVERTED = [
    ("transformer_abs", {}),
    ("transformer_dep_labeled_rel+transformer_dbsa", {}),
    ("transformer_dep_rel", {"self_parsing": True, "self_parsing_layers": 1}),
]


@pytest.fixture(scope="module")
def marian_dir():
    directory = scratch_dir("marian_syntax_lr")
    make_marian(directory)
    return directory


def convert(marian_dir, preset, **overrides):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the DBSA note
        return SyntaxMTForConditionalGeneration.from_marian(marian_dir, preset=preset, **overrides)


def training_args(tmp_path, **settings):
    defaults = dict(output_dir=str(tmp_path / "out"), learning_rate=1e-3, warmup_steps=4, use_cpu=True,
                    report_to=[], disable_tqdm=True, save_strategy="no", eval_strategy="no")
    return SyntaxMTTrainingArguments(**{**defaults, **settings})


def group_ids(optimizer, lr):
    return {id(p) for group in optimizer.param_groups if group["lr"] == lr for p in group["params"]}


@pytest.mark.parametrize(("preset", "overrides"), CONVERTED)
def test_syntax_parameters_are_exactly_those_marian_lacks(marian_dir, preset, overrides):
    marian_state = MarianMTModel.from_pretrained(marian_dir).state_dict()
    model = convert(marian_dir, preset, **overrides)
    syntax = set(model.syntax_parameter_names())
    for name, parameter in model.named_parameters():
        source = name.replace(".feed_forward.fc", ".fc")  # the one renamed module
        if name in syntax:
            assert source not in marian_state, name
        else:
            torch.testing.assert_close(parameter, marian_state[source], atol=0, rtol=0, msg=name)
    marian_size = sum(p.numel() for n, p in MarianMTModel.from_pretrained(marian_dir).named_parameters()
                      if ".embed_positions." not in n)  # sinusoids, computed by SyntaxMT
    assert sum(p.numel() for n, p in model.named_parameters() if n not in syntax) == marian_size
    assert bool(syntax) == (preset != "transformer_abs")
    if overrides.get("self_parsing"):
        assert any(".source_parser." in name for name in syntax)
    # a model built from scratch has the same syntax parameters
    scratch = SyntaxMTForConditionalGeneration(SyntaxMTConfig.from_dict(model.config.to_dict()))
    assert scratch.syntax_parameter_names() == model.syntax_parameter_names()


def test_syntax_parameter_kinds():
    config = SyntaxMTConfig.from_preset("transformer_dep_labeled_rel+transformer_dbsa", vocab_size=40, d_model=32,
                                        encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                        dbsa_encoder_layer=1, dbsa_decoder_layer=2)
    names = SyntaxMTForConditionalGeneration(config).syntax_parameter_names()
    assert "model.encoder.layers.0.relations.dependency.key" in names
    assert "model.encoder.layers.1.relations.combine.value.weight" in names  # W_rel
    assert "model.decoder.layers.0.relations.relative.value" in names
    assert "model.encoder.layers.0.self_attn.parse_bilinear" in names  # DBSA encoder layer 1
    assert "model.decoder.layers.1.self_attn.parse_key_bias" in names  # DBSA decoder layer 2
    assert not any("proj" in name or "norm" in name or "shared" in name for name in names)


def test_optimizer_groups_split_the_trainers_groups(marian_dir, tmp_path):
    model = convert(marian_dir, "transformer_dep_labeled_rel+transformer_dbsa")
    args = training_args(tmp_path, syntax_lr_multiplier=10, weight_decay=0.01)
    trainer = SyntaxMTSeq2SeqTrainer(model=model, args=args)
    optimizer = trainer.create_optimizer()
    parameters = dict(model.named_parameters())
    syntax = {id(parameters[n]) for n in model.syntax_parameter_names()}
    assert group_ids(optimizer, 1e-2) == syntax
    assert group_ids(optimizer, 1e-3) == {id(p) for p in parameters.values()} - syntax
    decay = set(trainer.get_decay_parameter_names(model))
    for group in optimizer.param_groups:
        assert group["weight_decay"] in (0.0, 0.01)
        for p in group["params"]:
            name = next(n for n, q in parameters.items() if q is p)
            assert (name in decay) == (group["weight_decay"] == 0.01), name
    assert [g["lr"] for g in optimizer.param_groups] == [1e-3, 1e-3, 1e-2, 1e-2]  # the logged rate is the base one

    # by default the Trainer's own two groups
    default = SyntaxMTSeq2SeqTrainer(model=model, args=training_args(tmp_path)).create_optimizer()
    assert len(default.param_groups) == 2 and {g["lr"] for g in default.param_groups} == {1e-3}
    absolute = SyntaxMTSeq2SeqTrainer(model=model, args=training_args(tmp_path, syntax_learning_rate=3e-3))
    assert group_ids(absolute.create_optimizer(), 3e-3) == syntax
    partly_frozen = convert(marian_dir, "transformer_dep_rel")
    table = partly_frozen.model.encoder.layers[0].relations.relative.key.requires_grad_(False)
    groups = syntax_parameter_groups(partly_frozen, [], 0.0, 1e-3, 1e-2)
    assert all(p is not table for group in groups for p in group["params"])  # left out, as the Trainer does


@pytest.mark.parametrize("scheduler", ["inverse_sqrt", "linear", "cosine"])
def test_scheduler_keeps_the_ratio(marian_dir, tmp_path, scheduler):
    model = convert(marian_dir, "transformer_dep_rel")
    trainer = SyntaxMTSeq2SeqTrainer(model=model, args=training_args(tmp_path, syntax_lr_multiplier=30,
                                                                     lr_scheduler_type=scheduler))
    trainer.create_optimizer_and_scheduler(num_training_steps=40)
    for step in range(1, 30):
        trainer.optimizer.step()  # no gradients: nothing moves
        trainer.lr_scheduler.step()
        base, syntax = sorted({group["lr"] for group in trainer.optimizer.param_groups})
        assert syntax == pytest.approx(30 * base, rel=1e-12)
        assert trainer._get_learning_rate() == base
        if scheduler == "inverse_sqrt":
            assert base == pytest.approx(1e-3 * (step / 4 if step < 4 else math.sqrt(4 / step)), rel=1e-12)


class ParameterSnapshots(TrainerCallback):
    """The model's parameters after every optimizer step."""

    def __init__(self):
        self.steps = []

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.steps.append({n: p.detach().clone() for n, p in model.named_parameters()})


def train_two_steps(marian_dir, tmp_path, batch, **settings):
    torch.manual_seed(0)  # W_rel keeps a random initialisation
    model = convert(marian_dir, "transformer_dep_labeled_rel+transformer_dbsa_enc").double()  # updates of 1e-7 exact
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows = [{key: value[row] for key, value in batch.items()} for row in range(len(batch["input_ids"]))]
    snapshots = ParameterSnapshots()
    args = training_args(tmp_path, max_steps=2, per_device_train_batch_size=4, weight_decay=0.01, seed=0, **settings)
    SyntaxMTSeq2SeqTrainer(model=model, args=args, train_dataset=rows, callbacks=[snapshots]).train()
    return model, initial, snapshots.steps


def test_training_steps_scale_the_syntax_updates(marian_dir, tmp_path):
    """Step 1 runs at lr 0 (warm-up), so both runs see the same gradients twice; step 2 then moves the syntax
    parameters exactly 30 times as far with the multiplier, the others as far; the model after step 1 is
    still Marian."""
    torch.manual_seed(3)
    lengths = [9, 7, 5, 4, 9, 6, 8, 3]
    input_ids = torch.randint(1, PAD, (8, 9))
    attention_mask = torch.zeros_like(input_ids)
    for row, length in enumerate(lengths):
        input_ids[row, length - 1], input_ids[row, length:], attention_mask[row, :length] = 0, PAD, 1
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, source_heads=random_trees(lengths, 9),
                 labels=torch.randint(1, PAD, (8, 6)))
    model, initial, plain = train_two_steps(marian_dir, tmp_path, batch)
    _, _, boosted = train_two_steps(marian_dir, tmp_path, batch, syntax_lr_multiplier=30)
    syntax = set(model.syntax_parameter_names())
    for name in initial:
        assert torch.equal(boosted[0][name], initial[name]), name  # lr 0 at step 1
        plain_update, boosted_update = plain[1][name] - initial[name], boosted[1][name] - initial[name]
        assert plain_update.abs().max() > 0, name  # gradient or weight decay
        torch.testing.assert_close(boosted_update, plain_update * (30 if name in syntax else 1), atol=1e-15, rtol=1e-6)

    marian = MarianMTModel.from_pretrained(marian_dir).eval()
    model.load_state_dict(boosted[0], strict=False)
    model.float().eval()
    decoder_input_ids = torch.randint(1, PAD, (8, 5))
    with torch.no_grad():
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
        expected = marian(**inputs).logits
        logits = model(**inputs, source_heads=batch["source_heads"]).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


def test_a_model_without_syntax_parameter_names_is_refused(marian_dir, tmp_path):
    trainer = SyntaxMTSeq2SeqTrainer(model=MarianMTModel.from_pretrained(marian_dir),
                                     args=training_args(tmp_path, syntax_lr_multiplier=10))
    with pytest.raises(ValueError, match="needs a SyntaxMT model, not MarianMTModel"):
        trainer.create_optimizer()


@pytest.mark.parametrize(("settings", "match"), [
    (dict(syntax_lr_multiplier=-1.0), r"--syntax_lr_multiplier -1.0: expected a finite number >= 0"),
    (dict(syntax_learning_rate=float("nan")), r"--syntax_learning_rate nan: expected a finite number >= 0"),
    (dict(syntax_lr_multiplier=True), r"--syntax_lr_multiplier True"),
    (dict(syntax_lr_multiplier=10, syntax_learning_rate=1e-3), r"both set .* give one of them"),
])
def test_argument_errors(tmp_path, settings, match):
    with pytest.raises(ValueError, match=match):
        training_args(tmp_path, **settings)


def test_command_line(tmp_path):
    parser = HfArgumentParser(SyntaxMTTrainingArguments)
    assert "--syntax_lr_multiplier" in parser.format_help() and "--syntax_learning_rate" in parser.format_help()
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--learning_rate", "2e-4",
                                                  "--syntax_lr_multiplier", "10", "--use_cpu", "--report_to", "none"])
    assert args.syntax_parameter_learning_rate == pytest.approx(2e-3)
    (args,) = parser.parse_args_into_dataclasses(["--output_dir", str(tmp_path), "--use_cpu"])
    assert args.syntax_parameter_learning_rate == args.learning_rate


def test_recipe_variant_sets_the_syntax_learning_rate(tmp_path):
    """A quality-runner recipe (or variant) takes the option as a `training` key, checked like the others."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from quality_lib import recipes

    recipe = json.loads((recipes.REPO / "benchmarks" / "recipes" / "small_parallel_enja.ja-en.json").read_text())
    recipe.setdefault("variants", {})["dep_rel_x10"] = {"preset": "transformer_dep_rel",
                                                        "training": {"syntax_lr_multiplier": 10}}
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps({**recipe, "base_dir": str(recipes.REPO)}))
    _, _, training = recipes.run_settings(recipes.load_recipe(path), "dep_rel_x10")
    args = SyntaxMTTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", **training)
    assert args.syntax_parameter_learning_rate == pytest.approx(10 * args.learning_rate)
    recipe["variants"]["dep_rel_x10"]["training"] = {"syntax_lr_multipler": 10}
    path.write_text(json.dumps({**recipe, "base_dir": str(recipes.REPO)}))
    with pytest.raises(ValueError, match="did you mean 'syntax_lr_multiplier'"):
        recipes.load_recipe(path)
