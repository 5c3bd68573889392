"""The bijection recall task (numeric.experiments.bijection): sequences as specified, the exact Bayes predictive
against brute force over every permutation, and the floors ordered as they see less."""
import itertools

import pytest
import torch

from numeric.experiments import bijection as bj

TINY = bj.BijectionConfig(values=3, pairs=5)


def test_sequences_show_each_key_followed_by_its_value_under_one_permutation():
    cfg = bj.BijectionConfig(values=6, pairs=9)
    y = bj.sample(cfg, 20, torch.Generator().manual_seed(0))
    assert y.shape == (20, 18) and (y[:, 0::2] < 6).all() and (y[:, 1::2] >= 6).all()
    for row in y.tolist():
        pairs = dict(zip(row[0::2], row[1::2]))  # one value per key
        assert all(pairs[k] == v for k, v in zip(row[0::2], row[1::2]))
        assert len(set(pairs.values())) == len(pairs)  # distinct keys, distinct values
    assert bj.inputs(cfg, y).shape == (20, 17, 24)


def brute_force(cfg, row):
    """P(next | prefix) by enumerating every permutation consistent with the pairs shown (keys are drawn
    independently of pi, so the posterior over pi is uniform on those)."""
    V, K = cfg.values, cfg.symbols
    out = []
    for t in range(len(row) - 1):
        p = torch.zeros(K, dtype=torch.float64)
        if row[t] >= V:
            p[:V] = 1.0 / V
        else:
            shown = {row[s]: row[s + 1] - V for s in range(0, t, 2)}
            ok = [pi for pi in itertools.permutations(range(V)) if all(pi[k] == v for k, v in shown.items())]
            for pi in ok:
                p[V + pi[row[t]]] += 1.0 / len(ok)
        out.append(p)
    return torch.stack(out)


def test_bayes_predictive_equals_brute_force_over_permutations():
    y = bj.sample(TINY, 40, torch.Generator().manual_seed(1))
    bayes = bj.bayes_predictive(TINY, y)
    for b in range(40):
        assert torch.allclose(bayes[b], brute_force(TINY, y[b].tolist()), atol=1e-12), b
    assert torch.allclose(bayes.sum(-1), torch.ones(40, 9, dtype=torch.float64))


def test_a_wrong_predictive_is_told_apart():
    """Negative control: the no-context floor and a predictive that forgets elimination score worse than Bayes."""
    y = bj.sample(TINY, 40, torch.Generator().manual_seed(1))
    bayes = bj.bayes_predictive(TINY, y)
    worse = bj.floors(TINY, y)["no_context"]
    assert bj.scores(TINY, y, bayes, bayes)["kl_bits"] == pytest.approx(0.0, abs=1e-12)
    assert bj.scores(TINY, y, worse, bayes)["kl_bits"] > 0.05


def test_counts_floor_matches_values_to_keys_by_multiplicity():
    cfg = bj.BijectionConfig(values=4, pairs=4)
    y = torch.tensor([[0, 5, 1, 6, 1, 6, 0, 5]])  # 0 -> 5 (once), 1 -> 6 (twice): at the last 0, count 1 -> only 5
    counts = bj.floors(cfg, y)["counts"][0]
    assert counts[6].tolist() == bj._uniform(8, [5]).tolist()  # the last key 0, seen once: value 5 (count 1)
    assert counts[2].tolist() == bj._uniform(8, [4, 6, 7]).tolist()  # 1 unseen: the values not yet shown


def test_floors_are_ordered_as_they_see_less_on_held_out_sequences():
    cfg = bj.BijectionConfig(values=8, pairs=12)
    y = bj.sample(cfg, 200, torch.Generator().manual_seed(2))
    nll = lambda p: float(-torch.log(p.gather(-1, y[:, 1:, None]).squeeze(-1)).mean())  # noqa: E731
    f = bj.floors(cfg, y)
    bayes = nll(bj.bayes_predictive(cfg, y))
    assert bayes < nll(f["counts"]) < nll(f["no_context"]) < nll(f["prior"])
    key, seen = bj.query_positions(cfg, y)
    assert key[:, 0::2].all() and not key[:, 1::2].any() and not seen[:, 0].any() and seen.any()
