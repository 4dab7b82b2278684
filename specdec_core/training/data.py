"""`make-data`: grow the corpus (corpus.py) by shards of the target's own answers to prompts from
every source (sources.py).

A drafter is trained to guess what *this* target says next, so the data is the target's own text.
One shard at a time, and a shard is the unit of resuming and of reproducibility:
1. prompts: each source gives its quota from its cursor (the last shard's cursors in the manifest);
   self-instruct first has the target *write* twice its quota of requests (sampled), keeps the clean
   ones; every candidate is dropped if it repeats a prompt already in the corpus or shares ≥ 50 % of
   its token 3-grams with an eval prompt (`prompts.overlaps`), and the counts are recorded;
2. answers: the serving engine (plain AR, `fixed` scheduler, a closed loop of C requests in flight,
   many sequences per forward); the corpus's sequence g is greedy when g is even and sampled at
   temperature 0.7 when odd, with a seed of its own from (run seed, g);
3. write: the shard to a temporary file renamed into place, then its entry (SHA-256, counts, cursors)
   into manifest.json.
Every phase of a shard runs on an engine of its own that drains before the next starts, so a shard's
batches never depend on what ran before: a resumed corpus is byte-identical to an uninterrupted one,
and a shard's answers regenerate bit-identically from its records (`regenerate`).
"""
from __future__ import annotations

import hashlib
import multiprocessing
import platform
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..decode import GenerationConfig
from ..errors import SpecDecError
from ..models import LoadedModel, cache_dir, load_model, sha256_file
from ..provenance import git_commit
from ..serving import ServingEngine, make_scheduler
from . import sources as src
from .corpus import (FORMAT, HELDOUT, REPO, Stored, corpus_dir, read_manifest, read_shard, totals, verify,
                     write_manifest, write_shard)
from .contamination import OVERLAP_THRESHOLD, normalised, overlaps

SAMPLED_TEMPERATURE = 0.7


@dataclass(frozen=True)
class DataConfig:
    model: str = "smollm2-135m"
    max_new_tokens: int = 128
    concurrency: int = 16
    seed: int = 0
    shard_size: int = 64  # sequences per shard: what an interrupted run can lose
    heldout: float = HELDOUT  # the share of sequences held out (corpus.is_heldout)
    sources: tuple[str, ...] = tuple(src.MIX)

    def validate(self) -> None:
        if self.max_new_tokens < 1:
            raise SpecDecError(f"max-new-tokens must be >= 1 (got {self.max_new_tokens})")
        if not 1 <= self.concurrency <= 256:
            raise SpecDecError(f"concurrency must be between 1 and 256 (got {self.concurrency})")
        if self.shard_size < 1:
            raise SpecDecError(f"shard-size must be >= 1 (got {self.shard_size})")
        if not 0 <= self.heldout < 1:
            raise SpecDecError(f"heldout must be in [0, 1) (got {self.heldout})")
        unknown = sorted(set(self.sources) - set(src.MIX))
        if unknown or "templates" not in self.sources:
            raise SpecDecError(f"unknown source {unknown[0]!r}: choose from {', '.join(src.MIX)}" if unknown
                               else "the sources must include templates (they fill any shortfall)")


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(":".join(map(str, parts)).encode()).digest()[:8], "big") >> 1


def answer_config(config: DataConfig, g: int) -> GenerationConfig:
    """The corpus's sequence g: greedy on even g, temperature 0.7 on odd g, a seed of its own."""
    return GenerationConfig(mode="ar", max_new_tokens=config.max_new_tokens,
                            temperature=0.0 if g % 2 == 0 else SAMPLED_TEMPERATURE, seed=_seed(config.seed, g))


def respond(lm: LoadedModel, conversations: Sequence[list[dict]], configs: Sequence[GenerationConfig],
            concurrency: int, on_tokens: Callable[[int], None] = lambda n: None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, response ids) per conversation, `concurrency` requests in flight on a fresh engine:
    the next is submitted when one finishes, in order, so the batches depend on the inputs alone."""
    engine = ServingEngine(lm, make_scheduler("fixed"))
    pending = iter(range(len(conversations)))
    owner: dict[int, int] = {}
    live, results = [], {}

    def submit() -> None:
        i = next(pending, None)
        if i is None:
            return
        request = engine.submit(conversations[i], configs[i])
        if request.error:
            raise SpecDecError(f"a training prompt was refused: {request.error}")
        owner[request.id] = i
        live.append(request)

    for _ in range(concurrency):
        submit()
    counted = 0
    while not engine.idle:
        finished = engine.step()
        produced = sum(len(r.output_ids) for r in live)
        on_tokens(produced - counted)
        counted = produced
        for request in finished:
            live.remove(request)
            counted -= len(request.output_ids)
            results[owner.pop(request.id)] = (list(request.prompt_ids), list(request.output_ids))
            submit()
    return [results[i] for i in range(len(conversations))]


# --- the run ------------------------------------------------------------------------------------


def machine(lm: LoadedModel) -> dict:
    return {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
            "device": str(lm.device), "dtype": str(lm.dtype).replace("torch.", ""), "torch": torch.__version__,
            "commit": git_commit(), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def default_folder(model: str) -> Path:
    """The real model's corpus is committed (data/<model>); tiny's smoke corpus lives in the cache."""
    return cache_dir() / "corpus" / model if model == "tiny" else corpus_dir(model)


# The smoke corpus: tiny, shards of 8 sequences of 16 tokens, a quarter held out.
SMOKE = DataConfig(model="tiny", max_new_tokens=16, concurrency=4, shard_size=8, heldout=0.25)


def smoke_corpus(lm: LoadedModel) -> Path:
    """A tiny corpus for `--smoke` training (made once, then reused from the cache): 2 shards of 8."""
    folder, manifest = open_corpus(lm, SMOKE, default_folder("tiny") / "smoke", resume=True)
    if len(manifest["shards"]) < 2:
        grow(lm, SMOKE, folder, manifest, 2 - len(manifest["shards"]))
    return folder


def fresh_manifest(lm: LoadedModel, config: DataConfig) -> dict:
    model_config = lm.model.config
    return {
        "format": FORMAT,
        "model": {"name": lm.name, "layers": model_config.num_hidden_layers, "hidden_size": model_config.hidden_size,
                  "vocab_size": model_config.vocab_size, "dtype": str(lm.dtype).replace("torch.", "")},
        "config": {**asdict(config), "sources": list(config.sources)},
        "generation": f"serving engine, plain AR, fixed scheduler, {config.concurrency} requests in flight; sequence g "
                      f"greedy when g is even, temperature {SAMPLED_TEMPERATURE} when odd; seed sha256('<seed>:<g>')[:8] >> 1. "
                      f"Self-instruct requests: written by the target at temperature {src.WRITER_TEMPERATURE}, "
                      f"{src.WRITER_TOKENS} tokens, seed sha256('<seed>:writer:<writer index>')",
        "sources": {name: {"licence": info.licence, "description": info.description}
                    for name, info in src.SOURCES.items() if name in config.sources},
        "mix_per_64": {name: src.MIX[name] for name in config.sources},
        "heldout": {"fraction": config.heldout, "rule": "sha256(the user turns joined by newlines)[:8] / 2^64 < fraction"},
        "overlap": {"threshold": OVERLAP_THRESHOLD, "rule": "a prompt sharing >= threshold of its token 3-grams with any "
                    "user turn of specdec_core/prompts/*.jsonl (or equal to one) is dropped; never an eval set as a source"},
        "shards": [], "totals": {},
    }


def open_corpus(lm: LoadedModel, config: DataConfig, out: Path | None, resume: bool) -> tuple[Path, dict]:
    """Every check before any work: the settings, and an existing corpus's manifest and shards (with
    `resume`), which must describe this model and these settings."""
    config.validate()
    if lm.name != config.model:
        raise SpecDecError(f"the config is for {config.model}, the loaded model is {lm.name}")
    folder = (out or default_folder(config.model)).resolve()
    fresh = fresh_manifest(lm, config)
    if (folder / "manifest.json").exists():
        if not resume:
            raise SpecDecError(f"{folder} already holds a corpus: pass --resume to grow it")
        manifest = read_manifest(folder)
        # Concurrency may differ between sittings (a GPU runs more requests at once): it is recorded per shard.
        same = lambda m: {**m, "config": {k: v for k, v in m["config"].items() if k != "concurrency"}}  # noqa: E731
        for key in ("model", "config"):
            if same(manifest).get(key) != same(fresh)[key]:
                raise SpecDecError(f"{folder} holds a corpus with another {key}: grow it with its own settings "
                                   f"({manifest.get(key)}), or write elsewhere (--out)")
        verify(folder, manifest)
        return folder, manifest
    if folder.is_relative_to(REPO) and lm.name == "tiny":
        raise SpecDecError(f"{folder} is inside the repository: only the real model's corpus is committed")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecDecError(f"cannot create {folder}: {err.strerror or err}")
    return folder, fresh


class Filter:
    """De-duplication against the corpus so far and the overlap rule, with the counts it dropped."""

    def __init__(self, tokenizer, seen: set[str]) -> None:
        self.tokenizer, self.seen = tokenizer, seen
        self.dropped = {"duplicate": 0, "overlap": 0, "unclean": 0}
        self.max_overlap = 0.0

    def keep(self, items: list[src.Item]) -> list[src.Item]:
        fresh = []
        for item in items:
            key = normalised(item.text)
            if key in self.seen:
                self.dropped["duplicate"] += 1
            else:
                self.seen.add(key)
                fresh.append(item)
        kept = []
        for item, overlap in zip(fresh, overlaps([i.text for i in fresh], self.tokenizer)):
            if overlap >= OVERLAP_THRESHOLD:
                self.dropped["overlap"] += 1
            else:
                self.max_overlap = max(self.max_overlap, overlap)
                kept.append(item)
        return kept


class History:
    """The corpus's sequences so far, for the multi-turn source (earlier answers): the shards read at the
    start are handed over (`add`), the ones written since are read when a follow-up first reaches them."""

    def __init__(self, folder: Path, manifest: dict, tokenizer) -> None:
        self.folder, self.manifest, self.tokenizer = folder, manifest, tokenizer
        self.loaded: list[src.Earlier] = []
        self.shards_read = 0
        self.wait: Callable[[], bool] = lambda: False  # lands a shard still being answered, if any (grow)

    def add(self, entry: dict, stored: list[Stored]) -> None:
        """The next shard's sequences (shards come in manifest order)."""
        for i, s in enumerate(stored):
            text = self.tokenizer.decode(s.response, skip_special_tokens=True)
            self.loaded.append(src.Earlier(s.item, text, f"{Path(entry['file']).stem} #{i}"))
        self.shards_read += 1

    def __call__(self, j: int) -> src.Earlier | None:
        while j >= len(self.loaded) and (self.shards_read < len(self.manifest["shards"]) or self.wait()):
            entry = self.manifest["shards"][self.shards_read]
            self.add(entry, read_shard(self.folder / entry["file"]))
        return self.loaded[j] if j < len(self.loaded) else None


def self_instruct(lm: LoadedModel, config: DataConfig, cursor: int, n: int, keep: Callable) -> tuple[list[src.Item], int]:
    """The target writes 2n requests (grid cells from `cursor`); the clean, new, non-overlapping ones
    become prompts (at most n)."""
    writers, after = src.writer_items(cursor, 2 * n, config.seed)
    configs = [GenerationConfig(mode="ar", max_new_tokens=src.WRITER_TOKENS, temperature=src.WRITER_TEMPERATURE,
                                seed=_seed(config.seed, "writer", cursor + i)) for i in range(len(writers))]
    written = respond(lm, [w.chat() for w in writers], configs, config.concurrency)
    candidates = []
    for writer, (_, ids) in zip(writers, written):
        request = src.clean_request(lm.tokenizer.decode(ids, skip_special_tokens=True))
        if request is None:
            keep.dropped["unclean"] += 1
            continue
        candidates.append(src.Item("self-instruct", writer.ref, writer.task, writer.language, (("user", request),)))
    return keep.keep(candidates)[:n], after


def gather(lm: LoadedModel, config: DataConfig, cursors: dict, history: History, keep: Filter) -> tuple[list[src.Item], dict]:
    """The shard's prompts by the mix (sources.shard_quota), interleaved by source; the cursors after."""
    quota = src.shard_quota(config.shard_size, config.sources)
    cursors = dict(cursors)
    by_source: dict[str, list[src.Item]] = {}
    for name in config.sources:
        if name == "templates":
            continue
        want, cursor = quota[name], cursors.get(name, 0)
        if name == "self-instruct":
            items, cursor = self_instruct(lm, config, cursor, want, keep)
        else:
            items = []
            while len(items) < want:  # refill what the filter drops, until the source runs dry
                if name == "multi-turn":
                    more, after = src.multi_turn_items(cursor, want - len(items), config.seed, history)
                else:
                    more, after = {"passages": src.passage_items, "code": src.code_items}[name](cursor, want - len(items), config.seed)
                if after == cursor:
                    break
                items += keep.keep(more)
                cursor = after
        by_source[name], cursors[name] = items, cursor
    want = config.shard_size - sum(len(v) for v in by_source.values())
    templates, cursor = [], cursors.get("templates", 0)
    while len(templates) < want:
        more, after = src.template_items(cursor, want - len(templates), config.seed)
        if after == cursor:
            raise SpecDecError("the template prompts are used up: every source has run dry")
        templates += keep.keep(more)
        cursor = after
    by_source["templates"], cursors["templates"] = templates, cursor
    order = [name for name in src.MIX if name in by_source]
    queues = {name: list(by_source[name]) for name in order}
    items = []
    while any(queues.values()):  # the sources take turns, so any prefix of a shard is a mix
        for name in order:
            if queues[name]:
                items.append(queues[name].pop(0))
    return items, cursors


@dataclass
class Planned:
    """A shard whose prompts are gathered (everything that depends on the shards before it), waiting
    for its answers, which depend on nothing else."""

    number: int
    items: list[src.Item]
    configs: list[GenerationConfig]
    cursors: dict
    dropped: dict[str, int]
    max_overlap: float
    gather_s: float


def plan_shard(lm: LoadedModel, config: DataConfig, number: int, first: int, cursors: dict, history: History,
               keep: Filter) -> Planned:
    """Shard `number`'s prompts from `cursors` (the previous shard's), its first sequence being `first`."""
    start = time.perf_counter()
    dropped_before = dict(keep.dropped)
    items, cursors = gather(lm, config, cursors, history, keep)
    return Planned(number, items, [answer_config(config, first + i) for i in range(len(items))], cursors,
                   {k: keep.dropped[k] - dropped_before[k] for k in keep.dropped}, keep.max_overlap,
                   time.perf_counter() - start)


def write_planned(lm: LoadedModel, config: DataConfig, folder: Path, planned: Planned,
                  answers: list[tuple[list[int], list[int]]], answer_s: float, workers: int) -> dict:
    """Write the answered shard; returns its manifest entry. `wall_s` is the shard's own compute time
    (gathering + answering), also when `workers` processes answered shards side by side."""
    stored = [Stored(item, prompt + response, len(prompt), c.temperature, c.seed)
              for item, (prompt, response), c in zip(planned.items, answers, planned.configs)]
    path = folder / f"shard-{planned.number:05d}.npz"
    write_shard(path, stored, lm.model.config.vocab_size)
    wall_s = planned.gather_s + answer_s
    response_tokens = sum(len(s.response) for s in stored)
    counts: dict[str, int] = {}
    for s in stored:
        counts[s.item.source] = counts.get(s.item.source, 0) + 1
    return {"file": path.name, "sequences": len(stored), "prompt_tokens": sum(s.prompt_len for s in stored),
            "response_tokens": response_tokens, "sources": counts, "cursors": planned.cursors,
            "dropped": planned.dropped, "max_overlap": round(planned.max_overlap, 4),
            "concurrency": config.concurrency, "workers": workers,
            "bytes": path.stat().st_size, "sha256": sha256_file(path),
            "wall_s": round(wall_s, 1), "tokens_per_s": round(response_tokens / wall_s, 1), "machine": machine(lm)}


def timed_respond(lm: LoadedModel, conversations: Sequence[list[dict]], configs: Sequence[GenerationConfig],
                  concurrency: int, on_tokens: Callable[[int], None] = lambda n: None) -> tuple[list, float]:
    start = time.perf_counter()
    answers = respond(lm, conversations, configs, concurrency, on_tokens)
    return answers, time.perf_counter() - start


# A worker process answers whole shards with a model of its own (spawned: no torch state is forked).
_WORKER_LM: LoadedModel | None = None


def _start_worker(name: str, device: str, dtype: str) -> None:
    global _WORKER_LM
    torch.set_num_threads(1)
    _WORKER_LM = load_model(name, device, dtype)


def _answer_in_worker(conversations: list[list[dict]], configs: list[GenerationConfig],
                      concurrency: int) -> tuple[list, float]:
    assert _WORKER_LM is not None, "the worker's initializer loads the model"
    return timed_respond(_WORKER_LM, conversations, configs, concurrency)


def grow(lm: LoadedModel, config: DataConfig, folder: Path, manifest: dict, shards: int | None = None,
         until_tokens: int | None = None, bar=None, workers: int = 1) -> dict:
    """Append shards (`shards` more, or until the corpus holds `until_tokens` response tokens),
    writing the manifest after each; returns it.

    With `workers` > 1 the shards are a pipeline: this process gathers shard n + 1 (prompts, the
    target's self-instruct requests) while `workers` processes, one thread each, answer the shards
    before it; every process runs one thread, so the corpus is byte-identical to one written by a single
    one-thread process. Shards land in order; `until_tokens` may be passed by the shards in flight."""
    if workers < 1:
        raise SpecDecError(f"workers must be >= 1 (got {workers})")
    history = History(folder, manifest, lm.tokenizer)
    seen: set[str] = set()
    for entry in manifest["shards"]:  # one pass over the committed shards fills both
        stored = read_shard(folder / entry["file"])
        seen |= {normalised(s.item.text) for s in stored}
        history.add(entry, stored)
    keep = Filter(lm.tokenizer, seen)
    in_flight: deque[tuple[Planned, Future]] = deque()

    def land(planned: Planned, answers: list, answer_s: float) -> None:
        entry = write_planned(lm, config, folder, planned, answers, answer_s, workers)
        manifest["shards"].append(entry)
        manifest["totals"] = totals(manifest["shards"])
        write_manifest(folder, manifest)
        if bar is not None and workers > 1:
            bar.update(entry["response_tokens"])

    def land_oldest() -> bool:
        if not in_flight:
            return False
        planned, future = in_flight.popleft()
        land(planned, *future.result())
        return True

    history.wait = land_oldest  # a follow-up on an answer still in flight waits for it
    planned_count = 0

    def more() -> bool:
        tokens = sum(e["response_tokens"] for e in manifest["shards"])
        return (shards is None or planned_count < shards) and (until_tokens is None or tokens < until_tokens)

    def next_plan() -> Planned:
        earlier = manifest["shards"] + [{"sequences": len(p.items), "cursors": p.cursors} for p, _ in in_flight]
        cursors = earlier[-1]["cursors"] if earlier else {}
        return plan_shard(lm, config, len(earlier), sum(e["sequences"] for e in earlier), cursors, history, keep)

    if workers == 1:
        on_tokens = bar.update if bar is not None else (lambda n: None)
        while more():
            planned = next_plan()
            land(planned, *timed_respond(lm, [i.chat() for i in planned.items], planned.configs,
                                         config.concurrency, on_tokens))
            planned_count += 1
        return manifest
    torch.set_num_threads(1)  # the gathering's self-instruct requests too: one thread, as in the workers
    context = multiprocessing.get_context("spawn")
    dtype = str(lm.dtype).replace("torch.", "")
    with ProcessPoolExecutor(workers, context, _start_worker, (lm.name, str(lm.device), dtype)) as pool:
        while more():
            if len(in_flight) >= workers:
                land_oldest()
                continue
            planned = next_plan()
            in_flight.append((planned, pool.submit(_answer_in_worker, [i.chat() for i in planned.items],
                                                   planned.configs, config.concurrency)))
            planned_count += 1
        while land_oldest():
            pass
    return manifest


def regenerate(lm: LoadedModel, folder: Path, manifest: dict, number: int) -> list[Stored]:
    """Shard `number`'s sequences answered again from its own records, seeds and temperatures (no
    source needed): equal to the committed shard on the same machine, kernels and thread count."""
    config = DataConfig(**{**manifest["config"], "sources": tuple(manifest["config"]["sources"])})
    stored = read_shard(folder / manifest["shards"][number]["file"])
    configs = [GenerationConfig(mode="ar", max_new_tokens=config.max_new_tokens, temperature=s.temperature, seed=s.seed)
               for s in stored]
    concurrency = manifest["shards"][number].get("concurrency", config.concurrency)
    answers = respond(lm, [s.item.chat() for s in stored], configs, concurrency)
    return [Stored(s.item, p + r, len(p), s.temperature, s.seed) for s, (p, r) in zip(stored, answers)]
