"""The kernel table (kernels/): every route computes nn.Linear's product, the measured table is chosen
by its own rules (one pack, cost never falling with rows, one family where it is within noise), cached
once per machine, selectable per bench mode; the row-invariance harness; the guard's flags."""
import json

import pytest
import torch

import specdec_core as sd
from specdec_core import guard
from specdec_core.kernels import LEGACY, MAX_ROWS, NAMED, KernelTable, Route, apply_kernels, kernel_table, using
from specdec_core.kernels import table as kt
from specdec_core.kernels.invariance import binary_tree, row_invariance
from specdec_core.kernels.routes import uniform_table
from specdec_core.theory import R_FLOOR

PADDED_MKL = KernelTable("probe", (Route("mkl", 1), *(Route("weight-left", 4) for _ in range(2, 4)),
                                   *(Route("weight-left", n) for n in range(4, MAX_ROWS + 1))), "mkl:1")


@pytest.mark.parametrize("table", [LEGACY, *NAMED.values(), PADDED_MKL, uniform_table("o4", "onednn", "onednn:4"),
                                   KernelTable("pad", tuple(Route("onednn", 8) for _ in range(8)) +
                                               tuple(Route("linear", 16) for _ in range(8)), "onednn:8")],
                         ids=lambda t: t.name)
def test_every_route_computes_nn_linear(table):
    model = torch.nn.Sequential(torch.nn.Linear(64, 48, bias=True), torch.nn.Linear(48, 40, bias=False))
    x_all = torch.randn(1, 70, 64)
    expected = model(x_all)
    assert apply_kernels(model, table) == 2
    for rows in (1, 2, 3, 5, 8, 9, 16, 17, 70):
        assert torch.allclose(model(x_all[:, :rows]), expected[:, :rows], atol=1e-5), (table.name, rows)
    if table.pack:  # this CPU build makes the pack: the packed kernel is the one tested, not a fallback
        assert model[0].packs[table.pack] is not None


def test_using_swaps_a_table_for_a_block_and_restores_it():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8))
    apply_kernels(model, NAMED["torch"])
    with using(model, LEGACY):
        model(torch.randn(3, 8))
        assert kernel_table(model) is LEGACY and model[0].packs["onednn:8"] is not None  # packed on first use
    assert kernel_table(model).name == "torch"


def _synthetic_ms(one_row_slow: bool) -> dict:
    """Timings in the shape of the Xeon that filed the issue: weight-left slow at 1-2 rows, every packed
    kernel ~flat; or a machine where everything is fine."""
    base = [40.0 + 2.0 * n for n in range(1, MAX_ROWS + 1)]
    ms = {name: [t * 1.3 for t in base] for name in ("linear", "weight-left")}
    if one_row_slow:
        ms["weight-left"][0] = ms["weight-left"][1] = 64.0
    for pack in kt.PACKS:
        ms[pack] = list(base) if pack.startswith("onednn") else [base[0] * 1.2] + [None] * (MAX_ROWS - 1)
    ms["onednn:8"][0] = 70.0  # a 1-row forward costlier than a 3-row one: only padding (or another pack) fixes it
    return ms


def test_the_measured_table_never_gets_cheaper_with_more_rows_and_holds_one_pack():
    ms = _synthetic_ms(one_row_slow=True)
    table = kt.choose(ms, {})
    cost = [table.time_ms(n) for n in range(1, MAX_ROWS + 1)]
    assert all(a <= b for a, b in zip(cost, cost[1:]))
    assert table.pack in kt.PACKS and all(r.rows >= n for n, r in enumerate(table.routes, start=1))
    assert cost[0] <= min(min(t for t in v if t is not None) for v in ms.values()) * kt.NOISE
    # the property is not free: taking each candidate's own unpadded time would let 3 rows cost less than 1
    naive = [ms["onednn:8"][n - 1] for n in range(1, MAX_ROWS + 1)]
    assert not all(a <= b for a, b in zip(naive, naive[1:]))


def test_one_kernel_family_is_kept_where_it_is_within_noise():
    table = kt.choose(_synthetic_ms(one_row_slow=False), {})
    assert len({r.kernel for r in table.routes}) == 1


def test_the_table_is_measured_once_per_machine_and_reused(tmp_path, tiny, monkeypatch):
    model = sd.load_model("tiny", kernels="torch").model
    key = kt.table_key("tiny", torch.float32)
    first = kt.load_or_measure(model, key, tmp_path, )
    stored = json.loads(kt.table_path(tmp_path, key).read_text())
    assert stored["key"] == key and len(stored["routes"]) == MAX_ROWS and set(stored["ms"]) == set(kt.candidates())
    monkeypatch.setattr(kt, "time_candidates", lambda *a, **k: pytest.fail("measured twice"))
    assert kt.load_or_measure(model, key, tmp_path).routes == first.routes
    assert kernel_table(model).name == "measured"
    other = {**key, "threads": key["threads"] + 1}  # another thread count is another table
    assert kt.table_path(tmp_path, other) != kt.table_path(tmp_path, key)
    apply_kernels(model, NAMED["torch"])


def test_an_unknown_table_is_one_clear_error():
    with pytest.raises(sd.SpecDecError, match="unknown kernel table 'fast'"):
        sd.load_model("tiny", kernels="fast")


@pytest.mark.parametrize("table", ["legacy", "onednn"])
def test_rows_score_the_same_alone_and_together(tiny, table):
    """The harness: up to rounding, a row's logits do not depend on the rows beside it (chains and trees,
    a cache shorter and longer than a kernel block)."""
    model = tiny.model
    with using(model, NAMED[table]):
        for rows in (1, 3, 9):
            for cache_len in (16, 63, 64):
                for tree in (None, binary_tree(rows)):
                    result = row_invariance(model, rows, cache_len, tree)
                    assert result.max_logit_diff < 1e-4 and result.max_hidden_diff < 1e-4, result
        assert row_invariance(model, 1, 16).bitwise  # one row alone is the same computation


def test_the_harness_catches_a_row_that_depends_on_its_neighbours(tiny, monkeypatch):
    from specdec_core import llama
    real = llama.rms_norm
    # a broken norm that mixes rows: each row's scale uses the mean over all rows of the forward
    monkeypatch.setattr(llama, "rms_norm", lambda x, w, eps: w * x * torch.rsqrt(x.pow(2).mean((-2, -1), keepdim=True) + eps))
    assert row_invariance(tiny.model, 4, 16).max_logit_diff > 1e-3
    monkeypatch.setattr(llama, "rms_norm", real)


def test_the_guard_flags_r_below_the_floor_and_speedups_above_k_plus_1():
    ratios = guard.raw_ratios([{"tokens": 1, "batch": 1, "seconds": 0.063}, {"tokens": 3, "batch": 1, "seconds": 0.039},
                               {"tokens": 4, "batch": 1, "seconds": 0.070}])
    assert ratios == pytest.approx({2: 0.039 / 0.063, 3: 0.070 / 0.063})
    flags = guard.ratio_flags(ratios, "legacy")
    assert len(flags) == 1 and flags[0].startswith("r(2)") and "kernel table" in flags[0]
    assert guard.ratio_flags({1: R_FLOOR, 2: 1.3}) == []
    assert guard.speedup_flags("spec:ngram", 4, {"p1": 6.18, "p2": 2.0}, 3.1)  # lesson 6's 6.18x at k = 4
    assert guard.speedup_flags("spec:ngram", 4, {"p1": 5.2}, 3.0) == []  # within the 5 % allowance
    assert guard.speedup_flags("ar@weights=int4", None, {"p1": 3.1}, 3.1) == []  # no drafts, no ceiling


def test_verify_ratios_are_an_isotonic_fit_not_a_running_maximum():
    """A slow outlier at 3 tokens lifts only the run it sits in (a running maximum would carry it to every
    later size), and a raw r(1) below 1 is planned with as 1, never below."""
    from specdec_core.costmodel import CostModel, _fitted_ratios, isotonic

    assert isotonic([1.0, 1.2, 1.1, 1.3]) == pytest.approx([1.0, 1.15, 1.15, 1.3])
    values = [float(v) for v in torch.rand(30, generator=torch.Generator().manual_seed(1))]
    fit = isotonic(values)
    assert all(a <= b + 1e-12 for a, b in zip(fit, fit[1:]))
    running = [max(values[:i + 1]) for i in range(len(values))]  # the old rule fits worse
    assert sum((f - v) ** 2 for f, v in zip(fit, values)) < sum((m - v) ** 2 for m, v in zip(running, values))

    times = {1: 50.0, 2: 48.0, 3: 70.0, 4: 55.0, 5: 57.0, 9: 66.0, 13: 80.0, 17: 95.0, 25: 120.0, 33: 150.0}
    cm = CostModel("m", "cpu", "float32", 2, 64, forward_s=[{"tokens": t, "batch": 1, "seconds": s} for t, s in times.items()])
    ratios = _fitted_ratios(cm)
    assert ratios[0] == ratios[1] == 1.0  # r(1) = 0.96 clipped
    assert ratios[2] == ratios[3] == ratios[4] == pytest.approx((70 + 55 + 57) / 3 / 50)  # the spike's run, pooled
    assert ratios[8] == pytest.approx(66 / 50) and ratios[32] == pytest.approx(3.0)  # later sizes keep their own
    assert all(a <= b for a, b in zip(list(ratios.values()), list(ratios.values())[1:]))
