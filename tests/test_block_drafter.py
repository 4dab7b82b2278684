"""The block drafter (drafters/block.py, training/block.py) and confidence calibration (training/calibration.py).

Exactness of `block` and `block-parallel` in the decode loop and the serving engine, their sampling
losslessness, smoke training, resume and shipped-weight exactness on SmolLM2 run with every trained
drafter in test_trained_drafters.py (both are in TRAINED); the confidence-scheduled serving case is in
test_serving.py. Here: what is particular to the block drafter.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

import specdec_core as sd
from specdec_core.drafters import BlockNet, ParallelBlockNet, make_drafter
from specdec_core.drafters import weights as weights_module
from specdec_core.errors import SpecDecError
from specdec_core.target import Target
from specdec_core.training import calibration
from specdec_core.training.batches import decoded_sequence, make_batch
from specdec_core.training.block import block_logits, block_mask, confidence_data, position_weights
from specdec_core.training.kinds import layers_needed

# --- calibration against hand-computed cases --------------------------------------------------------


def test_ece_and_reliability_by_hand():
    # Two bins in use: 0.1 (bin 1 of 15) holds outcomes 0 and 1, 0.9 (bin 13) holds 1 and 1.
    ece, table = calibration.expected_calibration_error(torch.tensor([0.1, 0.1, 0.9, 0.9]), torch.tensor([0.0, 1.0, 1.0, 1.0]))
    assert ece == pytest.approx(0.5 * abs(0.5 - 0.1) + 0.5 * abs(1.0 - 0.9))
    assert [(row["count"], row["observed"]) for row in table] == [(2, 0.5), (2, 1.0)]
    assert table[0]["low"] == pytest.approx(1 / 15) and table[1]["high"] == pytest.approx(14 / 15)
    # A prediction of exactly 1 lands in the last bin, not past it.
    assert calibration.expected_calibration_error(torch.tensor([1.0]), torch.tensor([1.0]))[1][0]["high"] == 1.0


def test_auc_by_hand():
    # Positives 0.35 and 0.8 against negatives 0.1 and 0.4: 3 of the 4 pairs ordered right.
    assert calibration.auc(torch.tensor([0.1, 0.4, 0.35, 0.8]), torch.tensor([0, 0, 1, 1])) == pytest.approx(0.75)
    assert calibration.auc(torch.tensor([0.5, 0.5]), torch.tensor([1, 0])) == pytest.approx(0.5)  # a tie counts half
    assert calibration.auc(torch.tensor([0.2, 0.3]), torch.tensor([1, 1])) is None


def test_sequential_temperature_scaling_recovers_known_temperatures():
    """Labels that are exactly sigmoid(z1/2) and sigmoid(z1/2)·sigmoid(z2/3): the fit must return 2 and 3.
    Fitting position 2 alone (without the frozen position 1 in front) gets a wrong T_2: the sequential
    rule is what makes the product, which the scheduler uses, right."""
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(2, 4000, generator=generator, dtype=torch.float64) * 3
    labels = torch.cumprod(torch.sigmoid(z / torch.tensor([[2.0], [3.0]], dtype=torch.float64)), 0)
    temperatures = calibration.sequential_temperatures(z, labels)
    assert temperatures == pytest.approx([2.0, 3.0], rel=0.01)
    alone = calibration.fit_temperature(z[1], torch.ones(4000, dtype=torch.float64), labels[1])
    assert abs(alone - 3.0) > 0.3
    result = calibration.report(z, labels, temperatures, binary=False)
    assert all(p["ece_after"] < 0.005 < p["ece_before"] for p in result["positions"])


def test_position_weights_and_block_mask():
    assert position_weights(3).tolist() == pytest.approx([1.0, math.exp(-0.25), math.exp(-0.5)])
    mask = block_mask(torch.tensor([[0, 2]]), rows=4, width=2)[0, 0]  # (Q=4, rows + Q = 8)
    expected = torch.tensor([[1, 0, 0, 0, 1, 1, 0, 0],   # block at anchor 0: context row 0, its own 2 slots
                             [1, 0, 0, 0, 1, 1, 0, 0],
                             [1, 1, 1, 0, 0, 0, 1, 1],   # block at anchor 2: context rows 0..2, its own slots
                             [1, 1, 1, 0, 0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask, expected)


# --- training and inference compute the same drafts -------------------------------------------------


@pytest.mark.parametrize("kind", ["block", "block-parallel"])
def test_offline_blocks_are_the_decode_loops_drafts(tiny, kind):
    """The training-side forward (many anchors side by side under `block_mask`, the serial head fed its
    own greedy choices) drafts, at every anchor the loop visits, exactly what the drafter drafted there."""
    prompt = "The quick brown fox jumps over the lazy dog and then"
    config = sd.GenerationConfig(mode="spec", drafter=kind, k=4, max_new_tokens=24)
    result = sd.generate(tiny, prompt, config)
    prompt_ids = result.trace.prompt_ids
    drafter = make_drafter(kind, tiny, config)
    sequence = decoded_sequence(Target(tiny), prompt_ids, result.token_ids, layers_needed(kind, tiny))
    offline = block_logits(drafter.net, drafter.vocab, tiny.model, make_batch([sequence]), 4)  # (4, 1, n, N)
    produced = 1  # the prefill's token
    checked = 0
    for step in result.trace.steps[1:]:
        anchor = produced - 1  # row of the state that named the context's last token
        drafted = [t.id for t in step.drafted]
        assert drafted == drafter.vocab.ids[offline[:len(drafted), 0, anchor].argmax(-1)].tolist(), step.index
        checked += len(drafted)
        produced += len(step.emitted)
    assert checked >= 8


def test_the_markov_head_is_what_separates_the_two(tiny):
    block = make_drafter("block", tiny, sd.GenerationConfig(mode="spec"))
    parallel = make_drafter("block-parallel", tiny, sd.GenerationConfig(mode="spec"))
    assert block.net.config["rank"] > 0 and parallel.net.config["rank"] == 0
    assert not hasattr(parallel.net, "markov_in")
    names = lambda net: {n for n, _ in net.named_parameters()}  # noqa: E731
    assert names(block.net) - names(parallel.net) == {"markov_in", "markov_out"}


@pytest.mark.parametrize("kind", ["block", "block-parallel"])
def test_steps_record_the_backbones_guess_and_the_confidence(tiny, kind):
    config = sd.GenerationConfig(mode="spec", drafter=kind, k=4, max_new_tokens=12)
    steps = [s for s in sd.generate(tiny, "Count: one two three", config).trace.steps if s.kind == "decode" and s.drafted]
    assert steps and all(len(s.draft_guess) == len(s.drafted) == len(s.draft_confidence) for s in steps)
    assert all(0 < c < 1 for s in steps for c in s.draft_confidence)
    if kind == "block-parallel":  # no serial head: greedy drafts are the backbone's guesses themselves
        assert all([g.id for g in s.draft_guess] == [d.id for d in s.drafted] for s in steps)


def test_confidence_data_labels_are_prefix_survival(tiny):
    kind = "block"
    drafter = make_drafter(kind, tiny, sd.GenerationConfig(mode="spec"))
    result = sd.generate(tiny, "Once upon a time", sd.GenerationConfig(mode="ar", max_new_tokens=20))
    seq = decoded_sequence(Target(tiny), result.trace.prompt_ids, result.token_ids, layers_needed(kind, tiny))
    for regime in ("greedy", "sampled"):
        logits, labels = confidence_data(drafter.net, drafter.vocab, tiny.model, [seq], regime)
        width = drafter.net.config["block"]
        assert logits.shape == labels.shape == (width, seq.rows - width)
        assert bool((labels[1:] <= labels[:-1] + 1e-12).all()) and bool(((labels >= 0) & (labels <= 1)).all())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["block", "block-parallel"])
def test_shipped_block_drafters_are_exact_on_more_smollm2_prompts_and_under_the_hardware_scheduler(smol, kind):
    """The shipped weights at k = 7 on a copy prompt and a Chinese prompt (one request at a time), then
    all three prompts served together with the confidence-driven `hardware` scheduler: greedy output is
    the target's every time, and drafts do get accepted."""
    from specdec_core.serving import ServingEngine, make_scheduler
    from specdec_core.serving.costs import CostTable

    prompts = ["Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox",
               "用两句话介绍一下长城。", "Explain in two sentences why the sky is blue."]
    ar = [sd.generate(smol, p, sd.GenerationConfig(mode="ar", max_new_tokens=32)).token_ids for p in prompts]
    accepted = 0
    for prompt, expected in zip(prompts[:2], ar):
        spec = sd.generate(smol, prompt, sd.GenerationConfig(mode="spec", drafter=kind, k=7, max_new_tokens=32))
        assert spec.token_ids == expected, prompt
        accepted += spec.metrics["num_accepted_tokens"]
    assert accepted > 0
    # A token row costs a twentieth of a forward: long prefixes pay only where the confidences are high.
    costs = CostTable("synthetic", [{"rows": r, "tokens": r * t, "seconds": 1 + 0.05 * r * t} for r in (1, 2, 4) for t in (1, 4, 8)])
    engine = ServingEngine(smol, make_scheduler("hardware"), costs)
    requests = [engine.submit(p, sd.GenerationConfig(mode="spec", drafter=kind, k=7, max_new_tokens=32)) for p in prompts]
    engine.run()
    assert [r.output_ids for r in requests] == ar
    assert any(max(s.lengths) > 0 for s in engine.steps)


# --- shipped weights ---------------------------------------------------------------------------------


def test_a_block_file_without_its_markov_head_is_a_one_line_error(tmp_path, tiny):
    """block-parallel weights under the block name (rank 0 in the file, rank > 0 in the manifest)."""
    module = weights_module.seeded_(ParallelBlockNet(ParallelBlockNet.tiny_config(tiny)), 1)
    tensors = {n: t.half() if t.is_floating_point() else t for n, t in module.state_dict().items()}
    config = {**module.config, "rank": 16}
    weights_module.save_state("tiny", "block", tensors, config, {"note": "test"}, tmp_path)
    with pytest.raises(SpecDecError, match="lacks tensor 'markov_in'") as err:
        weights_module.load_module("tiny", "block", BlockNet, tmp_path)
    assert "\n" not in str(err.value)
    manifest = json.loads((tmp_path / "tiny" / "manifest.json").read_text())
    assert manifest["files"]["block.safetensors"]["config"]["rank"] == 16
