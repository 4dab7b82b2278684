"""What the target's features cost a training step: read from the feature cache vs computed online.

For each drafter kind asked, on the committed corpus's first shards: the time to build the feature
cache (one forward per sequence), and the time of training steps whose batches read cached states vs
steps that compute them inside the step (`train-draft --features cache|online`), interleaved step by
step with the same batches, so the ratio is fair on a noisy machine. Writes a JSON for BENCHMARKS §11.

    OMP_NUM_THREADS=1 taskset -c 1 .venv/bin/python scripts/feature_cost.py --kinds heads,eagle --shards 4 \
        --steps 12 --out benchmarks/feature-cost-cpu.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kinds", default="heads,eagle")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    from specdec_core.models import load_model
    from specdec_core.provenance import cpu_name, git_commit
    from specdec_core.training.batches import batch_at, load_splits
    from specdec_core.training.corpus import corpus_dir, load_corpus
    from specdec_core.training.kinds import KINDS, layers_needed
    from specdec_core.training.train import TrainConfig, open_training

    lm = load_model("smollm2-135m", "auto", "float32")
    corpus = load_corpus(corpus_dir(lm.name), shards=args.shards)
    scratch = Path(tempfile.mkdtemp(prefix="feature-cost-"))
    result = {"environment": {"commit": git_commit(), "processor": cpu_name(), "date": time.strftime("%Y-%m-%d"),
                              "torch_threads": torch.get_num_threads()},
              "corpus_shards": args.shards, "sequences": len(corpus.sequences),
              "response_tokens": corpus.manifest["totals"]["response_tokens"], "batch_size": args.batch_size,
              "kinds": {}}
    for kind in args.kinds.split(","):
        layers = layers_needed(kind, lm)
        start = time.perf_counter()  # a cold feature cache per kind, in a scratch folder: the build is measured
        cached_train, cached_heldout = load_splits(lm, corpus, layers, "cache", cache_root=scratch / kind)
        build_s = time.perf_counter() - start
        online_train, _ = load_splits(lm, corpus, layers, "online")
        config = TrainConfig(kind=kind, steps=args.steps, batch_size=args.batch_size, vocab=8192)
        run = open_training(lm, config, cached_train, cached_heldout, False, scratch / f"run-{kind}")
        times = {"cache": [], "online": []}
        final = lm.model.config.num_hidden_layers
        for step in range(args.steps):
            for mode, train in (("cache", cached_train), ("online", online_train)) if step % 2 else \
                    (("online", online_train), ("cache", cached_train)):
                t0 = time.perf_counter()
                batch = batch_at(train, step, config.batch_size, config.seed)
                loss, _ = KINDS[kind].training_loss(run.module, run.vocab, lm.model, batch, KINDS[kind].train_depth(config.depth),
                                                    final, torch.Generator().manual_seed(step))
                run.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                times[mode].append(time.perf_counter() - t0)  # no optimizer step: both modes see the same weights
        cache_s, online_s = statistics.median(times["cache"]), statistics.median(times["online"])
        result["kinds"][kind] = {
            "layers": list(layers), "cache_build_s": round(build_s, 1),
            "cache_build_s_per_1k_response_tokens": round(build_s / result["response_tokens"] * 1000, 2),
            "cache_bytes": sum(p.stat().st_size for p in (scratch / kind).rglob("*.safetensors")),
            "step_s_cache": round(cache_s, 3), "step_s_online": round(online_s, 3),
            "feature_share_of_online_step": round(1 - cache_s / online_s, 3),
        }
        print(kind, result["kinds"][kind], flush=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
