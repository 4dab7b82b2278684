"""bench: our modes beside their kernel-table variants and transformers' stock peers in one interleaved run,
the environment's kernel table and guard flags, and a long run resumed where it stopped (`--resume`)."""
import json

from specdec_core.bench import run as bench_run
from specdec_core.cli import main

QUICK = "specdec_core/prompts/quick.jsonl"


def test_bench_runs_ar_beside_legacy_and_stock_transformers_and_records_the_table(tmp_path, tiny):
    out = tmp_path / "b.json"
    assert main(["bench", "--model", "tiny", "--prompts", QUICK, "--limit", "1",
                 "--modes", "ar,ar@kernels=torch,spec:ngram@kernels=onednn,hf:ar,hf:ar@kernels=engine",
                 "--max-new-tokens", "8", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["environment"]["kernel_table"]["name"] == "legacy"  # this test process's pin
    assert all(s["identical_to_ar"] == "1/1" for s in report["summary"].values())
    assert isinstance(report["flags"], list) and "verify_ratios_raw" in report["environment"]
    assert main(["bench", "--model", "tiny", "--modes", "ar@kernels=fast", "--out", str(out)]) == 2


def _bench(out, *extra) -> int:
    return main(["bench", "--model", "tiny", "--prompts", QUICK, "--limit", "3", "--modes", "ar,spec:ngram",
                 "--max-new-tokens", "6", "--out", str(out), *extra])


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path, tiny, monkeypatch):
    out = tmp_path / "b.json"
    real, calls = bench_run.run_case, []

    def stop_at_the_third_prompt(lm, peers, mode, case, config, history=None):
        calls.append(case.id)
        if len(set(calls)) == 3:  # the warm-up (on the first prompt), two measured prompts, then stop
            raise KeyboardInterrupt
        return real(lm, peers, mode, case, config, history)

    monkeypatch.setattr(bench_run, "run_case", stop_at_the_third_prompt)
    assert _bench(out) == 130
    partial = json.loads(out.with_name("b.json.partial.json").read_text())
    assert len(partial["done"]) == 2 and len(partial["results"]) == 4  # two prompts, each ar and spec:ngram
    monkeypatch.setattr(bench_run, "run_case", real)
    assert _bench(out, "--resume") == 0
    report = json.loads(out.read_text())
    assert [r["prompt_id"] for r in report["results"]].count(partial["done"][0]) == 2  # not run twice
    assert len(report["results"]) == 6 and not out.with_name("b.json.partial.json").exists()


def test_a_run_from_another_machine_or_commit_is_not_resumed(tmp_path, tiny, capsys):
    out = tmp_path / "b.json"
    assert _bench(out, "--resume") == 2 and "nothing to resume" in capsys.readouterr().err
    partial = out.with_name("b.json.partial.json")
    partial.write_text(json.dumps({"origin": {"cpu": "another CPU", "commit": "abc", "threads": 2},
                                   "config": {}, "done": [], "results": []}))
    assert _bench(out, "--resume") == 2
    assert "cannot resume" in capsys.readouterr().err and partial.exists()
