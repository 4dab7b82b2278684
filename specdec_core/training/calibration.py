"""Calibrating a drafter's confidence head: sequential temperature scaling, reliability, ECE and AUC.

A scheduler multiplies confidences into prefix survival, S_j = c_1 ... c_j, and decides from S_j how
many drafts to verify (serving/schedulers.py); so S_j has to mean what it says: of the blocks where
S_j ≈ 0.6, about 60 % should keep drafts 1..j. Temperature scaling divides position j's confidence
logit by T_j. Fitted one position at a time, as the paper does it: T_1 on the prefix label of position
1, frozen; then T_2 so that c_1·c_2 fits the prefix label of position 2, and so on. Each T_j is one
number chosen on one split of the held-out data; ECE, the reliability table and AUC are reported on
the other split, never on the data the temperatures were fitted on.

Regimes: `greedy` labels are 0/1 (did the drafter's own greedy drafts 1..j all equal the target's
greedy tokens?); `sampled` labels are the product of soft survival labels 1 - ½‖q - p‖₁, the chance
that sampling at temperature 1 keeps drafts 1..j given the true tokens before them.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

BINS = 15


def expected_calibration_error(predicted: torch.Tensor, outcome: torch.Tensor, bins: int = BINS) -> tuple[float, list[dict]]:
    """ECE over `bins` equal-width bins of the prediction: Σ_b (n_b / n) |mean outcome_b - mean prediction_b|,
    and the reliability table (one row per non-empty bin). Outcomes may be soft (expected values)."""
    predicted, outcome = predicted.double().flatten(), outcome.double().flatten()
    index = (predicted * bins).long().clamp(0, bins - 1)  # a prediction of exactly 1 joins the last bin
    ece, table = 0.0, []
    for b in range(bins):
        chosen = index == b
        count = int(chosen.sum())
        if not count:
            continue
        mean_p, mean_o = float(predicted[chosen].mean()), float(outcome[chosen].mean())
        ece += count / len(predicted) * abs(mean_o - mean_p)
        table.append({"low": b / bins, "high": (b + 1) / bins, "count": count, "predicted": mean_p, "observed": mean_o})
    return ece, table


def auc(score: torch.Tensor, label: torch.Tensor) -> float | None:
    """Area under the ROC curve of `score` for binary `label` (the chance that a random positive scores
    above a random negative, ties counting half); None when one class is missing."""
    score, label = score.double().flatten(), label.flatten() > 0.5
    positives, negatives = int(label.sum()), int((~label).sum())
    if not positives or not negatives:
        return None
    _, inverse, counts = torch.unique(score, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    ranks = (ends - (counts.double() - 1) / 2)[inverse]  # tied scores share their average rank
    return float((ranks[label].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def fit_temperature(logits: torch.Tensor, prior: torch.Tensor, label: torch.Tensor) -> float:
    """The T > 0 minimising the binary cross-entropy of prior · sigmoid(logits / T) against `label`
    (prior: the calibrated survival of the positions before, already frozen). A grid over log T, then
    a finer grid around the best: one dimension, no optimiser state, the same answer every run."""
    logits, prior, label = logits.double(), prior.double(), label.double()

    def loss(log_t: torch.Tensor) -> torch.Tensor:  # (G,) -> (G,)
        s = (prior[None] * torch.sigmoid(logits[None] / log_t.exp()[:, None])).clamp(1e-9, 1 - 1e-9)
        return F.binary_cross_entropy(s, label[None].expand_as(s), reduction="none").mean(-1)

    grid = torch.linspace(-3, 3, 121, dtype=torch.float64)  # T from 0.05 to 20
    best = grid[int(torch.argmin(loss(grid)))]
    fine = torch.linspace(float(best) - 0.05, float(best) + 0.05, 101, dtype=torch.float64)
    return float(fine[int(torch.argmin(loss(fine)))].exp())


def sequential_temperatures(logits: torch.Tensor, prefix_labels: torch.Tensor) -> list[float]:
    """Raw confidence logits (W, M) and prefix-survival labels (W, M) of M blocks -> T_1 .. T_W, fitted
    position by position on the cumulative product (each earlier T frozen before the next is fitted)."""
    temperatures: list[float] = []
    prior = torch.ones(logits.shape[1], dtype=torch.float64)
    for j in range(logits.shape[0]):
        t = fit_temperature(logits[j], prior, prefix_labels[j])
        temperatures.append(t)
        prior = prior * torch.sigmoid(logits[j].double() / t)
    return temperatures


def prefix_survival(logits: torch.Tensor, temperatures: list[float] | torch.Tensor) -> torch.Tensor:
    """(W, M) raw logits -> S_j = Π_{i<=j} sigmoid(z_i / T_i), (W, M)."""
    t = torch.as_tensor(temperatures, dtype=torch.float64)[:, None]
    return torch.cumprod(torch.sigmoid(logits.double() / t), dim=0)


def report(logits: torch.Tensor, prefix_labels: torch.Tensor, temperatures: list[float], binary: bool) -> dict:
    """Per position j: ECE of S_j before (T = 1) and after scaling, the reliability tables, the base rate
    and (binary labels) the AUC of S_j for "drafts 1..j all survive"."""
    before, after = prefix_survival(logits, [1.0] * logits.shape[0]), prefix_survival(logits, temperatures)
    positions = []
    for j in range(logits.shape[0]):
        ece_before, table_before = expected_calibration_error(before[j], prefix_labels[j])
        ece_after, table_after = expected_calibration_error(after[j], prefix_labels[j])
        positions.append({"position": j + 1, "temperature": temperatures[j], "survival": float(prefix_labels[j].double().mean()),
                          "ece_before": ece_before, "ece_after": ece_after,
                          "auc": auc(after[j], prefix_labels[j]) if binary else None,
                          "reliability_before": table_before, "reliability_after": table_after})
    return {"blocks": int(logits.shape[1]), "bins": BINS, "positions": positions}
