"""Training the block drafter (drafters/block.py): many blocks per sequence in one pass, and its loss.

A training sequence's rows are the target's states at positions start .. start+n-1 (batches.py). A
block anchored at row m holds the anchor token (the one row m named, at position start+m+1) and masks;
its slot j names the token at start+m+2+j, whose target distribution is the output head on row
m+1+j, and it may see the context rows 0 .. m only. Many anchors of one sequence go through the
backbone side by side: their slots are one sequence of queries, and one mask gives each block its own
context prefix and its own slots (`block_mask`), exactly what the drafter sees at inference.

The serial part (Markov bias, confidence) reads the token before each slot. Training feeds the true
token (teacher forcing: where an earlier draft differed the chain was rejected anyway); evaluation
feeds the drafter's own greedy choices, which is the decode loop itself, so offline acceptance and
calibration measure what the scheduler will see.

Loss, as the paper publishes it: 0.1 CE + 0.9 L1 + 1.0 BCE, each averaged over the valid slots with
position weights exp(-(j-1)/4) (j = 1 .. block): CE and L1 against the target's distribution over the
draft vocabulary (renormalised there), BCE of the confidence against the soft survival label
1 - ½‖q - p‖₁ (the chance that sampling at temperature 1 keeps the draft; the target's mass outside
the draft vocabulary is left out of this label: about 3 % of held-out tokens lie there).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..drafters import BlockNet, ReducedVocab
from ..drafters.block import REGIMES
from .batches import Batch, Sequence, make_batch
from .calibration import report, sequential_temperatures

ANCHORS = 24  # random blocks per training sequence and step
WEIGHTS = (0.1, 0.9, 1.0)  # CE, L1, BCE


def position_weights(width: int, device: torch.device | None = None) -> torch.Tensor:
    """exp(-(j-1)/4) for slots j = 1 .. width: early drafts matter more (every later one needs them)."""
    return torch.exp(-torch.arange(width, device=device, dtype=torch.float32) / 4)


def block_mask(anchors: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """(B, 1, A·width, rows + A·width) bool for anchors (B, A): slot j of block a sees context rows <= its
    anchor and every slot of its own block (non-causal inside the block), nothing else."""
    b, a = anchors.shape
    block_of = torch.arange(a * width, device=anchors.device) // width  # (Q,)
    anchor_of = anchors[:, block_of]  # (B, Q)
    context = torch.arange(rows, device=anchors.device)[None, None, :] <= anchor_of[..., None]  # (B, Q, rows)
    own = (block_of[:, None] == block_of[None, :]).expand(b, -1, -1)  # (B, Q, Q)
    return torch.cat((context, own), -1)[:, None]


def _gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x (B, n, ...) at row indices (B, ...) clamped into range -> (B, ..., ...)."""
    index = index.clamp(0, x.shape[1] - 1)
    flat = index.reshape(index.shape[0], -1)
    out = torch.gather(x, 1, flat.view(*flat.shape, *([1] * (x.ndim - 2))).expand(*flat.shape, *x.shape[2:]))
    return out.view(*index.shape, *x.shape[2:])


def block_outputs(net: BlockNet, vocab: ReducedVocab, target: torch.nn.Module, batch: Batch, anchors: torch.Tensor,
                  width: int, teacher_forced: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks at `anchors` (B, A) of `width` slots -> their logits (width, B, A, N) with the Markov bias
    and the raw confidence logits (width, B, A).

    teacher_forced: the token before slot j is the true one (training); otherwise the drafter's own
    greedy choice for slot j-1 (evaluation: what the decode loop does)."""
    b, a = anchors.shape
    n = batch.next_tokens.shape[1]
    ctx = net.context(batch.hidden)  # (B, n, H)
    kv = net.context_kv(target, ctx, batch.positions)
    anchor_tokens = _gather(batch.next_tokens, anchors)  # (B, A)
    x = net.slots(target, anchor_tokens, width).reshape(b, a * width, -1)  # (B, Q, H)
    offsets = torch.arange(width, device=anchors.device)
    positions = (_gather(batch.positions, anchors)[..., None] + 1 + offsets).reshape(b, -1)  # (B, Q)
    states = net.backbone(target, x, positions, kv, block_mask(anchors, n, width)).view(b, a, width, -1)
    guesses = vocab.logits(states)  # (B, A, width, N)
    embed = target.model.embed_tokens.weight.detach()
    true_prev = _gather(batch.next_tokens, anchors[..., None] + offsets)  # (B, A, width): the token at anchor+j
    logits, confidence = [], []
    prev = anchor_tokens
    for j in range(width):
        if teacher_forced:
            prev = true_prev[..., j]
        row = guesses[:, :, j] + net.markov(vocab.index[prev])
        logits.append(row)
        confidence.append(net.confidence_logit(states[:, :, j], F.embedding(prev, embed)))
        prev = vocab.ids[row.argmax(-1)]
    return torch.stack(logits), torch.stack(confidence)


def block_logits(net: BlockNet, vocab: ReducedVocab, target: torch.nn.Module, batch: Batch, k: int) -> torch.Tensor:
    """Every anchor's block drafted as the decode loop drafts it (greedy): (k, B, n, N), the kinds table's
    logits for offline acceptance (objectives.acceptance)."""
    b, n = batch.next_tokens.shape
    anchors = torch.arange(n, device=batch.next_tokens.device).expand(b, -1)
    return block_outputs(net, vocab, target, batch, anchors, min(k, net.config["block"]), teacher_forced=False)[0]


def soft_survival(q_logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """1 - ½‖q - p‖₁: the chance that rejection sampling keeps a draft from q when the target says p."""
    return (1 - 0.5 * (torch.softmax(q_logits.float(), -1) - p).abs().sum(-1)).clamp(0, 1)  # clamp: rounding


def block_loss(net: BlockNet, vocab: ReducedVocab, target: torch.nn.Module, batch: Batch, final_layer: int,
               generator: torch.Generator) -> tuple[torch.Tensor, list[float]]:
    """The published loss on ANCHORS random blocks per sequence; and each position's top-1 agreement."""
    b, n = batch.next_tokens.shape
    width = net.config["block"]
    device = batch.next_tokens.device
    # Anchors m with at least one slot to learn from (row m+1 exists): uniform in 0 .. rows-2.
    anchors = (torch.rand(b, ANCHORS, generator=generator) * (batch.rows - 1).clamp(min=1)[:, None].cpu()).long().to(device)
    logits, confidence = block_outputs(net, vocab, target, batch, anchors, width, teacher_forced=True)
    with torch.no_grad():
        teacher = torch.softmax(vocab.logits(batch.hidden[final_layer]), -1)  # (B, n, N) over the draft vocabulary
    weights = position_weights(width, device)
    terms = torch.zeros(3, device=device)
    agreement = []
    for j in range(width):
        rows = anchors + 1 + j  # (B, A): the row whose head names slot j's token
        valid = rows < batch.rows[:, None]
        if not valid.any():
            agreement.append(0.0)
            continue
        p = _gather(teacher, rows)[valid]  # (M, N)
        q_logits = logits[j][valid]
        label = soft_survival(q_logits.detach(), p)
        terms = terms + weights[j] * torch.stack((
            F.cross_entropy(q_logits, p),
            (torch.softmax(q_logits, -1) - p).abs().sum(-1).mean(),
            F.binary_cross_entropy_with_logits(confidence[j][valid].float(), label)))
        agreement.append(float((q_logits.argmax(-1) == p.argmax(-1)).float().mean()))
    loss = sum(w * t for w, t in zip(WEIGHTS, terms)) / weights.sum()
    return loss, agreement



@torch.no_grad()
def confidence_data(net: BlockNet, vocab: ReducedVocab, target: torch.nn.Module, sequences: list[Sequence], regime: str,
                    batch_size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw confidence logits and prefix-survival labels (W, M) of every block with all W slots inside its
    sequence. greedy: the drafter's own greedy drafts (as the loop drafts them) against the target's
    greedy tokens, 0/1; sampled: the product of soft labels 1 - ½‖q - p‖₁ with the true tokens before
    each slot and p over the full vocabulary (its mass outside the draft vocabulary can never survive)."""
    width = net.config["block"]
    final = target.config.num_hidden_layers
    device = net.final_norm.device
    all_logits, all_labels = [], []
    for start in range(0, len(sequences), batch_size):
        batch = make_batch(sequences[start:start + batch_size]).to(device)
        b, n = batch.next_tokens.shape
        anchors = torch.arange(n, device=device).expand(b, -1)
        logits, confidence = block_outputs(net, vocab, target, batch, anchors, width, teacher_forced=regime == "sampled")
        rows = anchors[None] + 1 + torch.arange(width, device=device)[:, None, None]  # (W, B, n)
        full = target.lm_head(batch.hidden[final])  # (B, n, V)
        if regime == "greedy":
            choice = full.argmax(-1)  # (B, n)
            survived = torch.stack([vocab.ids[logits[j].argmax(-1)] == _gather(choice, rows[j]) for j in range(width)])
        else:
            p = torch.softmax(full.float(), -1)
            p_sub, p_out = p[..., vocab.ids], 1 - p[..., vocab.ids].sum(-1)
            survived = torch.stack([1 - 0.5 * ((torch.softmax(logits[j].float(), -1) - _gather(p_sub, rows[j])).abs().sum(-1)
                                               + _gather(p_out, rows[j])) for j in range(width)])
        labels = torch.cumprod(survived.double().clamp(0, 1), dim=0)  # clamp: rounding in 1 - ½‖q - p‖₁
        valid = batch.valid(width)  # (B, n): every slot's row exists
        all_logits.append(confidence[:, valid].double().cpu())
        all_labels.append(labels[:, valid].cpu())
    return torch.cat(all_logits, 1), torch.cat(all_labels, 1)


def calibrate(net: BlockNet, vocab: ReducedVocab, target: torch.nn.Module, heldout: list[Sequence], fit: bool = True) -> dict:
    """Fit the confidence temperatures (both regimes) on the held-out sequences of even index and write
    them into `net` (fit=False: keep the module's own), then report calibration on those of odd index
    (disjoint from the fit), with the reliability tables before and after scaling."""
    fitting, test = heldout[0::2], heldout[1::2]
    result: dict = {"fit_sequences": len(fitting), "test_sequences": len(test),
                    "rule": "temperatures fitted on held-out sequences of even index, reported on those of odd index"}
    for regime in REGIMES:
        row = REGIMES.index(regime)
        if fit:
            temperatures = sequential_temperatures(*confidence_data(net, vocab, target, fitting, regime))
            net.temperature[row] = torch.tensor(temperatures, dtype=net.temperature.dtype)
        result[regime] = report(*confidence_data(net, vocab, target, test, regime), net.temperature[row].tolist(),
                                binary=regime == "greedy")
    return result
