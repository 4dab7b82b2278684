"""Trained drafters (issue 12): the reduced vocabulary keeps sampling lossless, every model drafter is
exact under greedy decoding (one-request loop and serving engine), shipped weights are checked at
load, and the training pipeline runs, resumes to the same weights, and evaluates offline."""
import json
from pathlib import Path

import pytest
import torch

import specdec_core as sd
from specdec_core.costmodel import DraftCosts
from specdec_core.generation import drafter_costs
import specdec_core.sampling as sampling
from specdec_core.cli import main
from specdec_core.drafters import MIX_MODELS, TRAINED, Draft, Drafter, MedusaHeads, ReducedVocab
from specdec_core.drafters import weights as weights_module
from specdec_core.errors import SpecDecError
from specdec_core.training.kinds import KINDS
from specdec_core.training import train as train_module
from test_sampling import first_spec_tokens, output_distribution
from test_serving import IDLE, SATURATED, serve

PROMPTS = ["Tell me a short story about a fox.", "What is the capital of France?", "List three colours."]


# --- the reduced vocabulary: q is zero outside the subset, and sampling stays lossless -------------


def reduced_q(logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
    vocab = ReducedVocab(torch.tensor(ids), torch.eye(len(logits)))  # identity head: rows = one-hot
    return sampling.logits_to_probs(vocab.expand(logits[ids]), sd.SamplingParams(temperature=1.0))


def test_reduced_vocab_q_is_a_full_distribution_with_zeros_outside():
    q = reduced_q(torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0, 0.0]), [0, 2, 4])
    assert q.shape == (6,) and abs(float(q.sum()) - 1) < 1e-6
    assert (q[[1, 3, 5]] == 0).all() and (q[[0, 2, 4]] > 0).all()


P_MASS_OUTSIDE = torch.tensor([0.30, 0.25, 0.05, 0.20, 0.10, 0.10], dtype=torch.float64)  # 0.55 outside {0, 2, 4}


def test_reduced_vocab_q_reproduces_p_exactly():
    q = reduced_q(torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0, 0.0]), [0, 2, 4]).double()
    assert torch.allclose(output_distribution(P_MASS_OUTSIDE, q), P_MASS_OUTSIDE, atol=1e-12)


def restrict_verification_to_the_subset(monkeypatch) -> None:
    """The broken rule: the residual keeps only tokens the drafter could propose (q > 0)."""
    right = sampling.residual_distribution

    def subset_residual(p, q, x):
        r = right(p, q, x) * (q > 0)
        return r / r.sum() if r.sum() > 0 else q
    monkeypatch.setattr(sampling, "residual_distribution", subset_residual)


def test_exact_check_fails_when_verification_is_restricted_to_the_subset(monkeypatch):
    """The tempting bug: verify over the drafter's subset only (p renormalised there). Tokens outside
    lose their mass, and the exact check catches it."""
    q = reduced_q(torch.tensor([2.0, 1.0, 0.5, -1.0, 3.0, 0.0]), [0, 2, 4]).double()
    restrict_verification_to_the_subset(monkeypatch)
    assert not torch.allclose(output_distribution(P_MASS_OUTSIDE, q), P_MASS_OUTSIDE, atol=1e-3)


class SubsetDrafter(Drafter):
    """q = the target's own sampling distribution squeezed onto a reduced vocabulary that leaves out
    some of p's likely tokens (set per test): the reduced-vocabulary case at its most demanding."""

    def __init__(self, q: torch.Tensor) -> None:
        self.q = q

    def propose(self, context, k, params, generator) -> Draft:
        return Draft([sampling.sample(self.q, generator) for _ in range(k)], self.q.expand(k, -1))


def subset_q(exact: torch.Tensor) -> torch.Tensor:
    top = torch.topk(exact, 8).indices
    ids = torch.cat((top[1::2], torch.tensor([0, 1, 2])))  # every other likely token, plus unlikely ones
    vocab = ReducedVocab(ids, torch.eye(len(exact)))
    return sampling.logits_to_probs(vocab.expand(torch.log(exact[ids] + 1e-9)), sd.SamplingParams(temperature=1.0))


STAT_TRIALS = 300  # the broken rule moves half of p's top mass: far more than 400 trials can miss


@pytest.mark.slow
def test_reduced_vocab_sampling_matches_ar_statistically(tiny, monkeypatch):
    counts, exact = first_spec_tokens(tiny, STAT_TRIALS, drafter_from_exact=lambda e: SubsetDrafter(subset_q(e)))
    assert not sampling.chi2_rejects(counts, exact, STAT_TRIALS)


@pytest.mark.slow
def test_statistical_check_catches_subset_restricted_verification(tiny, monkeypatch):
    restrict_verification_to_the_subset(monkeypatch)
    counts, exact = first_spec_tokens(tiny, STAT_TRIALS, drafter_from_exact=lambda e: SubsetDrafter(subset_q(e)))
    assert sampling.chi2_rejects(counts, exact, STAT_TRIALS)


@pytest.mark.slow
@pytest.mark.parametrize("kind", TRAINED)
def test_every_trained_drafter_samples_losslessly_and_the_check_catches_the_subset_rule(tiny, kind, monkeypatch):
    """Rejection sampling with each trained drafter's own q (seeded weights on tiny: a reduced vocabulary,
    zeros outside it) emits AR's distribution; with the subset-restricted residual the same check rejects."""
    counts, exact = first_spec_tokens(tiny, STAT_TRIALS, drafter=kind)
    assert not sampling.chi2_rejects(counts, exact, STAT_TRIALS)
    restrict_verification_to_the_subset(monkeypatch)
    counts, exact = first_spec_tokens(tiny, STAT_TRIALS, drafter=kind)
    assert sampling.chi2_rejects(counts, exact, STAT_TRIALS)


# --- greedy exactness: every trained drafter, every k ---------------------------------------------


MODEL_DRAFTERS = (*TRAINED, "mix")


@pytest.mark.parametrize("drafter", MODEL_DRAFTERS)
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_trained_drafters_are_exact_on_tiny(tiny, drafter, k):
    for prompt in PROMPTS:
        ar = sd.generate(tiny, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=24))
        spec = sd.generate(tiny, prompt, sd.GenerationConfig(mode="spec", drafter=drafter, k=k, max_new_tokens=24))
        assert spec.token_ids == ar.token_ids


@pytest.mark.parametrize("drafter", MODEL_DRAFTERS)
def test_trained_drafters_are_exact_with_dynamic_k_and_in_the_serving_engine(tiny, drafter):
    ar = [sd.generate(tiny, p, sd.GenerationConfig(mode="ar", max_new_tokens=20)).token_ids for p in PROMPTS]
    dyn = [sd.generate(tiny, p, sd.GenerationConfig(mode="spec", drafter=drafter, k=4, dynamic_k=0.5,
                                                    max_new_tokens=20)).token_ids for p in PROMPTS]
    assert dyn == ar
    configs = [sd.GenerationConfig(mode="spec", drafter=drafter, k=4, max_new_tokens=20) for _ in PROMPTS]
    for scheduler, costs in (("fixed", IDLE), ("hardware", SATURATED)):  # all drafts verified / fewer than drafted
        # mix weighs its proposals itself, with the costs the engine's owner measured (generation.drafter_costs)
        requests, _ = serve(tiny, PROMPTS, configs, scheduler, costs, drafter_costs=drafter_costs(tiny, drafter))
        assert [r.output_ids for r in requests] == ar


# --- shipped weights: checked at load ------------------------------------------------------------


@pytest.fixture
def shipped(tmp_path, tiny):
    """A weights folder holding a small heads file for `tiny`, as `train-draft` exports it."""
    module = weights_module.seeded_(MedusaHeads(MedusaHeads.tiny_config(tiny)), 1)
    tensors = {n: t.half() if t.is_floating_point() else t for n, t in module.state_dict().items()}
    weights_module.save_state("tiny", "heads", tensors, module.config, {"note": "test"}, tmp_path)
    return tmp_path


def test_a_shipped_file_loads_with_its_checked_shapes(shipped):
    module = weights_module.load_module("tiny", "heads", MedusaHeads, shipped)
    assert len(module.blocks) == 4 and module.vocab_ids.shape == (4096,)


def test_an_altered_file_is_a_one_line_error(shipped):
    path = shipped / "tiny" / "heads.safetensors"
    path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(SpecDecError, match="does not match its SHA-256") as err:
        weights_module.load_module("tiny", "heads", MedusaHeads, shipped)
    assert "\n" not in str(err.value)


def test_a_wrong_shape_or_vocabulary_names_the_tensor_and_the_expected_shape(shipped):
    manifest = json.loads((shipped / "tiny" / "manifest.json").read_text())
    manifest["files"]["heads.safetensors"]["config"]["vocab"] = 8192  # the file holds 4096 ids
    (shipped / "tiny" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecDecError, match=r"'vocab_ids' has shape \(4096,\), expected \(8192,\)"):
        weights_module.load_module("tiny", "heads", MedusaHeads, shipped)
    manifest["files"]["heads.safetensors"]["config"].update(vocab=4096, hidden=32)
    (shipped / "tiny" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SpecDecError, match=r"blocks.0.weight' has shape \(64, 64\), expected \(32, 32\)"):
        weights_module.load_module("tiny", "heads", MedusaHeads, shipped)


def test_a_missing_file_says_how_to_train_it(tmp_path):
    with pytest.raises(SpecDecError, match="heads.safetensors is missing .*train-draft --kind heads"):
        weights_module.load_module("smollm2-135m", "heads", MedusaHeads, tmp_path)


# --- the pipeline: smoke training, resume, offline evaluation --------------------------------------


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """`train-draft --smoke` for every kind (tiny data made once under a private cache)."""
    cache = tmp_path_factory.mktemp("cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("SPECDEC_CACHE", str(cache))
    out = {}
    for kind in TRAINED:
        assert main(["train-draft", "--kind", kind, "--smoke", "--out", str(cache / kind)]) == 0
        out[kind] = cache / kind
    yield cache, out
    patch.undo()


@pytest.mark.slow
@pytest.mark.parametrize("kind", TRAINED)
def test_smoke_training_exports_loadable_weights(smoke_runs, kind, tiny):
    _, runs = smoke_runs
    module = weights_module.load_module("tiny", kind, KINDS[kind].cls, runs[kind] / "weights")
    card = json.loads((runs[kind] / "weights" / "tiny" / "manifest.json").read_text())["files"][f"{kind}.safetensors"]["card"]
    assert card["steps"] == 6 and card["offline_heldout"]["greedy"]["anchors"] > 0
    assert module.vocab_ids.shape == (512,)


@pytest.mark.parametrize("kind", TRAINED)
def test_an_interrupted_then_resumed_run_ends_with_the_same_weights(smoke_runs, kind, monkeypatch, tmp_path):
    cache, runs = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    split = tmp_path / "split"
    assert main(["train-draft", "--kind", kind, "--smoke", "--stop-after", "2", "--out", str(split)]) == 0
    assert torch.load(split / "checkpoint.pt", weights_only=False)["step"] == 2
    assert main(["train-draft", "--kind", kind, "--smoke", "--resume", "--out", str(split)]) == 0
    whole = torch.load(runs[kind] / "checkpoint.pt", weights_only=False)["module"]
    resumed = torch.load(split / "checkpoint.pt", weights_only=False)["module"]
    assert max(float((whole[n].float() - resumed[n].float()).abs().max()) for n in whole) <= 1e-6
    # and the check can fail: a different seed gives other weights
    assert main(["train-draft", "--kind", kind, "--smoke", "--seed", "1", "--out", str(tmp_path / "other")]) == 0
    other = torch.load(tmp_path / "other" / "checkpoint.pt", weights_only=False)["module"]
    assert max(float((whole[n].float() - other[n].float()).abs().max()) for n in whole) > 1e-3


@pytest.mark.parametrize("kind", ["heads", "eagle"])
def test_online_features_train_exactly_as_the_feature_cache(smoke_runs, kind, monkeypatch, tmp_path):
    """The target's states computed inside each step (no disk) give the losses of the cached ones —
    and a feature layer shifted by one in the online path is caught."""
    from specdec_core.training import features

    cache, runs = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    cached = [entry["loss"] for entry in torch.load(runs[kind] / "checkpoint.pt", weights_only=False)["log"]]

    def losses(out: Path) -> list[float]:
        assert main(["train-draft", "--kind", kind, "--smoke", "--features", "online", "--out", str(out)]) == 0
        return [entry["loss"] for entry in torch.load(out / "checkpoint.pt", weights_only=False)["log"]]

    online = losses(tmp_path / "online")
    assert len(online) == len(cached) == 6 and max(abs(a - b) for a, b in zip(online, cached)) <= 1e-5

    real = features.capture  # a broken online path: every layer read one layer too low

    def shifted(target, ids, prompt_len, layers):
        states = real(target, ids, prompt_len, tuple(layer - 1 for layer in layers))
        return lambda: {layer: states[layer - 1] for layer in layers}

    monkeypatch.setattr(features, "online", shifted)
    broken = losses(tmp_path / "broken")
    assert max(abs(a - b) for a, b in zip(broken, cached)) > 1e-3


def test_a_warm_start_continues_from_the_weights_and_adds_a_sitting_to_their_card(smoke_runs, monkeypatch, tmp_path, tiny):
    from specdec_core.training.train import TrainConfig, open_training

    cache, runs = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    weights = runs["heads"] / "weights"
    config = TrainConfig(kind="heads", model="tiny", steps=6, vocab=512, init=str(weights))
    run = open_training(tiny, config, [], [], False, tmp_path / "probe")
    start = weights_module.load_module("tiny", "heads", MedusaHeads, weights)
    assert all(torch.equal(t, start.state_dict()[n].float()) for n, t in run.module.state_dict().items())
    assert run.optimizer.state  # the exported run's Adam moments came along from the cache
    assert main(["train-draft", "--kind", "heads", "--smoke", "--init", str(weights), "--out", str(tmp_path / "warm")]) == 0
    read = lambda root: json.loads((root / "tiny" / "manifest.json").read_text())["files"]["heads.safetensors"]["card"]  # noqa: E731
    first, second = read(weights), read(tmp_path / "warm" / "weights")
    assert [h["init"] for h in second["history"]] == ["scratch", str(weights)] and second["history"][0] == first["history"][0]
    assert second["total"]["steps"] == 12 and second["total"]["sittings"] == 2
    assert second["total"]["tokens_seen"] == first["tokens_seen"] + second["tokens_seen"] and first["tokens_seen"] > 0


def test_kinds_trained_together_end_with_the_weights_each_gets_alone(smoke_runs, monkeypatch, tmp_path):
    """`--kind heads,eagle,block` builds each batch (the target's forward) once for all three: every kind
    ends exactly where its own run ended; runs at different places in the data are refused."""
    from specdec_core.training.train import TrainConfig, open_training, train_steps

    cache, runs = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    kinds = ("heads", "eagle", "block")
    assert main(["train-draft", "--kind", ",".join(kinds), "--smoke", "--features", "online", "--out", str(tmp_path)]) == 0
    for kind in kinds:
        alone = torch.load(runs[kind] / "checkpoint.pt", weights_only=False)
        joint = torch.load(tmp_path / kind / "checkpoint.pt", weights_only=False)
        assert [e["loss"] for e in joint["log"]] == pytest.approx([e["loss"] for e in alone["log"]], abs=1e-5)
        assert max(float((alone["module"][n] - joint["module"][n]).abs().max()) for n in alone["module"]) <= 1e-6
        assert (tmp_path / kind / "weights" / "tiny" / f"{kind}.safetensors").is_file()
    probe = [open_training(sd.load_model("tiny"), TrainConfig(kind="heads", model="tiny", steps=2, vocab=512, seed=seed),
                           [], [], False, tmp_path / f"probe{seed}") for seed in (0, 1)]
    with pytest.raises(SpecDecError, match="train them separately"):
        train_steps(sd.load_model("tiny"), probe, [])


@pytest.mark.slow
def test_batches_built_by_a_feature_worker_train_the_same_bits(smoke_runs, monkeypatch, tmp_path):
    """`--feature-workers 1`: a spawned process builds the coming batches' online features while this one
    trains; with one thread everywhere the weights equal a one-process run's bit for bit — and the
    comparison catches a pipeline that hands over the batch one step ahead."""
    from specdec_core.training import train as train_module
    from specdec_core.training.prefetch import Prefetcher, TrainSplit

    cache, _ = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        argv = ["train-draft", "--kind", "heads,eagle", "--smoke", "--features", "online"]
        assert main([*argv, "--out", str(tmp_path / "here")]) == 0
        assert main([*argv, "--feature-workers", "1", "--stop-after", "4", "--out", str(tmp_path / "ahead")]) == 0
        assert main([*argv, "--feature-workers", "1", "--resume", "--out", str(tmp_path / "ahead")]) == 0
        states = lambda root, kind: torch.load(root / kind / "checkpoint.pt", weights_only=False)  # noqa: E731
        for kind in ("heads", "eagle"):
            here, ahead = states(tmp_path / "here", kind), states(tmp_path / "ahead", kind)
            assert ahead["step"] == 6 and [e["loss"] for e in ahead["log"]] == [e["loss"] for e in here["log"]]
            assert all(torch.equal(here["module"][n], ahead["module"][n]) for n in here["module"])

        # The same start and worker through the API: equal as above, and other weights when its batches
        # are taken one step ahead.
        tiny = sd.load_model("tiny")
        config = train_module.TrainConfig(**states(tmp_path / "here", "heads")["config"])  # the smoke run's own
        split = TrainSplit(config.data, config.data_shards, config.data_tokens, train_module.feature_layers(tiny, "heads"))
        here = states(tmp_path / "here", "heads")["module"]
        for shift in (0, 1):
            run = train_module.open_training(tiny, config, [], [], False, tmp_path / f"shift{shift}")
            with Prefetcher(tiny, split, range(shift, 6 + shift), config.batch_size, config.seed) as prefetched:
                train_module.train_steps(tiny, run, [], batches=lambda step: prefetched.batch(step + shift))
            same = all(torch.equal(here[n], t) for n, t in run.module.state_dict().items())
            assert same == (shift == 0), shift
        with Prefetcher(tiny, split, range(0, 2), 8, 0) as prefetched, pytest.raises(SpecDecError, match="in order"):
            prefetched.batch(1)
    finally:
        torch.set_num_threads(threads)


def test_a_warm_start_goes_on_in_the_data_order_where_its_sittings_stopped(smoke_runs, monkeypatch, tmp_path):
    from specdec_core.training import train as train_module

    cache, runs = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    history = [{"data": "old", "response_tokens": 9, "batch_size": 8, "steps": 800},
               {"data": "c", "response_tokens": 5, "batch_size": 8, "seed": 0, "steps": 40},
               {"data": "c", "response_tokens": 5, "batch_size": 8, "steps": 60}]
    assert train_module.steps_taken(history, "c", 5, 8, 0) == 100  # the newest sittings on this very data
    assert train_module.steps_taken(history, "c", 6, 8, 0) == 0  # the corpus grew: a new data order
    assert train_module.steps_taken(history, "c", 5, 16, 0) == 0
    seen = []
    real = train_module.batch_at
    monkeypatch.setattr(train_module, "batch_at", lambda seqs, step, *a: seen.append(step) or real(seqs, step, *a))
    weights = runs["heads"] / "weights"  # its one sitting: 6 steps on the smoke corpus
    assert main(["train-draft", "--kind", "heads", "--smoke", "--init", str(weights), "--out", str(tmp_path / "warm")]) == 0
    assert seen == list(range(6, 12))
    card = json.loads((tmp_path / "warm" / "weights" / "tiny" / "manifest.json").read_text())["files"]["heads.safetensors"]["card"]
    assert [h["data_offset"] for h in card["history"]] == [0, 6]


def test_walked_tau_follows_the_loops_anchors():
    from specdec_core.training.objectives import walked_tau

    # one sequence, 6 anchors: from 0 accept 2 (next anchor 3), accept 1 (next 5), accept 0 (next 6: end)
    accepted = torch.tensor([[2, 4, 4, 1, 4, 0]])
    assert walked_tau([(accepted, torch.ones(1, 6, dtype=torch.bool))], 4) == pytest.approx((3 + 2 + 1) / 3)
    assert walked_tau([(accepted, torch.ones(1, 6, dtype=torch.bool))], 1) == pytest.approx(2.0)  # anchors 0, 2, 4


def test_eval_draft_reports_per_position_survival(smoke_runs, monkeypatch, capsys):
    cache, runs = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    capsys.readouterr()
    assert main(["eval-draft", "--kind", "eagle", "--model", "tiny", "--smoke", "--weights", str(runs["eagle"] / "weights"),
                 "--k", "4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    survival = result["greedy"]["survival"]
    assert len(survival) == 4 and all(a >= b for a, b in zip(survival, survival[1:]))
    assert result["greedy"]["tau"]["4"] == pytest.approx(1 + sum(survival))
    assert 1 <= result["greedy"]["tau_walked"]["4"] <= 5


def test_eval_draft_scores_a_runs_checkpoint_before_it_exports(smoke_runs, monkeypatch, capsys, tmp_path, tiny):
    cache, runs = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    split = tmp_path / "split"
    assert main(["train-draft", "--kind", "eagle", "--smoke", "--stop-after", "2", "--out", str(split)]) == 0
    module, info = train_module.load_checkpoint(tiny, split, "eagle")
    saved = torch.load(split / "checkpoint.pt", weights_only=False)["module"]
    assert info["step"] == 2 and all(torch.equal(module.state_dict()[n], saved[n]) for n in saved)
    # and the check can fail: the finished run's checkpoint holds other weights
    finished, _ = train_module.load_checkpoint(tiny, runs["eagle"], "eagle")
    assert any(not torch.equal(finished.state_dict()[n], saved[n]) for n in saved)
    capsys.readouterr()
    assert main(["eval-draft", "--kind", "eagle", "--model", "tiny", "--smoke", "--checkpoint", str(split),
                 "--k", "4", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["checkpoint"]["step"] == 2 and len(result["greedy"]["survival"]) == 4
    for argv, message in [(["--kind", "heads", "--checkpoint", str(split)], "holds a eagle run on tiny, not heads on tiny"),
                          (["--kind", "eagle", "--checkpoint", str(tmp_path)], "no checkpoint.pt in"),
                          (["--kind", "eagle", "--checkpoint", str(split), "--weights", str(split)], "pass one")]:
        assert main(["eval-draft", "--model", "tiny", "--smoke", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err


def test_eval_draft_chooses_k_from_a_cost_model(smoke_runs, monkeypatch, capsys, tmp_path):
    """`eval-draft --costs`: k picked on the held-out split from the walked tau(k) and a profile's costs;
    a cost model without the drafter's draft step, or of another model, is refused in one line."""
    from specdec_core.costmodel import CostModel
    from specdec_core.theory import best_measured_k

    cache, runs = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    forwards = [{"tokens": t, "batch": 1, "seconds": 0.01 * (1 + 0.1 * (t - 1))} for t in (1, 2, 3, 4, 5)]
    costs = CostModel("tiny", "cpu", "float32", 1, 64, forward_s=forwards, draft_step_s={"eagle": 0.0005})
    path = tmp_path / "cost.json"
    path.write_text(costs.to_json())
    args = ["eval-draft", "--kind", "eagle", "--model", "tiny", "--smoke", "--weights", str(runs["eagle"] / "weights"),
            "--k", "4", "--costs", str(path)]
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    tau = {int(k): t for k, t in result["greedy"]["tau_walked"].items()}
    chosen = result["choose_k"]
    assert chosen["k"] == best_measured_k(tau, {k: 1 + 0.1 * k for k in tau}, 0.05)
    assert chosen["c"] == pytest.approx(0.05) and chosen["verify_ratios"]["4"] == pytest.approx(1.4)
    assert main(args) == 0 and f"k = {chosen['k']}" in capsys.readouterr().out
    path.write_text(CostModel("tiny", "cpu", "float32", 1, 64, forward_s=forwards).to_json())
    assert main(args) == 2
    assert "no draft step for eagle" in capsys.readouterr().err
    path.write_text(CostModel("smollm2-135m", "cpu", "float32", 1, 64, forward_s=forwards).to_json())
    assert main(args) == 2
    assert "measured on smollm2-135m" in capsys.readouterr().err


def test_walked_survival_counts_the_steps_that_kept_each_draft():
    from specdec_core.training.objectives import walked_survival, walked_tau

    accepted = torch.tensor([[2, 0, 1, 0, 0, 3]])  # walked at k = 4: anchors 0 (2 kept), 3 (0), 4 (0), 5 (3)
    batches = [(accepted, torch.ones(1, 6, dtype=torch.bool))]
    assert walked_survival(batches, 4) == pytest.approx([2 / 4, 2 / 4, 1 / 4, 0.0])
    assert walked_tau(batches, 4) == pytest.approx(1 + sum(walked_survival(batches, 4)))


def test_eval_draft_on_prompts_scores_offline_the_loops_own_answers(smol):
    """On the same greedy answers, the drafter's teacher-forced acceptance walked the way the loop walks
    equals what the decode loop measured (within 0.1 at the first position, 10 % in tau): a larger gap
    would mean the loop feeds the drafter something training never showed it."""
    from specdec_core.drafters import make_drafter
    from specdec_core.suite import load_prompts
    from specdec_core.training.on_prompts import compare_on_prompts

    cases = [c for c in load_prompts(Path(sd.__file__).parent / "prompts" / "suite.jsonl") if c.category == "story"][:2]
    module = make_drafter("heads", smol, sd.GenerationConfig(mode="spec", drafter="heads"))
    result = compare_on_prompts(smol, "heads", module.heads, module.vocab, cases, k=4, max_new_tokens=48)
    assert set(result["categories"]) == {"story", "all"}
    row = result["categories"]["all"]
    assert row["answers"] == 2 and 0.5 < row["vocab_coverage"] <= 1.0
    offline, loop = row["offline"], row["loop"]
    assert loop["steps"] > 0 and 1.0 <= loop["tau"] <= 5.0
    assert abs(offline["walked_survival"][0] - loop["survival"][0]) <= 0.1, (offline, loop)
    assert abs(offline["tau_walked"] / loop["tau"] - 1) <= 0.10, (offline, loop)


def test_eval_draft_prompts_cli_on_tiny(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "chat", "prompt": "Say something about rivers."}\n'
                       '{"id": "b", "category": "qa", "prompt": "Why is the sea salty?"}\n')
    capsys.readouterr()
    assert main(["eval-draft", "--kind", "heads", "--model", "tiny", "--prompts", str(prompts), "--k", "2",
                 "--max-new-tokens", "8", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["categories"]) == {"chat", "qa", "all"} and result["categories"]["all"]["answers"] == 2
    assert len(result["categories"]["all"]["loop"]["survival"]) == 2
    assert main(["eval-draft", "--kind", "heads", "--model", "tiny", "--prompts", str(prompts), "--categories", "code"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no category 'code'" in err and "\n" not in err


@pytest.mark.parametrize("argv,message", [
    (["train-draft", "--kind", "heads", "--smoke", "--steps", "0"], "steps must be >= 1"),
    (["train-draft", "--kind", "eagle", "--smoke", "--lr", "2"], "lr must be in (0, 1)"),
    (["train-draft", "--kind", "heads", "--data", "/nonexistent/run"], "no corpus at /nonexistent/run"),
    (["train-draft", "--kind", "heads,medusa", "--smoke"], "unknown drafter kind 'medusa'"),
    (["train-draft", "--kind", "heads", "--smoke", "--feature-workers", "1"], "add --features online"),
    (["train-draft", "--kind", "heads", "--smoke", "--features", "online", "--feature-workers", "-1"],
     "--feature-workers must be >= 0"),
    (["train-curve", "--model", "tiny", "--sizes", "", "--out", "x.json"], "--sizes may be empty only with --templates-size"),
])
def test_bad_training_arguments_exit_2_with_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


# --- the shipped weights on SmolLM2 ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("drafter", MODEL_DRAFTERS)
def test_shipped_drafters_are_exact_on_smollm2(smol, drafter):
    prompt = "Explain in two sentences why the sky is blue."
    ar = sd.generate(smol, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=32)).token_ids
    for k in (1, 2, 4, 8):
        spec = sd.generate(smol, prompt, sd.GenerationConfig(mode="spec", drafter=drafter, k=k, max_new_tokens=32))
        assert spec.token_ids == ar, k
    assert spec.metrics["num_accepted_tokens"] > 0  # trained: it does get drafts accepted


@pytest.mark.parametrize("drafter", TRAINED)
def test_offline_tau_predicts_the_decode_loops_tau(smol, drafter):
    """eval-draft's teacher-forced tau(4), walked along the anchors the loop visits, is within 10 % of the
    tau the decode loop measures on the same held-out prompts (greedy): a larger gap would mean the
    drafter is wired differently at inference than in training."""
    from specdec_core.drafters import make_drafter
    from specdec_core.target import Target
    from specdec_core.training.batches import decoded_sequence
    from specdec_core.course.experiments import heldout_template_prompts
    from specdec_core.training.train import evaluate, layers_needed

    prompts = list(heldout_template_prompts(4))
    config = sd.GenerationConfig(mode="spec", drafter=drafter, k=4, max_new_tokens=64)
    emitted = steps = 0
    sequences = []
    for text in prompts:
        result = sd.generate(smol, text, config)
        decode_steps = [s for s in result.trace.steps if s.kind == "decode"]
        emitted += sum(len(s.emitted) for s in decode_steps)
        steps += len(decode_steps)
        sequences.append(decoded_sequence(Target(smol), result.trace.prompt_ids, result.token_ids, layers_needed(drafter, smol)))
    module = make_drafter(drafter, smol, config)
    net = getattr(module, {"heads": "heads", "draft": "owned"}.get(drafter, "net"))
    offline = evaluate(smol, drafter, net, module.vocab, sequences, k=4)["all"]["tau_walked"][4]
    assert abs(offline / (emitted / steps) - 1) <= 0.10, (offline, emitted / steps)


def test_mix_records_each_steps_source_and_old_traces_still_load(tiny, tmp_path, monkeypatch):
    # Fixed costs: which source pays must not hang on how busy this machine is while it measures.
    costs = DraftCosts({d: 1.0 + 0.05 * d for d in range(33)}, {name: 0.05 for name in MIX_MODELS})
    monkeypatch.setattr(sd.generation, "drafter_costs", lambda lm, name, sized_tree=False, options=None: costs)
    prompt = "Repeat exactly: one two three four five six seven eight nine ten. one two three four five six"
    result = sd.generate(tiny, prompt, sd.GenerationConfig(mode="spec", drafter="mix", k=4, max_new_tokens=24))
    sources = {s.draft_source for s in result.trace.steps if s.drafted}
    assert sources and sources <= {"ngram", *MIX_MODELS}
    path = tmp_path / "mix.json"
    result.trace.save(path)
    assert [s.draft_source for s in sd.Trace.load(path).steps] == [s.draft_source for s in result.trace.steps]
    old = result.trace.to_dict()
    old["schema_version"] = 1
    for step in old["steps"]:
        del step["draft_source"]
    assert sd.Trace.from_dict(old).steps[1].draft_source is None  # a version-1 trace (no sources) loads


class FixedDrafter(Drafter):
    name = "fixed"

    def __init__(self, tokens):
        self.tokens = tokens

    def propose(self, context, k, params, generator):
        return Draft(self.tokens[:k], None, confidence=[0.9] * len(self.tokens[:k]))


def test_mix_verifies_the_proposal_with_more_expected_tokens_per_second():
    """Decided from running survival and measured costs only: copy when the n-gram match has earned
    its place, the model drafter when it has, and a plain step when neither pays."""
    from specdec_core.drafters import MixDrafter, NgramDrafter

    ratios = {d: 1.0 + 0.1 * d for d in range(9)}
    params, generator = sd.SamplingParams(), torch.Generator()
    mix = MixDrafter(NgramDrafter(1, 3, ratios), [(FixedDrafter([7, 8, 9, 10]), 0.05)], verify_ratios=ratios)
    context = [1, 2, 3, 4, 5, 1, 2, 3]  # "1 2 3" was followed by "4 5": a match to copy
    assert mix.propose([99, 98], 4, params, generator).source == "fixed"  # no match: the prior says draft
    mix.observe(0, [11], {}, verified=4)
    for _ in range(40):  # ... and then its drafts keep failing at the first position
        mix.survival["fixed"].update(0, 4, 0)
    assert mix.propose(context, 4, params, generator).source == "ngram"
    assert mix.propose([99, 98], 4, params, generator).tokens == []  # no match, the model does not pay: plain step
    trusted = MixDrafter(NgramDrafter(1, 3, ratios), [(FixedDrafter([7, 8, 9, 10]), 0.05)], verify_ratios=ratios)
    for _ in range(20):  # ... and one whose drafts are always accepted beats a fresh n-gram match
        trusted.propose([99, 98], 4, params, generator)
        trusted.observe(4, [7, 8, 9, 10, 11], {}, verified=4)
    assert trusted.propose(context, 4, params, generator).source == "fixed"



def test_mix_learns_to_draft_deeper_from_a_model_whose_drafts_survive():
    """A drafter that pays only one draft a step under the prior (a costly step, c = 0.6) must still learn
    that its guesses survive deeper: a position never verified yet expects its predecessor's survival,
    not the fixed prior. With the prior at every unverified position, mix verified exactly one quant
    draft a step on the whole suite (every draft accepted) and never found out that four pay."""
    from specdec_core.drafters import MixDrafter, NgramDrafter

    ratios = {d: 1.0 + 0.05 * d for d in range(9)}
    params, generator = sd.SamplingParams(), torch.Generator()
    mix = MixDrafter(NgramDrafter(1, 3, ratios), [(FixedDrafter([7, 8, 9, 10]), 0.6)], verify_ratios=ratios)
    lengths = []
    for _ in range(20):
        draft = mix.propose([99, 98], 4, params, generator)
        lengths.append(len(draft.tokens))
        mix.observe(len(draft.tokens), draft.tokens + [11], {}, verified=len(draft.tokens))
    assert lengths[0] == 1  # the prior alone pays one draft at this cost ...
    assert lengths[-1] == 4, lengths  # ... the evidence that every draft survives pays all four

# --- transformers' assisted generation with our draft LM ------------------------------------------


def test_the_hf_assistant_computes_the_draft_drafters_logits(tiny):
    """hf:assisted's assistant is the drafter's own module and head: transformers' forward of it gives the
    drafter's full-vocabulary logits (-inf outside the reduced vocabulary) at every position."""
    from specdec_core import llama
    from specdec_core.bench.run import HFRunner
    from specdec_core.kvcache import KVCache
    from specdec_core.drafters import make_drafter

    drafter = make_drafter("draft", tiny, sd.GenerationConfig(mode="spec", drafter="draft"))
    ids = torch.tensor([tiny.encode([{"role": "user", "content": "Tell me about the sea."}])])
    ours, _ = llama.forward(drafter.model, KVCache(), ids)  # (1, n, N)
    with torch.inference_mode():
        theirs = HFRunner(tiny).assistant()(input_ids=ids).logits  # (1, n, V)
    expected = drafter.vocab.expand(ours)
    assert torch.equal(torch.isinf(theirs), torch.isinf(expected))
    finite = ~torch.isinf(expected)
    assert torch.allclose(theirs[finite], expected[finite], atol=1e-4)


def test_bench_runs_hf_assisted_with_the_draft_lm_and_records_it(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "chat", "prompt": "Say something about rivers."}\n')
    out = tmp_path / "r.json"
    assert main(["bench", "--model", "tiny", "--prompts", str(prompts), "--modes", "spec:draft,hf:assisted,hf:assisted-default",
                 "--k", "4", "--max-new-tokens", "12", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())["summary"]
    for mode in ("spec:draft", "hf:assisted", "hf:assisted-default"):
        assert summary[mode]["identical_to_ar"] == "1/1", mode
    assert summary["hf:assisted"]["assistant"].startswith("draft: 2-layer")
    assert summary["spec:draft"]["assistant"] is None


def test_train_curve_trains_each_point_once_and_keeps_the_points_it_has(smoke_runs, monkeypatch, tmp_path, capsys):
    """`train-curve` on tiny: prefixes of the corpus and a templates-only point, scored on the answers to
    real prompts; a second run with more sizes trains only the new point."""
    from specdec_core.suite import PromptCase
    from specdec_core.training.corpus import load_corpus
    from specdec_core.training.curve import answers, score

    cache, _ = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    corpus = cache / "corpus" / "tiny" / "smoke"
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "chat", "prompt": "Say something about rivers."}\n')
    out = tmp_path / "curve.json"
    argv = ["train-curve", "--model", "tiny", "--data", str(corpus), "--steps", "3", "--prompts", str(prompts),
            "--categories", "chat", "--max-new-tokens", "8", "--out", str(out)]
    assert main([*argv, "--sizes", "40,80"]) == 0
    first = json.loads(out.read_text())
    assert sorted(first["points"]) == ["all-40", "all-80", "templates-40"]
    small, large = first["points"]["all-40"], first["points"]["all-80"]
    assert 0 < small["response_tokens"] < large["response_tokens"]
    assert set(small["categories"]) == {"chat"} and 0 <= small["categories"]["chat"]["s1"] <= 1
    templates = load_corpus(corpus, tokens=40, sources=("templates",))
    assert {s.item.source for s in templates.sequences} == {"templates"}
    assert main([*argv, "--sizes", "40,80,120"]) == 0
    second = json.loads(out.read_text())
    assert sorted(second["points"]) == ["all-120", "all-40", "all-80", "templates-40"]
    assert all(second["points"][name] == first["points"][name] for name in first["points"])  # kept, not retrained
    assert main([*argv, "--sizes", "", "--templates-size", "40"]) == 0  # that point alone: already there, kept
    assert json.loads(out.read_text()) == second
    # a finished point's weights, shipped beside the JSON from its checkpoint: they load and score as the curve did
    assert main([*argv, "--sizes", "40,80,120", "--ship", "templates-40"]) == 0
    module = weights_module.load_module("tiny", "heads", MedusaHeads, tmp_path / "curve" / "templates-40")
    assert json.loads(out.read_text()) == second
    tiny = sd.load_model("tiny")
    cases = [PromptCase("a", "chat", ["Say something about rivers."])]
    rescored = score(tiny, "heads", module.float(), ReducedVocab(module.vocab_ids, tiny.model.lm_head.weight),
                     answers(tiny, "heads", cases, 8), 4)
    assert rescored["chat"]["s1"] == pytest.approx(second["points"]["templates-40"]["categories"]["chat"]["s1"], abs=1e-6)
    capsys.readouterr()
    assert main([*argv, "--sizes", "40", "--ship", "all-999"]) == 2
    assert "not a point of this run" in capsys.readouterr().err
    capsys.readouterr()
    assert main([*argv, "--sizes", "40", "--steps", "4"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_the_whole_corpus_point_rides_on_a_joint_run_and_equals_the_point_trained_alone(smoke_runs, monkeypatch, tmp_path, capsys):
    """`train-draft --curve-point CURVE`: the curve's whole-corpus point trains on the joint run's batches
    (no forward of its own) and ends with the weights and scores `train-curve` gives it alone."""
    from specdec_core.training.corpus import read_manifest
    from specdec_core.training.train import TrainConfig

    cache, _ = smoke_runs
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    corpus = cache / "corpus" / "tiny" / "smoke"
    whole = f"all-{read_manifest(corpus)['totals']['response_tokens']}"
    curve = ["train-curve", "--model", "tiny", "--data", str(corpus), "--steps", "4", "--categories", "chat",
             "--max-new-tokens", "8"]
    assert main([*curve, "--sizes", whole.split("-")[1], "--out", str(tmp_path / "alone.json")]) == 0
    assert main([*curve, "--sizes", "40", "--out", str(tmp_path / "riding.json")]) == 0
    joint = ["train-draft", "--kind", "heads,eagle", "--smoke", "--features", "online", "--curve-point",
             str(tmp_path / "riding.json")]
    assert main([*joint, "--out", str(tmp_path / "joint")]) == 0
    alone = json.loads((tmp_path / "alone.json").read_text())["points"][whole]
    ridden = json.loads((tmp_path / "riding.json").read_text())["points"][whole]
    assert ridden["data_offset"] == 0 and ridden["categories"] == alone["categories"]
    rider = torch.load(cache / "training-runs" / "tiny" / f"curve-riding-{whole}" / "checkpoint.pt", weights_only=False)
    trained = torch.load(cache / "training-runs" / "tiny" / TrainConfig(**rider["config"]).run_key() / "checkpoint.pt",
                         weights_only=False)
    assert rider["step"] == 4 and max(float((t - rider["module"][n]).abs().max()) for n, t in trained["module"].items()) <= 1e-6
    capsys.readouterr()
    assert main([*joint, "--out", str(tmp_path / "again")]) == 0  # the point is there: nothing rides
    assert "nothing rides along" in capsys.readouterr().out
    # a sitting stopped after the rider finished but before scoring it: the next sitting, standing
    # elsewhere in the data order, scores the finished point instead of refusing it
    unscored = json.loads((tmp_path / "riding.json").read_text())
    del unscored["points"][whole]
    (tmp_path / "riding.json").write_text(json.dumps(unscored))
    assert main([*joint, "--steps", "2", "--out", str(tmp_path / "later")]) == 0
    assert "finished training, scored after this sitting" in capsys.readouterr().out
    assert json.loads((tmp_path / "riding.json").read_text())["points"][whole] == ridden
    assert main([*joint, "--data-shards", "1", "--out", str(tmp_path / "part")]) == 2
    assert "whole corpus" in capsys.readouterr().err
