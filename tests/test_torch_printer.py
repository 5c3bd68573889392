"""The torch printer: strict on unsupported nodes, parenthesised by precedence, and a symbolic ->
numeric round trip (printed code evaluated against SymPy's value or torch's)."""
import pytest
import sympy as sp
import torch

from derive.general import GeneralBackend
from derive.sumform import UnsupportedNode
from derive.torch_printer import TorchPrinter, align
from numeric.generated.attention import _recip, _softmax

i, j, a, k = (sp.Symbol(x, integer=True) for x in ("i", "j", "a", "k"))
DIMS = {i: "n", j: "n", k: "n", a: "dv"}
n, dv = GeneralBackend.sizes["n"], GeneralBackend.sizes["dv"]
X, Y, Z = sp.IndexedBase("X"), sp.IndexedBase("Y"), sp.IndexedBase("Z")


c, eta = sp.Symbol("c", positive=True), sp.Symbol("eta", positive=True)


def printer():
    return TorchPrinter({"X": "X", "Y": "Y", "Z": "Z", "c": "c", "eta": "eta"}, {"n": "n_size", "dv": "dv_size"}, DIMS)


def run(expr, axes, **env):
    p = printer()
    p.target = axes
    code = align(p.tensor(expr), axes).code
    return eval(code, {"torch": torch, "_recip": _recip, "_softmax": _softmax, **env}), code


@pytest.mark.parametrize("node", [sp.Abs(X[i, a]), sp.sin(X[i, a]), X[i, i], X[i, a] ** sp.Rational(1, 2), a])
def test_unsupported_nodes_raise(node):
    with pytest.raises(UnsupportedNode):
        printer().tensor(node)


def test_contraction_round_trip_with_batch_dims():
    g = torch.Generator().manual_seed(0)
    Xv, Yv = torch.randn(2, 3, 5, 4, generator=g), torch.randn(2, 3, 5, 4, generator=g)
    expr = sp.Symbol("c") * sp.Sum(X[i, a] * Y[j, a], (a, 1, dv))
    out, code = run(expr, (i, j), X=Xv, Y=Yv, c=0.5)
    assert "@" in code or "einsum" in code
    torch.testing.assert_close(out, 0.5 * Xv @ Yv.mT)


def test_elementwise_broadcast_and_transpose():
    g = torch.Generator().manual_seed(1)
    Xv, Zv = torch.randn(3, 4, 4, generator=g), torch.randn(3, 4, generator=g)
    expr = X[j, i] * (Z[i] - 2)  # needs a transpose and a broadcast
    out, _ = run(expr, (i, j), X=Xv, Z=Zv)
    torch.testing.assert_close(out, Xv.mT * (Zv[..., :, None] - 2))


def test_sum_of_terms_and_three_operand_einsum():
    g = torch.Generator().manual_seed(2)
    Xv, Yv, Zv = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g), torch.randn(4, generator=g)
    expr = sp.Sum(X[i, a] * Y[i, a] * Z[i] + X[i, a], (a, 1, dv))
    out, _ = run(expr, (i,), X=Xv, Y=Yv, Z=Zv)
    torch.testing.assert_close(out, (Xv * Yv).sum(-1) * Zv + Xv.sum(-1))


def test_softmax_pattern_is_fused():
    """Fused and max-shifted: finite where exp overflows."""
    Xv = torch.tensor([[1000.0, 999.0, 0.0], [-5.0, 1.0, 2.0]], dtype=torch.float64)
    out, code = run(sp.exp(X[i, j]) / sp.Sum(sp.exp(X[i, k]), (k, 1, n)), (i, j), X=Xv)
    torch.testing.assert_close(out, torch.softmax(Xv, -1))
    assert "torch.exp" not in code


def test_log_sum_exp_pattern():
    Xv = torch.tensor([[1000.0, 999.0], [-5.0, 1.0]], dtype=torch.float64)
    out, code = run(sp.log(sp.Sum(sp.exp(X[i, k]), (k, 1, n))), (i,), X=Xv)
    torch.testing.assert_close(out, torch.logsumexp(Xv, -1))


def unevaluated(op, *args):
    return op(*args, evaluate=False)


def neg(x):
    return unevaluated(sp.Mul, -1, x)


def sub(x, y):
    return unevaluated(sp.Add, x, neg(y))


def div(x, y):
    return unevaluated(sp.Mul, x, unevaluated(sp.Pow, y, -1))


P, Q, R, S = (sp.IndexedBase(name) for name in "PQRS")  # vectors over i; S a matrix over (i, a)
p_, q_, r_ = P[i], Q[i], R[i]
GROUPINGS = {
    "a - (b - c)": sub(p_, sub(q_, r_)),
    "(a - b) - c": sub(sub(p_, q_), r_),
    "-(a + b)": neg(unevaluated(sp.Add, p_, q_)),
    "(a + b) * c": unevaluated(sp.Mul, unevaluated(sp.Add, p_, q_), r_),
    "a * (b - c)": unevaluated(sp.Mul, p_, sub(q_, r_)),
    "(a - b) ** 3": unevaluated(sp.Pow, sub(p_, q_), 3),
    "-a ** 2": neg(unevaluated(sp.Pow, p_, 2)),
    "a / (b * c)": div(p_, unevaluated(sp.Mul, q_, r_)),
    "a / (b + c)": div(p_, unevaluated(sp.Add, q_, r_)),
    "a - b / 2": sub(p_, unevaluated(sp.Mul, sp.Rational(1, 2), q_)),
    "-(a - b) * c / 3": unevaluated(sp.Mul, sp.Rational(-1, 3), sub(p_, q_), r_),
    "a * c / (eta * n)": unevaluated(sp.Mul, p_, div(c, unevaluated(sp.Mul, eta, n))),
    "a * c / (eta - n)": unevaluated(sp.Mul, p_, div(c, sub(eta, n))),
    "(c - eta) * n * a / eta ** 2": unevaluated(sp.Mul, sub(c, eta), n, p_, unevaluated(sp.Pow, eta, -2)),
    "sum_a -(S_ia + a)": sp.Sum(neg(unevaluated(sp.Add, S[i, a], p_)), (a, 1, dv)),
    "-sum_a S_ia - b": unevaluated(sp.Add, neg(sp.Sum(S[i, a], (a, 1, dv))), neg(q_)),
    "-sum_a -S_ia * b": neg(unevaluated(sp.Mul, sp.Sum(neg(S[i, a]), (a, 1, dv)), q_)),
}


@pytest.mark.parametrize("name", GROUPINGS)
def test_printed_grouping_evaluates_to_sympys_value(name):
    expr = GROUPINGS[name]
    g = torch.Generator().manual_seed(3)
    values = {"P": torch.randn(4, generator=g, dtype=torch.float64) + 3, "Q": torch.randn(4, generator=g, dtype=torch.float64) - 4,
              "R": torch.randn(4, generator=g, dtype=torch.float64) + 5, "S": torch.randn(4, 3, generator=g, dtype=torch.float64)}
    p = TorchPrinter({**{b: b for b in "PQRS"}, "c": "c", "eta": "eta"}, {"n": "n_size", "dv": "dv_size"}, DIMS)
    p.target = (i,)
    code = align(p.tensor(expr), (i,)).code
    out = eval(code, {"torch": torch, "_recip": _recip, "c": 0.7, "eta": 1.3, "n_size": 2, "dv_size": 3, **values})
    for row in range(4):
        point = {c: 0.7, eta: 1.3, n: 2, P[i]: values["P"][row], Q[i]: values["Q"][row], R[i]: values["R"][row],
                 **{S[i, col + 1]: values["S"][row, col] for col in range(3)}}
        want = float(expr.subs(dv, 3).doit().xreplace({k: float(v) for k, v in point.items()}))
        assert float(out[row]) == pytest.approx(want, rel=1e-12), code
    assert "+ -" not in code and "(-1 *" not in code and "- -" not in code and "--" not in code


@pytest.mark.parametrize("expr,code", [
    (-P[i], "-P"), (Q[i] - P[i], "Q - P"), (1 - P[i], "1 - P"), (-P[i] - Q[i], "-P - Q"),
    (P[i] - 2 * Q[i], "P - 2 * Q"), (P[i] / n, "P / n_size"), (-P[i] * Q[i] / (2 * eta), "-P * Q / (2 * eta)"),
    (sub(P[i], sub(Q[i], R[i])), "P - (Q - R)"), (neg(unevaluated(sp.Add, P[i], Q[i])), "-(P + Q)"),
])
def test_negation_and_subtraction_print_as_written(expr, code):
    p = TorchPrinter({**{b: b for b in "PQR"}, "eta": "eta"}, {"n": "n_size"}, DIMS)
    assert align(p.tensor(expr), (i,)).code == code


def test_an_einsum_operand_is_not_transposed_twice():
    """sum_i X_ia (M_ic - Y_ic) laid out (a, c): the operand keeps its layout, the matmul reads it."""
    m, cc = sp.IndexedBase("M"), sp.Symbol("cc", integer=True)
    p = TorchPrinter({"X": "x", "M": "m", "Y": "y"}, {"n": "n_size"}, {**DIMS, cc: "dv"})
    p.target = (a, cc)
    code = align(p.tensor(sp.Sum(X[i, a] * (m[i, cc] - Y[i, cc]), (i, 1, n))), (a, cc)).code
    assert code == "x.mT @ (m - y)"
