"""H4 and H5 (derive/head_claims.py) against torch on an explicit 4-head model: heads concatenated before the
output projection, each head's scores and values its own leaves. The proofs take one head and the other
heads' share of the logits as a free R; here every head is checked against autograd at once."""
import pytest
import torch

from derive import claims as registry
from derive.general import GeneralBackend
from derive.model import Setting, ShapeError
from numeric import identities
from numeric.generated import attention as gen
from numeric.reference import causal_mask, softmax

HEADS, N, DV, M, BATCH = 4, 6, 3, 5, 2


def _model(seed):
    """Scores and values per head (BATCH, HEADS, N, ...), W_O (HEADS*DV, M), targets; and the loss's autograd."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(BATCH, HEADS, N, N, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(BATCH, HEADS, N, DV, generator=g, dtype=torch.float64, requires_grad=True)
    w_o = torch.randn(HEADS * DV, M, generator=g, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.one_hot(torch.randint(0, M, (BATCH, N), generator=g), M).double()
    alpha = softmax(s, causal_mask(N))
    concat = (alpha @ v).transpose(1, 2).reshape(BATCH, N, HEADS * DV)  # [o^1 ... o^H] per position
    z = concat @ w_o
    loss = (torch.logsumexp(z, -1) - (y * z).sum(-1)).mean(-1).sum()  # mean CE per sequence
    ds, dv, dw = torch.autograd.grad(loss, (s, v, w_o))
    return dict(alpha=alpha.detach(), v=v.detach(), w_o=w_o.detach(), y=y, p=torch.softmax(z, -1).detach(),
                o=(alpha @ v).detach(), ds=ds, dv=dv, dw=dw)


def _block(w_o, h):
    """Head h's block of rows of the concatenated projection, (DV, M)."""
    return w_o[h * DV:(h + 1) * DV]


@pytest.mark.parametrize("seed", range(3))
def test_every_head_of_a_concatenated_projection_follows_h4_and_h5(seed):
    t = _model(seed)
    err = (t["p"] - t["y"]) / N  # the shared error at the logits, (BATCH, N, M)
    scale = max(float(t[k].abs().max()) for k in ("ds", "dv", "dw"))
    for h in range(HEADS):
        alpha, v, block = t["alpha"][:, h], t["v"][:, h], _block(t["w_o"], h)
        u = err @ block.T  # H4: u^h = W_O^(h) (p - y) / n
        b = u @ v.mT
        ds = alpha * (b - (alpha * b).sum(-1, keepdim=True))  # C1 for head h
        assert torch.allclose(t["ds"][:, h], ds, atol=1e-12 * scale, rtol=0)
        dv = (alpha.mT @ err) @ block.T  # H5: W_O^(h) sum_i alpha_ij (p_i - y_i) / n
        assert torch.allclose(t["dv"][:, h], dv, atol=1e-12 * scale, rtol=0)
        dw = (t["o"][:, h].mT @ err).sum(0)  # H5 "output block", summed over the batch (W_O is shared)
        assert torch.allclose(_block(t["dw"], h), dw, atol=1e-12 * scale, rtol=0)


def test_a_head_taken_alone_is_wrong_in_a_real_model():
    """The mutants' mistake (M24, M26) on the same model: the error from the head's own logits misses the
    other heads' share, and the gradients it gives differ from autograd's by far more than rounding."""
    t = _model(0)
    h = 1
    alpha, v, block = t["alpha"][:, h], t["v"][:, h], _block(t["w_o"], h)
    alone = (torch.softmax(t["o"][:, h] @ block, -1) - t["y"]) / N
    u = alone @ block.T
    b = u @ v.mT
    ds = alpha * (b - (alpha * b).sum(-1, keepdim=True))
    assert float((t["ds"][:, h] - ds).abs().max()) > 1e-3 * float(t["ds"].abs().max())
    dv = (alpha.mT @ alone) @ block.T
    assert float((t["dv"][:, h] - dv).abs().max()) > 1e-3 * float(t["dv"].abs().max())


@pytest.mark.parametrize("cid,name", [("H4", "main"), ("H5", "main")])
def test_the_generated_check_needs_the_other_heads(cid, name):
    """The generated check of H4/H5 against autograd holds with the other heads' logits R in the loss, and the
    same check function fails when the loss forgets them (R drawn, kept out of the autograd loss): so R is read."""
    identity = registry.REGISTRY[cid].part(name)
    fn = getattr(gen, gen.MANIFEST[(cid, name)])
    sizes, batch = {"n": 5, "dk": 3, "dv": 2, "m": 4, "dx": 2}, (2,)
    err, magnitude = identities.evaluate(fn, identity, sizes, batch, "causal", seed=4)
    assert err <= identities.TOL_FLOAT64 and magnitude > 1e-6
    g = torch.Generator().manual_seed(4)
    leaves, scalars, mask = identities.draw_inputs(fn, identity.level, sizes, batch, "causal", g, "concat")
    assert "R" in leaves
    forgot = dict(leaves)
    del forgot["R"]
    grads = identities.autograd_grads(fn, identity.level, forgot, mask, 1.0)
    args = {k: v for k, v in grads.items()}
    for p in fn.__code__.co_varnames[:fn.__code__.co_argcount]:
        if p == "mask":
            args[p] = mask.double()
        elif not p.startswith("grad_"):
            args[p] = leaves[identities.CODE_TO_LEAF.get(p, p)]
    derived, closed = fn(**args)
    assert float((derived - closed).abs().max()) > 1e3 * identities.TOL_FLOAT64 * magnitude


def test_the_other_heads_logits_exist_only_under_a_concatenated_readout():
    m = GeneralBackend(Setting("scores", "ce", True), "HX")
    i, c = m.free_indices(("n", "m"))
    with pytest.raises(ShapeError, match="exists only under readout 'concat'"):
        m.leaf("R", i, c)
    concat = GeneralBackend(Setting("scores", "ce", True, readout="concat"), "HX")
    i, c = concat.free_indices(("n", "m"))
    assert "R" in str(concat.z(i, c)) and "R" not in str(m.z(i, c))
    with pytest.raises(ValueError, match="unknown readout"):
        Setting("scores", "ce", True, readout="stacked")


def test_a_kernel_that_reads_r_needs_a_concatenated_identity():
    fn = getattr(gen, gen.MANIFEST[("H4", "main")])
    with pytest.raises(ValueError, match="reads the other heads' logits R"):
        identities.draw_inputs(fn, "scores", {"n": 3, "dk": 2, "dv": 2, "m": 2, "dx": 2}, (1,), "causal",
                               torch.Generator().manual_seed(0), "single")


@pytest.mark.parametrize("level,name,dims", [("params", "X", ("n", "dx")), ("qk", "c", ())])
def test_what_every_head_shares_is_not_a_variable_under_concat(level, name, dims):
    """The other heads' logits R are held fixed, but they depend on X and c, which every head shares: a
    derivative by either would miss the other heads' paths, so it is refused (and allowed under "single")."""
    concat = GeneralBackend(Setting(level, "ce", True, readout="concat"), "HX")
    ix = concat.free_indices(dims)
    with pytest.raises(ShapeError, match=f"every head shares {name}"):
        concat.derived_grad(name, *ix)
    assert name not in concat.variables()
    single = GeneralBackend(Setting(level, "ce", True), "HX")
    single.derived_grad(name, *single.free_indices(dims))
    assert name in single.variables()
