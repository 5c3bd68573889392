"""The torch printer: strict on unsupported nodes, and a symbolic -> numeric round trip."""
import pytest
import sympy as sp
import torch

from derive.general import GeneralBackend
from derive.sumform import UnsupportedNode
from derive.torch_printer import TorchPrinter, align

i, j, a, k = (sp.Symbol(x, integer=True) for x in ("i", "j", "a", "k"))
DIMS = {i: "n", j: "n", k: "n", a: "dv"}
n, dv = GeneralBackend.sizes["n"], GeneralBackend.sizes["dv"]
X, Y, Z = sp.IndexedBase("X"), sp.IndexedBase("Y"), sp.IndexedBase("Z")


def printer():
    return TorchPrinter({"X": "X", "Y": "Y", "Z": "Z", "c": "c"}, {"n": "n_size", "dv": "dv_size"}, DIMS)


def run(expr, axes, **env):
    code = align(printer().tensor(expr), axes)
    return eval(code, {"torch": torch, "_recip": lambda t: 1 / t, "_softmax": None, **env}), code


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
    e = sp.exp(X[i, j]) / sp.Sum(sp.exp(X[i, k]), (k, 1, n))
    code = align(printer().tensor(e), (i, j))
    assert code.strip("()") == "_softmax(X, None, dim=-1"


def test_log_sum_exp_pattern():
    e = sp.log(sp.Sum(sp.exp(X[i, k]), (k, 1, n)))
    assert "torch.logsumexp(X, dim=-1)" in printer().tensor(e).code
