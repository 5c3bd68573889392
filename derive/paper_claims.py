"""C1–C10 of the paper and their negative controls, registered in `derive.claim.REGISTRY` on import."""
from __future__ import annotations

from derive.claim import Claim, Identity, Mutant, register

IDS = frozenset(f"C{i}" for i in range(1, 11))
# The generated API kernels a closed form feeds (derive.codegen.API).
BACKWARD = ("attention_backward", "attention_backward_from_forward")
GRADS = BACKWARD + ("attention_grads_from_forward",)
ROUTING = ("attention_routing", "attention_routing_from_forward")  # without dQ and dK (numeric.watch)


def _proximal(m, j, step):
    """C10's objective for value j: <dL/dv_j, Delta_j> + N_j/(2 eta) ||Delta_j||^2 (J = sum_j J_j)."""
    linear = m.sum("dv", lambda a: m.derived_grad("v", j, a) * step(j, a))
    return linear + m.responsibility(j) / (2 * m.eta) * m.sum("dv", lambda a: step(j, a) * step(j, a))


def _em_step(m, j, a):
    """The responsibility-normalised step Delta*_j = -eta sum_i alpha_ij u_i / N_j."""
    return -m.eta * m.dV(j, a) / m.responsibility(j)


def _em_gap(m, j, step):
    """The completed square N_j/(2 eta) ||Delta_j - step_j||^2."""
    def sq(a):
        r = m.leaf("Delta", j, a) - step(m, j, a)
        return r * r

    return m.responsibility(j) / (2 * m.eta) * m.sum("dv", sq)


def _em_excess(m, j, step):
    """J_j(Delta_j) - J_j(step_j): how much worse a free step is than the proposed minimiser."""
    return _proximal(m, j, lambda j_, a: m.leaf("Delta", j_, a)) - _proximal(m, j, lambda j_, a: step(m, j_, a))


def _unmasked_alpha(m, i, k):
    """Softmax that forgets the mask (the masked-baseline mutant)."""
    return m.e(i, k) / m.sum("n", lambda l: m.e(i, l))


def _wrong_step(m, j, a):
    return -m.eta * m.dV(j, a)


register(Claim(
    id="C1", name="score-advantage",
    statement=r"\frac{\partial L}{\partial s_{ij}} = \alpha_{ij}\Big(b_{ij} - \sum_k \alpha_{ik} b_{ik}\Big)",
    ref="arXiv 2512.22473, advantage-based routing (the baseline is the alpha-weighted mean of b)",
    parts=(Identity("main", ("n", "n"), "scores", lambda m, i, j: m.derived_grad("s", i, j),
                    lambda m, i, j: m.dS(i, j), r"\partial L/\partial s_{ij} = \alpha_{ij}(b_{ij}-\bar b_i)",
                    kernels=BACKWARD + ROUTING, output="dS"),
           # The generated code computes the baseline this way: O(n d) instead of O(n^2 d).
           Identity("fused baseline", ("n",), "scores", lambda m, i: m.baseline(i), lambda m, i: m.baseline_fused(i),
                    r"\sum_k \alpha_{ik} b_{ik} = u_i\cdot o_i", replaces="baseline")),
    mutants=(
        Mutant("M1-drop-baseline", "C1", "main", "baseline dropped: alpha_ij b_ij",
               lambda m, i, j: m.alpha(i, j) * m.b(i, j)),
        Mutant("M2-uniform-baseline", "C1", "main", "uniform instead of alpha-weighted baseline",
               lambda m, i, j: m.alpha(i, j) * (m.b(i, j) - m.sum("n", lambda k: m.b(i, k)) / m.size("n"))),
        Mutant("M3-drop-alpha", "C1", "main", "alpha factor dropped: b_ij - E[b]",
               lambda m, i, j: m.b(i, j) - m.baseline(i)),
        Mutant("M4-flip-sign", "C1", "main", "sign flipped",
               lambda m, i, j: -m.dS(i, j)),
        Mutant("M5-masked-baseline", "C1", "main", "masked positions included in the baseline",
               lambda m, i, j: m.alpha(i, j) * (m.b(i, j) - m.sum("n", lambda k: _unmasked_alpha(m, i, k) * m.b(i, k)))),
    ),
))

register(Claim(
    id="C2", name="value-responsibility",
    statement=r"\frac{\partial L}{\partial v_j} = \sum_i \alpha_{ij} u_i",
    ref="arXiv 2512.22473, responsibility-weighted value update",
    parts=(Identity("main", ("n", "dv"), "scores", lambda m, j, a: m.derived_grad("v", j, a),
                    lambda m, j, a: m.dV(j, a), r"\partial L/\partial v_{ja} = \sum_i \alpha_{ij} u_{ia}",
                    kernels=GRADS + ROUTING, output="dV"),),
    mutants=(
        Mutant("M6-wrong-index", "C2", "main", "sum over the wrong index: sum_i alpha_ji u_i",
               lambda m, j, a: m.sum("n", lambda i: m.alpha(j, i) * m.u(i, a))),
    ),
))

register(Claim(
    id="C3", name="query-gradient",
    statement=r"\frac{\partial L}{\partial q_i} = c \sum_j \frac{\partial L}{\partial s_{ij}}\, k_j",
    ref="arXiv 2512.22473, gradient of the queries",
    parts=(Identity("main", ("n", "dk"), "qk", lambda m, i, a: m.derived_grad("q", i, a),
                    lambda m, i, a: m.dQ(i, a), r"\partial L/\partial q_{ia} = c\sum_j \partial_{s_{ij}}L\, k_{ja}",
                    kernels=GRADS, output="dQ"),),
    mutants=(
        Mutant("M7-lose-scale", "C3", "main", "scale c lost",
               lambda m, i, a: m.sum("n", lambda j: m.dS(i, j) * m.k(j, a))),
        Mutant("M8-transpose-qk", "C3", "main", "q/k roles transposed: c sum_j dS_ji k_j",
               lambda m, i, a: m.c * m.sum("n", lambda j: m.dS(j, i) * m.k(j, a))),
    ),
))

register(Claim(
    id="C4", name="key-gradient",
    statement=r"\frac{\partial L}{\partial k_j} = c \sum_i \frac{\partial L}{\partial s_{ij}}\, q_i",
    ref="arXiv 2512.22473, gradient of the keys",
    parts=(Identity("main", ("n", "dk"), "qk", lambda m, j, a: m.derived_grad("k", j, a),
                    lambda m, j, a: m.dK(j, a), r"\partial L/\partial k_{ja} = c\sum_i \partial_{s_{ij}}L\, q_{ia}",
                    kernels=GRADS, output="dK"),),
    mutants=(
        Mutant("M9-transpose-qk", "C4", "main", "q/k roles transposed: c sum_i dS_ij k_i",
               lambda m, j, a: m.c * m.sum("n", lambda i: m.dS(i, j) * m.k(i, a))),
    ),
))

register(Claim(
    id="C5", name="upstream-ce",
    statement=r"u_i = \frac{\partial L}{\partial o_i} = \frac{1}{T} W_O (p_i - e_{y_i})",
    ref="arXiv 2512.22473, the upstream gradient (error signal) of the cross-entropy readout",
    parts=(Identity("main", ("n", "dv"), "readout", lambda m, i, a: m.derived_grad("o", i, a),
                    lambda m, i, a: m.u(i, a), r"\partial L/\partial o_{ia} = \tfrac1T\sum_c W_{O,ac}(p_{ic}-y_{ic})",
                    loss="ce", kernels=("readout_backward",), output="u"),),
    mutants=(
        Mutant("M10-lose-1/T", "C5", "main", "1/T lost",
               lambda m, i, a: m.sum("m", lambda c: m.leaf("WO", a, c) * (m.p(i, c) - m.leaf("Y", i, c)))),
    ),
))

register(Claim(
    id="C6", name="score-zero-sum",
    statement=r"\sum_j \frac{\partial L}{\partial s_{ij}} = 0",
    ref="arXiv 2512.22473, score gradients only redistribute attention",
    parts=(Identity("main", ("n",), "scores", lambda m, i: m.sum("n", lambda j: m.derived_grad("s", i, j)),
                    lambda m, i: 0, r"\sum_j \partial L/\partial s_{ij} = 0"),),
    mutants=(
        Mutant("M11-baseline-not-cancelled", "C6", "main", "zero-sum claimed to equal the baseline",
               lambda m, i: m.baseline(i)),
    ),
))

register(Claim(
    id="C7", name="attention-compatibility",
    statement=r"\frac{\partial L}{\partial \alpha_{ij}} = b_{ij} = u_i \cdot v_j",
    ref="arXiv 2512.22473, the compatibility matrix B",
    parts=(Identity("main", ("n", "n"), "alpha", lambda m, i, j: m.derived_grad("alpha", i, j),
                    lambda m, i, j: m.b(i, j), r"\partial L/\partial \alpha_{ij} = u_i\cdot v_j",
                    kernels=BACKWARD + ROUTING, output="B"),),
    mutants=(
        Mutant("M12-times-alpha", "C7", "main", "an extra alpha factor: alpha_ij b_ij",
               lambda m, i, j: m.alpha(i, j) * m.b(i, j)),
    ),
))

register(Claim(
    id="C8", name="parameter-gradients",
    statement=(r"\frac{\partial L}{\partial W_V} = \sum_j x_j \Big(\sum_i \alpha_{ij} u_i\Big)^{\!\top},\ "
               r"\frac{\partial L}{\partial W_Q} = \sum_i x_i \Big(\frac{\partial L}{\partial q_i}\Big)^{\!\top},\ "
               r"\frac{\partial L}{\partial W_K} = \sum_j x_j \Big(\frac{\partial L}{\partial k_j}\Big)^{\!\top},\ "
               r"\frac{\partial L}{\partial W_O} = \frac1T \sum_i o_i (p_i - e_{y_i})^{\!\top}"),
    ref="arXiv 2512.22473, gradients of W_Q, W_K, W_V and W_O",
    parts=(
        Identity("W_V", ("dx", "dv"), "params", lambda m, x, a: m.derived_grad("WV", x, a),
                 lambda m, x, a: m.sum("n", lambda j: m.leaf("X", j, x) * m.dV(j, a)), r"\partial L/\partial W_V",
                 kernels=("params_backward",), output="dW_V"),
        Identity("W_Q", ("dx", "dk"), "params", lambda m, x, a: m.derived_grad("WQ", x, a),
                 lambda m, x, a: m.sum("n", lambda i: m.leaf("X", i, x) * m.dQ(i, a)), r"\partial L/\partial W_Q",
                 kernels=("params_backward",), output="dW_Q"),
        Identity("W_K", ("dx", "dk"), "params", lambda m, x, a: m.derived_grad("WK", x, a),
                 lambda m, x, a: m.sum("n", lambda j: m.leaf("X", j, x) * m.dK(j, a)), r"\partial L/\partial W_K",
                 kernels=("params_backward",), output="dW_K"),
        Identity("W_O", ("dv", "m"), "readout", lambda m, a, c: m.derived_grad("WO", a, c),
                 lambda m, a, c: m.sum("n", lambda i: m.o(i, a) * (m.p(i, c) - m.leaf("Y", i, c))) / m.size("n"),
                 r"\partial L/\partial W_O", loss="ce", kernels=("readout_backward",), output="dW_O"),
    ),
    mutants=(
        Mutant("M13-WV-transposed-alpha", "C8", "W_V", "responsibilities transposed in dL/dW_V",
               lambda m, x, a: m.sum("n", lambda j: m.leaf("X", j, x) * m.sum("n", lambda i: m.alpha(j, i) * m.u(i, a)))),
    ),
))

register(Claim(
    id="C9", name="saturation (two timescales)",
    statement=(r"\sum_j \Big|\frac{\partial L}{\partial s_{ij}}\Big| \le 4\,\big(1 - \max_j \alpha_{ij}\big)\max_j |b_{ij}|,"
               r"\ \text{tight at } n=2,\ \alpha=(\varepsilon, 1-\varepsilon),\ b=(-1,1)"),
    ref="arXiv 2512.22473, two timescales (routing saturates, values keep learning); the bound is ours",
    kind="inequality",
    parts=(
        Identity("S1 baseline as mixture", ("n", "n"), "scores", lambda m, i, j: m.b(i, j) - m.baseline(i),
                 lambda m, i, j: m.sum("n", lambda k: m.alpha(i, k) * (m.b(i, j) - m.b(i, k))),
                 r"b_{ij}-\bar b_i = \sum_k \alpha_{ik}(b_{ij}-b_{ik})"),
        Identity("S2 self term vanishes", ("n", "n"), "scores",
                 lambda m, i, j: m.sum("n", lambda k: m.alpha(i, k) * (m.b(i, j) - m.b(i, k))),
                 lambda m, i, j: m.sum("n", lambda k: m.alpha(i, k) * (1 - m.delta(j, k)) * (m.b(i, j) - m.b(i, k))),
                 r"\sum_k \alpha_{ik}(b_{ij}-b_{ik}) = \sum_{k\ne j} \alpha_{ik}(b_{ij}-b_{ik})"),
        Identity("S3 off-diagonal mass", ("n", "n"), "scores",
                 lambda m, i, j: m.sum("n", lambda k: m.alpha(i, k) * (1 - m.delta(j, k))),
                 lambda m, i, j: 1 - m.alpha(i, j), r"\sum_{k\ne j}\alpha_{ik} = 1-\alpha_{ij}"),
    ),
    derivation=(
        r"Write $B=\max_j |b_{ij}|$ and $\alpha^*=\max_j\alpha_{ij}$. By C1 and S1–S2, "
        r"$|\partial_{s_{ij}}L| = \alpha_{ij}\,\big|\sum_{k\ne j}\alpha_{ik}(b_{ij}-b_{ik})\big| "
        r"\le \alpha_{ij}\sum_{k\ne j}\alpha_{ik}\,2B = 2B\,\alpha_{ij}(1-\alpha_{ij})$ "
        r"(triangle inequality, $|b_{ij}-b_{ik}|\le 2B$, then S3). Summing over $j$: "
        r"$\sum_j\alpha_{ij}(1-\alpha_{ij}) \le \alpha^*(1-\alpha^*) + \sum_{j\ne j^*}\alpha_{ij} \le 2(1-\alpha^*)$, "
        r"so $\sum_j|\partial_{s_{ij}}L| \le 4B(1-\alpha^*)$. At $n=2$, $\alpha=(\varepsilon,1-\varepsilon)$, "
        r"$b=(-1,1)$ the left side is $4\varepsilon(1-\varepsilon)$ and the right $4\varepsilon$: the ratio "
        r"$1-\varepsilon\to 1$, so 4 cannot be lowered. Meanwhile $\partial L/\partial v_j=\sum_i\alpha_{ij}u_i$ "
        r"(C2) does not vanish as $\alpha$ saturates: routing freezes while values keep learning."
    ),
    mutants=(
        Mutant("M14-S1-uniform-weights", "C9", "S1 baseline as mixture", "mixture with uniform weights",
               lambda m, i, j: m.sum("n", lambda k: m.b(i, j) - m.b(i, k)) / m.size("n")),
        Mutant("M15-constant-3.5", "C9", "", "bound constant 3.5 < 4 (not tight)", constant=3.5),
    ),
))

register(Claim(
    id="C10", name="EM M-step",
    statement=(r"v_j \leftarrow v_j - \eta\,\frac{\sum_i \alpha_{ij} u_i}{N_j},\ N_j=\sum_i\alpha_{ij}, "
               r"\text{ minimises } \sum_j \Big\langle \frac{\partial L}{\partial v_j}, \Delta_j\Big\rangle "
               r"+ \sum_j \frac{N_j}{2\eta}\|\Delta_j\|^2"),
    ref="arXiv 2512.22473, closed-form EM-style update; this formulation is ours (the authors' script uses a 10x value learning rate)",
    parts=(Identity("completed square", ("n",), "scores",
                    lambda m, j: _em_excess(m, j, _em_step), lambda m, j: _em_gap(m, j, _em_step),
                    r"J_j(\Delta_j)-J_j(\Delta^*_j) = \tfrac{N_j}{2\eta}\|\Delta_j-\Delta^*_j\|^2"),),
    derivation=(
        r"With $\alpha$ fixed (E-step), $J(\Delta)=\sum_j J_j(\Delta_j)$, $J_j(\Delta_j)=\langle\partial L/\partial v_j,\Delta_j\rangle"
        r"+\frac{N_j}{2\eta}\|\Delta_j\|^2$, is the linearised loss plus the responsibility-weighted "
        r"proximal term; it separates over $j$. The identity $J_j(\Delta_j)-J_j(\Delta_j^*)=\frac{N_j}{2\eta}\|\Delta_j-\Delta_j^*\|^2$ "
        r"(proved, with $\partial L/\partial v_j$ differentiated from the loss) and $N_j>0$ for every attended "
        r"position show that $\Delta^*_j=-\eta\sum_i\alpha_{ij}u_i/N_j$ is the unique exact minimiser."
    ),
    mutants=(
        Mutant("M16-plain-gradient-step", "C10", "completed square", "step without 1/N_j: -eta sum_i alpha_ij u_i",
               closed=lambda m, j: _em_gap(m, j, _wrong_step), derived=lambda m, j: _em_excess(m, j, _wrong_step)),
    ),
))
