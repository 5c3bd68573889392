"""The mechanism grid (numeric.experiments.mechanism_grid) on Dask: the same numbers on 1 and 2 workers, bitwise;
cached tasks resumed; the arms' learning rates; and the G1 rule (numeric.experiments.rules.g1) with its controls."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from derive import profile as profiles
from numeric.experiments import mechanism_grid as mg
from numeric.experiments import mechanism_layers as ml
from numeric.experiments import registry, rules

TINY = mg.GridConfig(length=13, steps=3, seeds=(42, 2024, 1337), seeds_per_task=2, blocks=3)
QUIET = dict(log=lambda *a: None)


def numbers(merged):
    """The grid's results without the wall times (the only part that may differ between runs)."""
    return {m: {k: v for k, v in r.items() if k != "step_seconds"} for m, r in merged.items()}


def test_grid_on_one_and_two_workers_is_bitwise_equal_and_resumes_from_its_cache(tmp_path):
    one, out1 = mg.run(TINY, workers=1, **QUIET)
    two, out2 = mg.run(TINY, workers=2, cache_dir=tmp_path, **QUIET)
    assert (out1.workers, out2.workers) == (1, 2) and out1.computed == out2.computed == 14 and not out2.failed
    assert numbers(one) == numbers(two)  # floats compared exactly (JSON-exact plain data)
    again, out3 = mg.run(TINY, workers=1, cache_dir=tmp_path, **QUIET)
    assert out3.cached == 14 and out3.computed == 0 and numbers(again) == numbers(two)
    for r in one.values():
        assert r["seeds"] == [42, 2024, 1337] and np.asarray(r["losses"]).shape == (2, 3, 4) and r["finite"]


def test_a_task_is_a_pure_function_of_its_arguments():
    threads = torch.get_num_threads()
    a = mg.train_task(TINY, "ssd", (42,))
    assert torch.get_num_threads() == threads  # the caller's setting restored
    b = mg.train_task(TINY, "ssd", (42,))
    a.pop("timing"), b.pop("timing")
    assert a == b
    both = mg.train_task(TINY, "ssd", (2024, 42))  # a seed's run does not depend on the seeds batched with it
    assert both["losses"][1][1] == a["losses"][1][0]


def test_learning_rates_of_the_arms():
    params = ml.init_params(TINY.sticky(), "moe", TINY.seeds, 2)
    lrs = mg.learning_rates("moe", TINY.arms, params)
    assert lrs["W_E"].flatten().tolist() == pytest.approx([0.01, 0.1])  # content: 10x in em_like
    for name in ("W_R", "W_O"):
        assert lrs[name].flatten().tolist() == pytest.approx([0.01, 0.01])
    assert lrs["W_E"].shape == (2, 1, 1, 1, 1) and lrs["W_O"].shape == (2, 1, 1, 1)


def test_task_names_key_the_cache_by_mechanism_seeds_and_training_config():
    names = [t.name for t in mg.tasks(TINY)]
    assert len(names) == 14 and len(set(names)) == 14 and names[0].startswith("mechanism-grid/softmax/seeds=42-2024/")
    assert mg.tasks(dataclasses.replace(TINY, steps=4))[0].name != names[0]
    assert mg.tasks(dataclasses.replace(TINY, mechanisms=("softmax",)))[0].name == names[0]


@pytest.mark.parametrize("change,match", [
    (dict(mechanisms=("softmax", "mamba")), "GridConfig.mechanisms"), (dict(steps=0), "GridConfig.steps"),
    (dict(seeds=()), "GridConfig.seeds"), (dict(arms=("sgd",)), "GridConfig.arms")])
def test_bad_grid_configs_name_the_field(change, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(TINY, **change).validate()


def test_profiles_carry_the_grids_and_validate_them():
    for p in (profiles.QUICK, profiles.DEFAULT):
        for sizes in (p.experiments.mechanism_grid, p.experiments.mechanism_grid_extended):
            mg.from_sizes(sizes).validate()
    full = profiles.DEFAULT.experiments.mechanism_grid_extended
    assert (full.length, full.steps, len(full.seeds)) == (2000, 1000, 5)
    with pytest.raises(ValueError, match="MechanismGridSizes.seeds must hold at least two"):
        profiles.MechanismGridSizes(length=50, steps=3, seeds=(1,))
    with pytest.raises(ValueError, match="ExperimentSizes.mechanism_grid must be a MechanismGridSizes"):
        profiles.QUICK.replace("experiments", mechanism_grid=(50, 3, (1, 2)))


def test_structural_labels_from_the_table_or_decided_here():
    table = {"table": {"softmax": {"questions": {"competition": {"verdict": "proved"}}},
                       "sigmoid": {"questions": {"competition": {"verdict": "disproved"}}}}}
    labels, source = mg.competition_labels(table, ("softmax", "sigmoid"))
    assert labels == {"softmax": True, "sigmoid": False} and "derive stage" in source
    labels, source = mg.competition_labels(None, ml.names())
    assert labels == {"softmax": True, "sigmoid": False, "linear": True, "ssd": False, "gate": True, "glr": False,
                      "moe": True} and "decided here" in source
    # the paper's partition: routing by content between positions (attention and SSD), not a token's own options
    labels, source = mg.content_routing_labels(None, ml.names())
    assert labels == {"softmax": True, "sigmoid": True, "linear": True, "ssd": True, "gate": False, "glr": False,
                      "moe": False} and "decided here" in source


# -- the rule --------------------------------------------------------------------------------------------------------
def test_g1_is_registered_with_its_rule_and_thresholds():
    c = registry.REGISTRY["G1"]
    assert c.rule is rules.g1 and c.ref.startswith("ours: ")
    assert all(getattr(rules, k) == v for k, v in c.thresholds.items())


def test_g1_controls_say_what_they_must():
    for cid, control in rules.G1_CONTROLS.items():
        assert control().verdict == rules.G1_EXPECTED[cid], cid
    two = rules.g1_controls(rules.g1_synthetic(seeds=2))  # as the quick profile's two seeds
    assert {cid: r.verdict for cid, (_, r) in two.items()} == rules.G1_EXPECTED


def test_g1_verdicts():
    k = rules.g1_synthetic()
    good = rules.g1(**k)
    m = good.measured
    assert good.verdict == "reproduced" and m["permutation_p"] == pytest.approx(1 / 35) and m["separated"]
    assert m["competing"] == ["softmax", "linear", "gate", "moe"] and m["difference_ci95"][0] > rules.G1_MARGIN
    assert all(m["mechanisms"][x]["excess_ci95"] == [0.0, 0.0] for x in m["others"])
    # one competing mechanism without any gain: more on average, not every one
    one = {**k, "curves": {**k["curves"], "gate": {**k["curves"]["gate"], "em_like": k["curves"]["gate"]["sgd"]}}}
    partly = rules.g1(**one)
    assert partly.verdict == "partly-reproduced" and "gate do(es) not gain" in partly.reason
    # the structure reversed: the mechanisms without competition gain
    flipped = rules.g1(k["curves"], {x: not v for x, v in k["competition"].items()}, k["steps"])
    assert flipped.verdict == "not-reproduced" and flipped.measured["difference"] < 0
    # no comparison group
    same = rules.g1(k["curves"], {x: True for x in k["curves"]}, k["steps"])
    assert same.verdict == "not-reproduced" and "no comparison" in same.reason
    # a diverged SGD arm: the mechanism is left out, named
    bad = {**k["curves"]["ssd"], "sgd": k["curves"]["ssd"]["sgd"].copy()}
    bad["sgd"][0, -1] = np.nan
    out = rules.g1({**k["curves"], "ssd": bad}, k["competition"], k["steps"])
    assert "ssd" in out.measured["left_out"] and "ssd" not in out.measured["mechanisms"]
    assert out.verdict == "partly-reproduced" and "15 relabelings the permutation test cannot reach" in out.reason
    with pytest.raises(ValueError, match="at least 2 seeds"):
        rules.g1({x: {a: c[a][:1] for a in c} for x, c in k["curves"].items()}, k["competition"], k["steps"])
    with pytest.raises(ValueError, match="lacks the arms"):
        rules.g1({"softmax": {"sgd": k["curves"]["softmax"]["sgd"]}}, k["competition"], k["steps"])


def test_g1_speedup_is_e1s_definition():
    k = rules.g1_synthetic()
    from numeric.experiments import stats as st

    for m, c in k["curves"].items():
        got = rules.g1(k["curves"], k["competition"], k["steps"]).measured["mechanisms"][m]
        assert got["speedup"] == pytest.approx(st.speedup(c["sgd"], c["em_like"], k["steps"])[0])
        assert got["baseline"] == pytest.approx(st.speedup(c["sgd"], c["sgd"], k["steps"])[0])
