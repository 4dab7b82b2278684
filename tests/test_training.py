"""Training data (specdec_core/training): the prompt sources, the contamination check against the eval
prompts, and `make-data` on `tiny` end to end: the committed-corpus format, append and resume
bit-identically, regeneration from the records, the manifest check and the overlap rule."""
import shutil
from pathlib import Path

import numpy as np
import pytest

from specdec_core.cli import main
from conftest import run_main
from specdec_core.training import data as data_module, sources
from specdec_core.training.corpus import load_corpus, read_manifest, read_shard
from specdec_core.training.contamination import check_contamination, trigram_overlap, trigrams
from specdec_core.training.prompts import training_prompts
from specdec_core.training.templates import CATEGORIES

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ["make-data", "--smoke"]  # tiny, shards of 8 sequences of 16 tokens


@pytest.fixture(scope="module")
def corpus_a(tmp_path_factory) -> Path:
    """Three shards in one go."""
    folder = tmp_path_factory.mktemp("corpus") / "a"
    assert main([*SMOKE, "--shards", "3", "--out", str(folder)]) == 0
    return folder


# --- the prompt set -----------------------------------------------------------------------------
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


# --- the sources --------------------------------------------------------------------------------


@pytest.mark.slow
def test_sources_are_deterministic_streams_with_cursors():
    for take in (sources.template_items, sources.passage_items, sources.code_items, sources.writer_items):
        first, cursor = take(0, 6, 0)
        assert len(first) == 6 and cursor >= 6
        again, _ = take(0, 6, 0)
        rest, _ = take(cursor, 3, 0)
        assert again == first and not {i.text for i in rest} & {i.text for i in first}
        assert all(i.messages[-1][0] == "user" and i.ref for i in first)
    code = sources.code_functions()
    assert len(code) > 1000 and all("(" in ref and ")" in ref for ref, _ in code[:50])  # the licence is in the ref
    assert sources.plant_bug("if a == b:\n    return True") == "if a != b:\n    return True"


def test_the_code_pool_is_parsed_once_and_kept_per_installed_versions(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    monkeypatch.setattr(sources, "CODE_PACKAGES", (("idna", "idna"),))  # one small package: parsed in a moment
    parse = sources._extract_functions
    sources.code_functions.cache_clear()
    try:
        parsed = sources.code_functions()
        [kept] = (tmp_path / "code-functions").glob("*.json")
        sources.code_functions.cache_clear()
        monkeypatch.setattr(sources, "_extract_functions", lambda installed: pytest.fail("parsed again"))
        assert sources.code_functions() == parsed and len(parsed) > 5  # read back, the same pool
        kept.write_text("{damaged", encoding="utf-8")
        sources.code_functions.cache_clear()
        monkeypatch.setattr(sources, "_extract_functions", parse)
        assert sources.code_functions() == parsed  # a damaged file is parsed again
    finally:
        sources.code_functions.cache_clear()  # the next test sees the real packages


def test_clean_request_keeps_the_message_and_drops_role_talk():
    assert sources.clean_request('Sure! Here is a message:\n\n"How do I bake bread without yeast?"') == \
        "How do I bake bread without yeast?"
    assert sources.clean_request("用户：请帮我写一首关于秋天的短诗。") == "请帮我写一首关于秋天的短诗。"
    assert sources.clean_request("As an AI assistant, I cannot write messages.") is None
    assert sources.clean_request("Hi!") is None


def test_multi_turn_follows_up_on_an_earlier_answer_only_of_chat_like_sources():
    chat = sources.Item("templates", "t", "qa", "en", (("user", "What is a comet?"),))
    code = sources.Item("code", "c", "explain", "en", (("user", "Explain this"),))
    earlier = [sources.Earlier(code, "x" * 50, "shard-00000 #0"), sources.Earlier(chat, "A comet is " + "ice " * 20, "shard-00000 #1")]
    items, cursor = sources.multi_turn_items(0, 1, 0, lambda j: earlier[j] if j < len(earlier) else None)
    assert cursor == 2 and len(items) == 1
    roles = [role for role, _ in items[0].messages]
    assert roles == ["user", "assistant", "user"] and items[0].ref == "follows shard-00000 #1"
    assert items[0].messages[-1][1] in sources.FOLLOW_UPS_EN


# --- make-data ----------------------------------------------------------------------------------


def test_make_data_writes_a_committable_corpus_of_token_ids(corpus_a, tiny):
    manifest = read_manifest(corpus_a)
    assert [e["file"] for e in manifest["shards"]] == ["shard-00000.npz", "shard-00001.npz", "shard-00002.npz"]
    assert manifest["totals"]["sequences"] == 24 and set(manifest["sources"]) == set(sources.MIX)
    assert all(set(e["sources"]) <= set(sources.MIX) and e["max_overlap"] < 0.5 for e in manifest["shards"])
    with np.load(corpus_a / "shard-00001.npz") as z:
        assert z["tokens"].dtype == np.uint16 and z["offsets"].dtype == np.int64
    stored = read_shard(corpus_a / "shard-00001.npz")
    assert len(stored) == 8 and {s.item.source for s in stored} >= {"multi-turn", "templates"}
    for g, s in enumerate(stored, 8):
        assert s.ids[:s.prompt_len] == tiny.encode(s.item.chat())  # the prompt, as the engine templated it
        assert 1 <= len(s.response) <= 16 and s.greedy == (g % 2 == 0)
    follow = next(s for s in stored if s.item.source == "multi-turn")
    assert follow.item.ref.startswith("follows shard-00000 #")


def test_make_data_appends_and_resumes_bit_identically(corpus_a, tmp_path, capsys):
    folder = tmp_path / "b"
    assert main([*SMOKE, "--out", str(folder)]) == 0  # one shard
    capsys.readouterr()
    code, _, err = run_main(capsys, *SMOKE, "--out", str(folder))
    assert code == 2 and "--resume" in err and len(err.strip().splitlines()) == 1
    assert main([*SMOKE, "--out", str(folder), "--resume", "--shards", "2"]) == 0
    for name in ("shard-00000.npz", "shard-00001.npz", "shard-00002.npz"):
        assert (folder / name).read_bytes() == (corpus_a / name).read_bytes()
    assert [e["cursors"] for e in read_manifest(folder)["shards"]] == [e["cursors"] for e in read_manifest(corpus_a)["shards"]]


@pytest.mark.slow
def test_make_data_with_workers_writes_the_same_bytes(corpus_a, tmp_path):
    # Shard 1 follows up on shard 0's answers: its gathering must wait for the worker still answering them.
    folder = tmp_path / "w"
    assert main([*SMOKE, "--out", str(folder), "--shards", "3", "--workers", "2"]) == 0
    for name in ("shard-00000.npz", "shard-00001.npz", "shard-00002.npz"):
        assert (folder / name).read_bytes() == (corpus_a / name).read_bytes()
    entries = read_manifest(folder)["shards"]
    assert [e["cursors"] for e in entries] == [e["cursors"] for e in read_manifest(corpus_a)["shards"]]
    assert [e["workers"] for e in entries] == [2, 2, 2]


def test_a_shard_regenerates_bit_identically_from_its_records(corpus_a, tiny):
    manifest = read_manifest(corpus_a)
    again = data_module.regenerate(tiny, corpus_a, manifest, 1)
    assert [(s.ids, s.prompt_len) for s in again] == [(s.ids, s.prompt_len) for s in read_shard(corpus_a / "shard-00001.npz")]


def test_a_corrupted_or_missing_shard_is_a_one_line_error(corpus_a, tmp_path, capsys):
    folder = tmp_path / "c"
    shutil.copytree(corpus_a, folder)
    shard = folder / "shard-00001.npz"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the compressed tokens
    shard.write_bytes(bytes(data))
    for argv in ([*SMOKE, "--out", str(folder), "--resume"],
                 ["eval-draft", "--kind", "heads", "--model", "tiny", "--data", str(folder)]):
        code, _, err = run_main(capsys, *argv)
        assert code == 2 and "shard-00001.npz does not match its SHA-256" in err and len(err.strip().splitlines()) == 1
    shard.unlink()
    code, _, err = run_main(capsys, *SMOKE, "--out", str(folder), "--resume")
    assert code == 2 and "shard-00001.npz is missing" in err


def test_the_overlap_rule_drops_a_prompt_copied_from_the_suite(monkeypatch, tmp_path, tiny):
    copied = "How does a rainbow form?"  # qa-02 of the suite, word for word
    planted = sources.Item("templates", "planted", "qa", "en", (("user", copied),))
    real = sources.template_items

    def with_copy(cursor, n, seed):
        items, after = real(cursor, n, seed)
        return ([planted, *items[:-1]] if cursor == 0 else items), after

    monkeypatch.setattr(sources, "template_items", with_copy)
    assert main([*SMOKE, "--sources", "templates", "--out", str(tmp_path / "d")]) == 0
    manifest = read_manifest(tmp_path / "d")
    corpus = load_corpus(tmp_path / "d")
    assert manifest["shards"][0]["dropped"]["overlap"] == 1 and len(corpus.sequences) == 8
    assert copied not in {s.item.text for s in corpus.sequences}
    assert not check_contamination([s.item.text for s in corpus.sequences], tiny.tokenizer).flagged
    assert check_contamination([copied], tiny.tokenizer).flagged == 1  # the rule itself, on the copy


@pytest.mark.parametrize("argv, message", [
    (["--heldout", "1.5"], "heldout must be in [0, 1)"),
    (["--concurrency", "0"], "concurrency must be between 1 and 256"),
    (["--shard-size", "0"], "shard-size must be >= 1"),
    (["--shards", "0"], "shards must be >= 1"),
    (["--workers", "0"], "workers must be >= 1"),
    (["--sources", "templates,hub"], "unknown source 'hub'"),
    (["--sources", "code"], "must include templates"),
    (["--max-new-tokens", "many"], "invalid int value"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, argv, message, tmp_path):
    code, out, err = run_main(capsys, "make-data", "--model", "tiny", "--out", str(tmp_path / "x"), *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_tiny_never_writes_into_the_repository(capsys):
    code, _, err = run_main(capsys, *SMOKE, "--out", str(ROOT / "data" / "tiny-test"))
    assert code == 2 and "inside the repository" in err and not (ROOT / "data" / "tiny-test").exists()


def test_the_feature_cache_keys_a_part_of_a_shard_apart_and_serves_any_part_from_a_whole_shard(corpus_a, tiny, monkeypatch, tmp_path):
    """A run that reads part of a shard (one source, cut at a token count) computes only that part, under
    a key of its own — never under the whole shard's key, which would hand a later run of the whole
    corpus rows of other sequences; a whole-shard file then serves the part without a forward."""
    import torch

    from specdec_core.target import Target
    from specdec_core.training import features

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    part = load_corpus(corpus_a, tokens=40, sources=("templates",))
    whole = load_corpus(corpus_a)
    assert 0 < len(part.sequences) < len(whole.sequences) and {s.item.source for s in part.sequences} == {"templates"}
    target = Target(tiny)
    real, forwards = features.capture, []
    monkeypatch.setattr(features, "capture", lambda *a: forwards.append(1) or real(*a))
    for corpus, expected in ((part, len(part.sequences)), (whole, len(whole.sequences)), (part, 0)):
        forwards.clear()
        got = features.cached(tiny, corpus, (1, 2))
        assert len(forwards) == expected
        for stored, states in zip(corpus.sequences, got):
            fresh = real(target, stored.ids, stored.prompt_len, (1, 2))
            assert all(torch.equal(states[layer], fresh[layer]) for layer in (1, 2))
