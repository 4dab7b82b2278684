"""Record the race page's precomputed traces with the real model (SmolLM2-135M-Instruct, CPU).

    .venv/bin/python scripts/record_traces.py            # all prompts -> app/traces/
    .venv/bin/python scripts/record_traces.py --only zh-poem --out /tmp/traces
    .venv/bin/python scripts/record_traces.py --drafter ngram      # every spec lane drafts by n-gram lookup

For each prompt, four lanes decode the same prompt greedily:
  ar     one token per target forward (the baseline)
  nar    one-shot parallel decoding, window 16 (fast and garbled: the cautionary lane)
  jacobi Jacobi fixed-point iteration, window 8 (exact, usually little faster)
  spec   speculative decoding, draft -> verify (exact), with the drafter of `--drafter`

`--drafter` picks the spec lane's drafter for every prompt. The default is `mix`, the best trained
option: per step it drafts by n-gram lookup where the text is copied, by the trained EAGLE drafter
elsewhere, or not at all where neither is expected to pay (each step's choice is in the trace,
`StepEvent.draft_source`, and the inspector shows it). Any drafter of the engine's registry works
(`ngram`, `eagle`, `heads`, …; a trained one needs its shipped weights). `--drafter per-prompt` keeps
each prompt's own choice from PROMPTS below (n-gram lookup for the copying prompts, a simulated
drafter of hit rate SIM_HIT_RATE for the chat question): the traces shipped before the trained drafters.
The prompt titles in index.json name the drafter used.

Every trace is saved with `Trace.save` to <out>/<id>/<lane>.json, and <out>/index.json lists the
prompts. The engine guarantees that jacobi and spec emit exactly the ar tokens; this script asserts it.
Timings inside the traces are wall-clock times of the recording machine (they change on each run;
the race's "measured time" clock replays them). Recording uses one torch thread by default: on a small
machine shared with other work, two threads fight over the cores and every step gets several times
slower and noisier (`--threads 0` keeps torch's default).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import specdec_core as sd  # noqa: E402

MAX_NEW_TOKENS = 48
NAR_WINDOW = 16
JACOBI_WINDOW = 8
SPEC_K = 4
SIM_HIT_RATE = 0.7  # the simulated drafter's hit rate where it drafts (the chat prompt under --drafter per-prompt)

# id, category, title (without the drafter: `title()` adds it), prompt, and the drafter `--drafter
# per-prompt` uses (+ its settings). Chosen so the race shows both sides: copying (n-gram drafting
# shines), free chat (nothing to copy), a code edit (partial copying) and Chinese text (multi-byte
# characters split across tokens).
PROMPTS = [
    {
        "id": "copy-en",
        "category": "copy",
        "title": {"zh": "照抄一段话", "en": "Copy a paragraph"},
        "prompt": ("Repeat this text word for word: Speculative decoding lets a small draft model guess several "
                   "tokens ahead, and the large model checks all of them in a single forward pass, so the output "
                   "stays exactly the same."),
        "drafter": "ngram",
        "drafter_config": {"k": SPEC_K},
    },
    {
        "id": "chat-sky",
        "category": "chat",
        "title": {"zh": "闲聊问答：天空为什么是蓝的", "en": "Chat question: why is the sky blue"},
        "prompt": "Why is the sky blue? Answer in two sentences.",
        "drafter": "sim",
        "drafter_config": {"k": SPEC_K, "hit_rate": SIM_HIT_RATE},
    },
    {
        "id": "code-fix",
        "category": "code",
        "title": {"zh": "改一小段代码", "en": "A short code edit"},
        "prompt": ("Fix the bug in this code and show the corrected version:\n```python\ndef mean(xs):\n"
                   "    return sum(xs) / len(x)\n```"),
        "drafter": "ngram",
        "drafter_config": {"k": SPEC_K},
    },
    {
        "id": "zh-poem",
        "category": "chinese",
        "title": {"zh": "中文：重复一句古诗", "en": "Chinese: repeat a line of classical poetry"},
        "prompt": "请重复这句话：春眠不觉晓，处处闻啼鸟。",
        "drafter": "ngram",
        "drafter_config": {"k": SPEC_K},
    },
]

LANES = ("ar", "nar", "jacobi", "spec")
DEFAULT_DRAFTER = "mix"
PER_PROMPT = "per-prompt"

# How a title names the spec lane's drafter (others: by their registry name). {model}: mix's model drafters.
DRAFTER_NOTES = {
    "mix": {"zh": "mix 草稿：照抄处用 n-gram，其余用{model}",
            "en": "mix drafter: n-gram where copied, else {model}"},
    "quant": {"zh": "int4 量化的目标模型", "en": "the int4-quantised target"},
    "ngram": {"zh": "n-gram 草稿", "en": "n-gram drafting"},
    "sim": {"zh": "模拟草稿，命中率 {hit_rate}", "en": "simulated drafter, hit rate {hit_rate}"},
    "eagle": {"zh": " EAGLE 草稿器", "en": "EAGLE drafter"},
    "heads": {"zh": " Medusa 多头", "en": "Medusa heads"},
    "draft": {"zh": "蒸馏草稿模型", "en": "distilled draft model"},
}


def spec_drafter(entry: dict, drafter: str) -> tuple[str, dict]:
    """The spec lane's drafter and its settings for this prompt under `--drafter`."""
    if drafter == PER_PROMPT:
        return entry["drafter"], dict(entry["drafter_config"])
    config = {"k": SPEC_K}
    if drafter == "sim":  # the prompt's hit rate if it has one, else the chat prompt's
        config["hit_rate"] = entry["drafter_config"].get("hit_rate", SIM_HIT_RATE)
    return drafter, config


def title(entry: dict, drafter: str, config: dict) -> dict:
    out = {}
    for lang, sep in (("zh", "（{}）"), ("en", " ({})")):
        note = DRAFTER_NOTES.get(drafter, {}).get(lang, drafter)
        named = (" 或 " if lang == "zh" else " or ").join(DRAFTER_NOTES.get(m, {}).get(lang, m).strip()
                                                           for m in sd.drafters.MIX_MODELS)
        out[lang] = entry["title"][lang] + sep.format(note.format(**config, model=named).strip())
    return out


def lane_config(lane: str, entry: dict, max_new_tokens: int, drafter: str = DEFAULT_DRAFTER) -> sd.GenerationConfig:
    if lane == "ar":
        return sd.GenerationConfig(mode="ar", max_new_tokens=max_new_tokens)
    if lane == "nar":
        return sd.GenerationConfig(mode="nar", window=NAR_WINDOW, max_new_tokens=max_new_tokens)
    if lane == "jacobi":
        return sd.GenerationConfig(mode="jacobi", window=JACOBI_WINDOW, max_new_tokens=max_new_tokens)
    name, config = spec_drafter(entry, drafter)
    options = {key: config.pop(key) for key in sd.drafters.OPTION_NAMES if key in config}
    return sd.GenerationConfig(mode="spec", drafter=name, max_new_tokens=max_new_tokens, drafter_options=options, **config)


def record(lm, entry: dict, out: Path, max_new_tokens: int, drafter: str = DEFAULT_DRAFTER) -> dict:
    folder = out / entry["id"]
    folder.mkdir(parents=True, exist_ok=True)
    name, config = spec_drafter(entry, drafter)
    results = {}
    for lane in LANES:
        start = time.perf_counter()
        res = sd.generate(lm, entry["prompt"], lane_config(lane, entry, max_new_tokens, drafter))
        res.trace.save(folder / f"{lane}.json")
        results[lane] = res
        m = res.metrics
        sources = {}
        for step in res.trace.steps:
            if step.draft_source:
                sources[step.draft_source] = sources.get(step.draft_source, 0) + 1
        print(f"  {entry['id']:>9} {lane:>6}: {m['new_tokens']:3d} tokens, {m['target_forwards']:3d} forwards, "
              f"tau {m['mean_acceptance_length']:.2f}, {time.perf_counter() - start:5.1f} s"
              + (f", drafts from {sources}" if sources else ""), flush=True)
    for lane in ("jacobi", "spec"):
        assert results[lane].token_ids == results["ar"].token_ids, (
            f"{entry['id']}: {lane} output differs from ar:\n{results[lane].text!r}\n{results['ar'].text!r}")
    print(f"  {entry['id']:>9} output: {results['ar'].text!r}", flush=True)
    return {
        "id": entry["id"],
        "category": entry["category"],
        "title": title(entry, name, config),
        "prompt": entry["prompt"],
        "drafter": name,
        "drafter_config": config,
        "max_new_tokens": max_new_tokens,
        "lanes": {lane: f"{entry['id']}/{lane}.json" for lane in LANES},
        "recorded_with": {"model": lm.name, "torch": torch.__version__, "threads": torch.get_num_threads()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "app" / "traces", help="output folder (default app/traces)")
    parser.add_argument("--only", nargs="*", help="record only these prompt ids (the index keeps the others)")
    parser.add_argument("--model", default="smollm2-135m", choices=sd.MODEL_NAMES)
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--drafter", default=DEFAULT_DRAFTER, choices=(*sd.drafters.DRAFTERS, PER_PROMPT),
                        help=f"the spec lane's drafter for every prompt (default {DEFAULT_DRAFTER}: n-gram lookup "
                             f"where text is copied, the trained EAGLE drafter elsewhere); {PER_PROMPT}: each "
                             "prompt's own choice (n-gram for copying, sim for chat)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    known = {p["id"] for p in PROMPTS}
    unknown = set(args.only or ()) - known
    if unknown:
        parser.error(f"unknown prompt id(s) {', '.join(sorted(unknown))}: choose from {', '.join(sorted(known))}")

    args.out.mkdir(parents=True, exist_ok=True)
    index_path = args.out / "index.json"
    previous = {}
    if args.only and index_path.exists():
        previous = {e["id"]: e for e in json.loads(index_path.read_text(encoding="utf-8"))}

    lm = sd.load_model(args.model)
    print(f"recording {args.model}, {args.max_new_tokens} new tokens, {torch.get_num_threads()} torch thread(s), "
          f"spec drafter {args.drafter} -> {args.out}", flush=True)
    # Warm up every lane of every prompt for a few tokens (kernels, each drafter's one-time cost
    # measurement), so the first recorded prompt does not pay for them in its timings.
    for entry in PROMPTS:
        for lane in LANES:
            sd.generate(lm, entry["prompt"], lane_config(lane, entry, 8, args.drafter))
    index = []
    for entry in PROMPTS:
        if args.only and entry["id"] not in args.only:
            if entry["id"] in previous:
                index.append(previous[entry["id"]])
            continue
        index.append(record(lm, entry, args.out, args.max_new_tokens, args.drafter))
    index_path.write_text(json.dumps(index, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")

    total = sum(p.stat().st_size for p in args.out.rglob("*.json"))
    print(f"wrote {index_path} ({len(index)} prompts), {total / 1024:.0f} KiB in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
