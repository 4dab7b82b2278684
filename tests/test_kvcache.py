"""The preallocated KV cache (specdec_core/kvcache.py): it gives transformers' DynamicCache's bits,
through doublings, rollbacks and a tree's compaction; attention over its prefix views gives the bits a
contiguous copy gives. Each check is shown to fail on a deliberately broken cache."""
import torch
import torch.nn.functional as F
from transformers import DynamicCache

from specdec_core import kvcache, llama
from specdec_core.kvcache import KVCache
from specdec_core.target import Target

TEXT = [101, 2048, 77, 5001, 9, 311, 4242, 18, 640, 75, 1200, 33, 8, 919, 14, 2600, 57, 300]


@torch.inference_mode()
def decode(model: torch.nn.Module, cache) -> torch.Tensor:
    """Decode TEXT in blocks of 1-3 tokens, each with two drafts the target rejects and rolls back; the
    logits of one more token."""
    fed = 0
    for size in [3, 1, 2, 1, 3, 1, 1, 2, 3, 1]:
        block = TEXT[fed:fed + size]
        llama.forward(model, cache, torch.tensor([block + [7, 7]]))
        cache.crop(-2)
        fed += size
    return llama.forward(model, cache, torch.tensor([[42]]))[0]


def decoded_vs_dynamic(model: torch.nn.Module, capacity: int) -> float:
    """The same decoding on a KVCache that starts at `capacity` positions and on transformers' DynamicCache
    (a tensor of exactly the cached length, appended with cat): the largest logit difference."""
    ours = decode(model, KVCache(capacity=capacity))
    theirs = decode(model, DynamicCache(config=model.config))
    return 0.0 if torch.equal(ours, theirs) else max(float((ours - theirs).abs().max()), 1e-30)


def test_doublings_and_rollbacks_give_dynamic_caches_bits(tiny):
    assert decoded_vs_dynamic(tiny.model, capacity=2) == 0.0  # 2 -> 4 -> 8 -> 16 -> 32, bitwise
    cache = KVCache(capacity=2)
    decode(tiny.model, cache)
    assert cache.get_seq_length() == len(TEXT) + 1 and cache.keys[0].shape[2] == 32


def test_a_doubling_that_forgets_the_cached_positions_is_caught(tiny, monkeypatch):
    def forgetful(self, layer, needed):
        for store in (self.keys, self.values):
            store[layer] = store[layer].new_zeros(*store[layer].shape[:2], needed, store[layer].shape[3])

    monkeypatch.setattr(KVCache, "_grow", forgetful)
    assert decoded_vs_dynamic(tiny.model, capacity=2) > 1e-3


def test_a_rollback_that_keeps_the_rejected_positions_is_caught(tiny, monkeypatch):
    monkeypatch.setattr(KVCache, "crop", lambda self, n: None)
    assert decoded_vs_dynamic(tiny.model, capacity=2) > 1e-3


def test_attention_over_a_prefix_view_is_bitwise_a_contiguous_copys():
    """SDPA reads the buffers' strided prefix views; the same call on contiguous copies (what a
    DynamicCache holds) returns the same bits, masked or not, for chains at every cache length tried."""
    generator = torch.Generator().manual_seed(0)
    keys, values = (torch.randn(1, 3, 512, 64, generator=generator) for _ in range(2))
    for past in (0, 1, 15, 63, 64, 200):
        for n in (1, 2, 4, 9):
            q = torch.randn(1, 9, n, 64, generator=generator)
            k, v = keys[:, :, :past + n], values[:, :, :past + n]
            assert not k.is_contiguous()
            mask = llama.causal_mask(past, n, q.device)
            assert torch.equal(llama.attention(q, k, v, mask, 0.125),
                               llama.attention(q, k.contiguous(), v.contiguous(), mask, 0.125)), (past, n)
    # ... and the comparison sees a one-position shift of the keys (it is not vacuous)
    q = torch.randn(1, 9, 1, 64, generator=generator)
    assert not torch.equal(F.scaled_dot_product_attention(q, keys[:, :, :64], values[:, :, :64], enable_gqa=True),
                           F.scaled_dot_product_attention(q, keys[:, :, 1:65], values[:, :, 1:65], enable_gqa=True))


def test_keep_compacts_a_tree_path_and_reports_its_capacity(tiny):
    cache = KVCache(capacity=4)
    k = torch.arange(6.0).view(1, 1, 6, 1)
    cache.update(k, -k, layer=0)
    cache.keep(new=4, rows=[0, 2, 3])  # positions 0, 1 stay; 2, 4, 5 follow them
    keys, values = cache.view(0)
    assert keys.flatten().tolist() == [0, 1, 2, 4, 5] and torch.equal(values, -keys)
    assert cache.get_seq_length() == 5 and cache.keys[0].shape[2] == 8  # 4 doubled once for 6
    assert cache.nbytes() == 2 * 8 * 4 and Target.cache_bytes(cache) == cache.nbytes()
    assert kvcache.CAPACITY >= 256
