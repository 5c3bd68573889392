"""True identities the fuzzer starts from: the paper's closed forms, first and second derivatives, normalisations."""
from __future__ import annotations

from derive.fuzz.grammar import (
    ALL,
    ATT,
    ETA,
    ONE,
    SOFT,
    ZERO,
    C,
    Const,
    Div,
    Kron,
    Loss,
    Mask,
    Pow,
    Size,
    Sum,
    Template,
    add,
    dgrad,
    grad,
    leaf,
    mul,
    neg,
    q,
    sub,
)

# -- templates: true identities ------------------------------------------------------------------

I, J, L_, F, G, A, X_, Y_ = ("i", "n"), ("j", "n"), ("l", "n"), ("f", "dv"), ("g", "dv"), ("a", "dk"), ("x", "dx"), ("y", "m")


def _alpha(i, j):
    return q("alpha", i, j)


def _b(i, j):
    return q("b", i, j)


def _ce_dz(i, y):
    """p_iy - Y_iy: dL_i/dz_iy under cross-entropy."""
    return sub(q("p", i, y), leaf("Y", i, y))


def _proximal(j, step):
    """C10's J_j: <dL/dv_j, step_j> + N_j / (2 eta) ||step_j||^2."""
    linear = Sum("e", "dv", mul(dgrad("v", j, "e"), step("e")))
    return add(linear, mul(Div(q("responsibility", j), mul(Const(2), ETA)), Sum("e", "dv", Pow(step("e"), 2))))


def _em_step(j):
    return lambda a: neg(Div(mul(ETA, q("dV", j, a)), q("responsibility", j)))


def _c10():
    free_step = lambda a: leaf("Delta", "j", a)  # noqa: E731
    excess = sub(_proximal("j", free_step), _proximal("j", _em_step("j")))
    gap = mul(Div(q("responsibility", "j"), mul(Const(2), ETA)),
              Sum("e", "dv", Pow(sub(leaf("Delta", "j", "e"), _em_step("j")("e")), 2)))
    plain = lambda a: neg(mul(ETA, q("dV", "j", a)))  # noqa: E731
    wrong = mul(Div(q("responsibility", "j"), mul(Const(2), ETA)), Sum("e", "dv", Pow(sub(leaf("Delta", "j", "e"), plain("e")), 2)))
    return Template("C10 EM step: excess = completed square", ("scores", "qk"), (J,), excess, gap,
                    mutants=(("M16 step without 1/N_j in the square", wrong),))


def _paper():
    aij, bij = _alpha("i", "j"), _b("i", "j")
    unmasked = Sum("k", "n", mul(Div(q("e", "i", "k"), Sum("l", "n", q("e", "i", "l"))), _b("i", "k")))
    m6 = Sum("k", "n", mul(_alpha("j", "k"), q("u", "k", "f")))  # sum_i alpha_ji u_i: the wrong index
    wo_form = lambda i, f: Sum("w", "m", mul(leaf("WO", f, "w"), _ce_dz(i, "w")))  # noqa: E731
    wo_grad = Div(Sum("k", "n", mul(q("o", "k", "f"), _ce_dz("k", "y"))), Size("n"))
    return [
        Template("C1 dL/ds = alpha(b - E_alpha b)", ("scores",), (I, J), dgrad("s", "i", "j"), q("dS", "i", "j"), mutants=(
            ("M1 baseline dropped", mul(aij, bij)),
            ("M2 uniform baseline", mul(aij, sub(bij, Div(Sum("k", "n", _b("i", "k")), Size("n"))))),
            ("M3 alpha dropped", sub(bij, q("baseline", "i"))),
            ("M4 sign flipped", neg(q("dS", "i", "j"))),
            ("M5 masked positions in the baseline", mul(aij, sub(bij, unmasked))))),
        Template("C2 dL/dv = sum_i alpha_ij u_i", ("alpha", "scores", "qk"), (J, F), dgrad("v", "j", "f"), q("dV", "j", "f"),
                 mutants=(("M6 sum over the wrong index", m6),)),
        Template("C3 dL/dq = c sum_j dS_ij k_j", ("qk",), (I, A), dgrad("q", "i", "a"), q("dQ", "i", "a"), mutants=(
            ("M7 scale c lost", Sum("l", "n", mul(q("dS", "i", "l"), q("k", "l", "a")))),
            ("M8 q/k transposed", mul(C, Sum("l", "n", mul(q("dS", "l", "i"), q("k", "l", "a"))))))),
        Template("C4 dL/dk = c sum_i dS_ij q_i", ("qk",), (J, A), dgrad("k", "j", "a"), q("dK", "j", "a"),
                 mutants=(("M9 q/k transposed", mul(C, Sum("l", "n", mul(q("dS", "l", "j"), q("k", "l", "a"))))),)),
        Template("C5 dL/do = W_O(p - y)/T", ("readout",), (I, F), dgrad("o", "i", "f"), Div(wo_form("i", "f"), Size("n")),
                 loss="ce", mutants=(("M10 1/T lost", wo_form("i", "f")),)),
        Template("C5 u is dL/do", ("readout",), (I, F), dgrad("o", "i", "f"), q("u", "i", "f"), loss="ce"),
        Template("C6 sum_j dL/ds_ij = 0", ("scores",), (I,), Sum("j", "n", dgrad("s", "i", "j")), ZERO,
                 mutants=(("M11 zero-sum equals the baseline", q("baseline", "i")),)),
        Template("C7 dL/dalpha = b", ("alpha",), (I, J), dgrad("alpha", "i", "j"), bij,
                 mutants=(("M12 extra alpha factor", mul(aij, bij)),)),
        Template("C8 dL/dW_V", ("params",), (X_, F), dgrad("WV", "x", "f"), Sum("j", "n", mul(leaf("X", "j", "x"), q("dV", "j", "f"))),
                 mutants=(("M13 responsibilities transposed", Sum("j", "n", mul(leaf("X", "j", "x"), m6))),)),
        Template("C8 dL/dW_Q", ("params",), (X_, A), dgrad("WQ", "x", "a"), Sum("i", "n", mul(leaf("X", "i", "x"), q("dQ", "i", "a")))),
        Template("C8 dL/dW_K", ("params",), (X_, A), dgrad("WK", "x", "a"), Sum("j", "n", mul(leaf("X", "j", "x"), q("dK", "j", "a")))),
        Template("C8 dL/dW_O", ("readout",), (F, Y_), dgrad("WO", "f", "y"), wo_grad, loss="ce"),
        Template("C8 dL/dW_O through the attention", ATT, (F, Y_), grad(Loss(), "WO", "f", "y"), wo_grad),
        _c10(),
    ]


def _first_order():
    def hq(i, j):  # q_i . k_j
        return Sum("h", "dk", mul(q("q", i, "h"), q("k", j, "h")))

    return [
        Template("dL/dX through q, k and v", ("params",), (I, X_), dgrad("X", "i", "x"), add(
            Sum("h", "dk", mul(q("dQ", "i", "h"), leaf("WQ", "x", "h"))),
            Sum("h2", "dk", mul(q("dK", "i", "h2"), leaf("WK", "x", "h2"))),
            Sum("e", "dv", mul(q("dV", "i", "e"), leaf("WV", "x", "e"))))),
        Template("dL/dc = sum_ij dS_ij q_i.k_j", ("qk", "params"), (), dgrad("c"),
                 Sum("i", "n", Sum("j", "n", mul(q("dS", "i", "j"), hq("i", "j"))))),
        Template("c dL/dc = sum_ij dS_ij s_ij", ("qk", "params"), (), mul(C, dgrad("c")),
                 Sum("i", "n", Sum("j", "n", mul(q("dS", "i", "j"), q("s", "i", "j"))))),
        Template("dL/dc = 0 where c is not in the forward", ("alpha", "scores", "readout"), (), dgrad("c"), ZERO),
        Template("dL/deta = 0", ALL, (), dgrad("eta"), ZERO),
        Template("dL/dY = -z/T", ALL, (I, Y_), grad(Loss(), "Y", "i", "y"), neg(Div(q("z", "i", "y"), Size("n")))),
        Template("Euler in q_i: sum_a q_ia dL/dq_ia = sum_j dS_ij s_ij", ("qk",), (I,),
                 Sum("a", "dk", mul(q("q", "i", "a"), dgrad("q", "i", "a"))), Sum("j", "n", mul(q("dS", "i", "j"), q("s", "i", "j")))),
        Template("c dL/dc = sum_ia q_ia dL/dq_ia", ("qk",), (), mul(C, dgrad("c")),
                 Sum("i", "n", Sum("a", "dk", mul(q("q", "i", "a"), dgrad("q", "i", "a"))))),
        Template("sum_j dL/dv_j = sum_i u_i", ("scores", "qk"), (F,), Sum("j", "n", dgrad("v", "j", "f")), Sum("i", "n", q("u", "i", "f"))),
    ]


def _algebra():
    return [
        Template("softmax rows sum to 1", SOFT, (I,), Sum("j", "n", _alpha("i", "j")), ONE),
        Template("sum_i sum_j alpha_ij = n", SOFT, (), Sum("i", "n", Sum("j", "n", _alpha("i", "j"))), Size("n")),
        Template("responsibilities sum to n", SOFT, (), Sum("j", "n", q("responsibility", "j")), Size("n")),
        Template("C1 fused baseline", ATT, (I,), q("baseline", "i"), q("baseline_fused", "i")),
        Template("class probabilities sum to 1", ALL, (I,), Sum("y", "m", q("p", "i", "y")), ONE),
        Template("sum_i sum_y p_iy = n", ALL, (), Sum("i", "n", Sum("y", "m", q("p", "i", "y"))), Size("n")),
        Template("advantages sum to 0 over j", SOFT, (I,), Sum("j", "n", q("dS", "i", "j")), ZERO),
        Template("C9 S1 baseline as mixture", SOFT, (I, J), sub(_b("i", "j"), q("baseline", "i")),
                 Sum("k", "n", mul(_alpha("i", "k"), sub(_b("i", "j"), _b("i", "k")))),
                 mutants=(("M14 uniform mixture weights", Div(Sum("k", "n", sub(_b("i", "j"), _b("i", "k"))), Size("n"))),)),
        Template("C9 S3 off-diagonal mass", SOFT, (I, J), Sum("k", "n", mul(_alpha("i", "k"), sub(ONE, Kron("j", "k")))),
                 sub(ONE, _alpha("i", "j"))),
        Template("logits z = W_O^T o", ALL, (I, Y_), q("z", "i", "y"), Sum("e", "dv", mul(leaf("WO", "e", "y"), q("o", "i", "e")))),
        Template("trace of delta over dk", ALL, (), Sum("h", "dk", Sum("h2", "dk", mul(Kron("h", "h2"), C))), mul(Size("dk"), C)),
        Template("trace of delta over m", ALL, (), Sum("w", "m", Sum("w2", "m", mul(Kron("w", "w2"), ETA))), mul(Size("m"), ETA)),
        Template("mask idempotence M alpha = alpha", SOFT, (I, J), mul(Mask("i", "j"), _alpha("i", "j")), _alpha("i", "j")),
        Template("causal: only the diagonal is attended both ways", SOFT, (I,),
                 Sum("j", "n", mul(Mask("i", "j"), Mask("j", "i"), _alpha("i", "j"))), _alpha("i", "i"), mask_algebra="causal"),
    ]


def _second_order():
    wo = lambda f, w: leaf("WO", f, w)  # noqa: E731
    mean_wo = lambda f, w: Sum(w, "m", mul(wo(f, w), q("p", "i", w)))  # noqa: E731
    hess_o = Div(mul(Kron("i", "j"), sub(Sum("w", "m", mul(wo("f", "w"), wo("g", "w"), q("p", "i", "w"))),
                                         mul(mean_wo("f", "w"), mean_wo("g", "w2")))), Size("n"))
    return [
        Template("score-Hessian rows sum to 0", ("scores",), (I, L_, ("r", "n")),
                 Sum("j", "n", grad(dgrad("s", "i", "j"), "s", "l", "r")), ZERO),
        Template("d/dv of the score zero-sum", ("scores",), (I, L_, F), Sum("j", "n", grad(dgrad("s", "i", "j"), "v", "l", "f")), ZERO),
        Template("d(dL/do)/dY = -delta W_O / T", ("readout",), (I, F, J, Y_), grad(dgrad("o", "i", "f"), "Y", "j", "y"),
                 neg(Div(mul(Kron("i", "j"), wo("f", "y")), Size("n"))), loss="ce"),
        Template("d(dL/dv)/dY = -alpha W_O / T", ("alpha", "scores", "qk"), (J, F, L_, Y_), grad(dgrad("v", "j", "f"), "Y", "l", "y"),
                 neg(Div(mul(_alpha("l", "j"), wo("f", "y")), Size("n")))),
        Template("d(dL/dW_O)/dY = -delta o / T", ALL, (F, Y_, I, ("w", "m")), grad(grad(Loss(), "WO", "f", "y"), "Y", "i", "w"),
                 neg(Div(mul(Kron("y", "w"), q("o", "i", "f")), Size("n")))),
        Template("CE Hessian in o", ("readout",), (I, F, J, G), grad(dgrad("o", "i", "f"), "o", "j", "g"), hess_o, loss="ce"),
    ]


PAPER, FIRST_ORDER, ALGEBRA, SECOND_ORDER = _paper(), _first_order(), _algebra(), _second_order()
LIFTABLE = PAPER + FIRST_ORDER + ALGEBRA  # any true identity stays true differentiated on both sides


