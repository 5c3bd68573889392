"""Which kernels are generated, and from what: the registry's declarations against the API's kernels.

The API's kernels (`API`, called by numeric/api.py and numeric/module.py) have fixed outputs in
return order; each output is a model quantity or the closed side of the one identity that declares
the kernel (`Identity.kernels`, `Identity.output`), and a quantity may be computed by a proven
identity's closed side instead of its definition (`Identity.replaces`). Every identity and equality
mutant also gets a check kernel returning (derived side, closed side). `derive.codegen` emits them.
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
