"""Parse-supervised attention (DBSA) and syntax-guided localized attention (SLA), issue 4."""

import random

import pytest
import torch
from torch.nn import functional as F
from transformers.testing_utils import CaptureLogger

from hf_syntax_mt import SyntaxMTConfig, SyntaxMTForConditionalGeneration, localized_attention_log_mask
from hf_syntax_mt.configuration_syntax_mt import logger as configuration_logger
from hf_syntax_mt.features.synthetic import generate_synthetic_corpus
from hf_syntax_mt.modeling_syntax_mt import decoder_parse_targets, shift_target_heads_right
from hf_syntax_mt.syntax import local_range_mask
from model_helpers import random_batch, tiny_config

# ---------------------------------------------------------------------------------------------
# SLA
# ---------------------------------------------------------------------------------------------


def crisp_local_range(d):
    """Seed 003 Algorithm 2 exactly as printed (1-based): n tokens, gaps d_1..d_{n-1}.

    b_l = max{j+1 : j < i-1, d_j > d_{i-1}} (1 if none); b_r = min{j : j > i, d_j > d_i} (n if none).
    """
    n = len(d) + 1
    gap = {j: d[j - 1] for j in range(1, n)}
    mask = [[False] * n for _ in range(n)]
    for i in range(1, n + 1):
        left = [j + 1 for j in range(1, i - 1) if i - 1 >= 1 and gap[j] > gap[i - 1]]
        right = [j for j in range(i + 1, n) if i <= n - 1 and gap[j] > gap[i]]
        b_l = max(left) if left else 1
        b_r = min(right) if right else n
        for j in range(b_l, b_r + 1):
            mask[i - 1][j - 1] = True
    return mask


def soft_mask(d, tau):
    """Per-token distances (gap after each token; the last gap is 'large') -> G (n, n)."""
    distances = torch.tensor([list(map(float, d)) + [2000.0]])
    return localized_attention_log_mask(distances, tau)[0].exp()


def test_seed003_example_range_of_across():
    # "I swim across the river ." with d = [4, 3, 2, 1, 4] (seed 003 Fig. 1)
    d = [4, 3, 2, 1, 4]
    crisp = crisp_local_range(d)
    assert [j for j, inside in enumerate(crisp[2]) if inside] == [1, 2, 3, 4]  # swim across the river
    G = soft_mask(d, tau=1e-3)
    assert torch.equal(G[2] > 0.5, torch.tensor([False, True, True, True, True, False]))
    assert torch.equal(G > 1e-6, torch.tensor(crisp))
    assert (local_range_mask(d) == torch.tensor(crisp).numpy()).all()


@pytest.mark.parametrize("seed", range(20))
def test_soft_mask_tends_to_the_crisp_range_on_random_distances(seed):
    rng = random.Random(seed)
    d = [rng.randint(1, 5) for _ in range(rng.randint(2, 14))]
    crisp = torch.tensor(crisp_local_range(d))
    G = soft_mask(d, tau=1e-4)
    assert torch.equal(G > 1e-6, crisp), d
    # away from ties, the soft mask is already 0/1; ties give 1/2 per tied gap
    assert torch.all((G < 1e-6) | (G > 0.5**len(d) - 1e-6))
    assert torch.allclose(G.diagonal(), torch.ones(len(d) + 1))


def test_flat_distances_make_a_pure_locality_mask():
    """distance_source="flat" (the no-syntax control): equal gaps, so every step outward costs
    σ(0) = 1/2 whatever τ is: G_ij = (1/2)^(|i-j|-1) for |i - j| > 1, 1 next to the query."""
    from hf_syntax_mt.syntax import read_conllu

    (annotation,) = read_conllu("# text = a b c d e f\n" + "".join(
        f"{i}\t{w}\t_\t_\t_\t_\t{h}\t_\t_\t_\n" for i, (w, h) in enumerate(zip("abcdef", [2, 0, 2, 5, 3, 5]), 1)))
    d = annotation.word_distances("flat")
    assert d == [1.0] * 5 and annotation.word_distances("dependency") != d
    n = len(d) + 1
    expected = torch.tensor([[0.5 ** max(abs(i - j) - 1, 0) for j in range(n)] for i in range(n)])
    for tau in (0.1, 10.0):
        assert torch.allclose(soft_mask(d, tau), expected)


def test_sla_heads_attend_exactly_the_normalised_mask_and_other_heads_are_untouched():
    torch.manual_seed(0)
    config = tiny_config("transformer_sla", sla_heads=2)
    plain = tiny_config("transformer_abs")
    model = SyntaxMTForConditionalGeneration(config).eval()
    baseline = SyntaxMTForConditionalGeneration(plain).eval()
    baseline.load_state_dict(model.state_dict())
    head_dim = model.model.encoder.layers[0].self_attn.head_dim
    with torch.no_grad():  # zero the Q/K projections of the last two heads in both layers
        for layer in model.model.encoder.layers:
            for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj):
                projection.weight[-2 * head_dim :] = 0
                projection.bias[-2 * head_dim :] = 0
    baseline.load_state_dict(model.state_dict())
    batch = random_batch([9, 7], seed=11)
    encoder_inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_attentions=True)
    attentions = model.get_encoder()(**encoder_inputs, source_distances=batch["source_distances"]).attentions
    with_sla = attentions[0]
    without = baseline.get_encoder()(**encoder_inputs).attentions[0]
    G = localized_attention_log_mask(batch["source_distances"], config.sla_tau).exp()
    G = G * batch["attention_mask"][:, None, :]
    expected = G / G.sum(-1, keepdim=True)
    for head in (2, 3):
        assert torch.allclose(with_sla[:, head], expected, atol=1e-6)
    assert torch.equal(with_sla[:, :2], without[:, :2])
    # sla_layers = [1]: in layer 2 the same zeroed heads attend uniformly over the tokens, not by G
    uniform = batch["attention_mask"][:, None, :].float().expand_as(expected)
    uniform = uniform / uniform.sum(-1, keepdim=True)
    for head in (2, 3):
        assert torch.allclose(attentions[1][:, head], uniform, atol=1e-6)
    assert not torch.allclose(expected, uniform, atol=1e-3)


def test_sla_mask_in_log_space_is_finite_for_large_gaps():
    distances = torch.tensor([[1.0, 999.0, 2.0, 2000.0, 2000.0]])
    log_mask = localized_attention_log_mask(distances, tau=0.01)
    assert torch.isfinite(log_mask).all()
    # still the local range of Algorithm 2 (gaps 1, 999, 2, large): inside ~1, outside ~0
    inside = torch.tensor(crisp_local_range([1, 999, 2, 2000]))
    assert torch.equal(log_mask[0].exp() > 1e-6, inside)
    assert torch.all(log_mask[0].exp()[inside] > 0.5)


# ---------------------------------------------------------------------------------------------
# DBSA
# ---------------------------------------------------------------------------------------------


def test_target_heads_are_aligned_with_the_decoder_inputs():
    # labels y0 y1 y2 </s>; y1 is the root, y0 -> y1 (a future head for y0), y2 -> y1
    target_heads = torch.tensor([[1, 1, 1, -100]])
    # decoder inputs <start> y0 y1 y2: row 1 reads y0 (head y1 is read at row 2 > 1: ignored),
    # row 2 reads y1 (root -> itself, row 2), row 3 reads y2 (head y1 at row 2)
    assert shift_target_heads_right(target_heads).tolist() == [[-100, -100, 2, 2]]


def test_decoder_supervised_rows_of_the_issue_example():
    # labels y0 y1 y2 </s>: y0 -> y1, y1 the root, y2 -> y1
    target_heads = torch.tensor([[1, 1, 1, -100]])
    # reading (the package): cells (2 -> 2), (3 -> 2); predicting (seed 004's code): (1 -> 1), (2 -> 1)
    assert decoder_parse_targets(target_heads).tolist() == shift_target_heads_right(target_heads).tolist()
    assert decoder_parse_targets(target_heads, "reading").tolist() == [[-100, -100, 2, 2]]
    assert decoder_parse_targets(target_heads, "predicting").tolist() == [[-100, 1, 1, -100]]


@pytest.mark.parametrize("row", ["reading", "predicting"])
@pytest.mark.parametrize("normalization", ["kept", "all"])
def test_decoder_parse_loss_conventions_against_a_hand_computed_reference(row, normalization):
    torch.manual_seed(0)
    config = tiny_config("transformer_dbsa_dec", dbsa_decoder_supervised_row=row,
                         dbsa_decoder_loss_normalization=normalization, dbsa_decoder_loss_weight=0.5)
    model = SyntaxMTForConditionalGeneration(config).train()
    batch = random_batch([6], seed=12)
    out = model(**batch, labels=torch.tensor([[5, 6, 7, 1]]), target_heads=torch.tensor([[1, 1, 1, -100]]))
    log_probs = out.decoder_parse_logits[0].float().log_softmax(-1)
    cells = {"reading": [(2, 2), (3, 2)], "predicting": [(1, 1), (2, 1)]}[row]
    nll = -sum(log_probs[r, c] for r, c in cells)
    expected = nll / (len(cells) if normalization == "kept" else 3)  # "all": y0's dropped arc counts too
    assert torch.allclose(out.decoder_parse_loss, expected)
    assert torch.allclose(out.loss, out.token_loss + 0.5 * out.decoder_parse_loss)
    gradient = torch.autograd.grad(out.decoder_parse_loss, out.decoder_parse_logits)[0][0]
    assert sorted(set(gradient.nonzero()[:, 0].tolist())) == [r for r, _ in cells]  # only the supervised rows


@pytest.mark.parametrize("row", ["reading", "predicting"])
def test_predicted_target_heads_are_the_argmax_of_the_supervised_rows(row):
    # predict_heads reads the rows the loss supervises: fed back as gold, its heads pick the argmax cells
    torch.manual_seed(0)
    model = SyntaxMTForConditionalGeneration(
        tiny_config("transformer_dbsa_dec", dbsa_decoder_layer=2, dbsa_decoder_supervised_row=row))
    batch = random_batch([6], seed=12)
    labels = torch.tensor([[5, 6, 7, 8, 1]])
    heads = model.predict_heads(batch["input_ids"], batch["attention_mask"], labels=labels)["target_heads"]
    logits = model.eval()(**batch, labels=labels).decoder_parse_logits
    gold = decoder_parse_targets(heads, row)
    rows = gold != -100
    assert rows.sum() >= 3 and torch.equal(logits.argmax(-1)[rows], gold[rows])


def test_decoder_parse_loss_never_uses_a_future_head():
    torch.manual_seed(0)
    config = tiny_config("transformer_dbsa_dec")
    model = SyntaxMTForConditionalGeneration(config).train()
    batch = random_batch([6], seed=12)
    labels = torch.tensor([[5, 6, 7, 8, 9, 1]])
    # every head lies to the right; the last word is the root
    target_heads = torch.tensor([[1, 2, 3, 4, 4, -100]])
    out = model(**batch, labels=labels, target_heads=target_heads, output_attentions=True)
    logits = out.decoder_parse_logits
    # only the root (read at row 5) is supervised: gold row 5 -> itself
    expected = F.cross_entropy(logits[0, 5:6], torch.tensor([5]))
    assert torch.allclose(out.decoder_parse_loss, expected)
    gradient = torch.autograd.grad(out.decoder_parse_loss, logits)[0]
    assert torch.count_nonzero(gradient[0, :5]) == 0
    # the causal mask also holds inside the parse head
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert (logits[0][future] == torch.finfo(logits.dtype).min).all()
    assert (logits[0][~future] > torch.finfo(logits.dtype).min).all()


def test_encoder_parse_loss_is_cross_entropy_against_source_heads():
    torch.manual_seed(0)
    config = tiny_config("transformer_dbsa_enc")
    model = SyntaxMTForConditionalGeneration(config).train()
    batch = random_batch([7, 5], seed=13)
    labels = torch.tensor([[5, 6, 1], [7, 1, -100]])
    out = model(**batch, labels=labels)
    gold = batch["source_heads"]
    rows = gold != -100
    expected = F.cross_entropy(out.encoder_parse_logits[rows], gold[rows])
    assert torch.allclose(out.encoder_parse_loss, expected)
    assert torch.allclose(out.loss, out.token_loss + out.encoder_parse_loss)


def test_dbsa_loss_weights_scale_the_parse_terms():
    torch.manual_seed(0)
    config = tiny_config("transformer_dbsa", dbsa_encoder_loss_weight=0.5, dbsa_decoder_loss_weight=2.0)
    model = SyntaxMTForConditionalGeneration(config).train()
    batch = random_batch([6], seed=14)
    out = model(**batch, labels=torch.tensor([[5, 6, 7, 1]]), target_heads=torch.tensor([[0, 0, 1, -100]]))
    assert torch.allclose(out.loss, out.token_loss + 0.5 * out.encoder_parse_loss + 2.0 * out.decoder_parse_loss)


def _encode(examples, vocab):
    """Word-level batch of synthetic examples (one token per word, then </s>)."""
    width = max(len(e.source.split()) for e in examples) + 1
    target_width = max(len(e.target.split()) for e in examples) + 1
    batch = dict(
        input_ids=torch.zeros(len(examples), width, dtype=torch.long),
        attention_mask=torch.zeros(len(examples), width, dtype=torch.long),
        source_heads=torch.full((len(examples), width), -100),
        labels=torch.full((len(examples), target_width), -100),
        target_heads=torch.full((len(examples), target_width), -100),
    )
    for row, example in enumerate(examples):
        source, target = example.source.split(), example.target.split()
        batch["input_ids"][row, : len(source) + 1] = torch.tensor([vocab[w] for w in source] + [1])
        batch["attention_mask"][row, : len(source) + 1] = 1
        batch["source_heads"][row, : len(source)] = torch.tensor(example.source_heads)
        batch["labels"][row, : len(target) + 1] = torch.tensor([vocab[w] for w in target] + [1])
        batch["target_heads"][row, : len(target)] = torch.tensor(example.target_heads)
    return batch


def _attachment_scores(model, batch):
    predicted = model.predict_heads(batch["input_ids"], batch["attention_mask"], labels=batch["labels"])
    source = batch["source_heads"] != -100
    encoder_uas = (predicted["source_heads"][source] == batch["source_heads"][source]).float().mean().item()
    target = batch["target_heads"]
    positions = torch.arange(target.shape[1])
    supervised = (target != -100) & (target <= positions)  # heads the causal parse head can see
    decoder_uas = (predicted["target_heads"][supervised] == target[supervised]).float().mean().item()
    return encoder_uas, decoder_uas


def test_parse_heads_learn_the_synthetic_trees():
    """On the synthetic task with gold trees, the parse heads of a tiny DBSA model reach a high
    unlabeled attachment score on held-out sentences (untrained: near chance)."""
    torch.manual_seed(0)
    examples = generate_synthetic_corpus(2200, seed=1, max_words=15)
    train, held_out = examples[:2000], examples[2000:]
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for example in examples:
        for word in example.source.split() + example.target.split():
            vocab.setdefault(word, len(vocab))
    config = tiny_config(  # the parse heads on the top layer (the default, layer 1 of 2, reached encoder UAS 0.83)
        "transformer_dbsa", vocab_size=len(vocab), d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, init_std=0.1,
        dbsa_encoder_layer=2, dbsa_decoder_layer=2,
    )
    model = SyntaxMTForConditionalGeneration(config)
    test_batch = _encode(held_out, vocab)
    untrained_encoder_uas, _ = _attachment_scores(model.eval(), test_batch)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(300):
        batch = _encode([train[(step * 32 + i) % len(train)] for i in range(32)], vocab)
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    encoder_uas, decoder_uas = _attachment_scores(model.eval(), test_batch)
    print(f"synthetic held-out UAS: encoder {encoder_uas:.3f} (untrained {untrained_encoder_uas:.3f}), decoder {decoder_uas:.3f}")
    assert untrained_encoder_uas < 0.4
    assert encoder_uas > 0.85
    assert decoder_uas > 0.9


def test_predict_heads_on_generated_target():
    torch.manual_seed(0)
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dbsa")).eval()
    batch = random_batch([7, 5], seed=15)
    generated = model.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=2, max_new_tokens=5)
    heads = model.predict_heads(batch["input_ids"], batch["attention_mask"], decoder_input_ids=generated)
    assert heads["source_heads"].shape == batch["input_ids"].shape
    assert heads["target_heads"].shape == (2, generated.shape[1] - 1)
    target = heads["target_heads"]
    positions = torch.arange(target.shape[1])
    assert ((target == -100) | (target <= positions)).all()  # causal: never a future head


def test_predict_heads_runs_without_dropout_and_restores_the_mode():
    torch.manual_seed(0)
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dbsa", dropout=0.3, init_std=0.3)).train()
    batch = random_batch([7, 5], seed=15)
    first = model.predict_heads(batch["input_ids"], batch["attention_mask"], labels=torch.tensor([[5, 6, 7, 1]] * 2))
    second = model.predict_heads(batch["input_ids"], batch["attention_mask"], labels=torch.tensor([[5, 6, 7, 1]] * 2))
    assert model.training
    assert all(torch.equal(first[name], second[name]) for name in ("source_heads", "target_heads"))


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target_heads, message",
    [
        ([1, 9, 1, -100], "target_heads contains 9"),
        ([1, -1, 1, -100], "target_heads contains -1"),
        ([2, 0, 1, -100], "target_heads contains a cycle"),
        ([1.0, 1.0, 1.0, -100.0], "target_heads must hold integer head indices"),
    ],
)
def test_bad_target_heads_are_refused(target_heads, message):
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dbsa_dec")).train()
    batch = random_batch([5], seed=16)
    with pytest.raises(ValueError, match=message):
        model(input_ids=batch["input_ids"], labels=torch.tensor([[5, 6, 7, 1]]), target_heads=torch.tensor([target_heads]))


def test_sla_without_source_distances_is_refused():
    model = SyntaxMTForConditionalGeneration(tiny_config("transformer_sla")).eval()
    with pytest.raises(ValueError, match="transformer_sla.*source_distances"):
        model.generate(input_ids=torch.tensor([[5, 6, 1]]), max_new_tokens=2)


def test_dbsa_training_without_heads_is_refused():
    batch = random_batch([5], seed=16)
    labels = torch.tensor([[5, 6, 1]])
    encoder_model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dbsa_enc")).train()
    with pytest.raises(ValueError, match="source_heads"):
        encoder_model(input_ids=batch["input_ids"], labels=labels)
    decoder_model = SyntaxMTForConditionalGeneration(tiny_config("transformer_dbsa_dec")).train()
    with pytest.raises(ValueError, match="target_heads"):
        decoder_model(input_ids=batch["input_ids"], labels=labels)
    with pytest.raises(ValueError, match="target_heads has shape"):
        decoder_model(input_ids=batch["input_ids"], labels=labels, target_heads=torch.tensor([[1, 1]]))


def test_dbsa_and_sla_settings_out_of_range_are_refused():
    with pytest.raises(ValueError, match="dbsa_encoder_layer=3 is outside"):
        tiny_config("transformer_abs", dbsa_encoder_layer=3)
    with pytest.raises(ValueError, match="dbsa_decoder_layer=0 is outside"):
        tiny_config("transformer_abs", dbsa_decoder_layer=0)
    with pytest.raises(ValueError, match="sla_heads=5"):
        tiny_config("transformer_sla", sla_heads=5)
    with pytest.raises(ValueError, match="sla_layers contains 4"):
        tiny_config("transformer_sla", sla_layers=[4])
    with pytest.raises(ValueError, match="parse head"):
        tiny_config("transformer_sla", sla_heads=4, dbsa_encoder_layer=1)


def test_dbsa_decoder_conventions_default_to_the_package_and_refuse_unknown_values():
    config = tiny_config("transformer_dbsa")
    assert (config.dbsa_decoder_supervised_row, config.dbsa_decoder_loss_normalization) == ("reading", "kept")
    with pytest.raises(ValueError, match="dbsa_decoder_supervised_row='writing'"):
        tiny_config("transformer_dbsa", dbsa_decoder_supervised_row="writing")
    with pytest.raises(ValueError, match="dbsa_decoder_loss_normalization='sum'"):
        tiny_config("transformer_dbsa", dbsa_decoder_loss_normalization="sum")


def test_sla_binarize_defaults_to_the_published_setting_but_not_for_saved_configs(tmp_path):
    from hf_syntax_mt import SyntaxMTConfig

    new = tiny_config("transformer_sla")
    assert new.sla_binarize == "right" and SyntaxMTConfig().sla_binarize == "right"
    new.save_pretrained(tmp_path)
    assert SyntaxMTConfig.from_pretrained(tmp_path).sla_binarize == "right"
    saved = new.to_dict()
    del saved["sla_binarize"]  # a config saved before the setting: its model read n-ary distances
    assert SyntaxMTConfig.from_dict(saved).sla_binarize == "none"
    assert SyntaxMTConfig.from_dict(saved, sla_binarize="left").sla_binarize == "left"
    # a self-parsing model derives its distances from the n-ary tree it reads
    assert tiny_config("transformer_dep_rel+transformer_sla", self_parsing=True).sla_binarize == "none"
    with pytest.raises(ValueError, match="sla_binarize='right': set sla_binarize='none'"):
        tiny_config("transformer_dep_rel+transformer_sla", self_parsing=True, sla_binarize="right")
    with pytest.raises(ValueError, match="sla_binarize='both'; expected one of"):
        tiny_config("transformer_sla", sla_binarize="both")


def test_feature_processor_reads_sla_binarize_from_the_config():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    from hf_syntax_mt import SyntaxMTConfig
    from hf_syntax_mt.features.syntax_features import SyntaxFeatureProcessor
    from hf_syntax_mt.syntax import Annotation, locate_words

    text = "I swim across the river ."
    words = text.split()
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    word_level.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, pad_token="<pad>", eos_token="</s>")
    annotation = Annotation(text, words, locate_words(text, words), [1, 1, 1, 4, 2, 1],
                            trees=["(S (NP I) (VP swim (PP across (NP the river))) .)"])
    saved = tiny_config("transformer_sla").to_dict()
    del saved["sla_binarize"]
    for config, raw in [(tiny_config("transformer_sla"), [5, 3, 2, 1, 4]),
                        (tiny_config("transformer_sla", sla_binarize="left"), [4, 3, 2, 1, 5]),
                        (SyntaxMTConfig.from_dict(saved), [4, 3, 2, 1, 4])]:
        processor = SyntaxFeatureProcessor.from_config(config, tokenizer)
        distances = processor([text], annotations=[annotation])["source_distances"]
        assert distances.tolist() == [[d + 1.0 for d in raw] + [2000.0, 2000.0]]  # + 1; gaps before/after </s>
    with pytest.raises(ValueError, match="distance_binarize='yes'"):
        SyntaxFeatureProcessor(tokenizer, distance_binarize="yes")


def test_dbsa_presets_put_the_parse_head_at_two_thirds_of_the_depth(caplog):
    """Seed 004's layer 4 of 6 scales with the depth: round(2L/3), at least 1; a shallow model says what it chose,
    a layer the user gives wins, and the saved config records the layer."""
    chosen = {layers: tiny_config("transformer_dbsa", encoder_layers=layers, decoder_layers=layers)
              for layers in (1, 2, 3, 4, 5, 6, 12)}
    assert {layers: (c.dbsa_encoder_layer, c.dbsa_decoder_layer) for layers, c in chosen.items()} == {
        1: (1, 1), 2: (1, 1), 3: (2, 2), 4: (3, 3), 5: (3, 3), 6: (4, 4), 12: (8, 8)}
    assert SyntaxMTConfig.from_dict(chosen[3].to_dict()).dbsa_encoder_layer == 2
    assert tiny_config("transformer_dbsa_enc", encoder_layers=3).dbsa_decoder_layer is None
    given = tiny_config("transformer_dbsa", encoder_layers=3, decoder_layers=3, dbsa_encoder_layer=3)
    assert (given.dbsa_encoder_layer, given.dbsa_decoder_layer) == (3, 2)
    with CaptureLogger(configuration_logger) as shallow:
        tiny_config("transformer_dbsa", encoder_layers=2, decoder_layers=3)
    assert "dbsa_encoder_layer=1 of 2 (encoder_layers)" in shallow.out and "dbsa_decoder_layer" not in shallow.out
    with CaptureLogger(configuration_logger) as deep:
        tiny_config("transformer_dbsa", encoder_layers=3, decoder_layers=3)
    assert deep.out == ""