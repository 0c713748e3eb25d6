"""Random numbers drawn inside a forward: a VAE's reparametrized noise
(randn_like), a diffusion model's noise and time steps (randn_like,
randint), a GAN's latent codes (randn), Gumbel noise (rand_like). Each
comes from wholestep's counter-based stream, as dropout's masks do
(random_uniform: 24-bit uniforms in [0, 1), a fresh part of the stream
at every step), not from torch's generator: torch.manual_seed does not
change them, and the numbers differ from eager torch's; their
distributions are torch's. None of them has a gradient (torch's normal
and bernoulli give their mean, std and p zero gradients; so does this).

float64 numbers and integers take two uniforms each, a 48-bit uniform;
float32 numbers one. Normal numbers are Box and Muller's: sqrt(-2 log(1 -
u1)) cos(2 pi u2), 1 - u1 in (0, 1] so the log is finite."""

import math

from ._ir import Unsupported, aten, is_value, out_dtype, out_shape

_RANDOM = ('`torch.rand`, `rand_like`, `randn`, `randn_like`, `randint`, `randint_like`, '
           '`normal` (tensor mean and std), `bernoulli` (tensor p), `Tensor.uniform_`, '
           '`normal_`, `exponential_`, `random_(to)`')
_LIMITS = ("the numbers are wholestep's (as dropout's masks), not torch's generator's; no "
           "`generator`; `randperm` and `multinomial` are not translated")


def _no_generator(kwargs):
    if kwargs.get("generator") is not None:
        raise Unsupported("random numbers from a torch.Generator (wholestep draws from its "
                          "own stream)")


def _uniform(b, dtype, shape):
    """Uniform numbers in [0, 1) of `dtype` ("f32" or "f64")."""
    u = b.random_uniform(dtype, shape)
    if dtype == "f64":  # 24 more bits
        u = b.op("add", [u, b.binary("mul", b.random_uniform(dtype, shape), 2.0 ** -24)])
    return u


def _float_of(dtype):
    if dtype not in ("f32", "f64"):
        raise Unsupported(f"random floating-point numbers of dtype {dtype}")
    return dtype


def _normal(b, dtype, shape):
    """Standard normal numbers (Box and Muller)."""
    u1, u2 = _uniform(b, dtype, shape), _uniform(b, dtype, shape)
    radius = b.unary("sqrt", b.binary("mul", b.unary("log1p", b.unary("neg", u1)), -2.0))
    return b.op("mul", [radius, b.unary("cos", b.binary("mul", u2, 2 * math.pi))])


def _integers(b, low, high, dtype, shape):
    """Integers in [low, high), as `dtype`."""
    if not high > low:
        raise Unsupported(f"random integers in an empty range [{low}, {high})")
    if high - low > 2 ** 40:
        raise Unsupported(f"random integers in a range of {high - low} (at most 2^40)")
    u = _uniform(b, "f64", shape)
    k = b.convert(b.binary("mul", u, float(high - low)), "i64")  # truncated: >= 0, floored
    return b.convert(b.binary("add", k, int(low)), dtype)


def _held(b, v):
    return b.unary("stop_gradient", v)


@aten("rand.default", "rand_like.default", torch=_RANDOM, limits=_LIMITS)
def _rand(b, node, *args, **kwargs):
    _no_generator(kwargs)
    return _uniform(b, _float_of(out_dtype(node)), out_shape(node))


@aten("randn.default", "randn_like.default", torch=_RANDOM, limits=_LIMITS)
def _randn(b, node, *args, **kwargs):
    _no_generator(kwargs)
    return _normal(b, _float_of(out_dtype(node)), out_shape(node))


@aten("randint.default", "randint.low", "randint_like.default", "randint_like.low_dtype",
      torch=_RANDOM, limits=_LIMITS)
def _randint(b, node, *args, **kwargs):
    _no_generator(kwargs)
    name = str(node.target)
    if "randint_like" in name:  # (x, high) or (x, low, high)
        bounds = args[1:3]
    else:  # (high, size) or (low, high, size)
        bounds = args[:2] if name.endswith(".low") else args[:1]
    low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
    return _integers(b, int(low), int(high), out_dtype(node), out_shape(node))


@aten("random_.to", torch=_RANDOM, limits=_LIMITS)
def _random_(b, node, x, high, **kwargs):
    """random_(to): integers in [0, to). (random_(from, to) does not trace:
    torch.fx writes its overload's name, `from`, as Python code.)"""
    _no_generator(kwargs)
    return _integers(b, 0, int(high), out_dtype(node), out_shape(node))


@aten("uniform_.default", torch=_RANDOM, limits=_LIMITS)
def _uniform_(b, node, x, low=0.0, high=1.0, **kwargs):
    _no_generator(kwargs)
    dtype = _float_of(out_dtype(node))
    u = _uniform(b, dtype, out_shape(node))
    return b.binary("add", b.binary("mul", u, float(high - low)), float(low))


@aten("normal_.default", torch=_RANDOM, limits=_LIMITS)
def _normal_(b, node, x, mean=0.0, std=1.0, **kwargs):
    _no_generator(kwargs)
    z = _normal(b, _float_of(out_dtype(node)), out_shape(node))
    return b.binary("add", b.binary("mul", z, float(std)), float(mean))


@aten("normal.Tensor_Tensor", "normal.Tensor_float", "normal.float_Tensor", torch=_RANDOM,
      limits=_LIMITS)
def _normal_tensors(b, node, mean, std=1.0, **kwargs):
    """mean + std z, broadcast; no gradient to mean or std (as torch's)."""
    _no_generator(kwargs)
    dtype, shape = _float_of(out_dtype(node)), out_shape(node)

    def operand(v):
        return _held(b, b.convert(v, dtype)) if is_value(v) else float(v)

    return b.binary("add", b.binary("mul", _normal(b, dtype, shape), operand(std)),
                    operand(mean))


@aten("bernoulli.default", "bernoulli.p", torch=_RANDOM, limits=_LIMITS)
def _bernoulli_p(b, node, p, *args, **kwargs):
    """1 where a uniform number is below p (a tensor, or a number with
    bernoulli.p), else 0; no gradient to p (as torch's)."""
    _no_generator(kwargs)
    dtype, shape = out_dtype(node), out_shape(node)
    prob = float(args[0]) if str(node.target).endswith(".p") else _held(b, b.convert(p, "f64"))
    if is_value(prob):
        prob = b.broadcast(prob, shape)
    u = _uniform(b, "f64", shape)
    return b.convert(b.binary("lt", u, prob), dtype)


@aten("exponential_.default", torch=_RANDOM, limits=_LIMITS)
def _exponential_(b, node, x, lambd=1.0, **kwargs):
    _no_generator(kwargs)
    u = _uniform(b, _float_of(out_dtype(node)), out_shape(node))
    return b.binary("mul", b.unary("log1p", b.unary("neg", u)), -1.0 / float(lambd))
