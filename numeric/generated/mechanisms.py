# GENERATED FILE: do not edit. Regenerate with `python -m derive.codegen --write`.
# Emitted by derive/codegen.py from the routing mechanisms (derive/mechanisms/: each one's score, weight, proved
# routing form and mutants; derive/kernels.py: which kernels), the same SymPy objects the derivation engine proves.
# The codegen stage fails when this file differs from a fresh emission.
"""Torch kernels of every routing mechanism with a kernel shape, generated from its closed forms (see derive/codegen.py):
attention's (weights over keys from logits of q and k, mixing v) and the options shape (weights over the mechanism's
own options from its logits, mixing each option's own content: a gate's or a cell's inputs, a router's experts).
MECHANISMS[name][kind][variant] names each kernel (kinds: derive.kernels.MECHANISM_API; variants: masked, unmasked),
RETURNS its outputs, MUTANTS each routing mutant's dS kernel, and UNEMITTED says why a mechanism or mutant has none.
The mask is a 0/1 float tensor broadcastable to (..., n, n), 1 where query i may attend to key j; for a router,
(..., n, E), 1 where token i selected expert e."""
import torch

from numeric.generated.attention import _recip, _softmax, _softmax_  # noqa: F401  (the helpers the kernels share)


def _softmax_extra(x, mask, dim, extra):
    """M e^x / (e^extra + sum M e^x): a softmax with one more logit in its normaliser (an attention sink),
    max-shifted over x and the extra logit; a fully masked row gives 0."""
    if mask is not None:
        x = x.masked_fill(~(mask if mask.dtype == torch.bool else mask != 0), float("-inf"))
    extra = torch.as_tensor(extra, dtype=x.dtype, device=x.device)
    top = torch.maximum(x.amax(dim, keepdim=True), extra)
    e = torch.exp(x - top)
    return e / (e.sum(dim, keepdim=True) + torch.exp(extra - top))


def _log_matmul_exp(x, y):
    """log(exp(x) @ exp(y)^T), each row of x and of y max-shifted: finite wherever the result is."""
    mx, my = x.amax(-1, keepdim=True), y.amax(-1, keepdim=True)
    return torch.log(torch.exp(x - mx) @ torch.exp(y - my).mT).add_(mx).add_(my.mT)  # in place: no n x n copies


# Each mechanism's kernels: MECHANISMS[name][kind][variant] -> the function's name. A mechanism whose weights
# read no mask (a cell's gates) has one variant, unmasked: its masked kernels would be the same functions.
MECHANISMS = {
    "softmax": {
        "scores": {
            "masked": "softmax_scores_masked",
            "unmasked": "softmax_scores_unmasked"
        },
        "forward": {
            "masked": "softmax_forward_masked",
            "unmasked": "softmax_forward_unmasked"
        },
        "backward": {
            "masked": "softmax_backward_masked",
            "unmasked": "softmax_backward_unmasked"
        },
        "backward_from_forward": {
            "masked": "softmax_backward_from_forward_masked",
            "unmasked": "softmax_backward_from_forward_unmasked"
        }
    },
    "sigmoid": {
        "scores": {
            "masked": "sigmoid_scores_masked",
            "unmasked": "sigmoid_scores_unmasked"
        },
        "forward": {
            "masked": "sigmoid_forward_masked",
            "unmasked": "sigmoid_forward_unmasked"
        },
        "backward": {
            "masked": "sigmoid_backward_masked",
            "unmasked": "sigmoid_backward_unmasked"
        },
        "backward_from_forward": {
            "masked": "sigmoid_backward_from_forward_masked",
            "unmasked": "sigmoid_backward_from_forward_unmasked"
        }
    },
    "linear": {
        "scores": {
            "masked": "linear_scores_masked",
            "unmasked": "linear_scores_unmasked"
        },
        "forward": {
            "masked": "linear_forward_masked",
            "unmasked": "linear_forward_unmasked"
        },
        "backward": {
            "masked": "linear_backward_masked",
            "unmasked": "linear_backward_unmasked"
        },
        "backward_from_forward": {
            "masked": "linear_backward_from_forward_masked",
            "unmasked": "linear_backward_from_forward_unmasked"
        }
    },
    "ssd": {
        "scores": {
            "masked": "ssd_scores_masked",
            "unmasked": "ssd_scores_unmasked"
        },
        "forward": {
            "masked": "ssd_forward_masked",
            "unmasked": "ssd_forward_unmasked"
        },
        "backward": {
            "masked": "ssd_backward_masked",
            "unmasked": "ssd_backward_unmasked"
        },
        "backward_from_forward": {
            "masked": "ssd_backward_from_forward_masked",
            "unmasked": "ssd_backward_from_forward_unmasked"
        }
    },
    "gate": {
        "scores": {
            "unmasked": "gate_scores_unmasked"
        },
        "forward": {
            "unmasked": "gate_forward_unmasked"
        },
        "backward": {
            "unmasked": "gate_backward_unmasked"
        },
        "backward_from_forward": {
            "unmasked": "gate_backward_from_forward_unmasked"
        }
    },
    "glr": {
        "scores": {
            "unmasked": "glr_scores_unmasked"
        },
        "forward": {
            "unmasked": "glr_forward_unmasked"
        },
        "backward": {
            "unmasked": "glr_backward_unmasked"
        },
        "backward_from_forward": {
            "unmasked": "glr_backward_from_forward_unmasked"
        }
    },
    "moe": {
        "scores": {
            "masked": "moe_scores_masked",
            "unmasked": "moe_scores_unmasked"
        },
        "forward": {
            "masked": "moe_forward_masked",
            "unmasked": "moe_forward_unmasked"
        },
        "backward": {
            "masked": "moe_backward_masked",
            "unmasked": "moe_backward_unmasked"
        },
        "backward_from_forward": {
            "masked": "moe_backward_from_forward_masked",
            "unmasked": "moe_backward_from_forward_unmasked"
        }
    }
}
# What each kind of kernel returns, in order (dS: dL/d its logits; d<leaf>: the gradient of an input).
RETURNS = {
    "softmax": {
        "scores": [
            "s"
        ],
        "forward": [
            "alpha",
            "o"
        ],
        "backward": [
            "alpha",
            "dS",
            "dQ",
            "dK",
            "dV"
        ],
        "backward_from_forward": [
            "dS",
            "dQ",
            "dK",
            "dV"
        ]
    },
    "sigmoid": {
        "scores": [
            "s"
        ],
        "forward": [
            "alpha",
            "o"
        ],
        "backward": [
            "alpha",
            "dS",
            "dQ",
            "dK",
            "dV"
        ],
        "backward_from_forward": [
            "dS",
            "dQ",
            "dK",
            "dV"
        ]
    },
    "linear": {
        "scores": [
            "s"
        ],
        "forward": [
            "alpha",
            "o"
        ],
        "backward": [
            "alpha",
            "dS",
            "dQ",
            "dK",
            "dV"
        ],
        "backward_from_forward": [
            "dS",
            "dQ",
            "dK",
            "dV"
        ]
    },
    "ssd": {
        "scores": [
            "s"
        ],
        "forward": [
            "alpha",
            "o"
        ],
        "backward": [
            "alpha",
            "dS",
            "dQ",
            "dK",
            "dV"
        ],
        "backward_from_forward": [
            "dS",
            "dQ",
            "dK",
            "dV"
        ]
    },
    "gate": {
        "scores": [
            "s"
        ],
        "forward": [
            "alpha",
            "o"
        ],
        "backward": [
            "alpha",
            "dS",
            "dH"
        ],
        "backward_from_forward": [
            "dS",
            "dH"
        ]
    },
    "glr": {
        "scores": [
            "s"
        ],
        "forward": [
            "alpha",
            "o"
        ],
        "backward": [
            "alpha",
            "dS",
            "dH"
        ],
        "backward_from_forward": [
            "dS",
            "dH"
        ]
    },
    "moe": {
        "scores": [
            "s"
        ],
        "forward": [
            "alpha",
            "o"
        ],
        "backward": [
            "alpha",
            "dS",
            "dX",
            "dWR",
            "dWE"
        ],
        "backward_from_forward": [
            "dS",
            "dX",
            "dWR",
            "dWE"
        ]
    }
}
# Each routing mutant's dS kernel (a wrong closed form in place of the routing form), per variant.
MUTANTS = {
    "softmax-per-key": {
        "mechanism": "softmax",
        "question": "routing",
        "masked": "mutant_softmax_per_key_masked",
        "unmasked": "mutant_softmax_per_key_unmasked"
    },
    "softmax-no-baseline": {
        "mechanism": "softmax",
        "question": "routing",
        "masked": "mutant_softmax_no_baseline_masked",
        "unmasked": "mutant_softmax_no_baseline_unmasked"
    },
    "sigmoid-advantage": {
        "mechanism": "sigmoid",
        "question": "routing",
        "masked": "mutant_sigmoid_advantage_masked",
        "unmasked": "mutant_sigmoid_advantage_unmasked"
    },
    "sigmoid-no-saturation": {
        "mechanism": "sigmoid",
        "question": "routing",
        "masked": "mutant_sigmoid_no_saturation_masked",
        "unmasked": "mutant_sigmoid_no_saturation_unmasked"
    },
    "linear-per-key": {
        "mechanism": "linear",
        "question": "routing",
        "masked": "mutant_linear_per_key_masked",
        "unmasked": "mutant_linear_per_key_unmasked"
    },
    "linear-kernel-not-logit": {
        "mechanism": "linear",
        "question": "routing",
        "masked": "mutant_linear_kernel_not_logit_masked",
        "unmasked": "mutant_linear_kernel_not_logit_unmasked"
    },
    "ssd-advantage": {
        "mechanism": "ssd",
        "question": "routing",
        "masked": "mutant_ssd_advantage_masked",
        "unmasked": "mutant_ssd_advantage_unmasked"
    },
    "ssd-per-key": {
        "mechanism": "ssd",
        "question": "routing",
        "masked": "mutant_ssd_per_key_masked",
        "unmasked": "mutant_ssd_per_key_unmasked"
    },
    "ssd-no-decay": {
        "mechanism": "ssd",
        "question": "routing",
        "masked": "mutant_ssd_no_decay_masked",
        "unmasked": "mutant_ssd_no_decay_unmasked"
    },
    "gate-per-key": {
        "mechanism": "gate",
        "question": "routing",
        "unmasked": "mutant_gate_per_key_unmasked"
    },
    "gate-no-baseline": {
        "mechanism": "gate",
        "question": "routing",
        "unmasked": "mutant_gate_no_baseline_unmasked"
    },
    "glr-advantage": {
        "mechanism": "glr",
        "question": "routing",
        "unmasked": "mutant_glr_advantage_unmasked"
    },
    "glr-no-saturation": {
        "mechanism": "glr",
        "question": "routing",
        "unmasked": "mutant_glr_no_saturation_unmasked"
    },
    "moe-per-key": {
        "mechanism": "moe",
        "question": "routing",
        "masked": "mutant_moe_per_key_masked",
        "unmasked": "mutant_moe_per_key_unmasked"
    },
    "moe-unselected-baseline": {
        "mechanism": "moe",
        "question": "routing",
        "masked": "mutant_moe_unselected_baseline_masked",
        "unmasked": "mutant_moe_unselected_baseline_unmasked"
    }
}
# Mechanisms and mutants with no kernels, and why.
UNEMITTED = {}


def softmax_scores_masked(q, k, scale):
    """softmax attention: The routing logits s (the mechanism's score of q_i and k_j)."""
    s = q @ (scale * k).mT  # (..., n, n)
    return s


def softmax_scores_unmasked(q, k, scale):
    """softmax attention: The routing logits s (the mechanism's score of q_i and k_j)."""
    s = q @ (scale * k).mT  # (..., n, n)
    return s


def softmax_forward_masked(q, k, v, mask, scale):
    """softmax attention: The forward: the weights w and o = w v."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def softmax_forward_unmasked(q, k, v, scale):
    """softmax attention: The forward: the weights w and o = w v."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def softmax_backward_masked(q, k, v, u, mask, scale):
    """softmax attention: The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return alpha, dS, dQ, dK, dV


def softmax_backward_unmasked(q, k, v, u, scale):
    """softmax attention: The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return alpha, dS, dQ, dK, dV


def softmax_backward_from_forward_masked(q, k, v, alpha, o, u, scale):
    """softmax attention: The backward reusing the forward's weights and o (the module's backward)."""
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dS, dQ, dK, dV


def softmax_backward_from_forward_unmasked(q, k, v, alpha, o, u, scale):
    """softmax attention: The backward reusing the forward's weights and o (the module's backward)."""
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dS, dQ, dK, dV


def mutant_softmax_per_key_masked(q, k, v, u, mask, scale):
    """negative control softmax-per-key: sigmoid attention's per-key form w(1-w)b (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    return dS


def mutant_softmax_per_key_unmasked(q, k, v, u, scale):
    """negative control softmax-per-key: sigmoid attention's per-key form w(1-w)b (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    return dS


def mutant_softmax_no_baseline_masked(q, k, v, u, mask, scale):
    """negative control softmax-no-baseline: the baseline dropped: w b (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = alpha.mul_(b)  # (..., n, n)
    return dS


def mutant_softmax_no_baseline_unmasked(q, k, v, u, scale):
    """negative control softmax-no-baseline: the baseline dropped: w b (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = alpha.mul_(b)  # (..., n, n)
    return dS


def sigmoid_scores_masked(q, k, scale):
    """sigmoid attention: The routing logits s (the mechanism's score of q_i and k_j)."""
    s = q @ (scale * k).mT  # (..., n, n)
    return s


def sigmoid_scores_unmasked(q, k, scale):
    """sigmoid attention: The routing logits s (the mechanism's score of q_i and k_j)."""
    s = q @ (scale * k).mT  # (..., n, n)
    return s


def sigmoid_forward_masked(q, k, v, mask, beta, scale):
    """sigmoid attention: The forward: the weights w and o = w v."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = torch.sigmoid(beta + s) * mask  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def sigmoid_forward_unmasked(q, k, v, beta, scale):
    """sigmoid attention: The forward: the weights w and o = w v."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = torch.sigmoid(beta + s)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def sigmoid_backward_masked(q, k, v, u, mask, beta, scale):
    """sigmoid attention: The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = torch.sigmoid(beta + s) * mask  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return alpha, dS, dQ, dK, dV


def sigmoid_backward_unmasked(q, k, v, u, beta, scale):
    """sigmoid attention: The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = torch.sigmoid(beta + s)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return alpha, dS, dQ, dK, dV


def sigmoid_backward_from_forward_masked(q, k, v, alpha, u, scale):
    """sigmoid attention: The backward reusing the forward's weights and o (the module's backward)."""
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dS, dQ, dK, dV


def sigmoid_backward_from_forward_unmasked(q, k, v, alpha, u, scale):
    """sigmoid attention: The backward reusing the forward's weights and o (the module's backward)."""
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dS, dQ, dK, dV


def mutant_sigmoid_advantage_masked(q, k, v, u, mask, beta, scale):
    """negative control sigmoid-advantage: the paper's softmax form w(b - sum_k w b) applied to sigmoid (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = torch.sigmoid(beta + s) * mask  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    return dS


def mutant_sigmoid_advantage_unmasked(q, k, v, u, beta, scale):
    """negative control sigmoid-advantage: the paper's softmax form w(b - sum_k w b) applied to sigmoid (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = torch.sigmoid(beta + s)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    return dS


def mutant_sigmoid_no_saturation_masked(q, k, v, u, mask, beta, scale):
    """negative control sigmoid-no-saturation: the factor 1 - w dropped: w b (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = torch.sigmoid(beta + s) * mask  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = alpha.mul_(b)  # (..., n, n)
    return dS


def mutant_sigmoid_no_saturation_unmasked(q, k, v, u, beta, scale):
    """negative control sigmoid-no-saturation: the factor 1 - w dropped: w b (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = torch.sigmoid(beta + s)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = alpha.mul_(b)  # (..., n, n)
    return dS


def linear_scores_masked(q, k):
    """normalised linear attention: The routing logits s (the mechanism's score of q_i and k_j)."""
    s = _log_matmul_exp(q, k)  # (..., n, n)
    return s


def linear_scores_unmasked(q, k):
    """normalised linear attention: The routing logits s (the mechanism's score of q_i and k_j)."""
    s = _log_matmul_exp(q, k)  # (..., n, n)
    return s


def linear_forward_masked(q, k, v, mask):
    """normalised linear attention: The forward: the weights w and o = w v."""
    s = _log_matmul_exp(q, k)  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def linear_forward_unmasked(q, k, v):
    """normalised linear attention: The forward: the weights w and o = w v."""
    s = _log_matmul_exp(q, k)  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def linear_backward_masked(q, k, v, u, mask):
    """normalised linear attention: The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content."""
    exp_k = torch.exp(k)  # (..., n, d_k)
    exp_q = torch.exp(q)  # (..., n, d_k)
    s = _log_matmul_exp(q, k)  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    prod0 = torch.reciprocal(exp_q @ exp_k.mT) * dS  # (..., n, n)
    dQ = exp_q * (prod0 @ exp_k)  # (..., n, d_k)
    dK = exp_k.mul_((exp_q.mT @ prod0).mT)  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return alpha, dS, dQ, dK, dV


def linear_backward_unmasked(q, k, v, u):
    """normalised linear attention: The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content."""
    exp_k = torch.exp(k)  # (..., n, d_k)
    exp_q = torch.exp(q)  # (..., n, d_k)
    s = _log_matmul_exp(q, k)  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    prod0 = torch.reciprocal(exp_q @ exp_k.mT) * dS  # (..., n, n)
    dQ = exp_q * (prod0 @ exp_k)  # (..., n, d_k)
    dK = exp_k.mul_((exp_q.mT @ prod0).mT)  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return alpha, dS, dQ, dK, dV


def linear_backward_from_forward_masked(q, k, v, alpha, o, u):
    """normalised linear attention: The backward reusing the forward's weights and o (the module's backward)."""
    exp_k = torch.exp(k)  # (..., n, d_k)
    exp_q = torch.exp(q)  # (..., n, d_k)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    prod0 = torch.reciprocal(exp_q @ exp_k.mT) * dS  # (..., n, n)
    dQ = exp_q * (prod0 @ exp_k)  # (..., n, d_k)
    dK = exp_k.mul_((exp_q.mT @ prod0).mT)  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dS, dQ, dK, dV


def linear_backward_from_forward_unmasked(q, k, v, alpha, o, u):
    """normalised linear attention: The backward reusing the forward's weights and o (the module's backward)."""
    exp_k = torch.exp(k)  # (..., n, d_k)
    exp_q = torch.exp(q)  # (..., n, d_k)
    b = u @ v.mT  # (..., n, n)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    prod0 = torch.reciprocal(exp_q @ exp_k.mT) * dS  # (..., n, n)
    dQ = exp_q * (prod0 @ exp_k)  # (..., n, d_k)
    dK = exp_k.mul_((exp_q.mT @ prod0).mT)  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dS, dQ, dK, dV


def mutant_linear_per_key_masked(q, k, v, u, mask):
    """negative control linear-per-key: sigmoid attention's per-key form w(1-w)b (dS by the wrong form)."""
    s = _log_matmul_exp(q, k)  # (..., n, n)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    return dS


def mutant_linear_per_key_unmasked(q, k, v, u):
    """negative control linear-per-key: sigmoid attention's per-key form w(1-w)b (dS by the wrong form)."""
    s = _log_matmul_exp(q, k)  # (..., n, n)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    return dS


def mutant_linear_kernel_not_logit_masked(q, k, v, u, mask):
    """negative control linear-kernel-not-logit: the advantage times kappa (the kernel taken for its log) (dS by the wrong form)."""
    s = _log_matmul_exp(q, k)  # (..., n, n)
    alpha = _softmax(s, mask, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None]).mul_(torch.exp(s))  # (..., n, n)
    return dS


def mutant_linear_kernel_not_logit_unmasked(q, k, v, u):
    """negative control linear-kernel-not-logit: the advantage times kappa (the kernel taken for its log) (dS by the wrong form)."""
    s = _log_matmul_exp(q, k)  # (..., n, n)
    alpha = _softmax(s, None, dim=-1)  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None]).mul_(torch.exp(s))  # (..., n, n)
    return dS


def ssd_scores_masked(q, k, scale):
    """state-space duality (Mamba-2, RetNet): The routing logits s (the mechanism's score of q_i and k_j)."""
    s = q @ (scale * k).mT  # (..., n, n)
    return s


def ssd_scores_unmasked(q, k, scale):
    """state-space duality (Mamba-2, RetNet): The routing logits s (the mechanism's score of q_i and k_j)."""
    s = q @ (scale * k).mT  # (..., n, n)
    return s


def ssd_forward_masked(q, k, v, mask, ell, scale):
    """state-space duality (Mamba-2, RetNet): The forward: the weights w and o = w v."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = s.mul_(mask).mul_(torch.exp(torch.einsum("...a,...ba->...b", ell, mask)[..., :, None] - torch.einsum("...a,...ba->...b", ell, mask)[..., None, :]))  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def ssd_forward_unmasked(q, k, v, scale):
    """state-space duality (Mamba-2, RetNet): The forward: the weights w and o = w v."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = s  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    return alpha, o


def ssd_backward_masked(q, k, v, u, mask, ell, scale):
    """state-space duality (Mamba-2, RetNet): The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = s.mul_(mask).mul_(torch.exp(torch.einsum("...a,...ba->...b", ell, mask)[..., :, None] - torch.einsum("...a,...ba->...b", ell, mask)[..., None, :]))  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(mask).mul_(torch.exp(torch.einsum("...a,...ba->...b", ell, mask)[..., :, None] - torch.einsum("...a,...ba->...b", ell, mask)[..., None, :]))  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return alpha, dS, dQ, dK, dV


def ssd_backward_unmasked(q, k, v, u, scale):
    """state-space duality (Mamba-2, RetNet): The backward from q, k, v and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dQ and dK by the chain rule through its score, dV by responsibility-weighted content."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = s  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return alpha, dS, dQ, dK, dV


def ssd_backward_from_forward_masked(q, k, v, alpha, u, mask, ell, scale):
    """state-space duality (Mamba-2, RetNet): The backward reusing the forward's weights and o (the module's backward)."""
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(mask).mul_(torch.exp(torch.einsum("...a,...ba->...b", ell, mask)[..., :, None] - torch.einsum("...a,...ba->...b", ell, mask)[..., None, :]))  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dS, dQ, dK, dV


def ssd_backward_from_forward_unmasked(q, k, v, alpha, u, scale):
    """state-space duality (Mamba-2, RetNet): The backward reusing the forward's weights and o (the module's backward)."""
    b = u @ v.mT  # (..., n, n)
    dS = b  # (..., n, n)
    dQ = dS @ (scale * k)  # (..., n, d_k)
    dK = ((scale * q).mT @ dS).mT  # (..., n, d_k)
    dV = (u.mT @ alpha).mT  # (..., n, d_v)
    return dS, dQ, dK, dV


def mutant_ssd_advantage_masked(q, k, v, u, mask, ell, scale):
    """negative control ssd-advantage: the paper's softmax form applied to SSD (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = s.mul_(mask).mul_(torch.exp(torch.einsum("...a,...ba->...b", ell, mask)[..., :, None] - torch.einsum("...a,...ba->...b", ell, mask)[..., None, :]))  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, n)
    return dS


def mutant_ssd_advantage_unmasked(q, k, v, u, scale):
    """negative control ssd-advantage: the paper's softmax form applied to SSD (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = s  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    o = alpha @ v  # (..., n, d_v)
    baseline = torch.linalg.vecdot(o, u)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, n)
    return dS


def mutant_ssd_per_key_masked(q, k, v, u, mask, ell, scale):
    """negative control ssd-per-key: sigmoid attention's per-key form w(1-w)b (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = s.mul_(mask).mul_(torch.exp(torch.einsum("...a,...ba->...b", ell, mask)[..., :, None] - torch.einsum("...a,...ba->...b", ell, mask)[..., None, :]))  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    return dS


def mutant_ssd_per_key_unmasked(q, k, v, u, scale):
    """negative control ssd-per-key: sigmoid attention's per-key form w(1-w)b (dS by the wrong form)."""
    s = q @ (scale * k).mT  # (..., n, n)
    alpha = s  # (..., n, n)
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, n)
    return dS


def mutant_ssd_no_decay_masked(v, u, mask):
    """negative control ssd-no-decay: the decay dropped: M b (dS by the wrong form)."""
    b = u @ v.mT  # (..., n, n)
    dS = b.mul_(mask)  # (..., n, n)
    return dS


def mutant_ssd_no_decay_unmasked(v, u):
    """negative control ssd-no-decay: the decay dropped: M b (dS by the wrong form)."""
    b = u @ v.mT  # (..., n, n)
    dS = b  # (..., n, n)
    return dS


def gate_scores_unmasked(a):
    """scalar convex gate per position (sigma(x_t w) between state and input): The routing logits s (its logits A over g, given)."""
    s = a  # (..., n, 2)
    return s


def gate_forward_unmasked(a, h):
    """scalar convex gate per position (sigma(x_t w) between state and input): The forward: the weights w and o_i = sum_g w_ig c_ig, each option's content c from H."""
    s = a  # (..., n, 2)
    alpha = _softmax(s, None, dim=-1)  # (..., n, 2)
    prod0 = alpha[..., :, :, None] * h  # (..., n, 2, d_v)
    o = prod0.sum(dim=-2)  # (..., n, d_v)
    return alpha, o


def gate_backward_unmasked(u, a, h):
    """scalar convex gate per position (sigma(x_t w) between state and input): The backward from A, H and u = dL/do: the weights, dL/ds by the mechanism's proved routing form (dL/dA, its logits an input), dH by responsibility-weighted content."""
    s = a  # (..., n, 2)
    alpha = _softmax(s, None, dim=-1)  # (..., n, 2)
    b = torch.einsum("...ab,...acb->...ac", u, h)  # (..., n, 2)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, 2)
    dH = alpha[..., :, :, None] * u[..., :, None, :]  # (..., n, 2, d_v)
    return alpha, dS, dH


def gate_backward_from_forward_unmasked(alpha, u, h):
    """scalar convex gate per position (sigma(x_t w) between state and input): The backward reusing the forward's weights and o (the module's backward)."""
    b = torch.einsum("...ab,...acb->...ac", u, h)  # (..., n, 2)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, 2)
    dH = alpha[..., :, :, None] * u[..., :, None, :]  # (..., n, 2, d_v)
    return dS, dH


def mutant_gate_per_key_unmasked(u, a, h):
    """negative control gate-per-key: independent gates' per-key form w(1-w)b (dS by the wrong form)."""
    s = a  # (..., n, 2)
    alpha = _softmax(s, None, dim=-1)  # (..., n, 2)
    b = torch.einsum("...ab,...acb->...ac", u, h)  # (..., n, 2)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, 2)
    return dS


def mutant_gate_no_baseline_unmasked(u, a, h):
    """negative control gate-no-baseline: the baseline dropped: w b (dS by the wrong form)."""
    s = a  # (..., n, 2)
    alpha = _softmax(s, None, dim=-1)  # (..., n, 2)
    b = torch.einsum("...ab,...acb->...ac", u, h)  # (..., n, 2)
    dS = alpha.mul_(b)  # (..., n, 2)
    return dS


def glr_scores_unmasked(a):
    """gated linear recurrence (independent forget and input gates of x_t): The routing logits s (its logits A over g, given)."""
    s = a  # (..., n, 2)
    return s


def glr_forward_unmasked(a, h):
    """gated linear recurrence (independent forget and input gates of x_t): The forward: the weights w and o_i = sum_g w_ig c_ig, each option's content c from H."""
    s = a  # (..., n, 2)
    alpha = torch.sigmoid(s)  # (..., n, 2)
    prod0 = alpha[..., :, :, None] * h  # (..., n, 2, d_v)
    o = prod0.sum(dim=-2)  # (..., n, d_v)
    return alpha, o


def glr_backward_unmasked(u, a, h):
    """gated linear recurrence (independent forget and input gates of x_t): The backward from A, H and u = dL/do: the weights, dL/ds by the mechanism's proved routing form (dL/dA, its logits an input), dH by responsibility-weighted content."""
    s = a  # (..., n, 2)
    alpha = torch.sigmoid(s)  # (..., n, 2)
    b = torch.einsum("...ab,...acb->...ac", u, h)  # (..., n, 2)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, 2)
    dH = alpha[..., :, :, None] * u[..., :, None, :]  # (..., n, 2, d_v)
    return alpha, dS, dH


def glr_backward_from_forward_unmasked(alpha, u, h):
    """gated linear recurrence (independent forget and input gates of x_t): The backward reusing the forward's weights and o (the module's backward)."""
    b = torch.einsum("...ab,...acb->...ac", u, h)  # (..., n, 2)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, 2)
    dH = alpha[..., :, :, None] * u[..., :, None, :]  # (..., n, 2, d_v)
    return dS, dH


def mutant_glr_advantage_unmasked(u, a, h):
    """negative control glr-advantage: the paper's softmax form applied to the recurrence's gates (dS by the wrong form)."""
    s = a  # (..., n, 2)
    alpha = torch.sigmoid(s)  # (..., n, 2)
    b = torch.einsum("...ab,...acb->...ac", u, h)  # (..., n, 2)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = alpha.mul_(b - baseline[..., :, None])  # (..., n, 2)
    return dS


def mutant_glr_no_saturation_unmasked(u, a, h):
    """negative control glr-no-saturation: the factor 1 - w dropped: w b (dS by the wrong form)."""
    s = a  # (..., n, 2)
    alpha = torch.sigmoid(s)  # (..., n, 2)
    b = torch.einsum("...ab,...acb->...ac", u, h)  # (..., n, 2)
    dS = alpha.mul_(b)  # (..., n, 2)
    return dS


def moe_scores_masked(x, w_r):
    """mixture of experts (top-k router): The routing logits s (its logits r over e, from X, WR)."""
    s = x @ w_r  # (..., n, E)
    return s


def moe_scores_unmasked(x, w_r):
    """mixture of experts (top-k router): The routing logits s (its logits r over e, from X, WR)."""
    s = x @ w_r  # (..., n, E)
    return s


def moe_forward_masked(x, mask, w_e, w_r):
    """mixture of experts (top-k router): The forward: the weights w and o_i = sum_e w_ie c_ie, each option's content c from X, WE."""
    s = x @ w_r  # (..., n, E)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, E)
    o = torch.einsum("...ab,...abc->...ac", alpha, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, d_v)
    return alpha, o


def moe_forward_unmasked(x, w_e, w_r):
    """mixture of experts (top-k router): The forward: the weights w and o_i = sum_e w_ie c_ie, each option's content c from X, WE."""
    s = x @ w_r  # (..., n, E)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, E)
    o = torch.einsum("...ab,...abc->...ac", alpha, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, d_v)
    return alpha, o


def moe_backward_masked(u, x, mask, w_e, w_r):
    """mixture of experts (top-k router): The backward from X, WR, WE and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dX and dWR by the chain rule through its logits and content, dWE by responsibility-weighted content."""
    s = x @ w_r  # (..., n, E)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, E)
    b = torch.einsum("...ab,...acb->...ac", u, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, E)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, E)
    dX = dS @ w_r.mT + torch.einsum("...ab,...ac,...bdc->...ad", alpha, u, w_e)  # (..., n, d_x)
    dWR = x.mT @ dS  # (..., d_x, E)
    dWE = torch.einsum("...ab,...ac,...ad->...cbd", x, alpha, u)  # (..., E, d_x, d_v)
    return alpha, dS, dX, dWR, dWE


def moe_backward_unmasked(u, x, w_e, w_r):
    """mixture of experts (top-k router): The backward from X, WR, WE and u = dL/do: the weights, dL/ds by the mechanism's proved routing form, dX and dWR by the chain rule through its logits and content, dWE by responsibility-weighted content."""
    s = x @ w_r  # (..., n, E)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, E)
    b = torch.einsum("...ab,...acb->...ac", u, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, E)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, E)
    dX = dS @ w_r.mT + torch.einsum("...ab,...ac,...bdc->...ad", alpha, u, w_e)  # (..., n, d_x)
    dWR = x.mT @ dS  # (..., d_x, E)
    dWE = torch.einsum("...ab,...ac,...ad->...cbd", x, alpha, u)  # (..., E, d_x, d_v)
    return alpha, dS, dX, dWR, dWE


def moe_backward_from_forward_masked(alpha, u, x, w_e, w_r):
    """mixture of experts (top-k router): The backward reusing the forward's weights and o (the module's backward)."""
    b = torch.einsum("...ab,...acb->...ac", u, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, E)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, E)
    dX = dS @ w_r.mT + torch.einsum("...ab,...ac,...bdc->...ad", alpha, u, w_e)  # (..., n, d_x)
    dWR = x.mT @ dS  # (..., d_x, E)
    dWE = torch.einsum("...ab,...ac,...ad->...cbd", x, alpha, u)  # (..., E, d_x, d_v)
    return dS, dX, dWR, dWE


def moe_backward_from_forward_unmasked(alpha, u, x, w_e, w_r):
    """mixture of experts (top-k router): The backward reusing the forward's weights and o (the module's backward)."""
    b = torch.einsum("...ab,...acb->...ac", u, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, E)
    baseline = torch.linalg.vecdot(alpha, b)  # (..., n)
    dS = b.sub_(baseline[..., :, None]).mul_(alpha)  # (..., n, E)
    dX = dS @ w_r.mT + torch.einsum("...ab,...ac,...bdc->...ad", alpha, u, w_e)  # (..., n, d_x)
    dWR = x.mT @ dS  # (..., d_x, E)
    dWE = torch.einsum("...ab,...ac,...ad->...cbd", x, alpha, u)  # (..., E, d_x, d_v)
    return dS, dX, dWR, dWE


def mutant_moe_per_key_masked(u, x, mask, w_e, w_r):
    """negative control moe-per-key: independent gates' per-key form g(1-g)b (dS by the wrong form)."""
    s = x @ w_r  # (..., n, E)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, E)
    b = torch.einsum("...ab,...acb->...ac", u, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, E)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, E)
    return dS


def mutant_moe_per_key_unmasked(u, x, w_e, w_r):
    """negative control moe-per-key: independent gates' per-key form g(1-g)b (dS by the wrong form)."""
    s = x @ w_r  # (..., n, E)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, E)
    b = torch.einsum("...ab,...acb->...ac", u, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, E)
    dS = b.mul_(1 - alpha).mul_(alpha)  # (..., n, E)
    return dS


def mutant_moe_unselected_baseline_masked(u, x, mask, w_e, w_r):
    """negative control moe-unselected-baseline: the baseline over every expert, selected or not (dS by the wrong form)."""
    e_size = mask.shape[-1]
    s = x @ w_r  # (..., n, E)
    alpha = _softmax_(s, mask, dim=-1)  # (..., n, E)
    b = torch.einsum("...ab,...acb->...ac", u, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, E)
    dS = alpha.mul_(b - (b / e_size).sum(dim=-1)[..., :, None])  # (..., n, E)
    return dS


def mutant_moe_unselected_baseline_unmasked(u, x, w_e, w_r):
    """negative control moe-unselected-baseline: the baseline over every expert, selected or not (dS by the wrong form)."""
    e_size = w_e.shape[-3]
    s = x @ w_r  # (..., n, E)
    alpha = _softmax_(s, None, dim=-1)  # (..., n, E)
    b = torch.einsum("...ab,...acb->...ac", u, torch.einsum("...ab,...cbd->...acd", x, w_e))  # (..., n, E)
    dS = alpha.mul_(b - (b / e_size).sum(dim=-1)[..., :, None])  # (..., n, E)
    return dS
