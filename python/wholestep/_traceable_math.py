"""Torch functions rewritten in torch ops while a model is traced
(_traceable.traceable() enters and leaves them), where this torch's fake
tensors cannot trace its own.

torch.quantile and torch.nanquantile: torch checks q's range by reading
its values; here the check is wholestep::check, and the rest is torch's
computation step for step (the sort, each quantile's rank, NaN handling
and interpolation, gathers from the sort and a lerp).

torch.cdist: this torch's meta function for its forward fails on fake
tensors. Here the value is computed as torch computes it (p = 2 through
products, torch's _euclidean_dist, where torch takes that path: more than
25 rows on a side by default, or compute_mode says so; else the distance
of the differences), and its gradient by torch's backward formula through
wholestep::straight_through: for p = 2, g (x1 - x2) / dist, 0 where the
distance is 0, through products when the value was; for other p >= 1,
g |d|^(p - 1) sign(d) / dist^(p - 1), 0 where the distance is 0.
"""

import torch

from ._ir import TRACED

TRACED.append(("`torch.quantile`, `torch.nanquantile` (rewritten while tracing)",
               ["sort.default", "gather.default", "lerp.Tensor", "check (wholestep)"],
               "a q outside [0, 1] fails the step, as torch raises"))
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(original, ignore_nan):
    """torch's quantile_compute in torch ops (aten/native/Sorting.cpp)."""

    def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
        if out is not None or interpolation not in _INTERPOLATIONS \
                or not input.is_floating_point():
            return original(input, q, dim, keepdim, interpolation=interpolation, out=out)
        what = "nanquantile()" if ignore_nan else "quantile()"
        qt = torch.as_tensor(q, dtype=input.dtype)
        if qt.dim() > 1:
            raise RuntimeError(f"{what} q must be a scalar or 1D tensor")
        qt = torch.ops.wholestep.check(qt, (qt >= 0) & (qt <= 1),
                                       f"{what} q values must be in the range [0, 1]")
        x = input.flatten() if dim is None else input
        d = 0 if dim is None else dim % max(x.dim(), 1)
        if x.dim() == 0:
            x = x.reshape(1)
        ordered = x.movedim(d, -1).sort(-1).values  # NaN last
        n = ordered.shape[-1]
        lead = ordered.shape[:-1]
        qs = qt.reshape(1) if qt.dim() == 0 else qt
        if ignore_nan:
            valid = (~ordered.isnan()).sum(-1, keepdim=True)
            ranks = qs * (valid - 1).to(qs.dtype)
            ranks = torch.where(ranks < 0, torch.zeros_like(ranks), ranks)
        else:
            ranks = (qs * (n - 1)).expand(*lead, qs.shape[0])
            has_nan = ordered.isnan().any(-1, keepdim=True)
            ranks = torch.where(has_nan, torch.full_like(ranks, n - 1), ranks)
        if interpolation == "lower":
            ranks = ranks.floor()
        elif interpolation == "higher":
            ranks = ranks.ceil()
        elif interpolation == "nearest":
            ranks = ranks.round()
        below = ranks.long()
        result = ordered.gather(-1, below)
        if interpolation in ("linear", "midpoint"):
            weights = torch.full_like(ranks, 0.5) if interpolation == "midpoint" \
                else ranks - below.to(ranks.dtype)
            result = torch.lerp(result, ordered.gather(-1, ranks.ceil().long()), weights)
        if keepdim:
            if dim is None:
                result = result.reshape([1] * input.dim() + [qs.shape[0]])
            else:
                result = result.unsqueeze(-2).movedim(-2, d)
        result = result.movedim(-1, 0)
        return result[0] if qt.dim() == 0 else result

    return quantile


TRACED.append(("`torch.cdist` (p >= 1, rewritten while tracing)",
               ["sub.Tensor", "abs.default", "pow.Tensor_Scalar", "sum.dim_IntList", "bmm.default",
                "straight_through (wholestep)"],
               "p from 1 up (not 0, below 1 or inf); every compute_mode"))
_MM_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
             "donot_use_mm_for_euclid_dist")


def _cdist(original):
    def cdist(x1, x2, p=2.0, compute_mode=None):
        mode = compute_mode or _MM_MODES[0]
        if mode not in _MM_MODES or not 1 <= p < float("inf") or x1.dim() < 2 \
                or x1.dim() != x2.dim() or not x1.is_floating_point() \
                or x1.shape[:-2] != x2.shape[:-2] or x1.shape[-1] != x2.shape[-1]:
            return original(x1, x2, p, compute_mode)
        r1, r2 = x1.shape[-2], x2.shape[-2]
        products = p == 2 and (mode == _MM_MODES[1] or mode == _MM_MODES[0] and max(r1, r2) > 25)
        with torch.no_grad():
            if products:  # torch's _euclidean_dist
                n1, n2 = x1.pow(2).sum(-1, True), x2.pow(2).sum(-1, True)
                left = torch.cat([x1.mul(-2), n1, torch.ones_like(n1)], -1)
                right = torch.cat([x2, torch.ones_like(n2), n2], -1)
                value = left.matmul(right.transpose(-1, -2)).clamp_min(0).sqrt()
            else:
                d = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
                value = d.pow(2).sum(-1).sqrt() if p == 2 else d.pow(p).sum(-1).pow(1 / p)
            # the gradient's factor per pair: 1 / dist^(p - 1), 0 where dist is 0
            scale = torch.where(value == 0, torch.zeros_like(value), value.pow(1 - p))
        if products:
            # 0.5 |x1 - x2|^2 through products: g (x1 rowsum(ratio) - ratio x2)
            square = x1.pow(2).sum(-1, True) + x2.pow(2).sum(-1, True).transpose(-1, -2) \
                - 2 * x1.matmul(x2.transpose(-1, -2))
            via = 0.5 * square * scale
        else:
            via = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs().pow(p).sum(-1) / p * scale
        return torch.ops.wholestep.straight_through(value, via)

    return cdist


def enter():
    """Every rewrite of this module in place of torch's; returns what leave
    restores."""
    kept = [(owner, name, getattr(owner, name)) for owner in (torch, torch.Tensor)
            for name in ("quantile", "nanquantile")]
    for owner, name, original in kept:
        setattr(owner, name, _quantile(original, name == "nanquantile"))
    kept.append((torch, "cdist", torch.cdist))
    torch.cdist = _cdist(torch.cdist)
    return kept


def leave(kept):
    for owner, name, original in kept:
        setattr(owner, name, original)
