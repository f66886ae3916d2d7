"""Token-budget batching (`hf_syntax_mt.features.batching`, `--max_tokens_per_batch`): budget, coverage, order,
determinism, the split between data-parallel processes, and the Trainer's use of it (training batches,
evaluation in corpus order, resume)."""

import random

import pytest
import torch

from hf_syntax_mt.features.batching import (
    TokenBudgetBatchSampler,
    fill_batches,
    padded_tokens,
    padding_share,
    pair_lengths,
)
from hf_syntax_mt.training.run import SyntaxMTTrainingArguments, train
from hf_syntax_mt.training.trainer import dataset_lengths
from training_helpers import scratch_dir, tiny_args


def naive_batches(order, lengths, budget):
    """Straight from the definition: extend the batch while len · max length stays within the budget."""
    out = []
    for i in order:
        if out and (len(out[-1]) + 1) * max(lengths[j] for j in out[-1] + [i]) <= budget:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def random_lengths(n, seed=0, longest=60):
    rng = random.Random(seed)
    return [rng.randint(1, longest) for _ in range(n)]


@pytest.mark.parametrize("budget", [1, 7, 64, 200, 10_000])
def test_batches_fill_the_budget_and_cover_every_pair_once(budget):
    lengths = random_lengths(300, seed=budget)
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batches = fill_batches(order, lengths, budget)
    assert batches == naive_batches(order, lengths, budget)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:  # within the budget, or a single pair that alone is longer than it
        assert len(batch) * max(lengths[i] for i in batch) <= budget or len(batch) == 1


def test_a_pair_longer_than_the_budget_gets_a_batch_of_its_own():
    lengths = [3, 3, 50, 3]
    batches = fill_batches(range(4), lengths, 10)
    assert batches == [[0, 1], [2], [3]]
    assert TokenBudgetBatchSampler(lengths, 10).oversized == 1


def test_sorting_by_length_removes_most_padding():
    lengths = random_lengths(2000, seed=1, longest=120)
    sampler = TokenBudgetBatchSampler(lengths, 2048, seed=3)
    fixed = [list(range(i, min(i + 64, 2000))) for i in range(0, 2000, 64)]
    assert padding_share(lengths, sampler.epoch_batches(0)) < 0.05 < 0.3 < padding_share(lengths, fixed)


def test_the_secondary_sort_key_pads_the_other_side_less_with_the_same_batch_count():
    rng = random.Random(6)
    sources = [rng.randint(1, 60) for _ in range(3000)]
    targets = [max(1, s + rng.randint(-20, 20)) for s in sources]
    lengths = pair_lengths(sources, targets)

    def per_side_padding(batches):
        real = sum(sources) + sum(targets)
        return 1 - real / sum(len(b) * (max(sources[i] for i in b) + max(targets[i] for i in b)) for b in batches)

    plain = TokenBudgetBatchSampler(lengths, 1024, seed=1)
    by_source = TokenBudgetBatchSampler(lengths, 1024, seed=1, secondary_lengths=sources)
    assert len(plain) == len(by_source)  # the boundaries depend on the sorted pair lengths only
    assert per_side_padding(by_source.epoch_batches(0)) < per_side_padding(plain.epoch_batches(0))
    with pytest.raises(ValueError, match="3000 lengths but 2 secondary lengths"):
        TokenBudgetBatchSampler(lengths, 1024, secondary_lengths=[1, 2])


def test_training_order_is_seeded_per_epoch_and_the_batch_count_is_fixed():
    lengths = random_lengths(500, seed=2)
    a, b = TokenBudgetBatchSampler(lengths, 256, seed=7), TokenBudgetBatchSampler(lengths, 256, seed=7)
    epochs = []
    for epoch in range(3):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        batches = list(a)
        assert batches == list(b) and len(batches) == len(a)  # the same (seed, epoch): the same batches
        assert sorted(i for batch in batches for i in batch) == list(range(500))
        epochs.append(batches)
    assert epochs[0] != epochs[1] != epochs[2]  # a new order each epoch
    other_seed = TokenBudgetBatchSampler(lengths, 256, seed=8)
    assert list(other_seed) != epochs[0]


def test_data_parallel_processes_get_distinct_batches_and_the_same_number():
    lengths = random_lengths(333, seed=4)
    for replicas in (2, 3):
        samplers = [TokenBudgetBatchSampler(lengths, 300, seed=1, num_replicas=replicas, rank=r) for r in range(replicas)]
        for s in samplers:
            s.set_epoch(2)
        per_rank = [list(s) for s in samplers]
        assert len({len(batches) for batches in per_rank}) == 1 and len(per_rank[0]) == len(samplers[0])
        every = samplers[0].epoch_batches(2)
        interleaved = [per_rank[k % replicas][k // replicas] for k in range(len(per_rank[0]) * replicas)]
        assert interleaved[: len(every)] == every  # batch k goes to process k mod replicas
        assert interleaved[len(every):] == every[: len(interleaved) - len(every)]  # the split evened by repeats
    with pytest.raises(ValueError, match="rank 2 of 2"):
        TokenBudgetBatchSampler(lengths, 300, num_replicas=2, rank=2)


def test_prediction_batches_keep_corpus_order_and_evaluation_batches_sort_by_length():
    lengths = random_lengths(100, seed=5)
    sampler = TokenBudgetBatchSampler(lengths, 120, shuffle=False)
    batches = list(sampler)
    assert [i for b in batches for i in b] == list(range(100))
    assert batches == naive_batches(range(100), lengths, 120)

    longest_first = sorted(range(100), key=lambda i: (-lengths[i], i))
    evaluation = TokenBudgetBatchSampler(lengths, 120, shuffle=False, longest_first=True)
    assert list(evaluation) == naive_batches(longest_first, lengths, 120) and len(evaluation) == len(list(evaluation))
    assert sum(padded_tokens(lengths, b) for b in evaluation) < sum(padded_tokens(lengths, b) for b in batches)
    with pytest.raises(ValueError, match="longest_first orders the fixed"):
        TokenBudgetBatchSampler(lengths, 120, longest_first=True)


def test_bad_budgets_are_refused():
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="positive number of tokens"):
            TokenBudgetBatchSampler([1, 2], bad)
    with pytest.raises(ValueError, match="3 source lengths but 2 target lengths"):
        pair_lengths([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="max_tokens_per_batch -1"):
        SyntaxMTTrainingArguments(output_dir="x", max_tokens_per_batch=-1, use_cpu=True)
    with pytest.raises(ValueError, match="drop --train_sampling_strategy group_by_length"):
        SyntaxMTTrainingArguments(output_dir="x", max_tokens_per_batch=100, train_sampling_strategy="group_by_length",
                                  use_cpu=True)


BUDGET = dict(max_tokens_per_batch=120, eval_strategy="no", load_best_model_at_end=False, save_steps=2, logging_steps=1)


def test_trainer_trains_on_token_budget_batches_and_predicts_in_corpus_order():
    result = train(*tiny_args(scratch_dir("budget"), "transformer_dep_rel", max_steps=3, **BUDGET))
    trainer, data = result.trainer, result.datasets
    sources, targets = dataset_lengths(data["train"])
    assert sources == [len(s) for s in data["train"]["input_ids"]] and targets == [len(t) for t in data["train"]["labels"]]
    loader = trainer.get_train_dataloader()
    expected = TokenBudgetBatchSampler(pair_lengths(sources, targets), 120, seed=trainer.args.seed,
                                       secondary_lengths=sources).epoch_batches(0)
    assert len(loader) == len(expected) > 48 * 12 // 120  # fewer pairs a batch than 16: the budget decides
    for batch, indices in zip(loader, expected):
        assert batch["input_ids"].shape[0] == len(indices)
        assert batch["input_ids"].numel() <= 120 and batch["labels"].numel() <= 120 or len(indices) == 1
        assert batch["input_ids"][0, : len(data["train"][indices[0]]["input_ids"])].tolist() == \
            data["train"][indices[0]]["input_ids"]
    # prediction: token-budget batches in corpus order give the translations of fixed-size batches, row by row
    dev = data["validation"]
    budgeted = trainer.predict(dev, max_length=12)
    trainer.args.eval_max_tokens_per_batch = None
    fixed = trainer.predict(dev, max_length=12)
    strip = lambda rows: [[t for t in row if t >= 0 and t != trainer.processing_class.pad_token_id] for row in rows.tolist()]  # noqa: E731
    assert strip(budgeted.predictions) == strip(fixed.predictions)
    assert strip(budgeted.label_ids) == strip(fixed.label_ids) == [row for row in dev["labels"]]


@pytest.mark.parametrize("stop", [4, 12])
def test_resumed_token_budget_run_ends_with_the_weights_of_a_straight_run(stop):
    """10 batches an epoch: the run stops inside the first epoch (4) or the second (12) and resumes to step 14."""
    straight = train(*tiny_args(scratch_dir("straight"), "transformer_rel", max_steps=14, **BUDGET)).trainer
    assert len(straight.get_train_dataloader()) == 10
    out = scratch_dir("resumed")
    train(*tiny_args(out, "transformer_rel", max_steps=stop, **BUDGET))
    resumed = train(*tiny_args(out, "transformer_rel", max_steps=14, **BUDGET)).trainer
    assert resumed.state.global_step == 14 and resumed.state.epoch > 1
    for (name, p), q in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.allclose(p, q, atol=1e-6), name
