"""`python -m specdec_core ...`: generate, bench, profile, report, prepare.

Bad input never shows a traceback: one line on stderr, exit code 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .errors import SpecDecError, ensure_writable
from .suite import PROMPTS_DIR

EXIT_USAGE = 2


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage + message; we print one line and exit 2 like every other error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SpecDecError(message)


def _csv(kind):
    def parse(text: str):
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
    return parse


def add_generation_options(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """Options shared by generate and bench (bench accepts comma lists for --k and --temperature)."""
    p.add_argument("--model", default="smollm2-135m", help="smollm2-135m (default) or tiny")
    p.add_argument("--drafter", default="ngram", help="spec drafter: ngram (cost-aware), ngram-fixed, sim, early-exit, quant (the target quantised), the trained draft, heads, eagle, block, block-parallel, or mix")
    p.add_argument("--k", type=_csv(int) if sweep else int, default=[4] if sweep else 4,
                   help="max drafted tokens per step, 1..16" + (" (comma list to sweep)" if sweep else ""))
    p.add_argument("--dynamic-k", type=float, default=None, metavar="T",
                   help="stop drafting when the draft's top probability falls below T")
    p.add_argument("--tree", default="chain",
                   help="spec: verify the drafts as a chain (default), a static tree (heads: Medusa's shape) or a dynamic "
                        "tree of the drafter's best guesses (heads, eagle, draft, early-exit, quant, block, block-parallel)")
    p.add_argument("--tree-nodes", type=int, default=0, metavar="N",
                   help="a tree's size, drafts per verify forward (default 0: each step, the size that pays on this machine's measured costs)")
    p.add_argument("--window", type=int, default=16, help="nar/jacobi window (default 16)")
    p.add_argument("--hit-rate", type=float, default=0.7, help="sim drafter: chance each draft is right")
    p.add_argument("--ngram-min", type=int, default=1)
    p.add_argument("--ngram-max", type=int, default=3)
    p.add_argument("--early-exit-layers", type=int, default=4)
    p.add_argument("--quant-bits", type=int, default=4, help="quant drafter: 4 (int4, default) or 8 (int8)")
    p.add_argument("--quant-layers", type=int, default=None, metavar="L",
                   help="quant drafter: only the first L layers (a quantised early exit; default all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=_csv(float) if sweep else float, default=[0.0] if sweep else 0.0,
                   help="0 = greedy" + (" (comma list to sweep)" if sweep else ""))
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16 or float64")
    add_kernels_option(p)


def add_kernels_option(p: argparse.ArgumentParser, show: bool = False) -> None:
    """--kernels: the kernel table the model's linears follow on CPU (kernels/; SPECDEC_KERNELS pins one)."""
    help_text = ("the kernel table: measured (this machine's, measured once and cached; the default), legacy (the "
                 "fixed dispatch tuned on one AMD CPU), torch (nn.Linear's kernels) or onednn (packed oneDNN for every "
                 "row count)")
    if show:
        p.add_argument("--kernels", nargs="?", const="show", default="auto", metavar="TABLE",
                       help=help_text + "; alone: print this machine's measured table and its timings, then exit")
        p.add_argument("--remeasure-kernels", action="store_true", help="with --kernels alone: measure the table again")
    else:
        p.add_argument("--kernels", default="auto", metavar="TABLE", help=help_text)


def add_weights_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--weights", default="fp32", help="the target's linear weights: fp32 (the reference), int8 or int4 "
                   "(faster, text may differ; bench: write ar@weights=int4)")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m specdec_core", description="A real, exact, observable speculative-decoding engine.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    g = sub.add_parser("generate", help="decode one prompt and print the text (or JSON)")
    g.add_argument("--prompt", required=True)
    g.add_argument("--mode", default="ar", help="ar, nar, jacobi or spec")
    add_generation_options(g)
    g.add_argument("--json", action="store_true", help="print {text, token_ids, metrics} as JSON")
    g.add_argument("--trace", type=Path, help="save the step-by-step trace as JSON")
    add_weights_option(g)

    b = sub.add_parser("bench", help="time modes on a prompt suite, interleaved per prompt")
    b.add_argument("--prompts", type=Path, default=PROMPTS_DIR / "quick.jsonl")
    b.add_argument("--modes", default="ar,spec:ngram,hf:ar,hf:pld",
                   help="comma list of ar, nar, jacobi, spec:DRAFTER, hf:ar, hf:pld, hf:assisted, hf:assisted-default")
    b.add_argument("--repeats", type=int, default=1)
    b.add_argument("--categories", help="only these categories of --prompts (comma-separated, e.g. chat,qa,story)")
    b.add_argument("--limit", type=int, default=0, help="only the first N prompts (0 = all, after --categories)")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--resume", action="store_true", help="continue the run whose progress OUT.partial.json holds (saved "
                   "after every prompt; refused on another processor, commit or settings)")
    b.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server (http://host:port): run the prompts "
                   "there instead of on the local engine, with its speculative counters (--model: the served model's name)")
    b.add_argument("--baseline-endpoint", metavar="URL", help="with --endpoint: a second server (speculation off), "
                   "interleaved per prompt; speedups are endpoint over baseline")
    b.add_argument("--no-prompt-cache", action="store_true", help="with --endpoint: send llama.cpp's \"cache_prompt\": "
                   "false in every request (no prefill reuse between requests); other servers may ignore or reject it (not checked)")
    add_generation_options(b, sweep=True)

    pr = sub.add_parser("profile", help="measure the cost model: forward time vs tokens and batch size")
    pr.add_argument("--model", default="smollm2-135m")
    pr.add_argument("--device", default="auto")
    pr.add_argument("--dtype", default="auto")
    add_kernels_option(pr, show=True)
    pr.add_argument("--tokens", type=_csv(int), default=[1, 2, 3, 4, 6, 8, 12, 16])
    pr.add_argument("--batch", type=_csv(int), default=[1, 2, 4, 8, 16])
    pr.add_argument("--repeats", type=int, default=5)
    pr.add_argument("--serving", action="store_true",
                    help="measure the serving cost table instead (packed batched forwards: requests x total tokens)")
    pr.add_argument("--rows", type=_csv(int), default=[1, 2, 4, 8, 16, 32], help="--serving: requests per forward")
    pr.add_argument("--out", type=Path, help="write the cost model as JSON")
    pr.add_argument("--drafters", type=_csv(str), help="drafters whose draft step to time, comma-separated "
                    "(default ngram,early-exit; e.g. heads,eagle for `eval-draft --costs`)")
    add_weights_option(pr)

    rp = sub.add_parser("report", help="write an offline HTML report + Markdown summary from bench results")
    rp.add_argument("results", type=Path, nargs="+", help="one or more bench results JSON files")
    rp.add_argument("--out", type=Path, default=Path("report.html"))
    rp.add_argument("--cost", type=Path, help="a cost model JSON from `profile --out`")

    lt = sub.add_parser("load-test", help="serve many requests at once: per-user speed vs aggregate throughput per scheme")
    lt.add_argument("--concurrency", type=_csv(int), default=None,
                    help="closed-loop levels (requests in flight), default 1,2,4,8,16,32 (with --replay: the recorded ones)")
    lt.add_argument("--schemes", type=_csv(str), default=["ar", "spec-fixed", "spec-confidence", "spec-hardware"],
                    help="comma list of ar, spec-fixed, spec-confidence, spec-hardware, spec-budget, mtp1")
    lt.add_argument("--drafter", default="ngram", help="the spec schemes' drafter (default ngram)")
    lt.add_argument("--k", type=int, default=8, help="the most drafts a request verifies per step (default 8)")
    lt.add_argument("--threshold", type=float, default=0.5, help="spec-confidence: verify while prefix survival >= this")
    lt.add_argument("--arrival-rate", type=float, default=None, metavar="R",
                    help="Poisson arrivals at R requests/s instead of a closed loop (C then only sets 4 x C requests per level)")
    lt.add_argument("--requests-per-level", type=int, default=4, help="requests per level = this x concurrency")
    lt.add_argument("--max-new-tokens", type=int, default=64)
    lt.add_argument("--force-ar", action="store_true", help="the rollback switch: every scheme decodes plain AR")
    add_weights_option(lt)
    lt.add_argument("--prompts", type=Path, default=PROMPTS_DIR / "suite.jsonl")
    lt.add_argument("--replay", type=Path, metavar="LOAD_JSON",
                    help="re-run the schedulers on this load-test's recorded drafts (simulated time)")
    lt.add_argument("--costs", type=Path,
                    help="with --replay: a serving cost table (`profile --serving --out`) or a load-test JSON (its own table)")
    lt.add_argument("--model", default="smollm2-135m", help="the local model, or with --endpoint the served model's name")
    lt.add_argument("--device", default="auto")
    lt.add_argument("--dtype", default="auto")
    add_kernels_option(lt)
    lt.add_argument("--out", type=Path, required=True)
    lt.add_argument("--endpoint", metavar="URL", help="an OpenAI-compatible server (http://host:port): the same closed-loop "
                    "workload and metrics against it, with its speculative counters per level (--schemes, --drafter, "
                    "--k, --threshold, --force-ar and --weights do not apply)")
    lt.add_argument("--baseline-endpoint", metavar="URL", help="with --endpoint: a second server (speculation off), run "
                    "back to back with it on each level's request list; matched throughput is endpoint over baseline")
    lt.add_argument("--no-prompt-cache", action="store_true", help="with --endpoint: send llama.cpp's \"cache_prompt\": "
                    "false in every request (llama-server otherwise reuses a repeated prompt's KV, which makes TTFT "
                    "meaningless); other servers may ignore or reject the field (not checked)")

    md = sub.add_parser("make-data", help="grow the training corpus: the target's answers (token ids) to prompts from every source")
    md.add_argument("--model", default="smollm2-135m", help="smollm2-135m (default) or tiny")
    md.add_argument("--shards", type=int, help="append N shards (default 1, or until --until-tokens)")
    md.add_argument("--until-tokens", type=int, help="append shards until the corpus holds N response tokens")
    md.add_argument("--max-new-tokens", type=int, default=128)
    md.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    md.add_argument("--workers", type=int, default=1,
                    help="processes answering shards side by side, one thread each, while this one gathers the next "
                         "shard's prompts (default 1: one process, its threads from OMP_NUM_THREADS); the shards are "
                         "the same bytes as one one-thread process writes")
    md.add_argument("--seed", type=int, default=0)
    md.add_argument("--shard-size", type=int, default=64, help="sequences per shard (default 64)")
    md.add_argument("--heldout", type=float, default=0.05, help="share of sequences held out, by a hash of the prompt (default 0.05)")
    md.add_argument("--sources", help="comma-separated prompt sources (default: all of templates, self-instruct, "
                                      "passages, code, multi-turn)")
    md.add_argument("--out", type=Path, help="the corpus folder (default: data/MODEL in the repository; tiny: the cache)")
    md.add_argument("--resume", action="store_true", help="grow the existing corpus of --out (its shards are verified first)")
    md.add_argument("--smoke", action="store_true", help="tiny, shards of 8 sequences of 16 tokens, into --out or the cache")
    md.add_argument("--device", default="auto")
    md.add_argument("--dtype", default="auto")

    td = sub.add_parser("train-draft", help="train a drafter on a make-data run (checkpoints, --resume)")
    td.add_argument("--kind", required=True, help="the drafter to train: draft, heads, eagle, block or block-parallel; several "
                                                  "comma-separated train together, sharing each batch's target forward")
    td.add_argument("--model", default="smollm2-135m")
    td.add_argument("--data", type=Path, help="the corpus folder (default: the committed data/MODEL)")
    td.add_argument("--data-tokens", type=int, help="train on the corpus's first shards up to N response tokens (default: all)")
    td.add_argument("--data-shards", type=int, help="train on the corpus's first N shards (default: all; pins a resumed run)")
    td.add_argument("--features", choices=("cache", "online"), default="cache",
                    help="the target's states: computed once into SPECDEC_CACHE/features (default) or in every step")
    td.add_argument("--feature-workers", type=int, default=0,
                    help="with --features online: N processes (one thread each) build the coming batches' target "
                         "states while this one, on one thread too, trains (default 0: built here, between steps); "
                         "the same weights, bit for bit, as one one-thread process")
    td.add_argument("--curve-point", type=Path, metavar="CURVE.json",
                    help="also train the whole-corpus point of this scaling curve (train-curve's settings, from scratch) "
                         "on these batches, from where this run stands; scored into the file when it finishes")
    td.add_argument("--smoke", action="store_true", help="a few steps on tiny, end to end (data made if missing)")
    td.add_argument("--init", help="warm start: 'shipped' (the repository's weights of this kind) or a weights folder; "
                                   "the optimizer state follows from the cache when this machine exported them")
    td.add_argument("--steps", type=int, help="optimizer steps (default 1200; 6 with --smoke)")
    td.add_argument("--batch-size", type=int, default=8, help="sequences per step (default 8)")
    td.add_argument("--lr", type=float, help="learning rate (default: a warm start's own, else 1e-3)")
    td.add_argument("--warmup", type=int, default=50)
    td.add_argument("--depth", type=int, default=4, help="heads: number of heads; eagle: unrolled training-time-test steps; draft: unused")
    td.add_argument("--intermediate", type=int, default=0, help="eagle and draft: MLP width (default: eagle the target's, draft 480)")
    td.add_argument("--vocab", type=int, default=0, help="reduced vocabulary size N (default: measured)")
    td.add_argument("--seed", type=int, default=0)
    td.add_argument("--checkpoint-every", type=int, default=100)
    td.add_argument("--stop-after", type=int, help="stop this sitting after N steps (checkpointed; continue with --resume)")
    td.add_argument("--resume", action="store_true", help="continue the run with these settings from its checkpoint")
    td.add_argument("--out", type=Path, help="the run folder (default: SPECDEC_CACHE/training-runs/MODEL/KIND-HASH; "
                                           "several kinds: OUT/KIND)")
    td.add_argument("--device", default="auto")

    tc = sub.add_parser("train-curve", help="the scaling curve: a drafter trained at several data sizes (and on the "
                                            "templates alone), scored on the target's answers to real prompts")
    tc.add_argument("--kind", default="heads", help="the drafter kind (default heads: the cheapest)")
    tc.add_argument("--sizes", default="25000,50000,100000,200000", help="response tokens per point, comma-separated "
                                                                      "(empty with --templates-size: that point alone)")
    tc.add_argument("--templates-size", type=int, help="one point on the templates alone, this many tokens (default: the smallest size)")
    tc.add_argument("--steps", type=int, default=600, help="steps per point, the same for every point (default 600)")
    tc.add_argument("--batch-size", type=int, default=8)
    tc.add_argument("--lr", type=float, default=1e-3)
    tc.add_argument("--vocab", type=int, default=8192, help="reduced vocabulary size, the same at every point (default "
                                                          "8192, as the shipped drafters: a measured N would grow with the data's variety)")
    tc.add_argument("--prompts", type=Path, default=Path("specdec_core/prompts/suite.jsonl"), metavar="FILE")
    tc.add_argument("--categories", default="chat,qa,story")
    tc.add_argument("--k", type=int, default=4)
    tc.add_argument("--max-new-tokens", type=int, default=64)
    tc.add_argument("--data", type=Path, help="the corpus folder (default: the committed data/MODEL)")
    tc.add_argument("--model", default="smollm2-135m")
    tc.add_argument("--device", default="auto")
    tc.add_argument("--out", type=Path, required=True, help="the curve's JSON (points already in it are kept)")
    tc.add_argument("--ship", help="points whose weights to write beside the JSON (OUT without .json/POINT/), "
                                   "comma-separated names such as all-100000,templates-100000")

    ed = sub.add_parser("eval-draft", help="offline per-position acceptance of a trained drafter on held-out data")
    ed.add_argument("--kind", required=True, help="the trained drafter to evaluate: draft, heads, eagle, block or block-parallel")
    ed.add_argument("--model", default="smollm2-135m")
    ed.add_argument("--data", type=Path, help="the corpus folder (default: the committed data/MODEL)")
    ed.add_argument("--weights", type=Path, help="a weights folder other than the shipped one (holding MODEL/KIND.safetensors)")
    ed.add_argument("--checkpoint", type=Path, metavar="RUN",
                    help="a train-draft run folder (SPECDEC_CACHE/training-runs/MODEL/KIND-...): evaluate its latest "
                         "checkpoint, a run's progress before it finishes")
    ed.add_argument("--smoke", action="store_true", help="evaluate on the smoke data run (tiny)")
    ed.add_argument("--k", type=int, default=8, help="draft positions to evaluate (default 8)")
    ed.add_argument("--limit", type=int, help="at most N held-out sequences (with --prompts: N prompts)")
    ed.add_argument("--prompts", type=Path, metavar="FILE",
                    help="instead of held-out data: the target's greedy answers to the prompts of FILE (JSONL, e.g. "
                         "the suite), scored offline and, with the shipped weights, in the decode loop, per category")
    ed.add_argument("--categories", help="with --prompts: only these categories (comma-separated)")
    ed.add_argument("--max-new-tokens", type=int, default=64, help="with --prompts: answer length (default 64)")
    ed.add_argument("--json", action="store_true")
    ed.add_argument("--costs", type=Path, metavar="FILE",
                    help="a cost model from `profile --drafters KIND --out FILE`: also choose k on the held-out split, "
                         "the k whose walked tau(k) buys the most speed at this machine's verify and draft costs")
    ed.add_argument("--calibration", type=Path, metavar="OUT",
                    help="drafters with a confidence head: also write the calibration report (ECE per position, "
                         "reliability tables, AUC; the shipped temperatures on the held-out test half) to OUT as JSON")
    ed.add_argument("--device", default="auto")

    ts = sub.add_parser("tree-shape", help="measure the heads' rank accuracies on held-out data: the shape of their "
                                            "static (Medusa) tree, shipped beside the weights as heads.tree.json")
    ts.add_argument("--model", default="smollm2-135m")
    ts.add_argument("--data", type=Path, help="the corpus folder (default: the committed data/MODEL)")
    ts.add_argument("--ranks", type=int, default=8, help="guesses per depth to measure (default 8)")
    ts.add_argument("--limit", type=int, default=0, help="at most N held-out sequences (default all)")
    ts.add_argument("--device", default="auto")

    ex = sub.add_parser("export-eagle3", help="write the shipped eagle drafter as an EAGLE-3 checkpoint (config.json + "
                                               "model.safetensors) for llama.cpp's converter (--spec-type draft-eagle3)")
    ex.add_argument("--out", type=Path, required=True, help="the checkpoint folder to write")
    ex.add_argument("--model", default="smollm2-135m")
    ex.add_argument("--gguf", type=Path, metavar="FILE", help="also run llama.cpp's convert_hf_to_gguf.py on it (f32, "
                    "--target-model-dir = the lab's converted target) and write the draft GGUF to FILE")
    ex.add_argument("--llama-cpp-src", type=Path, metavar="DIR", help="with --gguf: the llama.cpp source folder (default: "
                    "$SPECDEC_LLAMA_CPP_SRC, else the one `make llama-server` unpacks)")

    sub.add_parser("prepare", help="convert the model once into the local cache and measure this machine's kernel table")
    return parser


def cmd_generate(args) -> None:
    from tqdm import tqdm

    from .generation import check, config_from_args, generate
    from .metrics import positional_matches
    from .models import load_model
    from .quant import with_weights

    if not args.prompt.strip():
        raise SpecDecError("the prompt is empty")
    if args.trace:
        ensure_writable(args.trace)
    mode = args.mode
    if mode.startswith("spec:"):  # accept bench-style labels too
        mode, args.drafter = "spec", mode.split(":", 1)[1]
    config = config_from_args(args, mode)
    lm = with_weights(load_model(args.model, args.device, args.dtype, args.kernels), args.weights)
    check(config, lm, len(lm.encode(args.prompt, args.raw)))
    with tqdm(total=config.max_new_tokens, unit="tok", disable=args.json or not sys.stderr.isatty(), leave=False) as bar:
        result = generate(lm, args.prompt, config, raw=args.raw, progress=lambda n: bar.update(n - bar.n))
    extra = {}
    if mode == "nar":  # NAR's point: how much of AR's text did one-shot prediction get right?
        ar = generate(lm, args.prompt, config_from_args(args, "ar"), raw=args.raw)
        extra = {"matches_ar": positional_matches(result.token_ids, ar.token_ids), "ar_tokens": len(ar.token_ids)}
    if args.trace:
        result.trace.save(args.trace)
    if args.json:
        print(json.dumps({"text": result.text, "token_ids": result.token_ids, "metrics": result.metrics, **extra}, ensure_ascii=False))
        return
    print(result.text)
    m = result.metrics
    summary = (f"[{config.label}] {m['new_tokens']} tokens, {m['target_forwards']} target forwards, "
               f"tau={m['mean_acceptance_length']:.2f}, {m['tokens_per_s']:.1f} tok/s")
    if mode == "spec":
        summary += f", alpha={m['draft_acceptance_rate']:.2f}"
    if extra:
        summary += f", {extra['matches_ar']}/{extra['ar_tokens']} tokens match AR"
    print(summary, file=sys.stderr)


def cmd_export_eagle3(args) -> None:
    from .bridge.eagle3 import convert_to_gguf, export_eagle3, find_llama_cpp_src, gguf_command

    if args.llama_cpp_src and not args.gguf:
        raise SpecDecError("--llama-cpp-src needs --gguf")
    src = find_llama_cpp_src(args.llama_cpp_src) if args.gguf else None  # before the export: fail fast
    export = export_eagle3(args.out, args.model)
    print(f"EAGLE-3 checkpoint: {export.path} ({len(export.shapes)} tensors, draft vocabulary "
          f"{export.config['draft_vocab_size']}, target layers {export.config['eagle_aux_hidden_state_layer_ids']})")
    if args.gguf:
        draft = convert_to_gguf(export, args.gguf, src)
        print(f"draft GGUF: {draft}")
    else:
        draft = Path("DRAFT.gguf")
        print("convert with llama.cpp's converter: " + " ".join(gguf_command(export.path, draft, Path("LLAMA_CPP_SRC"),
                                                                             export.target_dir)))
    print(f"serve: llama-server -m TARGET.gguf -md {draft} --spec-type draft-eagle3 --spec-draft-n-max 4")


def cmd_prepare(args) -> None:
    """Convert the model once, and measure this machine's kernel table once (both cached)."""
    import torch

    from .kernels import table_key
    from .kernels.table import table_path
    from .models import cache_dir, converted_model_dir, load_model
    print(converted_model_dir())
    path = table_path(cache_dir(), table_key("smollm2-135m", torch.float32))
    if not path.is_file():
        load_model("smollm2-135m", "cpu", "float32", "measured")
    print(path)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "generate":
            cmd_generate(args)
        elif args.command == "bench":
            from .bench.run import run_bench
            run_bench(args)
        elif args.command == "profile":
            from .bench.cli import run_profile, run_serving_profile
            (run_serving_profile if args.serving else run_profile)(args)
        elif args.command == "report":
            from .bench.report import write_report
            ensure_writable(args.out)
            write_report(args.results, args.out, args.cost)
        elif args.command == "load-test":
            from .bench.cli import run_load_test_command
            run_load_test_command(args)
        elif args.command == "make-data":
            from .training.cli import run_make_data_command
            run_make_data_command(args)
        elif args.command == "train-draft":
            from .training.cli import run_train_draft_command
            run_train_draft_command(args)
        elif args.command == "eval-draft":
            from .training.cli import run_eval_draft_command
            run_eval_draft_command(args)
        elif args.command == "train-curve":
            from .training.cli import run_train_curve_command
            run_train_curve_command(args)
        elif args.command == "tree-shape":
            from .training.cli import run_tree_shape_command
            run_tree_shape_command(args)
        elif args.command == "export-eagle3":
            cmd_export_eagle3(args)
        elif args.command == "prepare":
            cmd_prepare(args)
    except SpecDecError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 0
