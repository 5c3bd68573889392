"""The step profile and roofline (numeric.experiments.roofline): the FLOP count is the products the step runs, the
marks leave the step's numbers unchanged, the components cover the step, the ceilings and per-mechanism points are
measured; the report draws them."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from numeric.experiments import mechanism_grid as mg
from numeric.experiments import roofline as rf
from numeric.experiments import sticky

CFG = sticky.StickyConfig(length=90, seeds=(1, 2), arms=("sgd", "em_like", "em_mstep"), blocks=3)


def test_the_flop_count_is_what_torchs_counter_sees_and_a_wrong_count_is_told_apart():
    state = rf._setup(CFG)
    counted = rf.counted_flops(lambda: rf._step(*state))
    assert rf.step_flops(CFG) == counted
    assert rf.step_flops(CFG, padded=False) < counted  # d_k = 10, d_v = 15 run at 16 columns
    other = dataclasses.replace(CFG, blocks=5)  # a count that ignored the blocks would not tell these apart
    assert rf.step_flops(other) != counted
    assert rf.step_flops(other) == rf.counted_flops(lambda: rf._step(*rf._setup(other)))


def test_marks_leave_the_step_unchanged_and_the_profile_covers_it():
    data, params, lrs, mstep, scale, blocks, work = rf._setup(CFG)
    seen = []
    plain = sticky.gradients(params, data, scale, blocks, mstep, work)
    marked = sticky.gradients(params, data, scale, blocks, mstep, work, mark=seen.append)
    assert torch.equal(plain[0], marked[0]) and all(torch.equal(a, b) for a, b in zip(plain[1], marked[1]))
    assert set(seen) <= set(rf.COMPONENTS) and seen.count("attention forward") == len(blocks)
    p = rf.profile(CFG, steps=2)
    assert set(p["components_s"]) == set(rf.COMPONENTS) and all(v >= 0 for v in p["components_s"].values())
    assert math.isclose(sum(p["components_s"].values()), p["marked_step_s"], rel_tol=1e-6)
    assert p["gflops"] > 0 and 0 <= p["thread_idle_share"] <= 1 and p["runs"] == 6
    assert p["counted_flops"] == p["flops"] == rf.step_flops(CFG)


def test_the_floor_runs_exactly_the_steps_products_and_nothing_else():
    data, params, lrs, mstep, scale, blocks, work = rf._setup(CFG)
    before = [p.clone() for p in params]
    assert rf.counted_flops(lambda: rf.products(data, params, scale, blocks, work)) == rf.step_flops(CFG)
    assert all(torch.equal(a, b) for a, b in zip(before, params))  # it trains nothing
    fewer = sticky._blocks(data.x.shape[-2], 2)  # a floor over other blocks would count other products
    assert (rf.counted_flops(lambda: rf.products(data, params, scale, fewer, sticky.workspace(CFG, fewer)))
            != rf.step_flops(CFG))


def test_the_ceilings_and_the_roofline_point():
    r = rf.roofline(CFG, steps=2, min_seconds=0.05)
    for c in r["ceiling"].values():
        assert c["gflops"] > 0 and math.isfinite(c["gflops"])
    assert r["ceiling"]["step_shape"]["shape"] == [6, 30, 16, 89]
    assert math.isclose(r["fraction_of_square_ceiling"], r["gflops"] / r["ceiling"]["square"]["gflops"])
    assert r["products_s"] > 0 and math.isclose(r["products_share"], r["products_s"] / r["step_s"])


def test_every_grid_mechanism_gets_a_point():
    cfg = mg.GridConfig(mechanisms=("softmax", "moe"), length=40, steps=2, seeds=(1, 2), blocks=2)
    times = {"softmax": {"median_s": 0.01}, "moe": {"median_s": 0.002}, "softmax/scan": {"median_s": 1.0}}
    pts = rf.mechanism_points(cfg, times, ceiling_gflops=100.0)
    assert set(pts) == {"softmax", "moe"}  # a cell's other form is timed beside, not a point
    assert pts["softmax"]["flops"] > pts["moe"]["flops"] > 0  # the mixture mixes no positions
    assert pts["softmax"]["gflops"] == pytest.approx(pts["softmax"]["flops"] / 0.01 / 1e9)


def test_the_command_refuses_bad_options(capsys):
    with pytest.raises(SystemExit):
        rf.main(["--steps", "0"])
    assert "positive integers" in capsys.readouterr().err


def test_the_report_draws_the_profile():
    from reports import figures

    p = rf.roofline(CFG, steps=1, min_seconds=0.02)
    fig = figures.step_profile({"experiments": {"step_roofline": p}})
    assert fig is not None and len(fig.axes) == 2
    assert figures.step_profile({"experiments": {}}) is None


def test_the_fused_step_is_profiled_beside_the_generated_one():
    from numeric.experiments import fused

    r = rf.roofline(CFG, steps=2, min_seconds=0.02)
    if not fused.available():
        assert r["fused"] is None
        return
    f = r["fused"]
    assert set(f["components_s"]) == {"projections", "fused attention", "parameter gradients", "optimizer", "other"}
    assert f["flops"] == rf.step_flops(CFG, padded=False) < r["flops"]  # it runs at the model's own widths
    assert math.isclose(f["speedup_over_generated"], r["step_s"] / f["step_s"])
    assert math.isclose(f["fraction_of_square_ceiling"], f["gflops"] / r["ceiling"]["square"]["gflops"])
    assert rf.fused_profile(dataclasses.replace(CFG, kernel="generated")) is None
