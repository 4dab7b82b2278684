"""`bench`: time decoding modes and peer baselines on a prompt suite, interleaved per prompt.

Modes run A B C A B C ... for each prompt, so slow drifts of a noisy machine hit every mode alike;
speedups are ratios measured in the same run. Peers: `hf:ar` (transformers greedy/sampling
`generate`), `hf:pld` (its prompt lookup, same k), `hf:assisted` (its assisted generation with our
trained `draft` LM as the assistant, like for like: same k, constant schedule, confidence threshold 0,
the same module and reduced-vocabulary head wrapped to full-vocabulary logits) and
`hf:assisted-default` (the same assistant under transformers' default assisted-generation settings),
and `llamacpp:ar` (llama.cpp on the same GGUF, `bench/llamacpp.py`; installed by `make llamacpp`).
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..costmodel import measured_raw_ratios, measured_verify_ratios
from ..errors import SpecDecError, ensure_writable
from ..decode import GenerationConfig
from ..drafters import DraftNet, ReducedVocab, SuffixHistory, drafter_options, new_history, uses_history
from ..drafters.draft import causal_lm
from ..drafters.weights import drafter_module
from ..generation import check, generate
from ..guard import ratio_flags, speedup_flags
from ..metrics import geomean, matching_prefix, peak_rss_bytes, positional_matches, pooled_counts, pooled_per_position
from ..kernels import NAMED, KernelTable, kernel_table, using
from ..models import LoadedModel, load_model
from ..quant import with_weights
from ..provenance import cpu_name, engine_version, git_commit
from ..suite import PromptCase, load_prompts, only_categories
from ..target import Target, synchronize
from . import llamacpp
from .modes import Mode, mode_config, parse_modes

NEAR_TIE = 1e-4  # a greedy divergence at a top-2 logit margin below this is float noise, not a bug


class HFRunner:
    """transformers' own generate() as a peer baseline, on the same weights and prompts."""

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self._assistant = None

    def model(self, kernels: str | None) -> torch.nn.Module:
        """The model object a peer runs: stock (its own object, nn.Linear's kernels, as a user of
        transformers runs it) unless `kernels` is "engine" (the engine's object, its linears routed)."""
        if kernels == "engine" or self.lm.device.type != "cpu":
            return self.lm.model
        return load_model(self.lm.name, self.lm.device.type, str(self.lm.dtype).replace("torch.", ""), kernels="torch").model

    def assistant(self) -> torch.nn.Module:
        """Our trained `draft` LM as a transformers model with full-vocabulary logits (built once)."""
        if self._assistant is None:
            net = drafter_module(self.lm, "draft", DraftNet)
            self._assistant = causal_lm(net, self.lm.model, ReducedVocab(net.vocab_ids, self.lm.model.lm_head.weight),
                                        full_vocab=True)
        return self._assistant

    def assistant_label(self) -> str:
        c = drafter_module(self.lm, "draft", DraftNet).config
        return f"draft: {c['layers']}-layer distilled LM, MLP {c['intermediate']}, reduced vocabulary N = {c['vocab']}"

    def generate(self, mode: str, prompt_ids: list[int], config: GenerationConfig,
                 kernels: str | None = None) -> tuple[list[int], float]:
        model = self.model(kernels)
        kwargs = dict(max_new_tokens=config.max_new_tokens, do_sample=not config.sampling.greedy,
                      pad_token_id=self.lm.tokenizer.eos_token_id, eos_token_id=sorted(self.lm.eos_token_ids))
        if not config.sampling.greedy:
            kwargs.update(temperature=config.temperature, top_k=config.top_k or None, top_p=config.top_p)
            torch.manual_seed(config.seed or 0)
        if config.repetition_penalty != 1.0:
            kwargs["repetition_penalty"] = config.repetition_penalty
        if mode == "hf:pld":
            kwargs["prompt_lookup_num_tokens"] = config.k
        elif mode == "hf:assisted":  # like for like with spec:draft
            kwargs.update(assistant_model=self.assistant(), num_assistant_tokens=config.k,
                          num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0)
        elif mode == "hf:assisted-default":  # transformers' own schedule and confidence threshold
            kwargs.update(assistant_model=self.assistant())
        ids = torch.tensor([prompt_ids], device=self.lm.device)
        synchronize(self.lm.device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **kwargs)
        synchronize(self.lm.device)
        return out[0, len(prompt_ids):].tolist(), time.perf_counter() - start


class Peers:
    """The peer engines a run compares with, each built on first use."""

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.hf = HFRunner(lm)
        self._llamacpp: llamacpp.LlamaCppRunner | None = None

    def generate(self, mode: Mode, prompt_ids: list[int], config: GenerationConfig) -> tuple[list[int], float]:
        if mode.base in llamacpp.MODES:
            if self._llamacpp is None:  # only a run that asks for it checks the model has a GGUF
                self._llamacpp = llamacpp.LlamaCppRunner(self.lm, torch.get_num_threads())
            return self._llamacpp.generate(prompt_ids, config)
        return self.hf.generate(mode.base, prompt_ids, config, mode.kernels)


def run_case(lm: LoadedModel, peers: Peers, mode: Mode, case: PromptCase, config: GenerationConfig,
             history: SuffixHistory | None = None) -> dict:
    """One mode on one prompt (all turns). wall_s covers prefill + decode, not tokenisation. `history`: the
    suffix drafter's shared history (each turn recalls it and joins it when done; None: a fresh one per turn)."""
    messages: list[dict] = []
    token_ids: list[int] = []
    turn_tokens: list[int] = []  # new tokens per turn: a resumed `--history run` rebuilds its history from them
    turn_tau: list[float] = []  # tokens per target forward, per turn (does a session's history lift later turns?)
    wall = ttft = 0.0
    forwards = drafted = accepted = decode_tokens = 0
    offered_at: list[int] = []  # per draft position, pooled over turns (see metrics.accepted_per_pos)
    accepted_at: list[int] = []
    lengths: list[int] = []  # accepted-length histogram over drafting steps
    rank_offered: list[int] = []  # trees: per sibling rank (metrics.tree_counts), pooled over turns
    rank_accepted: list[int] = []
    kv_bytes = drafter_bytes = 0
    on_gpu = lm.device.type == "cuda"
    if on_gpu:
        torch.cuda.reset_peak_memory_stats(lm.device)
    for turn_index, turn in enumerate(case.turns):
        messages.append({"role": "user", "content": turn})
        prompt_ids = lm.encode(messages)
        if mode.peer:
            ids, seconds = peers.generate(mode, prompt_ids, config)
            wall += seconds
        else:
            with using(lm.model, table_for(lm, mode.kernels)):
                result = generate(with_weights(lm, mode.weights), prompt_ids, mode_config(config, mode), history=history)
            ids, m = result.token_ids, result.metrics
            wall += m["wall_s"]
            turn_tau.append(m["mean_acceptance_length"])
            forwards += m["target_forwards"]
            drafted += m["num_draft_tokens"]
            accepted += m["num_accepted_tokens"]
            decode_tokens += round(m["mean_acceptance_length"] * m["target_forwards"])
            if turn_index == 0:
                ttft = m["ttft_s"]
            kv_bytes, drafter_bytes = max(kv_bytes, m["kv_cache_bytes"]), max(drafter_bytes, m["drafter_bytes"])
            offered_at = pooled_counts([offered_at, m["offered_per_pos_count"]])
            accepted_at = pooled_counts([accepted_at, m["accepted_per_pos_count"]])
            lengths = pooled_counts([lengths, m["accepted_length_hist"]])
            rank_offered = pooled_counts([rank_offered, m.get("offered_per_rank_count", [])])
            rank_accepted = pooled_counts([rank_accepted, m.get("accepted_per_rank_count", [])])
        token_ids += ids
        turn_tokens.append(len(ids))
        messages.append({"role": "assistant", "content": lm.decode(ids)})
    hf_mode = mode.peer
    # "k" is the run's (the sweep point ar ran at, which the ratios pair by); "draft_k" what this mode drafted.
    return {"prompt_id": case.id, "category": case.category, "mode": mode.label, "k": config.k,
            "draft_k": mode_config(config, mode).k if mode.base == "spec" else None,
            "temperature": config.temperature, "token_ids": token_ids, "text": lm.decode(token_ids),
            "new_tokens": len(token_ids), "turn_tokens": turn_tokens, "wall_s": wall, "ttft_s": None if hf_mode else ttft,
            "target_forwards": None if hf_mode else forwards,
            "mean_accepted_length": None if hf_mode else (decode_tokens / forwards if forwards else 0.0),
            "turn_tau": None if hf_mode else turn_tau,
            "acceptance_rate": None if hf_mode or not drafted else accepted / drafted,
            "offered_per_pos": None if hf_mode else offered_at, "accepted_per_pos": None if hf_mode else accepted_at,
            "accepted_length_hist": None if hf_mode else lengths,
            "offered_per_rank": rank_offered or None, "accepted_per_rank": rank_accepted or None,
            "kv_cache_bytes": None if hf_mode else kv_bytes, "drafter_bytes": None if hf_mode else drafter_bytes,
            "peak_rss_bytes": peak_rss_bytes(),
            "peak_gpu_bytes": torch.cuda.max_memory_allocated(lm.device) if on_gpu else None,
            "assistant": peers.hf.assistant_label() if mode.base.startswith("hf:assisted") else None}


def table_for(lm: LoadedModel, kernels: str | None) -> KernelTable | None:
    """The named kernel table a mode asks for, or None: the model's own (this run's, measured or pinned)."""
    return NAMED[kernels] if kernels in NAMED and kernel_table(lm.model) is not None else None


def near_tie_margin(lm: LoadedModel, case: PromptCase, reference: list[int], position: int) -> float | None:
    """Top-2 logit margin of the AR reference at a divergence (single-turn prompts only)."""
    if len(case.turns) != 1:
        return None
    ids = lm.encode(case.turns[0]) + reference[:position]
    target = Target(lm)
    logits = target.forward(target.new_cache(), ids, last_only=True).logits[-1]
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def label_for(mode: str, k: int, t: float, sweep: bool) -> str:
    return f"{mode}@k={k},t={t:g}" if sweep else mode


def summarise(results: list[dict], sweep: bool) -> tuple[dict, dict]:
    """speedup_vs_ar = geometric mean over prompts of ar_wall / mode_wall at the same k and temperature
    (walls are medians over repeats), each wall taken per generated token: greedy outputs are identical,
    so this is exactly the wall ratio; sampled outputs may differ in length, and a per-token ratio keeps
    an early EOS from counting as a speedup. tau and alpha pooled; identity counted for greedy runs."""
    walls: dict[tuple, list[float]] = defaultdict(list)
    for r in results:
        walls[(r["mode"], r["k"], r["temperature"], r["prompt_id"])].append(r["wall_s"] / max(1, r["new_tokens"]))
    # Each sweep point is compared with the ar runs interleaved with it (same k, temperature and prompt).
    ar_wall = {(k, t, p): statistics.median(w) for (m, k, t, p), w in walls.items() if m == "ar"}
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in results:
        groups[(r["mode"], r["k"], r["temperature"])].append(r)
    summary, by_category = {}, defaultdict(dict)
    for (mode, k, t), rows in groups.items():
        label = label_for(mode, k, t, sweep)
        per_prompt = {}
        for r in rows:
            per_prompt[r["prompt_id"]] = (r["category"], ar_wall[(k, t, r["prompt_id"])] / statistics.median(walls[(mode, k, t, r["prompt_id"])]))
        ratios = [v for _, v in per_prompt.values()]
        taus = [r["mean_accepted_length"] for r in rows if r["mean_accepted_length"] is not None]
        rates = [r["acceptance_rate"] for r in rows if r["acceptance_rate"] is not None]
        greedy = [r for r in rows if r["temperature"] == 0]
        ours = [r for r in rows if r.get("offered_per_pos") is not None]
        per_pos = pooled_per_position([r["offered_per_pos"] for r in ours], [r["accepted_per_pos"] for r in ours])
        ttfts = [r["ttft_s"] for r in rows if r.get("ttft_s") is not None]
        summary[label] = {
            "speedup_vs_ar": geomean(ratios),
            # the guard: a chain (or a tree of depth k) above k + 1, overall or on a prompt's median (guard.py)
            "flags": speedup_flags(label, rows[0].get("draft_k"), {p: v for p, (_, v) in per_prompt.items()}, geomean(ratios)),
            "draft_k": rows[0].get("draft_k"),
            "mean_accepted_length": statistics.mean(taus) if taus else None,
            "acceptance_rate": statistics.mean(rates) if rates else None,
            "identical_to_ar": f"{sum(bool(r.get('identical_to_ar')) for r in greedy)}/{len(greedy)}" if greedy else None,
            "agreement_with_ar": statistics.mean(r["agreement_with_ar"] for r in greedy) if greedy else None,
            "tokens_per_s": sum(r["new_tokens"] for r in rows) / sum(r["wall_s"] for r in rows),
            "ttft_s": statistics.median(ttfts) if ttfts else None,
            # position i: P(the first i drafts were all accepted | the step drafted at least i), as in
            # metrics.accepted_per_pos; i.i.d. theory: alpha^i (theory.prob_all_accepted). Pooled over prompts
            # (metrics.pooled_per_position, as the app's survival plot pools its runs).
            "acceptance_per_pos": per_pos if any(a is not None for a in per_pos) else None,
            "accepted_length_hist": pooled_counts([r["accepted_length_hist"] for r in ours]) or None,
            "kv_cache_bytes": max((r["kv_cache_bytes"] for r in ours), default=None),
            "drafter_bytes": max((r["drafter_bytes"] for r in ours), default=None),
            "peak_gpu_bytes": max((r["peak_gpu_bytes"] for r in rows if r.get("peak_gpu_bytes")), default=None),
            "assistant": rows[0].get("assistant"),
            "tau_by_turn": _tau_by_turn(ours),
        }
        for category in sorted({c for c, _ in per_prompt.values()}):
            cat_rows = [r for r in rows if r["category"] == category]
            cat_taus = [r["mean_accepted_length"] for r in cat_rows if r["mean_accepted_length"] is not None]
            by_category[category][label] = {
                "speedup_vs_ar": geomean([v for c, v in per_prompt.values() if c == category]),
                "mean_accepted_length": statistics.mean(cat_taus) if cat_taus else None}
    return summary, dict(by_category)


def _tau_by_turn(rows: list[dict]) -> list[float] | None:
    """Mean τ of each turn index over the prompts that reach it (multi-turn sessions: does what a session
    said before lift its later turns?); None when no prompt has a second turn."""
    turns = [r["turn_tau"] for r in rows if r.get("turn_tau")]
    depth = max(map(len, turns), default=0)
    if depth < 2:
        return None
    return [statistics.mean(t[i] for t in turns if len(t) > i) for i in range(depth)]


def environment(lm: LoadedModel) -> dict:
    import transformers
    table, raw = kernel_table(lm.model), measured_raw_ratios(lm)
    return {"model": lm.name, "commit": git_commit(), "device": str(lm.device), "dtype": str(lm.dtype).replace("torch.", ""),
            "cpu": cpu_name(), "threads": torch.get_num_threads(), "python": sys.version.split()[0],
            "torch": torch.__version__, "transformers": transformers.__version__,
            "llama_cpp_python": llamacpp.version(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            # which kernel each linear calls for n rows (kernels/), the first suspect of any flag below
            "kernel_table": table.summary() if table else None,
            # d drafts -> verify cost / plain step, as measured at start-up by the cost-aware drafters (made
            # non-decreasing: what they plan with) and the raw medians of the same forwards (what the guard reads)
            "verify_ratios": measured_verify_ratios(lm), "verify_ratios_raw": raw,
            "flags": ratio_flags(raw or {}, table.label() if table else None)}


class Checkpoint:
    """A long bench run's progress, saved after every prompt beside its result file (OUT.partial.json), so
    `bench --resume` continues it in a later session. Only the same run continues: the same settings, the
    same engine code (`provenance.engine_version`: a course edit committed meanwhile changes nothing it
    measures) and the same processor — a ratio between runs on two machines would mean nothing."""

    def __init__(self, out, config: dict, resume: bool) -> None:
        self.path = out.with_name(out.name + ".partial.json")
        self.config = config
        self.origin = {"cpu": cpu_name(), "engine": engine_version(), "threads": torch.get_num_threads()}
        self.results: list[dict] = []
        self.done: list[str] = []
        if not resume:
            return
        if not self.path.is_file():
            raise SpecDecError(f"nothing to resume: {self.path} does not exist (run without --resume to start)")
        saved = json.loads(self.path.read_text())
        for what, mine, theirs in (("processor", self.origin, saved["origin"]), ("settings", config, saved["config"])):
            if mine != theirs:
                diff = ", ".join(f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} here" for k in mine if mine.get(k) != theirs.get(k))
                raise SpecDecError(f"cannot resume {self.path}: another {what if what == 'settings' else 'machine or engine'} ({diff})")
        self.results, self.done = saved["results"], saved["done"]

    def save(self, case_id: str) -> None:
        self.done.append(case_id)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"origin": self.origin, "config": self.config, "done": self.done, "results": self.results},
                                  ensure_ascii=False))
        tmp.replace(self.path)

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)


HISTORIES = ("fresh", "run")


class Histories:
    """The suffix drafter's history over a bench run. `fresh`: none kept (every prompt's drafter starts
    empty: first-pass figures). `run`: one history per repeat, sweep point and mode, fed every earlier
    prompt's output in the run's order, so each repeat sees the same history at the same prompt and the
    repeats stay comparable; the warm-up never feeds it. A resumed run rebuilds it from the saved rows."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.kept: dict[tuple, SuffixHistory] = {}

    def get(self, mode: Mode, config: GenerationConfig, repeat: int) -> SuffixHistory | None:
        config = mode_config(config, mode)
        if self.kind == "fresh" or not uses_history(config):
            return None
        key = (repeat, config.k, config.temperature, mode.label)
        if key not in self.kept:
            self.kept[key] = new_history(drafter_options("suffix", config.drafter_options))
        return self.kept[key]

    def replay(self, rows: list[dict], modes: list[Mode], point) -> None:
        """Feed a resumed run's saved rows (in their order) to the histories they fed when first run."""
        by_label = {m.label: m for m in modes}
        for row in rows:
            history = self.get(by_label[row["mode"]], point(row["k"], row["temperature"]), row["repeat"])
            start = 0
            for n in row["turn_tokens"] if history is not None else ():
                history.add(row["token_ids"][start:start + n])
                start += n


@dataclass(frozen=True)
class BenchRun:
    """What one local bench run measures: which prompts, which modes, the sweep over k and temperature, and the
    run's decoding settings (`config`; each sweep point sets its k and temperature)."""

    prompts: Path
    modes: str  # comma list of modes (parse_mode)
    out: Path
    config: GenerationConfig
    ks: list[int]  # at least one each
    temperatures: list[float]
    categories: str | None = None
    limit: int = 0  # the first N prompts (0: all)
    repeats: int = 1
    history: str = "fresh"  # the suffix history: "fresh" (empty for every prompt) or "run" (see Histories)
    resume: bool = False
    model: str = "smollm2-135m"
    device: str = "auto"
    dtype: str = "auto"
    kernels: str = "auto"

    def point(self, mode: str, k: int, temperature: float) -> GenerationConfig:
        return replace(self.config, mode=mode, k=k, temperature=temperature)

    @property
    def recorded(self) -> dict:
        """The settings a result file (and a resumed run's checkpoint) records."""
        return {"prompts": str(self.prompts), "categories": self.categories, "modes": [m.label for m in parse_modes(self.modes)],
                "k": self.ks, "temperature": self.temperatures, "repeats": self.repeats,
                "max_new_tokens": self.config.max_new_tokens, "history": self.history}


def checked(run: BenchRun) -> tuple[list[PromptCase], list[Mode], LoadedModel, list[tuple[int, float]]]:
    """The prompts, the modes, the loaded model and the sweep points, every setting checked before the first
    long run."""
    cases = only_categories(load_prompts(run.prompts), run.categories, run.prompts)
    if run.limit:
        cases = cases[: run.limit]
    modes = parse_modes(run.modes)
    if any(m.base in llamacpp.MODES for m in modes):
        llamacpp.require()
        if any(t > 0 for t in run.temperatures):
            raise SpecDecError("llamacpp:ar is compared greedy only (its samplers are not ours): use --temperature 0")
    if run.repeats < 1:
        raise SpecDecError(f"repeats must be >= 1 (got {run.repeats})")
    if run.history not in HISTORIES:
        raise SpecDecError(f"history must be one of {', '.join(HISTORIES)} (got {run.history!r})")
    ensure_writable(run.out)
    lm = load_model(run.model, run.device, run.dtype, run.kernels)
    sweeps = [(k, t) for k in run.ks for t in run.temperatures]
    own_k = [m.label for m in modes if m.k is not None]
    if own_k and len(run.ks) > 1:
        raise SpecDecError(f"{own_k[0]} drafts its own k: run it without a sweep over --k (got {len(run.ks)} values)")
    for k, t in sweeps:
        check(run.point("spec", k, t), lm, 1)
        for mode in modes:
            if mode.base == "spec":
                check(mode_config(run.point("spec", k, t), mode), lm, 1)
    return cases, modes, lm, sweeps


def compare_with_ar(row: dict, reference: list[int], lm: LoadedModel, case: PromptCase) -> None:
    """A greedy row against fp32 ar's tokens: identical, how much agrees, and where and how near a tie it
    first diverges."""
    row["identical_to_ar"] = row["token_ids"] == reference
    # quantised weights may change the text: how much of fp32 ar's does it keep?
    row["agreement_with_ar"] = positional_matches(row["token_ids"], reference) / max(1, len(reference))
    if not row["identical_to_ar"]:
        pos = matching_prefix(row["token_ids"], reference)
        margin = near_tie_margin(lm, case, reference, pos)
        row["divergence"] = {"position": pos, "top2_margin": margin, "near_tie": margin is not None and margin < NEAR_TIE}


def run_bench(run: BenchRun) -> dict:
    """Time every mode on every prompt, interleaved; write the report to run.out, print its summary, return it."""
    from tqdm import tqdm

    cases, modes, lm, sweeps = checked(run)
    peers = Peers(lm)
    # Warm up every mode once (kernels, the assistant model, drafters' cost measurements), so no mode's
    # first measured run pays for it.
    warm = replace(run.point("ar", sweeps[0][0], 0.0), max_new_tokens=8)
    for mode in modes:
        run_case(lm, peers, mode, cases[0], warm)
    checkpoint = Checkpoint(run.out, run.recorded, resume=run.resume)
    results = checkpoint.results
    histories = Histories(run.history)
    histories.replay(results, modes, lambda k, t: run.point("ar", k, t))
    with tqdm(total=len(cases) * run.repeats * len(sweeps) * len(modes), desc="bench", unit="run",
              initial=len(results)) as bar:
        for case_index, case in enumerate(cases):
            if case.id in checkpoint.done:
                continue
            for repeat in range(run.repeats):
                for k, t in sweeps:
                    # Interleaved: every mode of this prompt, then the next prompt. The order rotates from
                    # one round to the next, so no mode always runs first or always after the same other.
                    shift = (case_index + repeat) % len(modes)
                    rows = {}
                    for mode in modes[shift:] + modes[:shift]:
                        point = run.point("ar", k, t)
                        rows[mode.label] = run_case(lm, peers, mode, case, point, histories.get(mode, point, repeat))
                        bar.update()
                    for mode in modes:
                        row = rows[mode.label]
                        row["repeat"] = repeat
                        row["identical_to_ar"] = None
                        if t == 0:
                            compare_with_ar(row, rows["ar"]["token_ids"], lm, case)
                        results.append(row)
            checkpoint.save(case.id)
    summary, by_category = summarise(results, len(sweeps) > 1)
    env = environment(lm)
    flags = env["flags"] + [flag for s in summary.values() for flag in s["flags"]]
    report = {"environment": env, "flags": flags, "config": run.recorded,
              "results": results, "summary": summary, "by_category": by_category}
    run.out.write_text(json.dumps(report, ensure_ascii=False, indent=1))
    checkpoint.finish()
    print_summary(summary, by_category)
    for flag in flags:
        print(f"FLAG: {flag}")
    return report


def print_summary(summary: dict, by_category: dict) -> None:
    print(f"{'mode':28s} {'speedup':>8s} {'tau':>6s} {'alpha':>6s} {'identical':>10s}")
    for label, s in summary.items():
        tau = "-" if s["mean_accepted_length"] is None else f"{s['mean_accepted_length']:.2f}"
        alpha = "-" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.2f}"
        print(f"{label:28s} {s['speedup_vs_ar']:8.2f} {tau:>6s} {alpha:>6s} {s['identical_to_ar'] or '-':>10s}")
    for category, labels in by_category.items():
        cells = ", ".join(f"{label} {v['speedup_vs_ar']:.2f}x" for label, v in labels.items() if label != "ar")
        print(f"  {category:14s} {cells}")
