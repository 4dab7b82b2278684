"""CLI: JSON output schema, bench output schema, and every bad input -> one line on stderr, exit 2."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specdec_core.cli import main
from conftest import run_main

ROOT = Path(__file__).resolve().parent.parent


def test_generate_json_schema(capsys):
    code, out, err = run_main(capsys, "generate", "--model", "tiny", "--prompt", "hello there", "--mode", "spec",
                              "--drafter", "sim", "--max-new-tokens", "8", "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"text", "token_ids", "metrics"}
    assert isinstance(data["text"], str) and len(data["token_ids"]) == 8
    for key in ("new_tokens", "target_forwards", "draft_acceptance_rate", "mean_acceptance_length",
                "accepted_per_pos", "ttft_s", "tokens_per_s", "peak_rss_bytes", "kv_cache_bytes"):
        assert key in data["metrics"]


def test_generate_nar_reports_matches_with_ar(capsys, tmp_path):
    trace = tmp_path / "t.json"
    code, out, err = run_main(capsys, "generate", "--model", "tiny", "--prompt", "hi", "--mode", "nar",
                              "--window", "4", "--max-new-tokens", "8", "--trace", str(trace))
    assert code == 0 and "tokens match AR" in err
    assert json.loads(trace.read_text())["mode"] == "nar"


def test_bench_output_schema(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "copy", "prompt": "Repeat: a b c a b c"}\n'
                       '{"id": "b", "category": "multi_turn", "turns": ["Hi", "Tell me more"]}\n')
    out = tmp_path / "r.json"
    code, _, err = run_main(capsys, "bench", "--model", "tiny", "--prompts", str(prompts), "--modes", "ar,spec:sim,spec:ngram,hf:ar",
                            "--max-new-tokens", "6", "--out", str(out))
    assert code == 0, err
    report = json.loads(out.read_text())
    assert set(report) >= {"environment", "results", "summary", "by_category"}
    env = report["environment"]
    assert env["commit"] and env["threads"] >= 1  # every result file names the code and machine that made it
    assert env["verify_ratios"]["0"] == 1.0 and env["verify_ratios"]["4"] >= 1.0  # what spec:ngram's cost rule used
    row = report["results"][0]
    assert set(row) >= {"prompt_id", "category", "mode", "k", "temperature", "repeat", "token_ids", "text", "new_tokens",
                        "wall_s", "ttft_s", "target_forwards", "mean_accepted_length", "acceptance_rate", "identical_to_ar"}
    assert set(report["summary"]) == {"ar", "spec:sim", "spec:ngram", "hf:ar"}
    assert report["summary"]["spec:sim"]["identical_to_ar"] == "2/2"
    assert report["summary"]["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    assert set(report["by_category"]) == {"copy", "multi_turn"}
    html = tmp_path / "report.html"
    code, _, err = run_main(capsys, "report", str(out), "--out", str(html))
    assert code == 0, err
    assert "plotly.min.js" in html.read_text() and "spec:sim" in html.with_suffix(".md").read_text()
    assert "Plotly" in (tmp_path / "plotly.min.js").read_text()[:100_000]  # offline: the bundle lies beside the page


def test_bench_categories_pick_prompts(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "copy", "prompt": "Repeat: a b c"}\n'
                       '{"id": "b", "category": "chat", "prompt": "Hi"}\n'
                       '{"id": "c", "category": "qa", "prompt": "Why?"}\n')
    out = tmp_path / "r.json"
    code, _, err = run_main(capsys, "bench", "--model", "tiny", "--prompts", str(prompts), "--categories", "qa,copy",
                            "--modes", "ar", "--max-new-tokens", "2", "--out", str(out))
    assert code == 0, err
    report = json.loads(out.read_text())
    assert [r["prompt_id"] for r in report["results"]] == ["a", "c"]  # file order, only the named categories
    assert report["config"]["categories"] == "qa,copy"


def test_bench_sweep_labels(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "chat", "prompt": "Hello"}\n')
    out = tmp_path / "r.json"
    code, _, err = run_main(capsys, "bench", "--model", "tiny", "--prompts", str(prompts), "--modes", "ar,spec:sim",
                            "--k", "1,2", "--max-new-tokens", "4", "--out", str(out))
    assert code == 0, err
    assert set(json.loads(out.read_text())["summary"]) == {f"{m}@k={k},t=0" for m in ("ar", "spec:sim") for k in (1, 2)}


LONG_PROMPT = "word " * 2100  # tiny's context is 2048 tokens

BAD_GENERATE = [
    (["--prompt", ""], "prompt is empty"),
    (["--prompt", "   "], "prompt is empty"),
    (["--prompt", LONG_PROMPT], "more than the model's context"),
    (["--prompt", "hi", "--k", "0", "--mode", "spec"], "k must be between 1 and 16"),
    (["--prompt", "hi", "--k", "17", "--mode", "spec"], "k must be between 1 and 16"),
    (["--prompt", "hi", "--max-new-tokens", "0"], "max-new-tokens must be >= 1"),
    (["--prompt", "hi", "--max-new-tokens", "5000"], "does not fit"),
    (["--prompt", "hi", "--temperature", "-1"], "temperature must be >= 0"),
    (["--prompt", "hi", "--top-p", "0"], "top-p must be in (0, 1]"),
    (["--prompt", "hi", "--top-p", "1.5"], "top-p must be in (0, 1]"),
    (["--prompt", "hi", "--top-k", "-1"], "top-k must be >= 0"),
    (["--prompt", "hi", "--mode", "fast"], "unknown mode"),
    (["--prompt", "hi", "--mode", "spec", "--drafter", "oracle"], "unknown drafter"),
    (["--prompt", "hi", "--model", "gpt-5"], "unknown model"),
    (["--prompt", "hi", "--device", "tpu"], "unknown device"),
    (["--prompt", "hi", "--mode", "jacobi", "--temperature", "0.5"], "decodes greedily"),
    (["--prompt", "hi", "--trace", "/proc/no/such/dir/t.json"], "cannot write"),
    (["--prompt", "hi", "--k", "two"], "invalid int value"),
    (["--prompt", "hi", "--mode", "spec", "--drafter", "ngram", "--tree", "dynamic"], "cannot draft a dynamic tree"),
    (["--prompt", "hi", "--mode", "spec", "--drafter", "heads", "--tree", "bushy"], "unknown tree"),
    (["--prompt", "hi", "--mode", "spec", "--drafter", "heads", "--tree", "dynamic", "--tree-nodes", "65"], "tree-nodes must be"),
]


@pytest.mark.parametrize("args,message", BAD_GENERATE, ids=[m for _, m in BAD_GENERATE])
def test_bad_generate_input(capsys, args, message):
    model = [] if "--model" in args else ["--model", "tiny"]
    code, out, err = run_main(capsys, "generate", *model, *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


def test_cuda_without_gpu(capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, _, err = run_main(capsys, "generate", "--model", "tiny", "--prompt", "hi", "--device", "cuda")
    assert code == 2 and "no GPU is available" in err


def _bench_args(tmp_path, prompts: Path, out: Path | None = None) -> list[str]:
    return ["bench", "--model", "tiny", "--prompts", str(prompts), "--out", str(out or tmp_path / "r.json")]


def test_bad_bench_input(capsys, tmp_path):
    cases = []
    cases.append((_bench_args(tmp_path, tmp_path / "missing.jsonl"), "cannot read prompts file"))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"id": "a", "category": "chat", "prompt": "caf\xe9"}\n'.encode("latin-1"))
    cases.append((_bench_args(tmp_path, latin), "is not UTF-8"))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a", "category": "chat", "prompt": "ok"}\n{"id": "b", "category": \n')
    cases.append((_bench_args(tmp_path, broken), "line 2"))
    no_prompt = tmp_path / "noprompt.jsonl"
    no_prompt.write_text('{"id": "a", "category": "chat"}\n')
    cases.append((_bench_args(tmp_path, no_prompt), "line 1"))
    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "a", "category": "chat", "prompt": "ok"}\n')
    cases.append((_bench_args(tmp_path, good, Path("/proc/nope/r.json")), "cannot write"))
    cases.append((_bench_args(tmp_path, good) + ["--modes", "ar,spec:magic"], "unknown mode"))
    cases.append((_bench_args(tmp_path, good) + ["--categories", "chat,code"], "has no category 'code': it has chat"))
    cases.append((_bench_args(tmp_path, good) + ["--k", "1,40"], "k must be between 1 and 16"))
    cases.append((_bench_args(tmp_path, good) + ["--modes", "ar,llamacpp:ar@weights=int4"], "unknown setting 'weights'"))
    cases.append((_bench_args(tmp_path, good) + ["--modes", "ar,spec:heads@tree=bushy"], "tree must be one of"))
    cases.append((_bench_args(tmp_path, good) + ["--modes", "ar,spec:heads@nodes=many"], "nodes must be a whole number"))
    cases.append((_bench_args(tmp_path, good) + ["--modes", "ar,spec:heads@k=0"], "k must be a whole number >= 1"))
    cases.append((_bench_args(tmp_path, good) + ["--modes", "ar@k=2"], "unknown setting 'k'"))
    cases.append((_bench_args(tmp_path, good) + ["--modes", "spec:heads@k=1", "--k", "2,4"], "drafts its own k"))
    cases.append((_bench_args(tmp_path, good) + ["--modes", "ar,spec:ngram@tree=dynamic"], "cannot draft a dynamic tree"))
    from specdec_core.bench import llamacpp  # the peer row: missing binding, or a model without a GGUF
    cases.append((_bench_args(tmp_path, good) + ["--modes", "ar,llamacpp:ar"],
                  "runs the smollm2-135m GGUF only" if llamacpp.available() else "run `make llamacpp`"))
    cases.append((["profile", "--model", "tiny", "--drafters", "heads,medusa"], "unknown drafter medusa"))
    for argv, message in cases:
        code, _, err = run_main(capsys, *argv)
        assert code == 2 and err.count("\n") == 1 and message in err, (argv, err)


def test_real_process_exit_code_and_no_traceback():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "specdec_core", "generate", "--model", "tiny", "--prompt", "hi", "--k", "99",
                           "--mode", "spec"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: k must be between 1 and 16 (got 99)"


def test_every_subcommand_has_help():
    for sub in ("generate", "bench", "profile", "report", "prepare"):
        with pytest.raises(SystemExit) as exit_info:
            main([sub, "--help"])
        assert exit_info.value.code == 0


def test_bench_runs_a_chain_and_its_tree_interleaved(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "category": "chat", "prompt": "hello there"}\n')
    out = tmp_path / "r.json"
    code, _, err = run_main(capsys, *_bench_args(tmp_path, prompts, out), "--max-new-tokens", "12",
                            "--modes", "spec:heads,spec:heads@tree=dynamic@nodes=6,spec:heads@k=1")
    assert code == 0, err
    report = json.loads(out.read_text())
    rows = {r["mode"]: r for r in report["results"]}
    assert set(rows) == {"ar", "spec:heads", "spec:heads@tree=dynamic@nodes=6", "spec:heads@k=1"}
    # A mode's own k: it drafts one token a step, paired with the same ar runs as the run's k = 4.
    assert rows["spec:heads@k=1"]["draft_k"] == 1 and rows["spec:heads"]["draft_k"] == 4 == rows["spec:heads@k=1"]["k"]
    assert len(rows["spec:heads@k=1"]["offered_per_pos"]) == 1 < len(rows["spec:heads"]["offered_per_pos"])
    assert rows["spec:heads@k=1"]["token_ids"] == rows["ar"]["token_ids"]
    assert report["summary"]["spec:heads@k=1"]["draft_k"] == 1
    assert rows["spec:heads@tree=dynamic@nodes=6"]["token_ids"] == rows["ar"]["token_ids"]
    assert rows["spec:heads"]["offered_per_rank"] is None  # a chain has no siblings
    offered = rows["spec:heads@tree=dynamic@nodes=6"]["offered_per_rank"]
    assert offered and offered[0] >= rows["spec:heads@tree=dynamic@nodes=6"]["target_forwards"] - 1


def test_generate_reads_bench_mode_labels(capsys):
    """generate and bench share one mode parser (bench/run.py's parse_mode): a bench label decodes here too,
    its own settings winning over the options; a peer is bench's alone."""
    code, out, err = run_main(capsys, "generate", "--model", "tiny", "--prompt", "hi", "--mode", "spec:sim@k=2",
                              "--k", "6", "--max-new-tokens", "6", "--json")
    assert code == 0, err
    assert len(json.loads(out)["metrics"]["offered_per_pos_count"]) == 2  # @k=2, not --k 6
    code, _, err = run_main(capsys, "generate", "--model", "tiny", "--prompt", "hi", "--mode", "hf:ar")
    assert code == 2 and "peer" in err and len(err.strip().splitlines()) == 1
