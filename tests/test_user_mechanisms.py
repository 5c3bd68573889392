"""Mechanisms written as a user writes them (a claims file, the guide's recipe), their verdicts checked against
plain float64 autograd on their own torch weights: a disproved saturation cell's witness must violate the bound
when rebuilt in torch, a proved one must survive a random search there; a mechanism whose code cannot be run on
some path never takes the table down; domains are declared, validated and used."""

import textwrap

import pytest
import torch

from derive import mechanisms
from derive.mechanisms import questions, table
from derive.results import Results

OPTIONS = {"grid": [{"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}], "points": 2, "seed": 0, "budget_s": 60}

HEAD = """\
import sympy
from derive.mechanisms import Mechanism, register
from derive.mechanisms.forms import advantage, at_logits
from derive.mechanisms.softmax import score


def reference(t):
    s = t["c"] * t["q"] @ t["k"].mT
    mask = t.get("mask")
    mask = s.new_ones(s.shape) if mask is None else mask
    return weights(s, mask, t)

"""

# name -> (the file's body: weight(m, i, j), weights(s, mask, t) in torch, routing, extra Mechanism arguments)
FILES = {
    # w = softplus(s) / sum softplus(s), its declared routing form wrong (the 1/Z factor dropped)
    "softplus_wrong": """
def sp(m, x):
    return m.log(1 + m.exp(x))


def weight(m, i, j):
    return m.mask(i, j) * sp(m, m.s(i, j)) / m.sum("n", lambda k: m.mask(i, k) * sp(m, m.s(i, k)))


def routing(m, i, j):
    sig = m.exp(m.s(i, j)) / (1 + m.exp(m.s(i, j)))
    return m.mask(i, j) * sig * (m.b(i, j) - m.baseline(i))


def weights(s, mask, t):
    e = s.exp().log1p() * mask
    return e / e.sum(-1, keepdim=True)
""",
    # w_ij = P_ij e^{s_ij} / sum_k P_ik e^{s_ik}, with P any real or declared positive
    "prior_real": """
def weight(m, i, j):
    p = lambda k: m.mask(i, k) * m.leaf("P", i, k) * m.exp(m.s(i, k))
    return p(j) / m.sum("n", p)


routing = advantage


def weights(s, mask, t):
    e = t["P"] * s.exp() * mask
    return e / e.sum(-1, keepdim=True)
""",
    # w = s^2 / sum s^2: singular where a row's logits vanish
    "power": """
def weight(m, i, j):
    return m.mask(i, j) * m.s(i, j) ** 2 / m.sum("n", lambda k: m.mask(i, k) * m.s(i, k) ** 2)


routing = advantage


def weights(s, mask, t):
    e = s ** 2 * mask
    return e / e.sum(-1, keepdim=True)
""",
    # a SymPy function on the model's nodes: runs at general size, not on the rational path's graph
    "sympy_fn": """
def weight(m, i, j):
    return m.mask(i, j) * m.exp(sympy.tanh(m.s(i, j))) / m.sum("n", lambda k: m.mask(i, k) * m.exp(sympy.tanh(m.s(i, k))))


routing = advantage


def weights(s, mask, t):
    e = s.tanh().exp() * mask
    return e / e.sum(-1, keepdim=True)
""",
    # the normaliser over every key, the mask only on top: softmax unmasked, not under a mask
    "maskdep": """
def weight(m, i, j):
    return m.mask(i, j) * m.exp(m.s(i, j)) / m.sum("n", lambda k: m.exp(m.s(i, k)))


routing = advantage


def weights(s, mask, t):
    return s.softmax(-1) * mask
""",
    # a per-query temperature tau_i > 0: softmax(tau_i s_ij)
    "temperature": """
def weight(m, i, j):
    p = lambda k: m.mask(i, k) * m.exp(m.leaf("tau", i) * m.s(i, k))
    return p(j) / m.sum("n", p)


def routing(m, i, j):
    return m.leaf("tau", i) * m.alpha(i, j) * (m.b(i, j) - m.baseline(i))


def weights(s, mask, t):
    e = (t["tau"][..., :, None] * s).exp() * mask
    return e / e.sum(-1, keepdim=True)
""",
}
EXTRA = {"prior_real": 'leaves={"P": ("n", "n")}, free={"P": ("scores", "qk", "params")}',
         "temperature": 'leaves={"tau": ("n",)}, free={"tau": ("scores", "qk", "params")}, domains={"tau": "positive"}'}


def source(name, extra=None):
    extra = EXTRA.get(name, "") if extra is None else extra
    return HEAD + textwrap.dedent(FILES[name]) + textwrap.dedent(f"""

register(Mechanism({name!r}, {name!r}, score, weight, routing=routing, reference=reference, normalised=True,
                   reference_logits=at_logits(reference), latex="", routing_latex="", ref="", {extra}))
""")


def _row(loaded, tmp_path, name, extra=None, register_as=None):
    from numeric.reference_check import check_reference
    text = source(name, extra)
    if register_as:
        text = text.replace(f"Mechanism({name!r}", f"Mechanism({register_as!r}")
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    loaded(path, mechanism_checks=(check_reference,))
    results = Results({})
    rows = table.build(results, OPTIONS, log=lambda *a: None, names=[register_as or name])
    return results, rows[register_as or name]


def _tensor(point, name, shape):
    t = torch.zeros(shape, dtype=torch.float64)
    for label, value in point.items():
        if label.startswith(name + "["):
            num, _, den = value.partition("/")
            t[tuple(int(x) for x in label[len(name) + 1:-1].split(","))] = int(num) / int(den or 1)
    return t


def _torch_sides(mech, point, sizes, masked, row):
    """C9's two sides at one query row, from the mechanism's torch weights and autograd alone: L = <U, w v>."""
    n, dv = sizes["n"], sizes["dv"]
    s = _tensor(point, "s", (n, n)).requires_grad_()
    t = {leaf: _tensor(point, leaf, tuple(sizes[d] for d in dims)) for leaf, dims in mech.leaves.items()}
    t.update(s=s, mask=torch.ones(n, n, dtype=torch.float64).tril() if masked else None,
             beta=torch.tensor(0.0, dtype=torch.float64), c=torch.tensor(1.0, dtype=torch.float64))
    v, u = _tensor(point, "v", (n, dv)), _tensor(point, "U", (n, dv))
    w = mech.reference_logits(t)
    (grad,) = torch.autograd.grad((u * (w @ v)).sum(), s)
    b = (u @ v.T)[row]
    return grad[row].abs().sum().item(), 4 * (1 - w[row].max().item()) * b.abs().max().item()


def _assert_sound(mech, cell, seed=0):
    """A disproved (or mask-dependent) saturation cell's witness violates the bound in torch as printed; a proved
    one survives 300 random in-domain points in torch."""
    w = cell["witness"]
    if w is not None:
        lhs, rhs = _torch_sides(mech, w["point"], w["sizes"], w["masked"], w["row"])
        assert lhs >= float(w["lhs_at_least"]) - 1e-9 and rhs <= float(w["rhs_at_most"]) + 1e-9 and lhs > rhs, (lhs, rhs)
    if cell["verdict"] != "proved":
        return
    from numeric.oracle import draw_in_domain
    g = torch.Generator().manual_seed(seed)
    for trial in range(300):
        n = 2 + trial % 4
        scale = (0.5, 2.0, 8.0)[trial % 3]
        point, sizes = {}, {"n": n, "dv": 1}
        s = scale * torch.randn(n, n, generator=g, dtype=torch.float64)
        t = {"s": s, "v": torch.randn(n, 1, generator=g, dtype=torch.float64),
             "U": torch.randn(n, 1, generator=g, dtype=torch.float64)}
        for leaf, dims in mech.leaves.items():
            t[leaf] = draw_in_domain(mech.domain(leaf), tuple(n for _ in dims), g)
        for name, x in t.items():
            point.update({f"{name}[{','.join(map(str, ix))}]": str(float(x[ix])) for ix in _indices(x.shape)})
        point = {k: _fraction(v) for k, v in point.items()}
        for masked in (False, True):
            lhs, rhs = _torch_sides(mech, point, sizes, masked, n - 1)
            assert lhs <= rhs * (1 + 1e-9) + 1e-12, (trial, masked, lhs, rhs)


def _indices(shape):
    import itertools
    return itertools.product(*(range(d) for d in shape))


def _fraction(text):
    from fractions import Fraction
    q = Fraction(text)
    return f"{q.numerator}/{q.denominator}"


def test_a_wrong_declared_routing_form_is_not_the_gradient_saturation_is_decided_from(loaded, tmp_path):
    """The declared form is a claim (routing disproved); C9's cell reads the true gradient, so it is never
    disproved by the declared form's values (its witness, if any, violates the bound in torch)."""
    results, row = _row(loaded, tmp_path, "softplus_wrong")
    cells = row["questions"]
    assert cells["routing"]["verdict"] == "disproved"
    assert cells["saturation"]["verdict"] in ("proved", "disproved", "undecided")
    _assert_sound(mechanisms.get("softplus_wrong"), cells["saturation"])


def test_a_real_prior_leaf_disproves_the_bound_a_positive_one_proves_it(loaded, tmp_path):
    """w ∝ P e^s: the advantage form holds whatever P is; C9's chain needs w >= 0. P real: disproved, with a
    witness that violates the bound in torch. P declared positive: proved, the assumption listed."""
    _, row = _row(loaded, tmp_path, "prior_real")
    cell = row["questions"]["saturation"]
    assert row["questions"]["advantage"]["verdict"] == "proved" and cell["verdict"] == "disproved"
    assert row["domains"] == {"P": "real"}
    _assert_sound(mechanisms.get("prior_real"), cell)
    _, row = _row(loaded, tmp_path, "prior_real", register_as="prior_positive",
                  extra='leaves={"P": ("n", "n")}, free={"P": ("scores", "qk", "params")}, domains={"P": "positive"}')
    cell = row["questions"]["saturation"]
    assert cell["verdict"] == "proved", cell
    assert "P > 0 (declared)" in cell["assumptions"] and "w_ij >= 0 (sign analysis of the weight)" in cell["assumptions"]
    assert cell["witness"] is None
    _assert_sound(mechanisms.get("prior_positive"), cell)


def test_a_singular_weight_is_searched_around_not_a_crash(loaded, tmp_path):
    results, row = _row(loaded, tmp_path, "power")
    verdicts = {q: c["verdict"] for q, c in row["questions"].items()}
    assert "error" not in verdicts.values(), verdicts
    _assert_sound(mechanisms.get("power"), row["questions"]["saturation"])


def test_a_weight_a_path_cannot_run_is_that_cell_s_error_not_the_table_s(loaded, tmp_path):
    """sympy.tanh on the rational path's nodes raises; the row is still decided, every cell with a verdict,
    and a cell that could not be decided reads error with its message and fails its check."""
    results, row = _row(loaded, tmp_path, "sympy_fn")
    cells = row["questions"]
    assert set(cells) == set(questions.COLUMNS)
    assert cells["saturation"]["verdict"] == "error" and "SympifyError" in cells["saturation"]["reason"]
    assert all(c["verdict"] in ("undecided", "error") for c in cells.values())  # never a guess
    for q, cell in cells.items():
        check = next(c for c in results.checks if c.id == f"derive/mechanisms/sympy_fn/{q}")
        if cell["verdict"] == "error":
            assert cell["reason"] and check.status == "fail"
    _assert_sound(mechanisms.get("sympy_fn"), cells["saturation"])


def test_a_cell_that_fails_only_under_a_mask_is_mask_dependent(loaded, tmp_path):
    results, row = _row(loaded, tmp_path, "maskdep")
    cell = row["questions"]["advantage"]
    assert cell["verdict"] == "mask-dependent" and cell["settings"] == {"unmasked": "proved", "masked": "disproved"}
    assert cell["witness"]["masked"] is True
    check = next(c for c in results.checks if c.id == "derive/mechanisms/maskdep/advantage")
    assert check.status == "pass"  # a decided verdict about the mechanism, not an engine failure
    _assert_sound(mechanisms.get("maskdep"), row["questions"]["saturation"])


def test_a_per_query_temperature_above_one_breaks_the_bound(loaded, tmp_path):
    _, row = _row(loaded, tmp_path, "temperature")
    assert row["questions"]["routing"]["verdict"] == "proved"
    assert row["questions"]["advantage"]["verdict"] == "disproved"
    assert row["questions"]["saturation"]["verdict"] == "disproved"
    _assert_sound(mechanisms.get("temperature"), row["questions"]["saturation"])


def test_a_domain_must_name_an_own_leaf_and_a_known_domain(loaded, tmp_path):
    from derive.claimfile import ClaimFileError
    for extra, message in (('leaves={"P": ("n", "n")}, domains={"Q": "positive"}', "domains names 'Q'"),
                           ('leaves={"P": ("n", "n")}, domains={"P": "strictly positive"}', "expected one of real")):
        path = tmp_path / "bad_domain.py"
        path.write_text(source("prior_real", extra))
        with pytest.raises(ClaimFileError, match=rf"^{path}:\d+: mechanism prior_real: .*{message}"):
            loaded(path)
        assert "prior_real" not in mechanisms.REGISTRY
