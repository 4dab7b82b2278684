"""Weight-only quantisation (quant.py, kernels.Int4Linear / Int8Linear) and the `quant` self-drafter."""
from __future__ import annotations

import json

import pytest
import torch
from transformers import DynamicCache

import specdec_core as sd
import specdec_core.sampling as sampling
from specdec_core import quant
from specdec_core.cli import main
from specdec_core.generation import drafter_costs
from specdec_core.kernels import Int4Linear, Int8Linear
from specdec_core.serving import ServingEngine, make_scheduler
from test_sampling import first_spec_tokens
from test_serving import IDLE

PROMPTS = [[500, 600, 700, 800, 900], [1200, 1300, 1200, 1300, 1200, 1400]]


# --- the weights ---------------------------------------------------------------------------------


def int4_error(lm, codes: dict, dtype: torch.dtype) -> float:
    """max over the linears of max |int4 weight - fp32 target weight| / max |target weight|."""
    worst = 0.0
    for name, (q, scale, zero) in codes.items():
        weight = lm.model.get_submodule(name).weight.detach()
        w = quant.dequantise(q, scale.to(dtype), zero.to(dtype))
        worst = max(worst, float((w - weight).abs().max() / weight.abs().max()))
    return worst


def test_int4_from_the_q41_blocks_is_the_fp32_target(smol):
    """Our fp32 target is the GGUF's Q4_1 blocks dequantised, so the int4 codes read from those blocks give
    back its weights: to float rounding with fp32 scales, within Q41_BOUND with the kernel's bf16 ones."""
    codes = quant.gguf_int4_codes(smol)
    assert len(codes) == 7 * smol.model.config.num_hidden_layers
    assert int4_error(smol, codes, torch.float32) < 1e-6
    assert int4_error(smol, codes, torch.bfloat16) < quant.Q41_BOUND


def test_the_int4_check_fails_when_the_group_mapping_is_shifted_by_one(smol):
    codes = quant.gguf_int4_codes(smol)
    name = "model.layers.0.mlp.down_proj"
    q, scale, zero = codes[name]
    shifted = {name: (q, scale.roll(1, dims=1), zero.roll(1, dims=1))}  # each group gets its neighbour's scale
    assert int4_error(smol, shifted, torch.float32) > 100 * quant.Q41_BOUND


def test_int8_round_trip_within_half_a_step():
    weight = torch.randn(64, 96) * torch.linspace(0.1, 3, 64)[:, None]
    q, scale = quant.quantise_int8(weight)
    assert q.dtype == torch.int8 and int(q.abs().max()) == 127
    assert torch.all((q.float() * scale[:, None] - weight).abs() <= scale[:, None] / 2 + 1e-6)


def test_the_kernels_compute_x_times_the_dequantised_weight():
    torch.manual_seed(0)
    weight, x = torch.randn(128, 96), torch.randn(3, 96)
    q, scale, zero = quant.quantise_int4(weight)
    reference = x.bfloat16().float() @ quant.dequantise(q, scale.bfloat16(), zero.bfloat16()).T
    assert torch.allclose(Int4Linear(q, scale, zero)(x), reference, atol=0.05, rtol=0.01)
    q8, scale8 = quant.quantise_int8(weight)
    reference8 = x.bfloat16().float() @ (q8.float() * scale8.bfloat16().float()[:, None]).T
    assert torch.allclose(Int8Linear(q8, scale8)(x), reference8, atol=0.05, rtol=0.01)


@pytest.mark.parametrize("bits", quant.BITS)
def test_fusing_a_layers_linears_changes_no_number(tiny, bits):
    """q/k/v and gate/up as one linear each compute every output row as before: the copy's logits are
    bitwise those of the copy with seven separate linears, for a prefill and a one-token step."""
    fused, apart = quant.quantised_copy(tiny, bits), quant.quantised_copy(tiny, bits, fuse=False)
    assert hasattr(fused.model.layers[0].self_attn, "qkv_proj") and not hasattr(apart.model.layers[0].self_attn, "qkv_proj")
    ids = torch.tensor([PROMPTS[1]])
    logits = []
    for copy in (fused, apart):
        cache = DynamicCache()
        with torch.inference_mode():
            prefill, _ = sd.llama.forward(copy, cache, ids[:, :-1])
            step, _ = sd.llama.forward(copy, cache, ids[:, -1:])
        logits.append((prefill, step))
    assert all(torch.equal(a, b) for a, b in zip(*logits))


# --- the quant drafter: exact and lossless ---------------------------------------------------------


@pytest.mark.parametrize("options", [{}, {"quant_bits": 8}, {"quant_layers": 1}])
@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_quant_drafter_is_exact_on_tiny(tiny, options, k):
    for prompt in PROMPTS:
        ar = sd.generate(tiny, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=24)).token_ids
        spec = sd.generate(tiny, prompt, sd.GenerationConfig(mode="spec", drafter="quant", k=k, max_new_tokens=24,
                                                             drafter_options=options))
        assert spec.token_ids == ar


def test_quant_drafter_is_exact_in_the_serving_engine(tiny):
    """Batched drafting (one ragged forward of the copy for every request) and batched verification."""
    ar = [sd.generate(tiny, p, sd.GenerationConfig(mode="ar", max_new_tokens=20)).token_ids for p in PROMPTS]
    engine = ServingEngine(tiny, make_scheduler("fixed"), IDLE, drafter_costs=drafter_costs(tiny, "quant"))
    requests = [engine.submit(p, sd.GenerationConfig(mode="spec", drafter="quant", k=4, max_new_tokens=20)) for p in PROMPTS]
    engine.run()
    assert [r.output_ids for r in requests] == ar


@pytest.mark.slow
def test_quant_drafter_is_exact_on_smollm2_and_almost_always_right(smol):
    prompt = "Explain in two sentences why the sky is blue."
    ar = sd.generate(smol, prompt, sd.GenerationConfig(mode="ar", max_new_tokens=32)).token_ids
    for k, options in ((1, {}), (2, {}), (4, {}), (8, {}), (4, {"quant_bits": 8}), (4, {"quant_layers": 15})):
        spec = sd.generate(smol, prompt, sd.GenerationConfig(mode="spec", drafter="quant", k=k, max_new_tokens=32,
                                                             drafter_options=options))
        assert spec.token_ids == ar, (k, options)
        if options == {}:  # int4 from the target's own Q4_1 blocks: its guesses are the target's
            assert spec.metrics["accepted_per_pos"][0] > 0.85, k  # first-draft acceptance


STAT_TRIALS = 300
SPREAD = (3000, 3001, 3002, 3003, 3004, 3005)  # a context where tiny's next-token p is spread, not one token


@pytest.mark.parametrize("options", [{}, {"quant_layers": 1}])
def test_quant_drafter_samples_losslessly(tiny, options):
    counts, exact = first_spec_tokens(tiny, STAT_TRIALS, drafter="quant", options=options, context=SPREAD)
    assert not sampling.chi2_rejects(counts, exact, STAT_TRIALS)


@pytest.mark.parametrize("options", [{}, {"quant_layers": 1}])
def test_the_lossless_check_catches_always_accept_with_the_quant_drafter(tiny, monkeypatch, options):
    """The negative control: accepting every draft emits the copy's q instead of p, and the same check
    (same context, same trials) rejects it, for the full copy and the one-layer one."""
    monkeypatch.setattr(sampling, "acceptance_probability", lambda p, q, x: 1.0)
    counts, exact = first_spec_tokens(tiny, STAT_TRIALS, drafter="quant", options=options, context=SPREAD)
    assert sampling.chi2_rejects(counts, exact, STAT_TRIALS)


# --- the quantised target and the CLI --------------------------------------------------------------


def test_bench_records_how_much_of_fp32_ar_a_quantised_target_keeps(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "chat", "prompt": "Hello there"}\n')
    out = tmp_path / "r.json"
    assert main(["bench", "--model", "tiny", "--prompts", str(prompts), "--modes", "ar@weights=int4,spec:quant@bits=8",
                 "--max-new-tokens", "12", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = {r["mode"]: r for r in report["results"]}
    assert set(rows) == {"ar", "ar@weights=int4", "spec:quant@bits=8"}
    assert rows["ar"]["agreement_with_ar"] == 1.0 and rows["spec:quant@bits=8"]["identical_to_ar"]
    int4 = rows["ar@weights=int4"]
    assert 0.0 <= int4["agreement_with_ar"] <= 1.0
    assert int4["identical_to_ar"] == (int4["agreement_with_ar"] == 1.0 and int4["new_tokens"] == rows["ar"]["new_tokens"])
    assert report["summary"]["ar@weights=int4"]["agreement_with_ar"] == int4["agreement_with_ar"]


@pytest.mark.parametrize("argv,message", [
    (["generate", "--model", "tiny", "--prompt", "hi", "--weights", "int3"], "unknown weights 'int3'"),
    (["generate", "--model", "tiny", "--prompt", "hi", "--mode", "spec:quant", "--quant-bits", "5"], "quant-bits must be 4 or 8"),
    (["generate", "--model", "tiny", "--prompt", "hi", "--mode", "spec:quant", "--quant-layers", "0"], "quant-layers must be between 1"),
    (["bench", "--model", "tiny", "--modes", "spec:quant@bitz=8"], "unknown setting 'bitz'"),
    (["bench", "--model", "tiny", "--modes", "spec:quant@bits"], "write each setting as @key=value"),
    (["bench", "--model", "tiny", "--modes", "ar@weights=int5"], "weights must be one of"),
    (["bench", "--model", "tiny", "--modes", "spec:ngram@weights=int4"], "unknown setting 'weights'"),
    (["generate", "--model", "tiny", "--prompt", "hi", "--mode", "spec", "--weights", "int4"], "spec verifies with the fp32"),
])
def test_bad_quantisation_settings_exit_2_with_one_line(capsys, tmp_path, argv, message):
    argv = argv + (["--out", str(tmp_path / "r.json")] if argv[0] == "bench" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
