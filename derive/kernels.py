"""Which kernels are generated, and from what: the registry's declarations against the API's kernels.

The API's kernels (`API`, called by numeric/api.py and numeric/module.py) have fixed outputs in
return order; each output is a model quantity or the closed side of the one identity that declares
the kernel (`Identity.kernels`, `Identity.output`), and a quantity may be computed by a proven
identity's closed side instead of its definition (`Identity.replaces`). Every identity and equality
mutant also gets a check kernel returning (derived side, closed side). `derive.codegen` emits them.

Each routing mechanism with a kernel shape (`kernel_shape`: attention's, weights over keys from logits of q and k
mixing v; or the options shape, weights over the mechanism's own options from its logit leaf mixing each option's
own content, read off its `axis`, `dims`, `logit_leaf`, `content` and `content_spec`) gets the kernels of
`MECHANISM_API`, computed by `mechanism_rewrites` (its routing form for dS, the content form for its content leaf,
the chain rule through its logits and content for every other input, attention's fused baseline), which
`mechanism_identities` states as proof obligations at `mechanism=name`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

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
GRADS = "*grads"  # in MechanismApi.outputs: the gradients of the kernel's inputs (KernelShape.grads), in order


@dataclass(frozen=True)
class MechanismApi:
    """One kind of mechanism kernel: its outputs in return order (GRADS: the gradients of the kernel's inputs) and the
    quantities given as inputs; `doc` a template filled from the mechanism's KernelShape. Each is emitted per variant
    of the shape, `<mechanism>_<kind>_<masked|unmasked>`."""

    kind: str
    doc: str
    outputs: tuple
    inputs: tuple = ()


MECHANISM_API = (
    MechanismApi("scores", "The routing logits s ({logits}).", ("s",)),
    MechanismApi("forward", "The forward: the weights w and {mix}.", ("alpha", "o")),
    MechanismApi("backward", "The backward from {inputs} and u = dL/do: the weights, dL/ds by the mechanism's proved "
                 "routing form{grads}.", ("alpha", "dS", GRADS)),
    MechanismApi("backward_from_forward", "The backward reusing the forward's weights and o (the module's backward).",
                 ("dS", GRADS), ("alpha", "o")),
)
VARIANTS = ("masked", "unmasked")
# The levels at which a mechanism's kernel may take its inputs, in order of preference: the first at which every leaf
# its logits and content read is free (attention: q, k, v; a router: the tokens and the router's and experts'
# weights; a cell: its logits and contents, free at the scores level).
KERNEL_LEVELS = ("qk", "params", "scores")


@dataclass(frozen=True)
class Grad:
    """One gradient a mechanism's backward returns: dL/d`leaf` (index ranges `dims`) as the output `name`, computed by
    responsibility-weighted content (`form` "content": the content question's closed form) or by the chain rule
    through the logits and the content ("chain", the routing form read off the dS line)."""

    name: str
    leaf: str
    dims: tuple
    form: str


@dataclass(frozen=True)
class KernelShape:
    """What a mechanism's kernels read and return: the level at which their inputs are leaves, what the weights range
    over (`axis`: keys n, or the mechanism's own options), the inputs in order, the gradients of the inputs the
    backward returns (the logit leaf's, when it is an input, is dS itself), whether the weights read a mask (else one
    variant, unmasked: a masked kernel would be the same function), and the docs' words."""

    level: str
    axis: str
    inputs: tuple
    logit_inputs: tuple  # the inputs the logits read (the scores kernel's)
    grads: tuple
    masked: bool
    logits: str
    mix: str
    fused_baseline: bool = False  # attention's: sum_k w_ik b_ik = u_i . o_i spares an n x n pass

    @property
    def variants(self):
        return VARIANTS if self.masked else ("unmasked",)

    def dims(self, name):
        """The index ranges of a kernel output."""
        for g in self.grads:
            if g.name == name:
                return g.dims
        return {"o": ("n", "dv")}.get(name, ("n", self.axis))

    def doc(self, api, mechanism):
        chain = [g.name for g in self.grads if g.form == "chain"]
        content = [g.name for g in self.grads if g.form == "content"]
        grads = f" (dL/d{mechanism.logit_leaf}, its logits an input)" if mechanism.logit_leaf in self.inputs else ""
        if chain:
            through = "score" if mechanism.content is None else "logits and content"
            grads += f", {' and '.join(chain)} by the chain rule through its {through}"
        if content:
            grads += f", {' and '.join(content)} by responsibility-weighted content"
        return api.doc.format(logits=self.logits, mix=self.mix, inputs=", ".join(self.inputs), grads=grads)


ATTENTION_SHAPE = KernelShape(
    "qk", "n", ("q", "k", "v"), ("q", "k"),
    (Grad("dQ", "q", ("n", "dk"), "chain"), Grad("dK", "k", ("n", "dk"), "chain"), Grad("dV", "v", ("n", "dv"), "content")),
    True, "the mechanism's score of q_i and k_j", "o = w v", fused_baseline=True)


@dataclass(frozen=True)
class Rewrite:
    """A closed form a mechanism kernel computes a model quantity by (CodegenBackend reads `closed`, as of an
    identity that `replaces` the quantity)."""

    name: str
    closed: object  # (model, *indices) -> expression
    source: str


def kernel_form(mechanism) -> str:
    """'' when the mechanism has kernels (`kernel_shape`), else why not."""
    return kernel_shape(mechanism)[1]


def kernel_shape(mechanism):
    """(KernelShape, '') or (None, why the mechanism has no kernels). Attention's shape: weights over the keys from
    logits s_ij of q_i and k_j, mixing the values v_j, no index range of its own. The options shape: weights over the
    mechanism's own dim (`axis`, one of `dims`) from its logit leaf, mixing each option's own content (`content`, whose
    content question is `content_spec`), at the first of KERNEL_LEVELS where every leaf they read is free. Fields a
    mechanism of an older version may not have are read defensively, with attention's values."""
    axis = getattr(mechanism, "axis", "n")
    if axis != "n":
        return _options_shape(mechanism, axis)
    if getattr(mechanism, "content", None) is not None:
        return None, "its options offer their own content, not the values v_j: no kernel of q, k, v"
    if getattr(mechanism, "logit_leaf", "s") != "s":
        return None, f"its logits are the leaf {mechanism.logit_leaf}, not a score of q and k: no kernel of q, k, v"
    if getattr(mechanism, "dims", None):
        return None, f"it has index ranges of its own ({', '.join(mechanism.dims)}): no kernel of q, k, v"
    return ATTENTION_SHAPE, ""


def _options_shape(mechanism, axis):
    from derive.general import GeneralBackend
    from derive.model import LEAVES, LEVELS, Setting, ShapeError

    if axis not in getattr(mechanism, "dims", {}):
        return None, f"its weights range over {axis}, which is not one of its own dims: no kernel"
    if getattr(mechanism, "content", None) is None:
        return None, f"its options ({axis}) offer no content of their own (Mechanism.content): no kernel"
    logit, spec = mechanism.logit_leaf, mechanism.content_spec
    if logit not in LEVELS["scores"] and "scores" not in mechanism.free.get(logit, ()):
        return None, f"its logit leaf {logit} is not free at the scores level, where its routing form is proved"
    order = list(LEAVES)

    def reads(expr):  # the leaves an expression reads, the model's in LEAVES order, then the mechanism's by name
        labels = {str(x.base.label) for x in sp.sympify(expr).atoms(sp.Indexed)} - {"M", "U"}
        return sorted(labels, key=lambda x: (order.index(x) if x in order else len(order), x))

    for level in KERNEL_LEVELS:
        m = GeneralBackend(Setting(level, "linear", True, mechanism=mechanism.name), f"the kernels of {mechanism.name}")
        i, j, a = m.free_indices(("n", axis, "dv"))
        try:
            logits, content, weights = reads(m.s(i, j)), reads(m.content(i, j, a)), m.alpha(i, j)
        except ShapeError:
            continue
        inputs = tuple(logits + [x for x in content if x not in logits])
        if not all(m._is_free(x) for x in inputs):
            continue
        beside = [x for x in reads(weights) if x not in logits]
        if beside:  # the chain rule reads the weights' dependence on the inputs off the logits alone
            return None, f"its weights read {', '.join(beside)} besides its logits: no chain rule through the logits"
        leaves = m.leaves()
        if spec.leaf not in inputs or tuple(spec.unit + spec.comps) != tuple(leaves[spec.leaf]):
            return None, (f"its content question's leaf {spec.leaf} (ranges {spec.unit + spec.comps}) is not an input of "
                          f"its content at level {level}: no content form for its backward")
        grads = tuple(Grad(f"d{x}", x, tuple(leaves[x]), "content" if x == spec.leaf else "chain")
                      for x in inputs if x != logit)
        masked = "M" in {str(x.base.label) for x in sp.sympify(weights).atoms(sp.Indexed)}
        given = "given" if logit in inputs else "from " + ", ".join(logits)
        return KernelShape(level, axis, inputs, tuple(logits), grads, masked, f"its logits {logit} over {axis}, {given}",
                           f"o_i = sum_{axis} w_i{axis} c_i{axis}, each option's content c from {', '.join(content)}"), ""
    return None, (f"no level ({', '.join(KERNEL_LEVELS)}) at which every leaf its logits and content read is free: "
                  "no kernel of its inputs")


def chain_rule(mechanism, leaf, routing):
    """dL/dx = sum_ij routing_ij ds_ij/dx + sum_ija w_ij u_ia dc_ija/dx for an entry x of `leaf`: the chain rule through
    the mechanism's logits s_ij (its score; i over positions, j over its axis) and, when its options offer content of
    their own, through the content c_ija (dL/dc_ija = w_ij u_ia). The weights read the logits, never the leaves
    directly, so that is all of the loss's dependence on the leaf outside the content. The derivatives of the score and
    the content are the model's own (`m.grad`): symbolic in the code generator, by each proof path's backend."""
    score, content = mechanism.score, mechanism.content
    axis = getattr(mechanism, "axis", "n")

    def closed(m, *ix):
        total = m.sum("n", lambda i: m.sum(axis, lambda j: routing(m, i, j) * m.grad(score(m, i, j), leaf, *ix)))
        if content is None:
            return total
        return total + m.sum("n", lambda i: m.sum(axis, lambda j: m.sum(
            "dv", lambda a: m.alpha(i, j) * m.u(i, a) * m.grad(content(m, i, j, a), leaf, *ix))))
    return closed


def _shape_of(name):
    from derive import mechanisms

    mech = mechanisms.get(name)
    shape, why = kernel_shape(mech)
    if shape is None:
        raise ValueError(f"mechanism {name} has no kernels: {why}")
    return mech, shape


def mechanism_identities(name):
    """What a mechanism's kernels compute by, as proof obligations at `mechanism=name`: its routing form (dS, the
    routing question of derive.mechanisms.questions, at the scores level where its logits are free), the content form
    for its content leaf (dV for attention, the content question at the kernel's level), the chain rule through its
    logits and content for every other input (dQ and dK; a first derivative read through m.grad, so proved at the
    full loss) and, for attention's shape, the fused baseline sum_k w_ik b_ik = u_i . o_i. Keyed by the quantity."""
    from derive.claim import Identity

    mech, shape = _shape_of(name)
    logit, spec = mech.logit_leaf, mech.content_spec
    out = {"dS": Identity("routing", ("n", shape.axis), "scores", lambda m, i, j: m.derived_grad(logit, i, j),
                          mech.routing, mech.routing_latex, mechanism=name)}
    for g in shape.grads:
        if g.form == "content":
            out[g.name] = Identity("content", g.dims, shape.level, lambda m, *ix, x=g.leaf: m.derived_grad(x, *ix),
                                   spec.closed, rf"\frac{{\partial L}}{{\partial {g.leaf}}}"
                                   r"=\textstyle\sum_i w_{ij}u_i\ \text{(its content form)}", mechanism=name)
        else:
            through = "" if mech.content is None else r"+\sum_{ija}w_{ij}u_{ia}\frac{\partial c_{ija}}{\partial %s}" % g.leaf
            out[g.name] = Identity(f"chain rule {g.name}", g.dims, shape.level,
                                   lambda m, *ix, x=g.leaf: m.derived_grad(x, *ix), chain_rule(mech, g.leaf, mech.routing),
                                   rf"\frac{{\partial L}}{{\partial {g.leaf}}}=\sum_{{ij}}\frac{{\partial L}}{{\partial s_{{ij}}}}"
                                   rf"\frac{{\partial s_{{ij}}}}{{\partial {g.leaf}}}" + through, mechanism=name)
    if shape.fused_baseline:
        out["baseline"] = Identity("fused baseline", ("n",), shape.level, lambda m, i: m.baseline(i),
                                   lambda m, i: m.baseline_fused(i), r"\sum_k w_{ik}b_{ik}=u_i\cdot o_i", mechanism=name)
    return out


def _routing_line(m, i, j):
    return m.dS(i, j)


def mechanism_rewrites(mechanism, shape=None):
    """The closed forms the kernels compute by: dS by the routing form, the chain rule for every input but the content
    leaf read off the dS line (the routing form, proved equal to dL/ds: `mechanism_identities`), and for attention's
    shape the baseline fused. The content leaf's gradient is the content form (for attention the model's own
    definition of dV, a quantity of its own: no rewrite)."""
    shape = shape or kernel_shape(mechanism)[0]
    out = {"dS": Rewrite("dS", mechanism.routing, f"the routing form of {mechanism.name}")}
    if shape.fused_baseline:
        out["baseline"] = Rewrite("baseline", lambda m, i: m.baseline_fused(i), "the fused baseline u . o")
    for g in shape.grads:
        if g.form == "chain":
            out[g.name] = Rewrite(g.name, chain_rule(mechanism, g.leaf, _routing_line), "the chain rule through the score")
        elif g.name not in MATERIALISE:
            out[g.name] = Rewrite(g.name, mechanism.content_spec.closed, "responsibility-weighted content")
    return out


def _output(name, shape=ATTENTION_SHAPE, rewrites=None):
    """A kernel output: the model's own quantity where it has one with its own line (alpha, dS, dQ, ...: MATERIALISE,
    computed by the rewrites), else the rewrite's closed form (an options mechanism's dX, dH, ...)."""
    if name in MATERIALISE:
        return Output(name, lambda m, *ix, q=name: getattr(m, q)(*ix), shape.dims(name))
    return Output(name, rewrites[name].closed, shape.dims(name))


def mechanism_outputs(shape, api):
    """The names a kernel of kind `api` returns, in order (GRADS expanded)."""
    return tuple(x for o in api.outputs for x in ([g.name for g in shape.grads] if o == GRADS else [o]))


def mechanism_kernels(mechanism):
    """Every kernel of one mechanism (MECHANISM_API, per variant of its shape) and one per routing mutant (its dS, the
    mutant's closed form in place of the routing form), keyed (mechanism, kind, variant) and (mutant id, variant)."""
    shape, why = kernel_shape(mechanism)
    if shape is None:
        raise ValueError(f"mechanism {mechanism.name} has no kernels: {why}")
    rewrites = mechanism_rewrites(mechanism, shape)
    out = []
    for api in MECHANISM_API:
        outputs = tuple(_output(o, shape, rewrites) for o in mechanism_outputs(shape, api))
        for variant in shape.variants:
            out.append(Kernel(f"{mechanism.name}_{api.kind}_{variant}", f"{mechanism.title}: {shape.doc(api, mechanism)}",
                              shape.level, "linear", variant == "masked", outputs, api.inputs, rewrites,
                              (mechanism.name, api.kind, variant), mechanism=mechanism.name, symbolic=True))
    for mutant in mechanism.mutants:
        if mutant.question != "routing":
            continue
        wrong = {**rewrites, "dS": Rewrite("dS", mutant.closed, f"negative control {mutant.id}")}
        for variant in shape.variants:
            out.append(Kernel(_fn_name("mutant", mutant.id, variant), f"negative control {mutant.id}: {mutant.description} "
                              "(dS by the wrong form).", shape.level, "linear", variant == "masked", (_output("dS", shape),),
                              (), wrong, (mutant.id, variant), mechanism=mechanism.name, symbolic=True))
    return out
