"""benchmarks/op_count.py: the backend operations of a training step and of decoding, counted with a
TorchDispatchMode (views left out), and what the counts say about the relation path (issue 91)."""

import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import op_count  # noqa: E402

TINY = dict(vocab_size=200, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)


def test_counter_counts_kernels_and_leaves_out_views():
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    with op_count.OperationCounter() as counter:
        c = (a + b).view(12).view(4, 3).t()  # one kernel, three views
        torch.mm(c, b.t())
    assert dict(counter.counts) == {"add": 1, "mm": 1}


def test_relation_ids_are_made_once_a_forward_not_once_a_layer(monkeypatch):
    """Two more relation layers add the same operations to rel as to abs plus the per-layer terms only: the ids
    (aranges, clamps) are shared, so their count does not grow with the depth."""
    counts = {}
    for layers in (1, 3):
        monkeypatch.setattr(op_count, "SIZE", {**TINY, "encoder_layers": layers, "decoder_layers": layers})
        for system in ("transformer_abs", "transformer_rel"):
            counts[system, layers] = op_count.training_step_counts(system, 8, 32)
    for name in ("arange", "clamp"):
        assert counts["transformer_rel", 3][name] == counts["transformer_rel", 1][name], name
    added = {system: sum(counts[system, 3].values()) - sum(counts[system, 1].values())
             for system in ("transformer_abs", "transformer_rel")}
    # per relation layer (encoder + decoder self-attention, forward and backward): at most 34 operations over abs's
    assert 0 < added["transformer_rel"] - added["transformer_abs"] <= 2 * 2 * 34


def test_main_prints_ratio_tables_and_writes_the_counts(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(op_count, "SIZE", TINY)
    output = tmp_path / "ops.json"
    train, decode = op_count.main(["--presets", "transformer_abs", "transformer_rel", "transformer_rel@keys",
                                   "--length", "8", "--tokens", "32", "--decode-sentences", "2", "--decode-source", "6",
                                   "--decode-new", "3", "--top", "3", "--output", str(output)])
    printed = capsys.readouterr().out
    assert "| transformer_abs | " in printed and "| 1.00 |" in printed
    ratio = sum(train["transformer_rel"].values()) / sum(train["transformer_abs"].values())
    assert f"| transformer_rel | {sum(train['transformer_rel'].values()):,} | {ratio:.2f} |" in printed
    saved = json.loads(output.read_text(encoding="utf-8"))
    assert saved["training_step"]["transformer_rel@keys"] == dict(train["transformer_rel@keys"])
    assert set(saved["decoding"]) == {"transformer_abs", "transformer_rel", "transformer_rel@keys"}
    # the key-only variant decodes inside fused attention: fewer operations than the full preset
    assert sum(decode["transformer_rel@keys"].values()) < sum(decode["transformer_rel"].values())
    again = op_count.training_step_counts("transformer_rel", 8, 32)
    assert again == train["transformer_rel"]  # deterministic


def test_the_gpu_path_counts_fused_attention_as_one_kernel_each_way_and_computes_the_same(monkeypatch):
    """`--path gpu`: attention chosen as on CUDA (the key-only preset's learned key term stays in fused attention), each
    fused call one kernel forward and one backward; the emulated step computes the CPU path's loss and gradients."""
    monkeypatch.setattr(op_count, "SIZE", TINY)
    cpu = op_count.training_step_counts("transformer_rel@keys", 8, 32)
    gpu = op_count.training_step_counts("transformer_rel@keys", 8, 32, path="gpu")
    attention_calls = 3 * 1  # one encoder layer (self) and one decoder layer (self, cross)
    assert gpu["fused_attention"] == gpu["fused_attention_backward"] == attention_calls
    assert "fused_attention" not in cpu and sum(gpu.values()) < sum(cpu.values())
    flex = op_count.training_step_counts("transformer_rel@keys", 8, 32, path="gpu-flex")
    assert flex["fused_attention"] == attention_calls and "gather" not in flex  # the key term read in the kernel
    full = op_count.training_step_counts("transformer_rel", 8, 32, path="gpu")
    assert full["fused_attention"] == 1  # value terms: explicit self-attention, fused cross-attention

    monkeypatch.setattr(op_count, "SIZE", {**TINY, "dropout": 0.0})  # the CPU's dropout draws other random numbers
    results = []
    for path in ("cpu", "gpu"):
        model, config = op_count.build("transformer_dep_labeled_rel@keys")
        model.train()
        batch = op_count._batch(config, 3, 8)
        with op_count.counting(path):
            loss = model(**batch).loss
            loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (cpu_loss, cpu_grads), (gpu_loss, gpu_grads) = results
    torch.testing.assert_close(gpu_loss, cpu_loss, atol=1e-5, rtol=0)
    for name, grad in cpu_grads.items():
        torch.testing.assert_close(gpu_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_collator_made_ids_leave_the_walk_up_the_trees_out_of_the_step(monkeypatch):
    monkeypatch.setattr(op_count, "SIZE", TINY)
    for system in ("transformer_dep_labeled_rel", "transformer_dep"):
        model_made = op_count.training_step_counts(system, 8, 32)
        collated = op_count.training_step_counts(system, 8, 32, collator_ids=True)
        assert sum(collated.values()) < sum(model_made.values()), system
        assert collated["gather"] < model_made["gather"], system  # the walk's pointer doubling
    same = [op_count.training_step_counts("transformer_rel", 8, 32, collator_ids=ids) for ids in (False, True)]
    assert same[0] == same[1]  # no tree relations: no ids from the collator
    rate = op_count.collator_rate("transformer_dep_labeled_rel", 8, 32, rounds=3)
    assert rate > 0
