"""Which kernels are generated, and from what: the registry's declarations against the API's kernels.

The API's kernels (`API`, called by numeric/api.py and numeric/module.py) have fixed outputs in
return order; each output is a model quantity or the closed side of the one identity that declares
the kernel (`Identity.kernels`, `Identity.output`), and a quantity may be computed by a proven
identity's closed side instead of its definition (`Identity.replaces`). Every identity and equality
mutant also gets a check kernel returning (derived side, closed side). `derive.codegen` emits them.

Each routing mechanism with attention's kernel shape (`kernel_form`) gets the kernels of `MECHANISM_API`,
computed by `mechanism_rewrites` (its routing form for dS, the fused baseline, the chain rule through its
score for dQ and dK), which `mechanism_identities` states as proof obligations at `mechanism=name`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from derive import claims as registry

# The model's quantities that get their own line (everything else is inlined where it is used).
MATERIALISE = ("q", "k", "v", "s", "alpha", "o", "z", "p", "u", "b", "baseline", "dS", "dV", "dQ", "dK", "responsibility")
# Kernel outputs that are the model's own quantities rather than a claim's closed form: their index ranges.
QUANTITIES = {"alpha": ("n", "n"), "o": ("n", "dv"), "p": ("n", "m"), "loss": ()}


@dataclass(frozen=True)
class Api:
    """A kernel of the public API (numeric/api.py): its setting, inputs and outputs in return order.

    Each output is a model quantity (QUANTITIES) or the closed side of the one identity that
    declares the kernel and the output's name (`Identity.kernels`, `Identity.output`)."""

    name: str
    doc: str
    level: str
    loss: str
    outputs: tuple
    inputs: tuple = ()
    variants: bool = False  # a masked and an unmasked kernel, name_masked and name_unmasked


API = (
    Api("attention_forward", "The attention forward.", "qk", "linear", ("alpha", "o"), variants=True),
    Api("attention_backward", "The attention backward from q, k, v and u = dL/do.", "qk", "linear",
        ("alpha", "B", "dS", "dQ", "dK", "dV"), variants=True),
    Api("attention_backward_from_forward", "The attention backward reusing alpha and o from the forward (alpha is "
        "zero where masked, so no mask is needed).", "qk", "linear", ("B", "dS", "dQ", "dK", "dV"), ("alpha", "o")),
    Api("attention_routing", "The routing and value gradients without dQ and dK (what numeric.watch reads).", "qk",
        "linear", ("alpha", "B", "dS", "dV"), variants=True),
    Api("attention_routing_from_forward", "attention_routing reusing alpha and o from the forward (any mask, float "
        "masks included).", "qk", "linear", ("B", "dS", "dV"), ("alpha", "o")),
    Api("attention_grads_from_forward", "The module's backward: B and dS die early, so their buffers are reused.",
        "qk", "linear", ("dQ", "dK", "dV"), ("alpha", "o")),
    Api("readout_backward", "The readout: class probabilities, u = dL/do, dL/dW_O and the mean cross-entropy of "
        "each sequence.", "readout", "ce", ("p", "u", "dW_O", "loss")),
    Api("params_backward", "The parameter gradients from dQ, dK, dV.", "params", "linear", ("dW_Q", "dW_K", "dW_V"),
        ("dQ", "dK", "dV")),
)


@dataclass(frozen=True)
class Output:
    name: str
    build: object  # (model, *free indices) -> expression
    dims: tuple


@dataclass(frozen=True)
class Kernel:
    """One generated function: a setting, the quantities given as inputs, the outputs."""

    name: str
    doc: str
    level: str
    loss: str
    masked: bool
    outputs: tuple
    inputs: tuple = ()
    rewrites: dict = field(default_factory=dict)  # quantity -> identity (never in the checks that justify them)
    key: object = None  # what it checks, its MANIFEST key: (claim id, identity name) or a mutant id
    readout: str = "single"  # derive.model.READOUTS
    mechanism: str = "softmax"  # derive.mechanisms: how routing logits become weights
    # Mechanism kernels: derivatives of expressions of the leaves (the chain rule through the score) are taken
    # symbolically, and contractions of more than two operands are planned (derive.codegen).
    symbolic: bool = False


def api_kernels(claims=None):
    """The API's kernels, every output the closed side of the identity that declares it, or a model quantity."""
    claims = registry.claims() if claims is None else claims
    feeds, rewrites = _feeds(claims), _rewrites(claims)
    out = []
    for api in API:
        outputs, notes = [], []
        for name in api.outputs:
            if (api.name, name) in feeds:
                claim, identity = feeds[api.name, name]
                outputs.append(Output(name, identity.closed, identity.free))
                notes.append(f"{name} ({claim.id}{'' if identity.name == 'main' else ' ' + identity.name})")
            elif name in QUANTITIES:
                outputs.append(Output(name, lambda m, *ix, q=name: getattr(m, q)(*ix), QUANTITIES[name]))
                notes.append(name)
            else:
                raise ValueError(f"output {name} of {api.name} is neither a model quantity nor declared by an identity")
        doc = f"{api.doc} Returns {', '.join(notes)}."
        for masked in (True, False) if api.variants else (False,):
            name = f"{api.name}_{'masked' if masked else 'unmasked'}" if api.variants else api.name
            out.append(Kernel(name, doc, api.level, api.loss, masked, tuple(outputs), api.inputs, rewrites))
    return out


def _feeds(claims):
    """(kernel, output) -> (claim, identity) from the identities' declarations, each checked against API."""
    returns = {api.name: api.outputs for api in API}
    feeds = {}
    for claim in claims:
        for identity in claim.parts:
            for kernel in identity.kernels:
                where = f"{claim.id} / {identity.name}"
                if identity.output not in returns.get(kernel, ()):
                    known = returns.get(kernel)
                    raise ValueError(f"{where} feeds {kernel}.{identity.output}, but " + (
                        f"{kernel} returns {', '.join(known)}" if known else f"there is no API kernel {kernel}; "
                        f"the API's: {', '.join(returns)}"))
                if (kernel, identity.output) in feeds:
                    other = feeds[kernel, identity.output]
                    raise ValueError(f"{where} and {other[0].id} / {other[1].name} both feed {kernel}.{identity.output}")
                feeds[kernel, identity.output] = (claim, identity)
    return feeds


def _rewrites(claims):
    """quantity -> the identity whose closed side the API kernels compute it by (Identity.replaces)."""
    out = {}
    for claim in claims:
        for identity in claim.parts:
            if not identity.replaces:
                continue
            if identity.replaces not in MATERIALISE:
                raise ValueError(f"{claim.id} / {identity.name} replaces {identity.replaces!r}, which is not a quantity "
                                 f"with its own line; those are {', '.join(MATERIALISE)}")
            if identity.replaces in out:
                raise ValueError(f"{claim.id} / {identity.name} and {out[identity.replaces].name} both replace {identity.replaces}")
            out[identity.replaces] = identity
    return out


def _fn_name(*parts):
    return "_".join("".join(ch if ch.isalnum() else "_" for ch in p).strip("_").lower() for p in parts)


def check_kernels(claims):
    """Per identity and per equality mutant: a function returning (derived side, closed side)."""
    out = []
    for claim in claims:
        for identity in claim.parts:
            out.append(_pair_kernel(_fn_name("identity", claim.id, identity.name), identity, identity.derived,
                                    identity.closed, f"{claim.id} / {identity.name}", (claim.id, identity.name)))
        for m in claim.mutants:
            if m.constant is None:
                identity = claim.part(m.part)
                out.append(_pair_kernel(_fn_name("mutant", m.id), identity, m.derived or identity.derived,
                                        m.closed, f"negative control {m.id}: {m.description}", m.id))
    return out


def _pair_kernel(name, identity, derived, closed, doc, key):
    outs = (Output("derived", derived, identity.free), Output("closed", closed, identity.free))
    return Kernel(name, f"{doc} (derived side with autograd inputs grad_*, closed side).", identity.level, "ce", True, outs,
                  key=key, readout=identity.readout)


# -- the kernels of a routing mechanism (derive.mechanisms): numeric/generated/mechanisms.py -----------------------
@dataclass(frozen=True)
class MechanismApi:
    """One kind of mechanism kernel: its outputs in return order (model quantities at level qk) and the
    quantities given as inputs. Each is emitted masked and unmasked, `<mechanism>_<kind>_<masked|unmasked>`."""

    kind: str
    doc: str
    outputs: tuple
    inputs: tuple = ()


MECHANISM_API = (
    MechanismApi("scores", "The routing logits s (the mechanism's score of q_i and k_j).", ("s",)),
    MechanismApi("forward", "The forward: the weights w and o = w v.", ("alpha", "o")),
    MechanismApi("backward", "The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved "
                 "routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content.",
                 ("alpha", "dS", "dQ", "dK", "dV")),
    MechanismApi("backward_from_forward", "The backward reusing the forward's weights and o (the module's backward).",
                 ("dS", "dQ", "dK", "dV"), ("alpha", "o")),
)
# The index ranges of the quantities a mechanism kernel returns.
MECHANISM_QUANTITIES = {"s": ("n", "n"), "alpha": ("n", "n"), "o": ("n", "dv"), "dS": ("n", "n"), "dQ": ("n", "dk"),
                        "dK": ("n", "dk"), "dV": ("n", "dv")}
VARIANTS = ("masked", "unmasked")


@dataclass(frozen=True)
class Rewrite:
    """A closed form a mechanism kernel computes a model quantity by (CodegenBackend reads `closed`, as of an
    identity that `replaces` the quantity)."""

    name: str
    closed: object  # (model, *indices) -> expression
    source: str


def kernel_form(mechanism) -> str:
    """'' when the mechanism has attention's kernel shape: weights over the keys from logits s_ij of q_i and k_j,
    mixing the values v_j, no index range of its own; else why it has no kernel of q, k, v (read defensively:
    fields a mechanism of this version may not have take attention's values)."""
    axis = getattr(mechanism, "axis", "n")
    if axis != "n":
        return f"its weights range over its own options ({axis}), not over keys: no kernel of q, k, v"
    if getattr(mechanism, "content", None) is not None:
        return "its options offer their own content, not the values v_j: no kernel of q, k, v"
    if getattr(mechanism, "logit_leaf", "s") != "s":
        return f"its logits are the leaf {mechanism.logit_leaf}, not a score of q and k: no kernel of q, k, v"
    if getattr(mechanism, "dims", None):
        return f"it has index ranges of its own ({', '.join(mechanism.dims)}): no kernel of q, k, v"
    return ""


def chain_rule(mechanism, leaf, routing):
    """dL/dq_ia = sum_lj routing_lj ds_lj/dq_ia (dL/dk_ja likewise): the chain rule through the mechanism's score,
    which is all of the weights' dependence on q and k (a weight reads the logits, never q or k). The derivative
    of the score is the model's own (`m.grad`): symbolic in the code generator, by each proof path's backend."""
    score = mechanism.score

    def closed(m, r, a):
        return m.sum("n", lambda i: m.sum("n", lambda j: routing(m, i, j) * m.grad(score(m, i, j), leaf, r, a)))
    return closed


def mechanism_identities(name):
    """What a mechanism's kernels compute by, as proof obligations at `mechanism=name`: its routing form (dS, the
    routing question of derive.mechanisms.questions), responsibility-weighted content (dV, the content question),
    the fused baseline sum_k w_ik b_ik = u_i . o_i (o_i = sum_k w_ik v_k for every such mechanism) and the chain
    rule through the score (dQ, dK; a first derivative read through m.grad, so proved at the full loss)."""
    from derive import mechanisms
    from derive.claim import Identity

    mech = mechanisms.get(name)
    return {
        "dS": Identity("routing", ("n", "n"), "scores", lambda m, i, j: m.derived_grad("s", i, j), mech.routing,
                       mech.routing_latex, mechanism=name),
        "dV": Identity("content", ("n", "dv"), "qk", lambda m, j, a: m.derived_grad("v", j, a),
                       lambda m, j, a: m.dV(j, a), r"\frac{\partial L}{\partial v_j}=\sum_i w_{ij}u_i", mechanism=name),
        "baseline": Identity("fused baseline", ("n",), "qk", lambda m, i: m.baseline(i), lambda m, i: m.baseline_fused(i),
                             r"\sum_k w_{ik}b_{ik}=u_i\cdot o_i", mechanism=name),
        "dQ": Identity("chain rule dQ", ("n", "dk"), "qk", lambda m, i, a: m.derived_grad("q", i, a),
                       chain_rule(mech, "q", mech.routing),
                       r"\frac{\partial L}{\partial q_i}=\sum_j \frac{\partial L}{\partial s_{ij}}"
                       r"\frac{\partial s_{ij}}{\partial q_i}", mechanism=name),
        "dK": Identity("chain rule dK", ("n", "dk"), "qk", lambda m, j, a: m.derived_grad("k", j, a),
                       chain_rule(mech, "k", mech.routing),
                       r"\frac{\partial L}{\partial k_j}=\sum_i \frac{\partial L}{\partial s_{ij}}"
                       r"\frac{\partial s_{ij}}{\partial k_j}", mechanism=name),
    }


def _routing_line(m, i, j):
    return m.dS(i, j)


def mechanism_rewrites(mechanism):
    """The closed forms the kernels compute by: dS by the routing form, the baseline fused, dQ and dK by the chain
    rule read off the dS line (the routing form, proved equal to dL/ds: `mechanism_identities`). dV is the model's
    own definition, the content form."""
    return {
        "dS": Rewrite("dS", mechanism.routing, f"the routing form of {mechanism.name}"),
        "baseline": Rewrite("baseline", lambda m, i: m.baseline_fused(i), "the fused baseline u . o"),
        "dQ": Rewrite("dQ", chain_rule(mechanism, "q", _routing_line), "the chain rule through the score"),
        "dK": Rewrite("dK", chain_rule(mechanism, "k", _routing_line), "the chain rule through the score"),
    }


def _output(name):
    return Output(name, lambda m, *ix, q=name: getattr(m, q)(*ix), MECHANISM_QUANTITIES[name])


def mechanism_kernels(mechanism):
    """Every kernel of one mechanism (MECHANISM_API, masked and unmasked) and one per routing mutant (its dS, the
    mutant's closed form in place of the routing form), keyed (mechanism, kind, variant) and (mutant id, variant)."""
    rewrites = mechanism_rewrites(mechanism)
    out = []
    for api in MECHANISM_API:
        outputs = tuple(_output(o) for o in api.outputs)
        for variant in VARIANTS:
            out.append(Kernel(f"{mechanism.name}_{api.kind}_{variant}", f"{mechanism.title}: {api.doc}", "qk", "linear",
                              variant == "masked", outputs, api.inputs, rewrites, (mechanism.name, api.kind, variant),
                              mechanism=mechanism.name, symbolic=True))
    for mutant in mechanism.mutants:
        if mutant.question != "routing":
            continue
        wrong = {**rewrites, "dS": Rewrite("dS", mutant.closed, f"negative control {mutant.id}")}
        for variant in VARIANTS:
            out.append(Kernel(_fn_name("mutant", mutant.id, variant), f"negative control {mutant.id}: {mutant.description} "
                              "(dS by the wrong form).", "qk", "linear", variant == "masked", (_output("dS"),), (), wrong,
                              (mutant.id, variant), mechanism=mechanism.name, symbolic=True))
    return out
