"""numeric.attention_backward and friends against torch.autograd, SDPA, finite differences."""
import pytest
import torch

import numeric.api
from numeric import attention_backward, attention_loss_backward
from numeric.agreement import (
    TOLERANCE,
    Case,
    compare_api,
    fully_masked_rows_are_zero,
    gradcheck_core,
    loss_variant_error,
    random_cases,
    sdpa_error,
    training_matches_autograd,
)
from numeric.module import GeneratedAttention

torch.set_num_threads(1)
CASES = random_cases(16, seed=123)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label())
def test_agrees_with_autograd(case, dtype):
    err, errors, finite = compare_api(case, dtype, "cpu")
    assert finite
    assert err <= TOLERANCE[dtype], errors


def test_tolerances_are_not_vacuous():
    """A wrong answer (dQ off by 1e-9 relative) must fail the float64 tolerance."""
    q, k, v, u = (torch.randn(2, 5, 3, dtype=torch.float64) for _ in range(4))
    g = attention_backward(q, k, v, u)
    from numeric.agreement import autograd_reference, rel_error

    ref = autograd_reference(q, k, v, u, None, 3 ** -0.5)
    assert rel_error(g.dQ, ref["dQ"]) <= TOLERANCE[torch.float64]
    assert rel_error(g.dQ * (1 + 1e-9), ref["dQ"]) > TOLERANCE[torch.float64]


def test_large_scores_do_not_overflow():
    err, _, finite = compare_api(Case((2,), 16, 8, 8, "causal", 3), torch.float64, "cpu", magnitude=12.0)
    assert finite and err <= 1e-12


def test_fully_masked_rows_give_zero_not_nan():
    assert fully_masked_rows_are_zero("cpu")


def test_gradcheck_of_the_generated_backward():
    assert gradcheck_core("cpu")


@pytest.mark.parametrize("mask", ["causal", "none"])
def test_matches_sdpa_backward(mask):
    assert sdpa_error(Case((2, 3), 9, 5, 4, mask, 4), "cpu") <= 1e-12


def test_full_loss_variant_matches_autograd():
    assert loss_variant_error("cpu") <= 1e-12


def test_module_trains_like_autograd():
    assert training_matches_autograd("cpu") <= 1e-12


def test_advantage_equals_ds_and_sums_to_zero():
    q, k, v, u = (torch.randn(3, 6, 4, dtype=torch.float64) for _ in range(4))
    g = attention_backward(q, k, v, u, mask=torch.ones(6, 6, dtype=torch.bool).tril())
    assert g.A is g.dS
    assert float(g.dS.sum(-1).abs().max()) < 1e-15  # C6


# -- bad input ------------------------------------------------------------------------------------
def _good(n=4, d=3, dtype=torch.float64):
    return [torch.randn(2, n, d, dtype=dtype) for _ in range(4)]


@pytest.mark.parametrize("mutate,exc,pattern", [
    (lambda a: (a[0][:, :3], *a[1:]), ValueError, r"u has n=4 rows, expected 3 \(shape \(2, 4, 3\)\)"),
    (lambda a: (a[0], a[1][..., :2], *a[2:]), ValueError, r"k has d_k=2 columns, expected 3"),
    (lambda a: (a[0], a[1], torch.cat([a[2], a[2][:1]]), a[3]), ValueError,
     r"v has batch dims \(3,\) \(shape \(3, 4, 3\)\), which do not broadcast with the batch dims \(2,\) of q, k"),
    (lambda a: (a[0], a[1], a[2][:1], a[3][:1]), ValueError, r"u has batch dims \(1,\), expected \(2,\)"),
    (lambda a: (a[0].long(), *a[1:]), TypeError, r"q must be a floating tensor, got dtype torch.int64 \(shape \(2, 4, 3\)\)"),
    (lambda a: (a[0], a[1].float(), *a[2:]), TypeError, r"k has dtype torch.float32 but q has torch.float64"),
    (lambda a: (a[0], a[1], a[2], a[3] * float("nan")), ValueError, r"u contains NaN \(shape \(2, 4, 3\)\)"),
    (lambda a: (a[0] * float("inf"), *a[1:]), ValueError, r"q contains Inf"),
    (lambda a: (a[0].numpy(), *a[1:]), TypeError, r"q must be a torch.Tensor, got ndarray"),
    (lambda a: (a[0][0, 0], *a[1:]), ValueError, r"q must have at least 2 dimensions"),
])
def test_bad_inputs_name_the_argument(mutate, exc, pattern):
    with pytest.raises(exc, match=pattern):
        attention_backward(*mutate(_good()))


def test_bad_mask_and_scale():
    q, k, v, u = _good()
    with pytest.raises(TypeError, match="mask must be a bool tensor .* got dtype torch.uint8"):
        attention_backward(q, k, v, u, mask=torch.ones(4, 4, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not broadcast to the score shape \(\.\.\., L, S\) = \(2, 4, 4\)"):
        attention_backward(q, k, v, u, mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="scale must be finite"):
        attention_backward(q, k, v, u, scale=float("nan"))
    with pytest.raises(TypeError, match="scale must be a real number"):
        attention_backward(q, k, v, u, scale="1")
    for ok in (0, -1.0):  # any finite real, as scaled_dot_product_attention
        assert torch.isfinite(attention_backward(q, k, v, u, scale=ok).dQ).all()


def test_validation_can_be_switched_off():
    q, k, v, u = _good()
    g = attention_backward(q, k, v, u, validate_inputs=False)
    assert g.dQ.shape == q.shape


def test_loss_variant_bad_targets():
    x = torch.randn(5, 4, dtype=torch.float64)
    w = [torch.randn(4, 3, dtype=torch.float64) for _ in range(3)] + [torch.randn(3, 6, dtype=torch.float64)]
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 6\)"):
        attention_loss_backward(x, *w, torch.tensor([0, 1, 2, 3, 6]))
    with pytest.raises(TypeError, match="targets must be an integer tensor"):
        attention_loss_backward(x, *w, torch.zeros(5))
    with pytest.raises(ValueError, match=r"w_o must be \(3, m\)"):
        attention_loss_backward(x, *w[:3], torch.randn(2, 6, dtype=torch.float64), torch.zeros(5, dtype=torch.long))


def test_module_rejects_bad_sizes_and_inputs():
    with pytest.raises(ValueError, match="d_k must be a positive integer"):
        GeneratedAttention(4, 0, 3)
    m = GeneratedAttention(4, 2, 3)
    with pytest.raises(ValueError, match=r"x must be \(\.\.\., n, 4\)"):
        m(torch.randn(5, 3))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))])
def test_api_agrees_with_autograd_on_every_device(device):
    """The same agreement check on each device torch has here (CUDA is skipped where absent)."""
    for kind in ("causal", "padding", "fully-masked-row"):
        err, _, finite = compare_api(Case((2,), 5, 3, 2, kind, 9), torch.float64, torch.device(device))
        assert finite and err <= 1e-12, kind


def test_mask_kinds_are_distinct():
    from numeric.reference import make_mask

    g = torch.Generator().manual_seed(0)
    shapes = {k: None if (m := make_mask(k, (2, 3), 5, g)) is None else tuple(m.shape)
              for k in ("none", "causal", "padding", "random", "fully-masked-row", "broadcast")}
    assert shapes == {"none": None, "causal": (5, 5), "padding": (2, 3, 5, 5), "random": (2, 3, 5, 5),
                      "fully-masked-row": (2, 3, 5, 5), "broadcast": (2, 1, 5, 5)}
    padding = make_mask("padding", (4,), 6, g)
    assert bool(padding[..., 0].all()) and not bool(padding.all())
    with pytest.raises(ValueError, match="unknown mask kind"):
        make_mask("diagonal", (), 3, g)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "float", "broadcast-bool"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_routing_is_attention_backward_without_dq_dk(mask_kind, dtype):
    """attention_routing returns alpha, B, A, dS, dV equal (bitwise in float64 on bool/no masks, where it runs
    its own kernel) to attention_backward's, for every mask kind and broadcast k/v batch dims."""
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64)
    k = torch.randn(1, 3, 6, 4, generator=g, dtype=torch.float64)  # broadcast batch
    v = torch.randn(1, 3, 6, 2, generator=g, dtype=torch.float64)
    u = torch.randn(2, 3, 5, 2, generator=g, dtype=torch.float64)
    mask = {"none": None, "bool": torch.rand(2, 3, 5, 6, generator=g) < 0.7,
            "float": torch.randn(2, 3, 5, 6, generator=g, dtype=torch.float64),
            "broadcast-bool": torch.rand(5, 6, generator=g) < 0.6}[mask_kind]
    q, k, v, u = (t.to(dtype) for t in (q, k, v, u))
    if mask is not None and mask.dtype != torch.bool:
        mask = mask.to(dtype)
    full = numeric.api.attention_backward(q, k, v, u, mask=mask, scale=0.7)
    routing = numeric.api.attention_routing(q, k, v, u, mask=mask, scale=0.7)
    assert routing.dV.shape == v.shape
    for name in ("alpha", "B", "A", "dS", "dV"):
        a, b = getattr(routing, name), getattr(full, name)
        assert a.dtype == dtype and a.shape == b.shape, name
        tol = 0.0 if dtype == torch.float64 else 2e-2
        assert float((a.double() - b.double()).abs().max()) <= tol * max(1.0, float(b.double().abs().max())), name
    with pytest.raises(ValueError):
        numeric.api.attention_routing(q, k, v, u[..., :1], mask=mask)
