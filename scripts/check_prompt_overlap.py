"""Check a prompt suite: greedy answer length and how much the answer copies the prompt.

For each prompt we generate `--max-new-tokens` tokens greedily (chat template applied)
and report:

* ``len``      - number of generated tokens (stopping at EOS),
* ``eos``      - whether the model stopped by itself,
* ``cover``    - fraction of generated tokens that sit inside a token 3-gram that also
                 occurs in the prompt tokens (what an n-gram / prompt-lookup drafter can hit),
* ``tri``      - fraction of the answer's 3-grams that also occur in the prompt.

Multi-turn entries (``turns``) are answered turn by turn; the last answer is measured
against the whole conversation that precedes it.

Usage:
    python scripts/check_prompt_overlap.py specdec_core/prompts/suite.jsonl [model_dir]
        [--max-new-tokens 64] [--only copy,qa] [--show]
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys
import json
import os
import statistics
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def ngrams(ids: list[int], n: int = 3) -> list[tuple[int, ...]]:
    return [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]


def overlap(prompt_ids: list[int], answer_ids: list[int], n: int = 3) -> tuple[float, float]:
    """Return (token coverage, fraction of answer n-grams found in the prompt)."""
    if len(answer_ids) < n:
        return 0.0, 0.0
    seen = set(ngrams(prompt_ids, n))
    hits = [g in seen for g in ngrams(answer_ids, n)]
    covered = [False] * len(answer_ids)
    for i, hit in enumerate(hits):
        if hit:
            covered[i : i + n] = [True] * n
    return sum(covered) / len(answer_ids), sum(hits) / len(hits)


def answer(model, tok, messages: list[dict], max_new_tokens: int) -> tuple[list[int], list[int]]:
    enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
    prompt_ids = enc["input_ids"][0].tolist()
    new_ids = out[0, len(prompt_ids) :].tolist()
    if tok.eos_token_id in new_ids:  # keep EOS out of the answer
        new_ids = new_ids[: new_ids.index(tok.eos_token_id) + 1]
    return prompt_ids, new_ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite")
    ap.add_argument("model_dir", nargs="?", default=None, help="a converted model folder (default: the project's cache)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--only", default="", help="comma-separated categories or ids to check")
    ap.add_argument("--show", action="store_true", help="print each answer")
    args = ap.parse_args()

    if args.model_dir is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from specdec_core.models import converted_model_dir
        args.model_dir = converted_model_dir()
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).eval()

    with open(args.suite, encoding="utf-8") as f:
        items = [json.loads(line) for line in f if line.strip()]
    only = {s for s in args.only.split(",") if s}
    if only:
        items = [it for it in items if it["category"] in only or it["id"] in only]

    by_cat: dict[str, list[tuple[int, float]]] = defaultdict(list)
    print(f"{'id':<16} {'category':<14} {'len':>4} {'eos':>4} {'cover':>6} {'tri':>6}")
    for it in items:
        turns = it["turns"] if "turns" in it else [it["prompt"]]
        messages: list[dict] = []
        for turn in turns:
            messages.append({"role": "user", "content": turn})
            prompt_ids, new_ids = answer(model, tok, messages, args.max_new_tokens)
            eos = bool(new_ids) and new_ids[-1] == tok.eos_token_id
            text_ids = new_ids[:-1] if eos else new_ids
            messages.append({"role": "assistant", "content": tok.decode(text_ids, skip_special_tokens=True)})
        cover, tri = overlap(prompt_ids, text_ids)
        by_cat[it["category"]].append((len(text_ids), cover))
        print(f"{it['id']:<16} {it['category']:<14} {len(text_ids):>4} {'yes' if eos else '':>4} {cover:>6.2f} {tri:>6.2f}", flush=True)
        if args.show:
            print("    " + messages[-1]["content"].replace("\n", "\n    "))

    print(f"\n{'category':<14} {'n':>3} {'len min/med':>12} {'cover med':>10}")
    for cat, rows in sorted(by_cat.items()):
        lens, covers = [r[0] for r in rows], [r[1] for r in rows]
        print(f"{cat:<14} {len(rows):>3} {min(lens):>5}/{statistics.median(lens):<6.0f} {statistics.median(covers):>10.2f}")


if __name__ == "__main__":
    main()
