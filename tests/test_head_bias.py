"""H1–H3 (derive/head_claims.py) against torch itself: the real nn.MultiheadAttention's key bias gets no
gradient, and the value-bias closed forms under a mask with a fully masked row (outside every proof path:
they all attend somewhere in every row), where only the row-mass form holds."""
import pytest
import torch

from derive import claims as registry
from numeric import identities
from numeric.generated import attention as gen


def _mha_bias_grads(seed, embed=8, heads=2, n=7, batch=3, classes=5):
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the module's own initialisation
    mha = torch.nn.MultiheadAttention(embed, heads, bias=True, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_bias.copy_(torch.randn(3 * embed, generator=g, dtype=torch.float64))  # biases are 0 at init
        mha.out_proj.bias.copy_(torch.randn(embed, generator=g, dtype=torch.float64))
    x = torch.randn(batch, n, embed, generator=g, dtype=torch.float64)
    readout = torch.randn(embed, classes, generator=g, dtype=torch.float64)
    targets = torch.randint(0, classes, (batch, n), generator=g)
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)  # True = may not attend
    out, _ = mha(x, x, x, attn_mask=causal, need_weights=False)
    loss = torch.nn.functional.cross_entropy((out @ readout).reshape(-1, classes), targets.reshape(-1))
    loss.backward()
    grad = mha.in_proj_bias.grad
    return grad[:embed], grad[embed:2 * embed], grad[2 * embed:], mha.in_proj_weight.grad


@pytest.mark.parametrize("seed", range(3))
def test_a_real_multihead_attention_key_bias_gets_no_gradient(seed):
    """H1 in torch's own module (float64, biases, batch_first, causal attn_mask): dL/db_K is rounding only,
    while dL/db_Q and dL/db_V are not (H2, H3): the key bias is redundant, the others learn."""
    d_query, d_key, d_value, d_weights = _mha_bias_grads(seed)
    scale = float(d_weights.abs().max())
    assert scale > 1e-3
    assert float(d_key.abs().max()) <= 1e-13 * scale, (d_key, scale)
    assert float(d_query.abs().max()) > 1e-4 * scale
    assert float(d_value.abs().max()) > 1e-4 * scale


def test_the_value_bias_needs_a_key_in_every_row():
    """With a fully masked row (it attends nowhere, alpha = 0 there), dL/db_V = sum_i u_i sum_j alpha_ij (H3
    "row mass") still holds and so does dL/db_K = 0 (H1), but sum_i u_i (H3 "attended rows", stated for causal
    attention, M_ii = 1) does not: that row's u_i is counted without reaching any value."""
    sizes, batch = {"n": 5, "dk": 3, "dv": 2, "m": 3, "dx": 2}, (2,)
    errors = {}
    for cid, name in (("H1", "main"), ("H3", "row mass"), ("H3", "attended rows")):
        identity = registry.REGISTRY[cid].part(name)
        fn = getattr(gen, gen.MANIFEST[(cid, name)])
        errors[cid, name], magnitude = identities.evaluate(fn, identity, sizes, batch, "fully-masked-row", seed=3)
        assert magnitude > 1e-6
    assert errors["H1", "main"] <= identities.TOL_FLOAT64
    assert errors["H3", "row mass"] <= identities.TOL_FLOAT64
    assert errors["H3", "attended rows"] > 1e3 * identities.TOL_FLOAT64
    assert registry.REGISTRY["H3"].part("attended rows").mask_algebra == "causal"
