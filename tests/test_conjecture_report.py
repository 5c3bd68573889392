"""G3 in the report: the claim's own tables (every model against the floors, per task) and one figure per task
(entropy against position beside Bayes, coloured by the content_routing cell), drawn from results.json alone."""
from __future__ import annotations

from report_fixture import fixture_results, write_fixture

from numeric.experiments.rules import g3
from reports import figures
from reports.render import render

LABELS = {"softmax": True, "glr": False}


def _model(kl, entropy):
    arm = {"kl_bits_queries_per_seed": [kl, kl * 1.1], "kl_bits_queries": kl * 1.05, "lr": 0.01,
           "entropy_mae_bits": 0.1, "accuracy_seen": 0.5, "entropy_by_position": entropy}
    return {"arms": {"em_like": arm, "sgd": {**arm, "lr": 0.003}}}


def _entry(T):
    bayes = [2.0 - t / T for t in range(T)]
    return {"floors": {"prior": {"kl_bits_queries": 3.0, "entropy_mae_bits": 1.0, "accuracy_seen": 0.1},
                       "counts": {"kl_bits_queries": 1.0, "entropy_mae_bits": 0.5, "accuracy_seen": 0.4}},
            "content_routing": LABELS, "competition": {"softmax": True, "glr": True}, "baselines": ["lstm"],
            "parameters": {"softmax": {"all": 3584, "content_share": 0.29}, "glr": {"all": 1600, "content_share": 0.6},
                           "lstm": {"all": 3696, "content_share": 0.3}},
            "bayes_entropy_by_position": bayes,
            "mechanisms": {"softmax": _model(0.1, [b + 0.05 for b in bayes]), "glr": _model(2.0, [2.0] * T),
                           "lstm": _model(1.9, [1.95] * T)}}


def test_each_model_is_judged_at_the_schedule_its_validation_kl_chose():
    """g3.schedule: the arm whose chosen rate scored lower on validation sequences, whichever it is; G3_ARM without a
    sweep. The judged KL follows it: a model that only the other schedule brings below the floor beats it."""
    T = 5
    entry = _entry(T)
    glr = entry["mechanisms"]["glr"]
    glr["arms"]["sgd"] = {**glr["arms"]["sgd"], "kl_bits_queries_per_seed": [0.1, 0.1], "kl_bits_queries": 0.1,
                          "lr_sweep": [{"lr": 0.003, "validation_kl_bits": 0.2}], "lr_at_edge": True}
    glr["arms"]["em_like"]["lr_sweep"] = [{"lr": 0.01, "validation_kl_bits": 1.9}]
    assert g3.schedule(glr) == "sgd" and g3.schedule(entry["mechanisms"]["softmax"]) == "em_like"
    x = g3.task_inputs(entry)
    assert x["kl"]["glr"] == [0.1, 0.1] and x["details"]["glr"]["arm"] == "sgd"
    rule = g3.g3_task(x["kl"], LABELS, x["floor"], x["no_context"], x["baselines"])
    assert rule.verdict == "not-reproduced" and rule.measured["mechanisms"]["glr"]["beats_floor"]
    glr["arms"]["em_like"]["lr_sweep"] = [{"lr": 0.01, "validation_kl_bits": 0.1}]  # now EM-like validates better
    assert g3.schedule(glr) == "em_like" and g3.task_inputs(entry)["kl"]["glr"] == [2.0, 2.2]
    judged = g3.g3_task(x["kl"], LABELS, x["floor"], x["no_context"], x["baselines"]).measured
    rows = {r[0]: r for r in g3.tables({"tasks": {"t": {**x, **judged, "verdict": "v"}}})[0]["rows"]}
    assert rows["glr"][4] == "SGD 0.003*"  # the schedule, the rate and its mark at the sweep's edge


def test_g3_tables_and_figures_render_from_results_alone(tmp_path):
    experiments = {"conjecture": {"bijection": _entry(7), "transitions": _entry(9)}}
    m = g3.measure(experiments)
    rule = g3.g3(**m)
    assert rule.verdict == "reproduced" and rule.measured["competition"]["verdict"] == "not-reproduced"
    tables = g3.tables(rule.measured)
    assert [t["caption"].split(":")[0] for t in tables] == ["bijection", "transitions"]
    rows = {r[0]: r for r in tables[0]["rows"]}
    assert rows["softmax"][1] == "routes by content" and rows["lstm"][1] == "baseline (no cell)"
    assert rows["softmax"][-1] == "beats" and rows["glr"][-1] == "fails" and rows["floor: counts"][-1] == "yardstick"
    assert rows["softmax"][2] == 3584 and rows["softmax"][4] == "EM-like 0.01"  # no validation KL: G3_ARM
    results = fixture_results()
    results["experiments"] = {**results.get("experiments", {}), **experiments,
                              "measured_claims": {"G3": {"verdict": rule.verdict, "reason": rule.reason,
                                                         "measured": {}, "tables": tables,
                                                         "figures": list(g3.CLAIM.figures), "section": "s",
                                                         "controls": {}}}}
    fig = figures.conjecture(results, "transitions")
    assert fig is not None and len(fig.axes[0].lines) == 4  # three models and Bayes
    assert figures.conjecture(results, "no-such-task") is None
    write_fixture(tmp_path, results)
    render(tmp_path, pdf=False, log=lambda *a: None)
    html = (tmp_path / "report.html").read_text()
    sec = html[html.index('id="measured-G3"'):]
    assert "bijection: reproduced" in sec and "KL at queries (bits)" in sec and "floor: counts" in sec
    assert '<figure id="fig-conjecture_bijection">' in sec and '<figure id="fig-conjecture_transitions">' in sec
    assert (tmp_path / "figures" / "conjecture_transitions.pdf").exists()
    tex = (tmp_path / "report.tex").read_text()
    assert "figures/conjecture_bijection.pdf" in tex
