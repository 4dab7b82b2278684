"""The written-out Llama forward (specdec_core/llama.py) gives transformers' numbers bit for bit.

Both run the same steps side by side, each on its own KV cache (ours the lab's `KVCache`: prefix views of
a buffer that doubles; theirs transformers' `DynamicCache`): a prefill, single tokens, verify-sized
blocks on top of the cache, a rollback. Each check is shown to fail on a deliberately broken forward.
"""
import pytest
import torch
from transformers import DynamicCache

from specdec_core import llama
from specdec_core.kvcache import KVCache
from specdec_core.errors import SpecDecError

# (tokens fed, tokens rolled back afterwards): prefill, decode steps, verify blocks, a rejected draft
STEPS = [(12, 0), (1, 0), (4, 2), (2, 0), (1, 0), (8, 5), (3, 0)]


def side_by_side(model: torch.nn.Module, batch: int = 1, hidden_layers: tuple[int, ...] = ()) -> list[bool]:
    """For each step, whether logits (and the requested hidden states) are bitwise equal."""
    generator = torch.Generator().manual_seed(0)
    ours, theirs = KVCache(capacity=16), DynamicCache(config=model.config)  # ours doubles once
    equal = []
    with torch.inference_mode():
        for n, rollback in STEPS:
            ids = torch.randint(100, 40000, (batch, n), generator=generator)
            logits, hidden = llama.forward(model, ours, ids, hidden_layers)
            out = model(input_ids=ids, cache=theirs, use_cache=True, output_hidden_states=bool(hidden_layers))
            same = torch.equal(logits, out.logits)
            same &= all(torch.equal(hidden[layer], out.hidden_states[layer]) for layer in hidden_layers)
            equal.append(same)
            if rollback:
                ours.crop(-rollback)
                theirs.crop(-rollback)
    return equal


@pytest.mark.parametrize("name", ["tiny", "smol"])
def test_logits_are_bitwise_equal_to_transformers(name, request):
    model = request.getfixturevalue(name).model
    assert side_by_side(model) == [True] * len(STEPS)


def test_batches_and_hidden_states_are_equal_too(tiny):
    layers = tiny.model.config.num_hidden_layers
    assert side_by_side(tiny.model, batch=3, hidden_layers=(0, 1, layers)) == [True] * len(STEPS)


def test_last_only_is_the_last_row(tiny):
    """Up to rounding: the output head then multiplies one row, not four (another matmul kernel)."""
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        full, _ = llama.forward(tiny.model, DynamicCache(config=tiny.model.config), ids)
        last, _ = llama.forward(tiny.model, DynamicCache(config=tiny.model.config), ids, last_only=True)
    assert last.shape == (1, 1, full.shape[-1]) and torch.allclose(last[0, 0], full[0, -1], atol=1e-4)


def test_a_misaligned_causal_mask_is_caught(tiny, monkeypatch):
    """Broken: SDPA's is_causal on a verify block aligns the triangle top-left, so new token i sees
    only cached positions 0..i (the classic bug of reusing the prefill mask on top of a cache)."""
    real = llama.attention

    def top_left_causal(q, k, v, mask, scale):
        if mask is None:
            return real(q, k, v, mask, scale)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=True, enable_gqa=True)

    monkeypatch.setattr(llama, "attention", top_left_causal)
    equal = side_by_side(tiny.model)
    assert equal[1] and not all(equal)  # 1-token steps unaffected, verify blocks wrong


def test_positions_off_by_one_are_caught(tiny, monkeypatch):
    real = llama.rotary_tables
    monkeypatch.setattr(llama, "rotary_tables", lambda model, positions, dtype: real(model, positions + 1, dtype))
    assert not any(side_by_side(tiny.model))


def test_unsupported_models_are_refused(tiny):
    config = tiny.model.config.__class__(**{**tiny.model.config.to_dict(), "hidden_act": "gelu"})
    with torch.device("meta"):
        other = type(tiny.model)(config)
    with pytest.raises(SpecDecError, match="SiLU"):
        llama.check_supported(other)
