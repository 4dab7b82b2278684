"""Training data (specdec_core/training): the prompt set, its contamination check against the eval
prompts, and `make-data` on `tiny` end to end: shard contents, resume, and bit-identical regeneration."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from specdec_core.cli import main
from specdec_core.training import data as data_module
from specdec_core.training.data import capture_layers, read_shard
from specdec_core.training.prompts import (CATEGORIES, TrainingPrompt, check_contamination, trigram_overlap, trigrams,
                                           training_prompts)

ROOT = Path(__file__).resolve().parent.parent
RUN = ["make-data", "--model", "tiny", "--prompts", "7", "--max-new-tokens", "6", "--concurrency", "3",
       "--shard-size", "3", "--heldout", "0"]  # shards of 3 + 3 + 1 sequences


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def shard_hashes(folder: Path) -> dict[str, str]:
    return {name: s["sha256"] for name, s in json.loads((folder / "manifest.json").read_text())["shards"].items()}


@pytest.fixture(scope="module")
def run_a(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("data") / "a"
    assert main([*RUN, "--out", str(folder)]) == 0
    return folder


# --- the prompt set -----------------------------------------------------------------------------


def test_capture_layers_cover_every_drafter_and_fit_tiny():
    assert capture_layers(30) == (2, 5, 10, 15, 20, 25, 27, 30)  # EAGLE 2/15/27, block 5..25, final 30
    assert capture_layers(2) == (1, 2)


def test_prompt_order_alternates_categories_and_languages():
    prompts = training_prompts(0)
    assert len({p.text for p in prompts}) == len(prompts) >= 3000
    first = prompts[:240]
    assert [p.category for p in first[:8]] == list(CATEGORIES)
    assert all(sum(p.category == c for p in first) == 30 for c in CATEGORIES)
    assert sum(p.language == "zh" for p in first) == 80  # two English, one Chinese per category
    assert [p.index for p in first] == list(range(240))
    assert training_prompts(0) == prompts and [p.text for p in training_prompts(1)[:8]] != [p.text for p in first[:8]]


def test_trigram_overlap_takes_both_directions():
    eval_ids = [1, 2, 3, 4, 5, 6]  # 4 distinct 3-grams
    assert trigram_overlap(trigrams([1, 2, 3, 4, 9]), trigrams(eval_ids)) == pytest.approx(2 / 3)  # 2 of its 3
    assert trigram_overlap(trigrams([7, 8, *eval_ids, 9, 9, 9, 9]), trigrams(eval_ids)) == 1.0  # contains it whole
    assert trigram_overlap(trigrams([1, 2, 9, 4, 5, 9]), trigrams(eval_ids)) == 0.0
    assert trigram_overlap(trigrams([1, 2]), trigrams([1, 2])) == 0.0  # too short: only the text comparison sees it


def test_contamination_check_catches_a_copy_and_a_paraphrase(tiny):
    clean = [p.text for p in training_prompts(0)[:50]]
    copy = "can you explain it again for a ten-year-old?"  # multi_turn-02's second turn, case changed
    paraphrase = "Give me some tips for staying focused while studying in the library."  # chat-01, two words changed
    report = check_contamination(clean + [paraphrase], tiny.tokenizer)
    assert report.flagged == 1 and 0.5 <= report.max_overlap < 1
    assert report.worst_training == paraphrase and report.worst_eval.endswith("chat-01 turn 1")
    report = check_contamination(clean + [copy, paraphrase], tiny.tokenizer)
    assert report.flagged == 2 and report.max_overlap == 1.0 and report.worst_eval.endswith("multi_turn-02 turn 2")
    assert "multi_turn-02 turn 2" in report.refusal() and "100%" in report.refusal()


def test_the_real_prompt_set_is_clean_and_short(tiny):
    texts = [p.text for p in training_prompts(0)]
    report = check_contamination(texts, tiny.tokenizer)
    assert report.ok and report.max_overlap < 0.5 and report.eval_turns >= 76, report
    lengths = [len(ids) for ids in tiny.tokenizer(texts, add_special_tokens=False)["input_ids"]]
    assert max(lengths) <= 70


# --- make-data ----------------------------------------------------------------------------------


def test_make_data_writes_shards_that_replay_the_target(run_a, tiny):
    manifest = json.loads((run_a / "manifest.json").read_text())
    assert manifest["complete"] and list(manifest["shards"]) == ["train-00000", "train-00001", "train-00002"]
    assert manifest["capture_layers"] == [1, 2] and manifest["contamination"]["flagged"] == 0
    assert manifest["totals"]["sequences"] == 7
    shard = read_shard(run_a / "train-00000.safetensors")
    assert len(shard) == 3 and shard.prompt_index.tolist() == [0, 1, 2]
    prompts = training_prompts(0)
    embed = tiny.model.model.embed_tokens.weight  # tied: the output head
    for i in range(len(shard)):
        ids, prompt_len, hidden = shard.sequence(i)
        assert ids[:prompt_len] == tiny.encode(prompts[i].text)
        response = ids[prompt_len:]
        assert 1 <= len(response) <= 6 and hidden[2].shape == (len(response) + 1, 64) and hidden[2].dtype == torch.float16
        fresh = data_module.capture(data_module.Target(tiny), ids, prompt_len, (1, 2))
        assert all(torch.equal(hidden[layer], fresh[layer]) for layer in (1, 2))
        if i % 2 == 0:  # greedy: the stored final state predicts each response token
            assert (hidden[2][:-1].float() @ embed.T).argmax(-1).tolist() == response


def test_resume_rewrites_only_missing_or_corrupt_shards_identically(run_a, tmp_path, capsys):
    folder = tmp_path / "b"
    shutil.copytree(run_a, folder)
    (folder / "train-00000.safetensors").unlink()
    corrupt = folder / "train-00002.safetensors"
    corrupt.write_bytes(corrupt.read_bytes()[:-1] + b"\x00")
    code, _, err = run_main(capsys, *RUN, "--out", str(folder))
    assert code == 2 and "--resume" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_main(capsys, *RUN, "--out", str(folder), "--resume")
    assert code == 0, err
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["sittings"][-1]["written"] == ["train-00000", "train-00002"]
    for name in ("train-00000", "train-00001", "train-00002"):
        assert (folder / f"{name}.safetensors").read_bytes() == (run_a / f"{name}.safetensors").read_bytes()


def test_same_seed_regenerates_identical_shards(run_a, tmp_path):
    assert main([*RUN, "--out", str(tmp_path / "again")]) == 0
    assert shard_hashes(tmp_path / "again") == shard_hashes(run_a)


def test_held_out_prompts_go_to_their_own_shards(tmp_path):
    assert main([*RUN, "--heldout", "0.5", "--prompts", "6", "--out", str(tmp_path)]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    held = manifest["heldout"]["prompt_indices"]
    heldout_shards = [n for n in manifest["shards"] if n.startswith("heldout-")]
    assert held and heldout_shards and len(held) < 6
    seen = [i for n in heldout_shards for i in read_shard(tmp_path / f"{n}.safetensors").prompt_index.tolist()]
    assert seen == held


def test_make_data_refuses_a_contaminated_prompt_set(monkeypatch, tmp_path, capsys):
    planted = (*training_prompts(0)[:3], TrainingPrompt(3, "qa", "en", "How does a rainbow form?"))
    monkeypatch.setattr(data_module, "training_prompts", lambda seed: planted)
    code, _, err = run_main(capsys, *RUN, "--prompts", "4", "--out", str(tmp_path / "c"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "How does a rainbow form?" in err and "100%" in err and "qa-02" in err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("argv, message", [
    (["--heldout", "1.5"], "heldout must be in [0, 1)"),
    (["--prompts", "0"], "prompts must be between 1"),
    (["--concurrency", "0"], "concurrency must be between 1 and 256"),
    (["--shard-size", "0"], "shard-size must be >= 1"),
    (["--max-new-tokens", "many"], "invalid int value"),
    (["--out", str(ROOT / "data")], "inside the repository"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    code, out, err = run_main(capsys, *RUN, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
