"""What each drafter kind computes on a batch, the one distillation loss, and offline acceptance.

Every kind's logits function (`kinds.py` names them) returns (K, B, n, N): [i-1, b, m] are the logits
of draft i at anchor m (batches.py), so the loss and `acceptance` below never ask which kind produced them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import llama
from ..metrics import conditional_acceptance
from ..drafters import DraftNet, EagleNet, MedusaHeads, ReducedVocab
from ..drafters.draft import causal_lm
from .batches import Batch


def heads_logits(heads: MedusaHeads, vocab: ReducedVocab, batch: Batch, final_layer: int, k: int) -> torch.Tensor:
    """Head i reads row m itself: every head's guess at every anchor in one pass."""
    return vocab.logits(heads(batch.hidden[final_layer])[:k])


def ttt_mask(n: int, step: int, device: torch.device | None = None) -> torch.Tensor:
    """(n, (step+1) n) bool: what unroll step `step`'s query at row i may see. Its anchor is m = i - step:
    the true-feature keys of rows <= m (step 0's), and from each later step r <= step the one key it
    wrote on that same draft path, at row m + r. At inference these are exactly the drafter's cache
    (verified positions) and its own earlier drafts of the current step."""
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return torch.cat([j <= i - step] + [j == i - step + r for r in range(1, step + 1)], dim=1)


def eagle_logits(net: EagleNet, vocab: ReducedVocab, target: torch.nn.Module, batch: Batch, k: int) -> torch.Tensor:
    """Training-time test: unroll k drafting steps on the drafter's own output features.

    Step 0 is the ordinary causal pass on the target's true features. Step s feeds, at row i, step
    s-1's output at row i-1 (the drafter's guess of the feature there) with the true next token
    (where the drafted token differs the chain is rejected anyway, so this changes no acceptance),
    attending as `ttt_mask` says. Step s at row i is draft s+1 of anchor i - s: shifted back to anchors.
    """
    b, n = batch.next_tokens.shape
    embeds = F.embedding(batch.next_tokens, target.model.embed_tokens.weight.detach()).float()  # (B, n, H), frozen
    cos, sin = llama.rotary_tables(target, batch.positions, torch.float32)  # (B, 1, n, hd)
    feature = net.fused(batch.hidden)  # (B, n, H)
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    out_logits = []
    for step in range(k):
        q, key, value = net.qkv(feature, embeds, cos, sin)
        keys.append(key)
        values.append(value)
        out = net.finish(feature, net.attend(q, torch.cat(keys, 2), torch.cat(values, 2), ttt_mask(n, step, feature.device)))
        logits = vocab.logits(net.head_state(out))  # (B, n, N): row i = draft step+1 of anchor i-step
        out_logits.append(F.pad(logits[:, step:], (0, 0, 0, step)))  # (B, n, N) by anchor; tail rows unused
        feature = F.pad(out[:, :-1], (0, 0, 1, 0))  # row i <- out row i-1
    return torch.stack(out_logits)


def token_lm_logits(net: DraftNet, vocab: ReducedVocab, target: torch.nn.Module, batch: Batch, k: int) -> torch.Tensor:
    """The draft LM reads tokens only: one causal pass over prompt + response. Its output at row j
    (position start + j) names the token the target's row j names, so draft i of anchor m is its output
    at row m+i, teacher-forced on the tokens the target wrote (where an earlier draft differed from
    them the chain was rejected anyway: exactly the prefixes acceptance is measured on)."""
    model = causal_lm(net, target, vocab)
    tokens = batch.tokens  # (B, T)
    t, n = tokens.shape[1], batch.next_tokens.shape[1]
    x = F.embedding(tokens, target.model.embed_tokens.weight.detach()).float()  # (B, T, H), frozen
    causal = lambda q, key, value, layer, scale: llama.attention(q, key, value, None, scale)  # noqa: E731
    out, _ = llama.decoder(model, x, torch.arange(t, device=tokens.device)[None], causal)  # (B, T, H)
    rows = (batch.starts[:, None] + torch.arange(n + k, device=tokens.device)[None]).clamp(max=t - 1)  # (B, n+k)
    logits = vocab.logits(torch.gather(out, 1, rows[..., None].expand(-1, -1, out.shape[-1])))  # (B, n+k, N)
    return torch.stack([logits[:, i:i + n] for i in range(1, k + 1)])


def distillation_loss(logits: torch.Tensor, vocab: ReducedVocab, batch: Batch, final_layer: int
                      ) -> tuple[torch.Tensor, list[float]]:
    """Cross-entropy of draft i at anchor m against the target's distribution on row m+i (its output head
    over the subset, renormalised: the target's own text *and* its uncertainty), averaged over drafts;
    and each draft position's top-1 agreement with the target's subset argmax (a quick health signal)."""
    with torch.no_grad():
        teacher = torch.softmax(vocab.logits(batch.hidden[final_layer]), dim=-1)  # (B, n, N)
    losses, agreement = [], []
    for i, row_logits in enumerate(logits, start=1):
        valid = batch.valid(i)  # (B, n)
        target_p = F.pad(teacher[:, i:], (0, 0, 0, i))[valid]  # (M, N): row m+i for anchor m
        student = row_logits[valid]
        losses.append(F.cross_entropy(student, target_p))
        agreement.append(float((student.argmax(-1) == target_p.argmax(-1)).float().mean()))
    return torch.stack(losses).mean(), agreement


@torch.no_grad()
def acceptance(logits: torch.Tensor, vocab: ReducedVocab, lm_head: torch.nn.Module, batch: Batch, final_layer: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy acceptance, teacher-forced: the accepted length at every anchor, (B, n) in 0..K, and which
    anchors count, (B, n) bool: those with all K positions ahead inside the sequence.

    Draft i at anchor m is accepted when it and every draft before it equal the target's argmax over
    the *full* vocabulary on row m+i (what greedy verification compares with)."""
    k = logits.shape[0]
    choice = torch.argmax(lm_head(batch.hidden[final_layer]), dim=-1)  # (B, n) the target's greedy tokens
    drafted = vocab.ids[logits.argmax(-1)]  # (K, B, n) full-vocabulary ids
    matches = torch.stack([drafted[i - 1] == F.pad(choice[:, i:], (0, i)) for i in range(1, k + 1)])  # (K, B, n)
    return torch.cumprod(matches.long(), dim=0).sum(0), batch.valid(k)


def _walk(batches: list[tuple[torch.Tensor, torch.Tensor]], k: int) -> tuple[list[int], int]:
    """Walk each sequence as the greedy decode loop does with k drafts a step: from anchor m a step
    accepts a drafts (at most k) and the next step starts at m+a+1. Returns (how many steps accepted
    draft i, for i = 1..k; the number of steps)."""
    reached, steps = [0] * k, 0
    rows = [(row, ok) for accepted, valid in batches for row, ok in zip(accepted.clamp(max=k).tolist(), valid.tolist())]
    for row, ok in rows:
        m = 0
        while m < len(row) and ok[m]:
            for i in range(row[m]):
                reached[i] += 1
            steps += 1
            m += row[m] + 1
    return reached, steps


def walked_survival(batches: list[tuple[torch.Tensor, torch.Tensor]], k: int) -> list[float]:
    """s_1 .. s_k along the anchors the loop itself visits (`_walk`): the share of its steps that kept
    draft i. Averaging every anchor instead weights easy stretches the loop crosses in one step as often
    as the hard positions it stops at, so it overstates the loop; this walk is what the loop measures
    (up to the end of each sequence). `batches`: (accepted, valid) pairs as `acceptance` returns them."""
    reached, steps = _walk(batches, k)
    return [r / steps if steps else 0.0 for r in reached]


def walked_tau(batches: list[tuple[torch.Tensor, torch.Tensor]], k: int) -> float:
    """Tokens per verify step along the loop's own anchors: the accepted drafts plus the target's token."""
    reached, steps = _walk(batches, k)
    return (steps + sum(reached)) / steps if steps else 0.0


def survival_summary(accepted: torch.Tensor, k: int) -> dict:
    """Per-position survival s_i = P(accepted >= i), conditional a_i = s_i / s_(i-1), and the tokens per
    verify step each k implies, tau(k) = 1 + s_1 + ... + s_k (a greedy step emits the accepted drafts
    plus the target's own token)."""
    survival = [float((accepted >= i).float().mean()) for i in range(1, k + 1)]
    conditional = [a or 0.0 for a in conditional_acceptance(survival)]
    tau = {kk: 1 + sum(survival[:kk]) for kk in range(1, k + 1)}
    return {"anchors": int(len(accepted)), "survival": survival, "conditional": conditional, "tau": tau}
