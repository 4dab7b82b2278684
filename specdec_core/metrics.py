"""Metrics computed from a trace. Names follow vLLM's spec-decode metrics where they exist.

alpha = draft_acceptance_rate = accepted / drafted.
tau = mean_acceptance_length = tokens emitted by decode steps / target decode forwards (prefill
excluded; the correction or bonus token counts, so plain AR has tau = 1). This equals vLLM's mean
acceptance length when every step drafts.
rollback_rate = share of drafting steps with at least one rejected draft (each such step crops the
KV cache); kv_entries_discarded = how many drafted tokens' cache entries were cropped in all.
(Not 1 - acceptance: one rollback may discard one entry or k of them.)
"""
from __future__ import annotations

import math
import resource
import statistics
import sys

from .trace import Trace
from .trees import sibling_ranks


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


def compute_metrics(trace: Trace) -> dict:
    steps = trace.steps
    decode = [s for s in steps if s.kind != "prefill"]
    prefill = [s for s in steps if s.kind == "prefill"]
    drafting = [s for s in decode if s.drafted]
    k = int(trace.config.get("k", 0)) if trace.mode == "spec" else 0
    num_draft_tokens = sum(len(s.drafted) for s in drafting)
    num_accepted = sum(s.accepted for s in drafting)
    # Per position i (1-based): of the steps that drafted at least i tokens, how many accepted >= i.
    offered = [sum(s.draft_depth >= i for s in drafting) for i in range(1, k + 1)]
    accepted_at = [sum(s.draft_depth >= i and s.accepted >= i for s in drafting) for i in range(1, k + 1)]
    per_pos = [a / o if o else 0.0 for a, o in zip(accepted_at, offered)]
    hist = [0] * (k + 1)
    for s in drafting:
        hist[s.accepted] += 1
    forwards = decode[-1].target_forwards if decode else 0
    decode_tokens = sum(len(s.emitted) for s in decode)
    overhead = sum(s.overhead_s for s in steps)
    wall = trace.timing.get("wall_s", 0.0) - overhead
    prefill_s = sum(s.verify_s for s in prefill)
    new_tokens = len(trace.output_ids)
    return {
        "new_tokens": new_tokens,
        "target_forwards": forwards,
        "num_drafts": len(drafting),
        "num_draft_tokens": num_draft_tokens,
        "num_accepted_tokens": num_accepted,
        "draft_acceptance_rate": num_accepted / num_draft_tokens if num_draft_tokens else 0.0,
        "mean_acceptance_length": decode_tokens / forwards if forwards else 0.0,
        "accepted_per_pos": per_pos,
        "offered_per_pos_count": offered,  # the counts behind accepted_per_pos, for pooling over runs
        "accepted_per_pos_count": accepted_at,
        "accepted_length_hist": hist,
        **tree_counts(drafting),
        "rollback_rate": sum(s.accepted < len(s.drafted) for s in drafting) / len(drafting) if drafting else 0.0,
        "kv_entries_discarded": num_draft_tokens - num_accepted,
        "ttft_s": trace.timing.get("ttft_s", prefill_s),
        "prefill_s": prefill_s,
        "decode_s": max(0.0, wall - prefill_s),
        "draft_s": sum(s.draft_s for s in steps),
        "verify_s": sum(s.verify_s for s in decode),
        "sim_overhead_s": overhead,
        "wall_s": wall,
        "tokens_per_s": new_tokens / wall if wall > 0 else 0.0,
        "peak_rss_bytes": trace.timing.get("peak_rss_bytes", 0),
        "kv_cache_bytes": trace.timing.get("kv_cache_bytes", 0),
        "drafter_bytes": trace.timing.get("drafter_bytes", 0),
        "stop_reason": trace.stop_reason,
    }


def tree_counts(steps: list) -> dict:
    """Trees only: acceptance per sibling rank. offered_per_rank_count[r]: how often verification reached
    a node (the root or an accepted node) that had a rank-r child; accepted_per_rank_count[r]: how often
    that child was the one accepted. Rank 0 is the drafter's first guess, what a chain would have drafted."""
    offered: list[int] = []
    accepted: list[int] = []
    for s in (s for s in steps if s.tree_parents):
        ranks = sibling_ranks(s.tree_parents)
        reached = [-1, *s.tree_path]
        for node, (parent, rank) in enumerate(zip(s.tree_parents, ranks)):
            if parent in reached:
                while len(offered) <= rank:
                    offered.append(0)
                    accepted.append(0)
                offered[rank] += 1
                accepted[rank] += node in s.tree_path
    if not offered:
        return {}
    return {"accepted_per_rank": [a / o for a, o in zip(accepted, offered)], "offered_per_rank_count": offered,
            "accepted_per_rank_count": accepted}


def geomean(values: list[float]) -> float:
    """The geometric mean of speed ratios (0.0 for none): a ratio and its inverse weigh the same."""
    return math.exp(statistics.mean(math.log(v) for v in values)) if values else 0.0


def pooled_counts(runs: list[list[int]]) -> list[int]:
    """Element-wise sum of several runs' per-position counts. A shorter list (a run at a smaller k)
    counts nothing beyond its end."""
    n = max((len(r) for r in runs), default=0)
    return [sum(r[i] for r in runs if i < len(r)) for i in range(n)]


def pooled_per_position(offered: list[list[int]], accepted: list[list[int]]) -> list[float | None]:
    """accepted_per_pos pooled over runs (their `offered_per_pos_count` / `accepted_per_pos_count`):
    the counts are summed first, then divided, so a run of three drafting steps weighs three steps, not
    one ratio. None at a position no run offered."""
    return [a / o if o else None for a, o in zip(pooled_counts(accepted), pooled_counts(offered))]


def conditional_acceptance(survival: list[float | None]) -> list[float | None]:
    """a_i = s_i / s_(i-1) (s_0 = 1): of the steps (or anchors) that kept drafts 1..i-1, the share that
    kept draft i too. None where s_i is unknown or s_(i-1) = 0 (nothing got that far)."""
    out, before = [], 1.0
    for s in survival:
        out.append(s / before if s is not None and before else None)
        before = s
    return out


def matching_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token sequences."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def positional_matches(a: list[int], b: list[int]) -> int:
    """How many positions hold the same token in both sequences (NAR vs AR)."""
    return sum(x == y for x, y in zip(a, b))
