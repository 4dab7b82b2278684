"""The recipe book beside its production peer: the lab's `suffix` and arctic-inference's, step by step.

    .venv/bin/python scripts/suffix_peer.py --out benchmarks/suffix-peer-cpu.json     # needs `make arctic`

Both proposers see the same decode. One of them drives it (its drafts are verified); at every step the
other is asked too, on the same context and with the same history behind it, so "identical" means the
same drafted tokens (and, for trees, the same parents) on the same input. Each decode runs the sessions
of `--prompts` in order with `--history run` semantics. With matched settings (k = max speculated
tokens, depth, factor, offset, min_token_prob, chain or tree, and the history's semantics: the lab's
`suffix_in_flight`, arctic's global tree growing with every active answer) every step whose proposals
differ is given one cause:

- `history_semantics` (only in the pass with the lab's default, where an answer joins the history when
  it finishes): the lab, given arctic's semantics, proposes what arctic proposes;
- `equal_scores`: both proposals score the same (the sum of their path probabilities): equal counts
  ordered differently deep in arctic's compressed nodes, or equal path probabilities popped in another
  order by its heap (see tests/test_suffix.py's equivalence test);
- `other`: anything else.

Proposal time is wall time per call of each proposer (the lab in numpy, arctic in C++), beside the mean
target forward of the same decodes. τ is each driver's own: tokens per target forward over all turns.
Greedy, so both drivers emit the target's tokens and only the step boundaries differ.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from specdec_core.decode import GenerationConfig, new_state, run  # noqa: E402
from specdec_core.drafters.suffix import SuffixDrafter, SuffixHistory, SuffixOptions  # noqa: E402
from specdec_core.drafters.suffix_arctic import ArcticHistory, ArcticSuffixDrafter  # noqa: E402
from specdec_core.drafting import Draft, Drafter  # noqa: E402
from specdec_core.models import load_model  # noqa: E402
from specdec_core.provenance import cpu_name, git_commit  # noqa: E402
from specdec_core.suite import load_prompts  # noqa: E402


def with_arctic_semantics(lab: SuffixDrafter, context: list[int], prompt_len: int, k: int) -> list[int]:
    """What the lab proposes when the answer so far sits in its history too (arctic's global tree)."""
    answers = SuffixHistory.of([*lab.history.answers(), context[prompt_len:]])
    own = lab.own.propose(context, k, lab.options, lab.tree, "request")
    shared = answers.propose(context, k, lab.options, lab.tree, "history")
    if shared is not None and (own is None or shared.score > own.score):  # a tie stays with the request's own
        own = shared
    return [] if own is None else own.tokens


class Lockstep(Drafter):
    """Proposes with `driver`, asks `other` on the same context, and records the comparison."""

    name = "suffix"

    def __init__(self, driver: Drafter, other: Drafter, lab: SuffixDrafter, tree: bool, log: dict) -> None:
        self.driver, self.other, self.lab, self.tree, self.log = driver, other, lab, tree, log
        self.prompt_len = 0

    def reset(self, prompt_ids: list[int]) -> None:
        self.driver.reset(prompt_ids)
        self.other.reset(prompt_ids)
        self.prompt_len = len(prompt_ids)

    def propose(self, context, k, params, generator) -> Draft:
        drafts = {}
        for role, drafter in (("driver", self.driver), ("other", self.other)):
            start = time.perf_counter()
            drafts[role] = drafter.propose(context, k, params, generator)
            seconds = time.perf_counter() - start
            impl = "arctic" if isinstance(drafter, ArcticSuffixDrafter) else "lab"
            self.log["propose_s"][impl].append(seconds)
        lab, arctic = (drafts["driver"], drafts["other"]) if self.driver is self.lab else (drafts["other"], drafts["driver"])
        arctic_score = (self.other if self.driver is self.lab else self.driver).score
        lab_score = self.lab.last.score if self.lab.last is not None else 0.0
        if lab.tokens == arctic.tokens and (not self.tree or lab.parents == arctic.parents):
            cause = "identical"
        elif (not self.lab.options.suffix_in_flight and
              with_arctic_semantics(self.lab, context, self.prompt_len, k) == arctic.tokens):
            cause = "history_semantics"
        elif abs(lab_score - arctic_score) < 1e-6:
            cause = "equal_scores"
        else:
            cause = "other"
        self.log["steps"][cause] += 1
        return drafts["driver"]

    def observe(self, accepted, emitted, hidden, verified=None) -> None:
        self.driver.observe(accepted, emitted, hidden, verified)
        self.other.observe(accepted, emitted, hidden, verified)

    def finish(self) -> None:
        self.driver.finish()
        self.other.finish()


def decode_sessions(lm, cases, config: GenerationConfig, driver_impl: str) -> dict:
    """One pass over the sessions, `driver_impl` drafting, the other asked at every step."""
    options = SuffixOptions(**config.drafter_options)
    tree = config.tree != "chain"
    lab_history, arctic_history = SuffixHistory(options.suffix_history), ArcticHistory(options)
    log = {"steps": Counter(), "propose_s": {"lab": [], "arctic": []}}
    tokens = forwards = 0
    wall = 0.0
    for case in cases:
        messages = []
        for turn in case.turns:
            messages.append({"role": "user", "content": turn})
            prompt_ids = lm.encode(messages)
            lab = SuffixDrafter(options, lab_history, tree)
            arctic = ArcticSuffixDrafter(options, arctic_history, tree)
            driver, other = (lab, arctic) if driver_impl == "lab" else (arctic, lab)
            probe = Lockstep(driver, other, lab, tree, log)
            result = run(lm, prompt_ids, new_state(lm, prompt_ids, config, probe), config)
            m = result.metrics
            tokens += round(m["mean_acceptance_length"] * m["target_forwards"])
            forwards += m["target_forwards"]
            wall += m["wall_s"]
            messages.append({"role": "assistant", "content": lm.decode(result.token_ids)})
    steps = sum(log["steps"].values())
    return {"driver": driver_impl, "tau": tokens / forwards, "target_forwards": forwards, "steps": steps,
            "identical": log["steps"]["identical"] / steps, "causes": dict(log["steps"]),
            "propose_us": {impl: {"median": 1e6 * statistics.median(v), "mean": 1e6 * statistics.mean(v)}
                           for impl, v in log["propose_s"].items()},
            "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", default="specdec_core/prompts/history.jsonl")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--limit", type=int, default=0, help="only the first N sessions")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    lm = load_model("smollm2-135m")
    cases = load_prompts(Path(args.prompts))[: args.limit or None]
    options = {f: getattr(SuffixOptions, f) for f in ("suffix_depth", "suffix_factor", "suffix_offset", "suffix_min_prob")}
    passes = []
    # matched semantics, each proposer driving in turn (its τ); then the lab's default semantics, lab driving
    for tree, in_flight, driver in (("chain", True, "lab"), ("chain", True, "arctic"), ("dynamic", True, "lab"),
                                    ("dynamic", True, "arctic"), ("chain", False, "lab")):
        config = GenerationConfig(mode="spec", drafter="suffix", k=args.k, tree=tree, max_new_tokens=args.max_new_tokens,
                                  temperature=0.0, seed=0, drafter_options={**options, "suffix_in_flight": in_flight})
        one = decode_sessions(lm, cases, config, driver)
        passes.append({"tree": tree, "lab_in_flight": in_flight, **one})
        print(f"{tree:8s} in-flight {in_flight!s:5s} driver {driver:6s} tau {one['tau']:.3f}  identical {one['identical']:.1%}  "
              f"causes {one['causes']}  propose us lab {one['propose_us']['lab']['median']:.0f} "
              f"arctic {one['propose_us']['arctic']['median']:.0f}  ({one['wall_s'] / one['target_forwards'] * 1e3:.1f} ms "
              f"per target forward)", flush=True)
    out = {"prompts": args.prompts, "k": args.k, "max_new_tokens": args.max_new_tokens, "options": options,
           "cpu": cpu_name(), "threads": torch.get_num_threads(), "commit": git_commit(), "passes": passes}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
