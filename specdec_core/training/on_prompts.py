"""Offline acceptance and the decode loop's, on the same prompts (`eval-draft --prompts FILE`).

A drafter trained on template prompts scores 0.4-0.46 first-draft acceptance offline on held-out
templates, and ~0.2 in the decode loop on the suite's prompts. Two stories explain such a gap and they
call for different work: the loop feeds the drafter something training never showed it (a wiring bug),
or the suite's text simply looks unlike the training data (a data problem). They are told apart by
measuring both numbers on the *same* tokens: decode each prompt once (greedy, so the answer is the
target's own), read the loop's per-position acceptance from that run, then score the drafter
teacher-forced on exactly that answer (`evaluate`, as on held-out data). If the two agree, the drafter
is wired as it was trained and the gap is the data's.

Also per category: the share of the answer's tokens inside the drafter's reduced vocabulary (a token
outside it can never be drafted, so it caps first-draft acceptance from above).
"""
from __future__ import annotations

from collections import defaultdict

import torch

from ..decode import GenerationConfig
from ..drafters import ReducedVocab
from ..generation import generate
from ..metrics import pooled_counts
from ..models import LoadedModel
from ..suite import PromptCase
from ..target import Target
from .batches import Sequence, decoded_sequence
from .kinds import layers_needed
from .train import evaluate


def answer(lm: LoadedModel, kind: str, case: PromptCase, k: int, max_new_tokens: int, loop: bool) -> list[dict]:
    """Each turn of `case` decoded greedily (by the decode loop with drafter `kind` if `loop`, else plain
    AR: the same tokens either way): prompt ids, answer ids and, for the loop, its per-position counts."""
    config = GenerationConfig(mode="spec" if loop else "ar", drafter=kind, k=k, max_new_tokens=max_new_tokens)
    messages: list[dict] = []
    turns = []
    for turn in case.turns:
        messages.append({"role": "user", "content": turn})
        prompt_ids = lm.encode(messages)
        result = generate(lm, prompt_ids, config)
        decode = [s for s in result.trace.steps if s.kind == "decode"]
        turns.append({"prompt_ids": prompt_ids, "output_ids": result.token_ids,
                      "offered": result.metrics["offered_per_pos_count"],
                      "accepted": result.metrics["accepted_per_pos_count"],
                      "steps": len(decode), "emitted": sum(len(s.emitted) for s in decode)})
        messages.append({"role": "assistant", "content": lm.decode(result.token_ids)})
    return turns


def loop_summary(turns: list[dict], k: int) -> dict:
    """The decode loop's survival s_i = steps whose draft i was accepted / steps that drafted, and its
    tau = tokens emitted per verify step."""
    offered = pooled_counts([t["offered"] for t in turns])
    accepted = pooled_counts([t["accepted"] for t in turns])
    drafting = offered[0] if offered else 0
    steps, emitted = sum(t["steps"] for t in turns), sum(t["emitted"] for t in turns)
    return {"steps": steps, "survival": [a / drafting if drafting else 0.0 for a in (accepted + [0] * k)[:k]],
            "tau": emitted / steps if steps else 0.0}


def coverage(vocab: ReducedVocab, turns: list[dict]) -> tuple[int, float]:
    """(answer tokens, the share of them inside the reduced vocabulary)."""
    ids = torch.tensor([t for turn in turns for t in turn["output_ids"]], dtype=torch.long, device=vocab.index.device)
    return len(ids), float((vocab.index[ids] >= 0).float().mean()) if len(ids) else 0.0


def compare_on_prompts(lm: LoadedModel, kind: str, module: torch.nn.Module, vocab: ReducedVocab,
                       cases: list[PromptCase], k: int = 4, max_new_tokens: int = 64, loop: bool = True,
                       progress=None) -> dict:
    """Per category and over all prompts: the vocabulary's coverage of the target's greedy answers,
    the drafter's teacher-forced acceptance on them (every anchor, and walked the way the loop walks)
    and, if `loop`, the decode loop's own acceptance on the same answers."""
    target = Target(lm)
    layers = layers_needed(kind, lm)
    turns: dict[str, list[dict]] = defaultdict(list)
    sequences: dict[str, list[Sequence]] = defaultdict(list)
    for case in cases:
        for turn in answer(lm, kind, case, k, max_new_tokens, loop):
            turns[case.category].append(turn)
            sequences[case.category].append(decoded_sequence(target, turn["prompt_ids"], turn["output_ids"], layers))
        if progress is not None:
            progress(1)
    result: dict = {"kind": kind, "k": k, "max_new_tokens": max_new_tokens, "categories": {}}
    groups = {**{c: c for c in turns}, "all": None}
    for name, category in groups.items():
        chosen = [t for c, ts in turns.items() if category in (None, c) for t in ts]
        seqs = [s for c, ss in sequences.items() if category in (None, c) for s in ss]
        tokens, covered = coverage(vocab, chosen)
        evaluated = evaluate(lm, kind, module, vocab, seqs, k)
        offline, kk = evaluated["all"], evaluated["k"]  # kk < k where the drafter cannot draft k (heads)
        row = {"answers": len(chosen), "answer_tokens": tokens, "vocab_coverage": covered,
               "offline": {"survival": offline["survival"], "walked_survival": offline["walked_survival"][kk],
                           "tau_walked": offline["tau_walked"][kk]}}
        if loop:
            row["loop"] = loop_summary(chosen, k)
        result["categories"][name] = row
    return result
