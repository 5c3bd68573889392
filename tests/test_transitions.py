"""The enlarged wind tunnel (numeric.experiments.transitions): exact Bayes, the floors and the query positions."""
from __future__ import annotations

import math

import pytest
import torch

from numeric.experiments import transitions as tr

CFG = tr.TransitionsConfig()


def _held_out(n=256, seed=99):
    return tr.sample(CFG, n, torch.Generator().manual_seed(seed))


def test_bayes_is_the_dirichlet_counts_of_the_current_row():
    cfg = tr.TransitionsConfig(symbols=3, length=7, prior=0.5)
    y = tr.sample(cfg, 4, torch.Generator().manual_seed(1))
    p = tr.bayes_predictive(cfg, y)
    assert torch.allclose(p.sum(-1), torch.ones(()).double())
    for b in range(4):
        for t in range(6):
            a = int(y[b, t])
            n = [sum(1 for s in range(t) if y[b, s] == a and y[b, s + 1] == c) for c in range(3)]
            want = [(n[c] + 0.5) / (sum(n) + 1.5) for c in range(3)]
            assert torch.allclose(p[b, t], torch.tensor(want, dtype=torch.float64), atol=1e-14)


def test_the_chain_is_not_sticky():
    """With no extra diagonal mass a fresh row's own symbol follows it with chance 1/K: the first transition of 4096
    sequences (standard error 0.005) stays within 0.03 of 1/8; the wind tunnel's sticky rows (4 extra on the
    diagonal) give about 0.75. (Along a whole chain the self-transition frequency is higher: a row with much self-mass
    holds the chain longer.)"""
    import dataclasses

    from numeric.experiments import windtunnel

    y = tr.sample(CFG, 4096, torch.Generator().manual_seed(5))
    assert abs(float((y[:, 1] == y[:, 0]).double().mean()) - 1 / CFG.symbols) < 0.03
    sticky = windtunnel.sample(windtunnel.TunnelConfig(symbols=8, length=3, prior=0.2, sticky=4.0), 4096,
                               torch.Generator().manual_seed(5))
    assert float((sticky[:, 1] == sticky[:, 0]).double().mean()) > 0.6
    assert dataclasses.replace(CFG).sticky == 0.0


def test_the_floors_see_less_than_bayes_and_are_ordered():
    y = _held_out()
    bayes = tr.bayes_predictive(CFG, y)
    floors = tr.floors(CFG, y)
    assert set(floors) == set(tr.FLOORS)
    scores = {}
    for name, f in floors.items():
        assert f.shape == bayes.shape and torch.allclose(f.sum(-1), torch.ones(()).double())
        scores[name] = tr.scores(CFG, y, f, bayes)["kl_bits"]
    assert tr.scores(CFG, y, bayes, bayes)["kl_bits"] == 0.0
    assert 0 < scores["unigram"] < scores["no_context"] < scores["prior"], scores
    # the no-context floor beats the one-transition Dirichlet update (the same information, the wrong use of it)
    K, a = CFG.symbols, CFG.prior
    one = torch.full_like(bayes, 1 / K)
    same = y[:, 1:-1] == y[:, :-2]
    upd = torch.full((K,), a / (1 + K * a), dtype=torch.float64)
    for b, t in same.nonzero().tolist():
        row = upd.clone()
        row[y[b, t + 1]] = (1 + a) / (1 + K * a)
        one[b, t + 1] = row
    assert scores["no_context"] < tr.scores(CFG, y, one, bayes)["kl_bits"]


def test_the_no_context_floor_is_estimated_once_and_depends_only_on_the_symmetry_class():
    p_same, p_cur, p_prev = tr.no_context_table(CFG.symbols, CFG.length, CFG.prior)
    assert p_same > 1 / CFG.symbols and 0 < p_cur < 1 and 0 < p_prev < 1
    assert tr.no_context_table(CFG.symbols, CFG.length, CFG.prior) == (p_same, p_cur, p_prev)
    y = torch.tensor([[0, 0, 1, 2, 2]])
    cfg = tr.TransitionsConfig(length=5)
    f = tr.no_context(cfg, y)
    assert torch.allclose(f[0, 0], torch.full((8,), 1 / 8, dtype=torch.float64))  # no previous symbol
    assert math.isclose(float(f[0, 1, 0]), tr.no_context_table(8, 5, 0.2)[0], rel_tol=1e-12)  # 0 after 0
    assert math.isclose(float(f[0, 2, 1]), tr.no_context_table(8, 5, 0.2)[1], rel_tol=1e-12)  # 1 after 0
    assert math.isclose(float(f[0, 2, 0]), tr.no_context_table(8, 5, 0.2)[2], rel_tol=1e-12)


def test_query_positions_and_the_unigram_floor_by_hand():
    cfg = tr.TransitionsConfig(symbols=3, length=6)
    y = torch.tensor([[0, 1, 0, 2, 2, 1]])
    key, seen = tr.query_positions(cfg, y)
    assert key.all() and seen.tolist() == [[False, False, True, False, True]]
    u = tr.unigram(cfg, y)
    assert torch.allclose(u[0, 2], torch.tensor([3 / 6, 2 / 6, 1 / 6], dtype=torch.float64))


@pytest.mark.parametrize("field,value", [("symbols", 1), ("length", 2), ("prior", 0.0), ("optimizer", "lbfgs"),
                                         ("steps", 0)])
def test_bad_fields_are_refused(field, value):
    import dataclasses

    with pytest.raises(ValueError):
        dataclasses.replace(CFG, **{field: value}).validate()


def test_accuracy_counts_any_of_bayes_tied_modes():
    cfg = tr.TransitionsConfig(symbols=3, length=4)
    y = torch.tensor([[0, 1, 0, 2]])
    bayes = tr.bayes_predictive(cfg, y)
    flipped = bayes.roll(1, -1)  # the mode moved to another symbol
    assert tr.scores(cfg, y, bayes, bayes)["accuracy_seen"] == 1.0
    p = torch.tensor([[[1 / 3] * 3, [0.2, 0.2, 0.6], [0.1, 0.8, 0.1]]], dtype=torch.float64)
    # position 2 (symbol 0 seen before, its one successor 1): Bayes's mode is 1
    assert tr.scores(cfg, y, p, bayes)["accuracy_seen"] == 1.0
    assert tr.scores(cfg, y, flipped, bayes)["accuracy_seen"] == 0.0
