"""ATen's losses as IR ops: negative log-likelihood (the C++ library's
composite), squared, absolute and smooth errors, binary cross-entropy and
KL divergence's xlogy (the table and the builder: _ir.py)."""

import math

from ._ir import Unsupported, aten, is_value, out_dtype, out_shape

# What each translation covers, for the support table (_support.py).
_NLL = (
    '`F.cross_entropy`, `F.nll_loss` (class `weight`, `ignore_index`, `label_smoothing`, `[N, '
    'C, d...]`)')
_NLL_LIMITS = 'every label in `[0, C)` or `ignore_index`'


@aten("nll_loss_forward.default", "nll_loss2d_forward.default", torch=_NLL, limits=_NLL_LIMITS)
def _nll_loss(b, node, logp, target, weight, reduction, ignore_index):
    loss = b.composite("nll_loss", logp, target, weight, reduction=reduction,
                       ignore_index=ignore_index)
    return loss, None


@aten("mse_loss.default", torch='`F.mse_loss`')
def _mse_loss(b, node, x, y, reduction=1):
    if b.dtype(x) != b.dtype(y):
        # torch computes the loss in the wider dtype but its backward then
        # fails ("Found dtype Double but expected Float"): refused alike.
        raise Unsupported(f"mse_loss of {b.dtype(x)}{b.shape(x)} and {b.dtype(y)}{b.shape(y)}: "
                          f"eager torch cannot differentiate it either; give both one dtype "
                          f"(a float32 target: .float())")
    d = b.binary("sub", x, y)
    sq = b.op("mul", [d, d])
    if reduction == 0:
        return sq
    axes = range(len(b.shape(sq)))
    return b.mean(sq, axes) if reduction == 1 else b.sum(sq, axes)


_LOSSES = ('`F.l1_loss`, `F.smooth_l1_loss`, `F.huber_loss`, `F.binary_cross_entropy`, '
           '`F.binary_cross_entropy_with_logits` (`weight`, `pos_weight`), `F.kl_div`, '
           '`F.cosine_embedding_loss`, `F.soft_margin_loss`')


def _abs(b, x):
    """|x| with torch's gradient: sign(x), 0 at 0."""
    return b.select(b.binary("lt", x, 0.0), b.unary("neg", x),
                    b.select(b.binary("gt", x, 0.0), x, b.binary("mul", x, 0.0)))


def _reduce(b, loss, reduction):
    axes = range(len(b.shape(loss)))
    return loss if reduction == 0 else b.mean(loss, axes) if reduction == 1 else b.sum(loss, axes)


@aten("abs.default", "abs_.default", torch="`torch.abs`, `x.abs()`")
def _abs_op(b, node, x):
    return _abs(b, x)


@aten("soft_margin_loss.default", torch=_LOSSES)
def _soft_margin(b, node, x, y, reduction=1):
    """log(1 + exp(-y x)), torch's formula."""
    return _reduce(b, b.unary("log1p", b.unary("exp", b.unary("neg", b.op("mul", [x, y])))),
                   reduction)


@aten("smooth_l1_loss.default", "huber_loss.default", torch=_LOSSES)
def _smooth_l1(b, node, x, y, reduction=1, beta=1.0):
    d = _abs(b, b.binary("sub", x, y))
    huber = "huber" in str(node.target)
    if beta == 0:
        return _reduce(b, d, reduction)
    square = b.binary("mul", b.op("mul", [d, d]), 0.5)
    if huber:  # d < delta: d²/2; else delta (d - delta/2)
        linear = b.binary("mul", b.binary("sub", d, 0.5 * beta), float(beta))
    else:  # d < beta: d²/(2 beta); else d - beta/2
        square = b.binary("div", square, float(beta))
        linear = b.binary("sub", d, 0.5 * beta)
    return _reduce(b, b.select(b.binary("lt", d, float(beta)), square, linear), reduction)


@aten("binary_cross_entropy_with_logits.default", torch=_LOSSES)
def _bce_with_logits(b, node, x, t, weight=None, pos_weight=None, reduction=1):
    """torch's formula: (1 - t) x + w_p (log(exp(-m) + exp(-x - m)) + m),
    m = max(-x, 0), w_p = (pos_weight - 1) t + 1."""
    neg_x = b.unary("neg", x)
    m = b.composite("clamp", neg_x, min=0.0)
    lse = b.binary("add", b.unary("log", b.binary("add", b.unary("exp", b.unary("neg", m)),
                                                   b.unary("exp", b.binary("sub", neg_x, m)))), m)
    if pos_weight is not None:
        lse = b.binary("mul", b.binary("add", b.binary("mul", b.binary("sub", pos_weight, 1.0),
                                                       t), 1.0), lse)
    loss = b.binary("add", b.binary("mul", b.binary("sub", 1.0, t), x), lse)
    if weight is not None:
        loss = b.binary("mul", loss, weight)
    return _reduce(b, loss, reduction)


@aten("binary_cross_entropy.default", torch=_LOSSES,
      limits="each log clamped at -100, as torch")
def _bce(b, node, p, t, weight=None, reduction=1):
    def clamped_log(v):
        return b.composite("clamp", b.unary("log", v), min=-100.0)
    loss = b.unary("neg", b.binary("add", b.binary("mul", t, clamped_log(p)),
                                   b.binary("mul", b.binary("sub", 1.0, t),
                                            clamped_log(b.binary("sub", 1.0, p)))))
    if weight is not None:
        loss = b.binary("mul", loss, weight)
    return _reduce(b, loss, reduction)


def _log_of_number(y):
    return math.log(y) if y > 0 else (-math.inf if y == 0 else math.nan)


@aten("xlogy.Tensor", "xlogy.Scalar_Other", "xlogy.Scalar_Self", torch=_LOSSES)
def _xlogy(b, node, x, y):
    """x log y, 0 where x is 0 unless y is NaN (torch's), in the result's
    dtype (a float64 rate and a float32 count: float64)."""
    dtype, shape = out_dtype(node), out_shape(node)
    x, y = (b.broadcast(b.convert(v, dtype), shape) if is_value(v) else float(v)
            for v in (x, y))
    prod = b.binary("mul", x, b.unary("log", y) if is_value(y) else _log_of_number(y))
    if not is_value(x) or (not is_value(y) and math.isnan(y)):
        return prod
    out = b.select(b.binary("eq", x, 0.0), 0.0, prod)
    return b.select(b.op("ne", [y, y]), math.nan, out) if is_value(y) else out


_CTC = '`F.ctc_loss`, `nn.CTCLoss` (lengths as tensors or lists, targets padded or concatenated)'


@aten("_ctc_loss.Tensor", torch=_CTC,
      limits="torch's gradient: exact through log_softmax, as in torch")
def _ctc_loss(b, node, log_probs, targets, input_lengths, target_lengths, blank=0,
              zero_infinity=False):
    """Each sample's loss; torch's trace divides and averages after it."""
    loss = b.composite("ctc_loss", log_probs, targets, input_lengths, target_lengths,
                       blank=int(blank), reduction=0, zero_infinity=int(bool(zero_infinity)))
    return loss, None


_MARGIN = ('`F.multi_margin_loss` (`p` 1 or 2, `margin`, class `weight`), '
           '`F.multilabel_margin_loss`')
_MARGIN_LIMITS = "a class out of range fails the step with torch's message"


def _rows(b, x, target):
    """x as [N, C] and the target as its rows' [N, ...] (a 1-d input is
    one row), and whether the input was 1-d."""
    one = len(b.shape(x)) == 1
    if one:
        x = b.reshape(x, [1] + b.shape(x))
        target = b.reshape(target, [1] + b.shape(target))
    return x, target, one


def _row_entries(b, x, cols):
    """x [N, C] at column cols[n, ...] of each row n: one gather from the
    flattened x."""
    n, c = b.shape(x)
    shape = b.shape(cols)
    start = b.reshape(b.binary("mul", b.iota("i64", [n], 0), c), [n] + [1] * (len(shape) - 1))
    return b.op("gather", [b.reshape(x, [n * c]), b.binary("add", cols, start)])


def _hinge(b, z, p=1):
    """max(z, 0) to the power p, its gradient 0 where z <= 0 (torch's
    z > 0 test)."""
    return b.select(b.binary("gt", z, 0.0), z if p == 1 else b.op("mul", [z, z]), 0.0)


def _per_row(b, loss, one, reduction):
    if one and reduction == 0:
        return b.reshape(loss, [])
    return _reduce(b, loss, reduction)


@aten("multi_margin_loss.default", torch=_MARGIN, limits=_MARGIN_LIMITS)
def _multi_margin(b, node, x, target, p=1, margin=1, weight=None, reduction=1):
    """Each row's sum over the classes i but its target y of
    weight[y] max(0, margin - x[y] + x[i])^p, over C (torch's formula)."""
    if p not in (1, 2):
        raise Unsupported(f"multi_margin_loss with p = {p}: only p == 1 and p == 2 supported, "
                          f"as in torch")
    x, target, one = _rows(b, x, target)
    n, c = b.shape(x)
    target = b.op("check", [target, b.binary("ge", target, 0)], message="target out of range")
    target = b.op("check", [target, b.binary("lt", target, c)], message="target out of range")
    picked = b.reshape(_row_entries(b, x, target), [n, 1])
    z = b.binary("add", b.binary("sub", float(margin), picked), x)
    own = b.binary("eq", b.iota("i64", [n, c], 1), b.reshape(target, [n, 1]))
    h = b.select(own, 0.0, _hinge(b, z, p))
    if weight is not None:
        h = b.binary("mul", h, b.reshape(b.op("gather", [weight, target]), [n, 1]))
    return _per_row(b, b.binary("div", b.sum(h, [1]), float(c)), one, reduction)


@aten("multilabel_margin_loss_forward.default", torch=_MARGIN, limits=_MARGIN_LIMITS)
def _multilabel_margin(b, node, x, target, reduction=1):
    """Each row's sum over its targets j (the classes before the first -1)
    and the classes i not among them of max(0, 1 - x[j] + x[i]), over C
    (torch's formula; a class given twice counts twice, as in torch)."""
    x, target, one = _rows(b, x, target)
    n, c = b.shape(x)
    target = b.op("check", [target, b.binary("ge", target, -1)],
                  message="argument #2 'target' is out of range")
    target = b.op("check", [target, b.binary("lt", target, c)],
                  message="argument #2 'target' is out of range")
    f = b.dtype(x)
    pos = b.iota(f, [n, c], 1)
    # the targets are the entries before the first -1 (at C: none)
    first_end = b.unary("neg", b.max(b.unary("neg", b.select(b.binary("eq", target, -1), pos,
                                                                float(c))), [1], keepdim=True))
    valid = b.convert(b.binary("lt", pos, first_end), f)  # [N, J]: 1 for a target
    cols = b.select(b.binary("gt", valid, 0.5), target, 0)
    valid = b.reshape(valid, [n, c, 1])
    hits = b.convert(b.binary("eq", b.reshape(cols, [n, c, 1]), b.iota("i64", [n, c, c], 2)), f)
    is_target = b.reshape(b.max(b.binary("mul", hits, valid), [1]), [n, 1, c])  # [N, 1, I]
    z = b.binary("add", b.binary("sub", 1.0, b.reshape(_row_entries(b, x, cols), [n, c, 1])),
                 b.reshape(x, [n, 1, c]))
    keep = b.binary("gt", b.binary("mul", valid, b.binary("sub", 1.0, is_target)), 0.5)
    h = b.select(keep, _hinge(b, z), 0.0)
    loss = b.binary("div", b.sum(h, [1, 2]), float(c))
    return _per_row(b, loss, one, reduction), None
