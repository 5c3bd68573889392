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


# -- the content-share control ---------------------------------------------------------------------------------------
def test_content_shares_are_counted_from_the_layers_shapes():
    counts, shares = mg.parameter_counts(TINY), mg.content_shares(TINY)
    assert set(shares) == set(TINY.mechanisms)
    # moe by hand (d_in 20, d_v 15, 8 symbols, 4 experts): W_O 15 x 8, W_R 20 x 4, content W_E 4 x 20 x 15
    assert counts["moe"] == {"content": 4 * 20 * 15, "all": 15 * 8 + 20 * 4 + 4 * 20 * 15}
    assert shares["moe"] == pytest.approx(1200 / 1400)
    # softmax: W_Q, W_K 20 x 10, W_O 15 x 8, content W_V 20 x 15
    assert shares["softmax"] == pytest.approx(300 / (2 * 200 + 300 + 120))
    # every mechanism: the numbers a run trains (one arm, one seed of init_params), content as mechanism_layers names it
    for m in TINY.mechanisms:
        params = ml.init_params(TINY.sticky(), m, TINY.seeds[:1], 1)
        total = sum(p[0, 0].numel() for p in params.values())
        content = sum(params[n][0, 0].numel() for n in ml.content(m))
        assert counts[m] == {"content": content, "all": total}, m
        assert shares[m] == pytest.approx(content / total), m
    # the sizes come from the grid's config, not a table: a wider d_v moves the attention share
    wide = dataclasses.replace(TINY, base=dataclasses.replace(TINY.base, d_v=30))
    assert mg.content_shares(wide)["softmax"] == pytest.approx(600 / (2 * 200 + 600 + 240))


def _gain_curves(gain, seeds=5, steps=200, seed=0):
    """{mechanism: {"sgd", "em_like"}}: per mechanism exponential approaches to each seed's floor (shared by the
    arms; floors close enough that every seed reaches the mean final SGD loss), the EM-like arm's time constant
    SGD's / gain[m]: an EM-like speedup of about gain[m] (E1's definition)."""
    rng = np.random.default_rng(seed)
    t, tau = np.arange(steps + 1), steps / 2.5
    out = {}
    for m, g in gain.items():
        floor = 1.9 + 0.002 * rng.standard_normal((seeds, 1))
        out[m] = {arm: floor + (np.log(8) - floor) * np.exp(-t / k)[None] + 1e-4 * rng.standard_normal((seeds, steps + 1))
                  for arm, k in (("sgd", tau), ("em_like", tau / g))}
    return out


def test_g1_a_gain_that_is_the_content_share_is_at_most_partly_reproduced():
    # the gain entirely a linear function of the share, with the shares sorted by the partition: the raw test passes
    comp, rest = ("a", "b", "c", "d"), ("e", "f", "g")
    shares = dict(zip(comp + rest, (0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2)))
    curves = _gain_curves({m: 1.0 + 4.0 * s for m, s in shares.items()})
    labels = {m: m in comp for m in shares}
    raw = rules.g1(curves, labels, 200)
    assert raw.verdict == "reproduced" and raw.measured["difference_ci95"][0] > rules.G1_MARGIN
    out = rules.g1(curves, labels, 200, shares=shares)
    m = out.measured
    assert out.verdict == "partly-reproduced" and "explained by the content share" in out.reason
    assert m["difference_ci95"] == raw.measured["difference_ci95"]  # the raw test itself unchanged
    assert m["difference_share_controlled_ci95"][0] <= rules.G1_MARGIN
    assert abs(m["difference_share_controlled"]) < 0.1 < m["difference"]
    assert m["content_share_spearman"] == pytest.approx(1.0)
    assert m["share_slope"] == pytest.approx(4.0, abs=0.3)  # speedup units per unit share, as constructed
    lo, hi = m["share_slope_ci95"]
    assert lo <= m["share_slope"] <= hi
    assert all(m["mechanisms"][x]["content_share"] == shares[x] for x in shares)
    resid = [m["mechanisms"][x]["excess_share_residual"] for x in shares]
    assert abs(sum(resid)) < 1e-9 and max(map(abs, resid)) < 0.2  # the line's residuals: noise around 0


def test_g1_a_gain_that_follows_the_partition_beyond_the_share_stays_reproduced():
    # the grid's own mechanisms, labels and shares; the gain rises with the share AND with competition
    shares = mg.content_shares(TINY)
    labels = {"softmax": True, "sigmoid": False, "linear": True, "ssd": False, "gate": True, "glr": False,
              "moe": True}  # the competition cells (test_structural_labels_from_the_table_or_decided_here)
    gain = {m: 1.5 + 2.0 * shares[m] + 1.2 * labels[m] for m in TINY.mechanisms}
    curves = _gain_curves(gain)
    out = rules.g1(curves, labels, 200, shares=shares)
    m = out.measured
    assert out.verdict == "reproduced" and "beyond their share of content parameters" in out.reason
    assert m["difference_share_controlled_ci95"][0] > rules.G1_MARGIN
    # what the constructed gains give by hand: the line through them over the shares, D on its residuals
    s, g, on = (np.array([d[x] for x in TINY.mechanisms], float) for d in (shares, gain, labels))
    on = on.astype(bool)
    slope, intercept = np.polyfit(s, g, 1)
    r = g - (intercept + slope * s)
    assert m["share_slope"] == pytest.approx(slope, abs=0.15) and m["content_share_spearman"] > 0
    assert m["difference_share_controlled"] == pytest.approx(r[on].mean() - r[~on].mean(), abs=0.1)
    assert m["difference_share_controlled"] < m["difference"]  # part of the raw difference was the share's
    # the share line cannot rescue a difference the raw test does not see
    flipped = rules.g1(curves, {x: not v for x, v in labels.items()}, 200, shares=shares)
    assert flipped.verdict == "not-reproduced"
    # the controls judged with the run's shares still say what they must
    k = {"curves": curves, "competition": labels, "steps": 200, "shares": shares}
    assert {cid: r.verdict for cid, (_, r) in rules.g1_controls(k).items()} == rules.G1_EXPECTED
    assert "difference_share_controlled" in rules.g1_controls(k)["G1/structured-gain"][1].measured
    with pytest.raises(ValueError, match="no content share for the mechanisms"):
        rules.g1(curves, labels, 200, shares={x: v for x, v in shares.items() if x != "moe"})
    with pytest.raises(ValueError, match="fraction of the parameters"):
        rules.g1(curves, labels, 200, shares={**shares, "moe": 1.5})


# the positive control's reason before the content-share control existed: shares=None must give it unchanged
G1_SYNTHETIC_REASON = (
    "competing [softmax 2.43x (excess +1.38, CI +0.94 to +1.69); linear 1.95x (excess +0.86, CI +0.28 to +1.70); "
    "gate 1.68x (excess +0.52, CI +0.07 to +1.65); moe 2.42x (excess +1.34, CI +0.91 to +1.74)] vs not [sigmoid "
    "1.06x (excess +0.00, CI +0.00 to +0.00); ssd 1.09x (excess +0.00, CI +0.00 to +0.00); glr 1.10x (excess +0.00, "
    "CI +0.00 to +0.00)]: difference of mean excess speedups +1.03 (95% expanded CI +0.89 to +1.53, 5 seeds), "
    "permutation p 0.029 over 35 relabelings: the competing mechanisms gain more, every one of them gains, and no "
    "other partition separates the gains as well")
G1_MEASURED_KEYS = {"mechanisms", "n_seeds", "steps", "resamples", "margin", "perm_p_at_most", "left_out", "competing",
                    "others", "labels", "difference", "difference_ci95", "permutation_p", "relabelings", "separated"}
G1_MECHANISM_KEYS = {"competition", "speedup", "ci95", "baseline", "excess", "excess_ci95", "gains",
                     "em_like_diverged_seeds"}


def test_g1_without_shares_is_the_rule_as_before():
    k = rules.g1_synthetic()
    plain = rules.g1(**k)
    assert plain.verdict == "reproduced" and plain.reason == G1_SYNTHETIC_REASON
    assert set(plain.measured) == G1_MEASURED_KEYS
    assert all(set(x) == G1_MECHANISM_KEYS for x in plain.measured["mechanisms"].values())
    for shuffled in (rules.g1(**rules.g1_shuffled_labels(k)), rules.g1(**rules.g1_identical_arms(k))):
        assert not any("share" in key for key in shuffled.measured)
    # with shares: every number of the test without them kept as it was, the control added beside them
    withs = rules.g1(**k, shares=mg.content_shares(TINY))
    assert withs.reason.startswith(G1_SYNTHETIC_REASON.split(": the competing mechanisms gain more")[0] + "; controlled")
    for key, value in plain.measured.items():
        if key != "mechanisms":
            assert withs.measured[key] == value, key
    for name, x in plain.measured["mechanisms"].items():
        assert {key: withs.measured["mechanisms"][name][key] for key in x} == x, name
