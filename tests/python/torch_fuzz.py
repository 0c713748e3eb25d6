"""A differential tester of wholestep.torch: random small torch modules,
one training step each, in every mode, against float64 eager torch.

A case is a JSON-able spec (the generator's output for a seed): the input
(images [N, C, H, W], token features [N, T, D], token ids through an
Embedding or bags of them through an EmbeddingBag, or vectors [N, F]), a
list of layer specs (in-place writes through views of several kinds, read back
through a view made before them; convolutions with and without bias and groups,
transposed convolutions, weight-normed convolutions, BatchNorm, LayerNorm,
GroupNorm, the activations of the support table, max and average pooling
(ceil_mode, count_include_pad, divisor_override, max pooling dilated, max
pooling's indices and unpooling),
adaptive average and max pooling to any size, padding of every mode,
upsampling (nearest, bilinear,
bicubic, align_corners both ways), residual blocks, concatenations,
squeeze-excitation, token mixing over a transposed axis, multi-head
attention, reductions, running means (cumsum) and p-norm normalization
over the token axis, centering on the tokens' median or k-th value,
windows as channels (unfold) and summed back (fold), bilinear products,
recurrent networks and 1-d convolutions and pooling along the tokens
(fuzz_sequence_layers.py), ...), the head the builder appends (flatten or
mean over tokens, then Linear; for a loss per position a 1x1 convolution
per pixel or a Linear per token; for the CTC loss a Linear per token and
log-probabilities [T, N, C]), the loss (fuzz_losses.py: cross-entropy
with its options, NLL, BCE with logits, the regression losses, KL
divergence, cosine embedding, Gaussian NLL; or ctc over token inputs:
random targets and lengths, zero_infinity, blank first or last) and the
optimizer (SGD with momentum, nesterov and weight decay; Adam;
AdamW; one or two parameter groups; fresh or after an eager step), and
at times the training loop's options (clip_grad_norm, accumulate: eager
torch's loop clips and accumulates too). Only
what the importer supports is generated.

Each case is checked with wst.check's rule (float64 eager torch the truth,
twice float32 eager torch's spread over batch orders the bound) in
single_graph fused and unfused, three_graph, interpret, one compiled mode
without aliasing and one with its images stored in blocks of channels or
NCHW (step option layouts); single_graph and three_graph again on a float64
copy (trained by SGD with momentum where the spec has Adam), within twice
float64 torch's spread (where a rounding to float32 or
a formula off by float32's noise stands out); and single_graph must give
the same bits twice from the same initial state. A float32 mismatch that
every float32 mode shares, interpret included, while the float64 step is
right is the model's chaos in float32 (a median's pick or a ReLU input
decided by rounding), reported apart, not a failure; so is a mismatch on
tensors that float64 torch itself moves far when its layers' outputs move
by a few roundings (a max between padding zeros and a value that is 0 in
exact arithmetic: the gradient follows the noise's sign); a float64
mismatch within SMALL_RATIO times how far those runs move float64 torch
is rounding-level. A failing case shrinks (layers removed, blocks
unwrapped, sizes and options reduced while the same failure persists) and
the smallest failing spec is written as a JSON regression case that
test_torch_fuzz.py replays.

    PYTHONPATH=build/python /usr/bin/python3 tests/python/torch_fuzz.py --seconds 3600
"""

import argparse
import contextlib
import copy
import json
import math
import random
import re
import sys
import time
from pathlib import Path

import torch

import fuzz_losses
import fuzz_sequence_layers as seq_layers
from fuzz_sequence_layers import pool_out
from wholestep import _check, _check_runs

nn = torch.nn
F = nn.functional

HERE = Path(__file__).resolve().parent
REGRESSIONS = HERE / "fuzz_regressions"

CONFIGS = [("single_graph", {}), ("single_graph", {"fuse": False}), ("three_graph", {}),
           ("interpret", {})]
# The same step of a float64 copy, judged within float64 torch's spread: a
# float32 rounding anywhere in wholestep's float64 step (a constant, an
# accumulator, a kernel computing in float) is 1e-8 off, far beyond it,
# and a formula that differs from torch's beyond rounding shows in float64
# where float32's own noise hides it. ("dtype" is the fuzzer's key, not a
# step option.)
F64 = {"dtype": "float64"}
F64_CONFIGS = [("single_graph", F64), ("three_graph", F64)]
# A float64 mismatch within SMALL_F64 of float64 torch is rounding-level
# too (the float64 counterpart of SMALL).
SMALL_F64 = 1e-12
# A float64 tensor exactly zero on one side (exact arithmetic's value, as
# wholestep's LayerNorm over one element gives) and within ZERO_F64 of the
# largest tensor of its kind on the other is that zero's rounding noise:
# float64 torch's LayerNorm over one element leaves 1e-16 of its input,
# which a BatchNorm after it divides by sqrt(eps) and a head's weight
# gradient multiplies again, 1.2e-12 of the largest momentum buffer in
# fuzz_regressions/layer_norm_of_one_element_before_batch_norm_seed388619.json.
# A float32 rounding in a float64 step leaves 1e-8, far above it.
ZERO_F64 = 1e-10
# A float64 tensor where torch's own orders already differ by
# CANCELLED_F64 is the rest of a cancellation (a gradient that is zero in
# exact arithmetic, as a LayerNorm bias's before a BatchNorm): another sound
# summation order lands up to CANCELLED_RATIO times as far (BatchNorm's
# weight gradient over one example: 1.9e-11 where torch's perturbed runs
# spread 6.3e-13; a Linear's weight gradient before a BatchNorm over two
# samples, whose normalized values are +-1 and whose backward leaves only
# what eps adds: 9.2e-12 where torch's runs spread 6.0e-14,
# fuzz_regressions/linear_before_batch_norm_of_two_samples_seed48291.json).
# A float32 rounding in a float64 step is 1e-8 - 1e-11 where torch's
# orders agree to 1e-16, and a formula off by float32's noise 1e-7.
CANCELLED_F64 = 1e-14
CANCELLED_RATIO = 1000
DETERMINISM = "single_graph twice"
# Float32 runs from inputs perturbed by one rounding, beyond the 4 batch
# orders: the spread then covers cancellations within an example (a
# BatchNorm bias's gradient summing terms of both signs), which batch
# orders do not reorder.
PERTURBED = 2
# Perturbed runs when every float32 config is off alike, the interpreter
# among them (CheckResult.same_failure_everywhere): the float32 evaluation,
# not the compiler, decides the difference, and a flip that one rounding
# of the state decides may need more runs to show in torch's own spread.
# Seed 604654 (a BatchNorm over two examples, Adam): float32 torch's spread
# of the embedding's weight was 8.8e-6 over four orders and two or four
# perturbed runs, 2.2e-4 over sixteen (and sixty-four), where every mode
# of ours landed.
CHAOS_PERTURBED = 16
# A mismatch whose every tensor is within SMALL (relative) of float64, or
# within SMALL_RATIO times its limit, is rounding-level: a different but
# sound float32 evaluation order or formula, amplified by a cancellation.
# The fuzzer counts and reports those apart (--strict makes them
# failures); the failures are the larger mismatches, errors and
# nondeterminism.
SMALL = 1e-4
SMALL_RATIO = 10
# A float64 gradient within NOISE_GRADIENT of the model's largest is
# rounding noise around an exact zero (_noise_gradients).
NOISE_GRADIENT = 1e-13

# A tensor whose float64 eager value moves by more than DECIDED_F64 of its
# size when the state and batch move by one float64 rounding and every
# layer's outputs by a few (_check_runs.perturbed_activations, DECIDED_RUNS
# runs) is decided by rounding: a max between padding zeros and a
# BatchNorm's output over a channel of equal values, whose exact value is
# 0 and whose noise's sign one summation order fixes, routes the gradient
# by that sign (fuzz_regressions/pool_indices_unpool_after_padding_seed55624
# .json: torch's own runs move a bias gradient by 0.033 where a sound
# rounding leaves 1e-11); so does a ReLU after a GroupNorm over one element,
# exactly 0 in wholestep and torch's noise of either sign, which only a
# rounding of the input moves (group_norm_of_one_element_before_relu_seed61004).
# A mismatch on such tensors only, within CANCELLED_RATIO of how far torch
# moves, judges nothing and is not a failure.
DECIDED_F64 = 1e-8
DECIDED_RUNS = 4
DECIDED_SEED = 11
# The categories that judge nothing (not failures).
UNJUDGED = ("float32 chaos", "decided by rounding")

# Adam's betas the generator draws: torch's defaults, and others exact in
# float32 (0.999 is not: wholestep computed 1 - beta2 from it in float32,
# fuzz_regressions/adam_beta2_rounding.json).
BETAS = [[0.9, 0.999], [0.8, 0.99], [0.875, 0.9990234375], [0.75, 0.99609375]]


class Invalid(Exception):
    """A spec that does not make a model (a layer does not fit its input)."""


# ---------------------------------------------------------------- modules


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = nn.Sequential(*body)

    def forward(self, x):
        return x + self.body(x)


class Concat(nn.Module):
    def __init__(self, branches, dim):
        super().__init__()
        self.branches = nn.ModuleList(nn.Sequential(*b) for b in branches)
        self.dim = dim

    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], dim=self.dim)


class PoolUnpool(nn.Module):
    """Max pooling with its indices over windows apart by their size, then
    the values written back at them (a SegNet decoder's step)."""

    def __init__(self, k, p):
        super().__init__()
        self.pool = nn.MaxPool2d(k, k, p, return_indices=True)
        self.unpool = nn.MaxUnpool2d(k, k, p)

    def forward(self, x):
        y, at = self.pool(x)
        return self.unpool(y, at, output_size=x.shape[-2:])


class ToTokens(nn.Module):
    """[N, C, H, W] -> [N, H*W, C], as a ViT's patches."""

    def forward(self, x):
        return x.flatten(2).transpose(1, 2)


class SqueezeExcite(nn.Module):
    def __init__(self, c, r):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(c, r), nn.Linear(r, c)

    def forward(self, x):
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean(dim=(2, 3))))))
        return x * s[:, :, None, None]


class TokenMix(nn.Module):
    """An MLP-Mixer's token mixing: a Linear over the token axis."""

    def __init__(self, t, bias):
        super().__init__()
        self.fc = nn.Linear(t, t, bias=bias)

    def forward(self, x):
        return self.fc(x.transpose(1, 2)).transpose(1, 2)


class Attention(nn.Module):
    """Multi-head self-attention written out: split into heads, scaled
    q @ k^T, softmax, @ v, heads merged, a projection."""

    def __init__(self, d, heads, bias):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.proj = nn.Linear(d, d, bias=bias)
        self.heads = heads

    def forward(self, x):
        n, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.reshape(n, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax((q @ k.transpose(-2, -1)) * (d // h) ** -0.5, dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(n, t, d))


class TorchMHA(nn.Module):
    def __init__(self, d, heads, bias):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, bias=bias, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class Reduce(nn.Module):
    def __init__(self, how, dim):
        super().__init__()
        self.how, self.dim = how, dim

    def forward(self, x):
        return x.mean(dim=self.dim) if self.how == "mean" else x.sum(dim=self.dim)


class First(nn.Module):
    def forward(self, x):
        return x[:, 0]


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class RunningMean(nn.Module):
    """The running mean over the tokens (a causal average: cumsum)."""

    def forward(self, x):
        counts = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
        return x.cumsum(1) / counts


class Normalize(nn.Module):
    """F.normalize with a p-norm over the features."""

    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.normalize(x, p=self.p, dim=-1)


class _ContiguousGrad(torch.autograd.Function):
    """The identity, whose backward hands on a contiguous gradient (the
    derivative of its forward: wholestep may trace it)."""

    wholestep_differentiate_forward = True

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g.contiguous()


class GELU(nn.GELU):
    """nn.GELU whose backward gets a contiguous gradient: Debian's torch
    1.13 computes GELU's backward from a non-contiguous one (a transpose
    after it, as a token-mixing Linear) from memory it does not own, a
    different gradient each run, NaN in some. The model wholestep sees is
    the same (the identity is a clone)."""

    def forward(self, x):
        return _ContiguousGrad.apply(super().forward(x))


class Pad(nn.Module):
    def __init__(self, p, mode):
        super().__init__()
        self.p, self.mode = p, mode

    def forward(self, x):
        return F.pad(x, (self.p,) * 4, mode=self.mode)


class Patches(nn.Module):
    """Each k x k window's pixels as the channels of one output pixel
    (F.unfold, a patch embedding's first half); with fold, the windows
    summed back where they came from (an overlap-add)."""

    def __init__(self, k, s, p, fold):
        super().__init__()
        self.k, self.s, self.p, self.fold = k, s, p, fold

    def forward(self, x):
        cols = F.unfold(x, self.k, padding=self.p, stride=self.s)
        if self.fold:
            return F.fold(cols, x.shape[2:], self.k, padding=self.p, stride=self.s)
        oh, ow = (pool_out(n, self.k, self.s, self.p) for n in x.shape[2:])
        return cols.view(x.shape[0], -1, oh, ow)


class WritesThroughViews(nn.Module):
    """In-place writes through views of a copy of the input, made before
    the writes: overlapping slices of the last dim ("head", "tail"), the
    whole tensor as a vector ("flat") or transposed ("transposed"), the
    first example as a batch of one ("row0"); each write multiplies by or
    adds its constant, some under torch.no_grad() (autograd does not see
    those: the gradient passes them unscaled). The result reads the tensor
    and the tail (a view made before every write, which sees them all)."""

    def __init__(self, writes):
        super().__init__()
        self.writes = writes

    def forward(self, x):
        h = (x * 1.0).contiguous()  # its own tensor: x may be saved for a backward
        n = h.shape[-1]
        views = {"head": h[..., :max(1, 2 * n // 3)], "tail": h[..., n // 3:],
                 "flat": h.view(-1), "transposed": h.transpose(0, -1),
                 "row0": h[0].unsqueeze(0)}
        for view, how, c, *untracked in self.writes:
            with torch.no_grad() if untracked and untracked[0] else contextlib.nullcontext():
                if how == "mul":
                    views[view].mul_(c)
                else:
                    views[view].add_(c)
        return h + views["tail"].sum(-1, keepdim=True)


class IndexWrites(nn.Module):
    """Writes at integer positions along the last dim: each write takes a
    function of the tensor at some positions and puts it at others
    (index_add and index_put accumulating, with repeated positions;
    index_copy, scatter and index_put without, at distinct ones;
    masked_scatter where the tensor is positive)."""

    def __init__(self, writes):
        super().__init__()
        self.writes = writes

    def forward(self, x):
        h = x * 1.0
        n = h.shape[-1]
        for how, src, dst, c in self.writes:
            distinct = sorted({i % n for i in dst})  # where a write that does not add goes
            v = h.index_select(-1, torch.tensor([i % n for i in src])) * c
            dst = torch.tensor([i % n for i in dst])
            if how == "index_add":
                h = h.index_add(h.dim() - 1, dst, v)
            elif how == "put_accumulate":  # index_put along the first dim of the transpose
                h = h.transpose(0, -1).index_put((dst,), v.transpose(0, -1),
                                                 accumulate=True).transpose(0, -1)
            elif how == "index_copy":
                k = len(distinct)
                h = h.index_copy(h.dim() - 1, torch.tensor(distinct), v[..., :k].contiguous())
            elif how == "scatter":
                k = len(distinct)
                at = torch.tensor(distinct).expand(*h.shape[:-1], k).contiguous()
                h = h.scatter(h.dim() - 1, at, v[..., :k].contiguous())
            else:  # masked_scatter
                h = h.masked_scatter(h > 0, h.flip(-1) * c)
        return h


class Centered(nn.Module):
    """The tokens less their median (or their k-th value) along the tokens."""

    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        if self.k is None:
            return x - x.median(1, keepdim=True).values
        return x - x.kthvalue(self.k, 1, keepdim=True).values


class Bilinear(nn.Module):
    """nn.Bilinear of the features with themselves squashed."""

    def __init__(self, f, out):
        super().__init__()
        self.bilinear = nn.Bilinear(f, f, out)

    def forward(self, x):
        return self.bilinear(x, torch.tanh(x))


class ClassesSecond(nn.Module):
    """[N, T, C] scores as [N, C, T], the layout of a loss per token."""

    def forward(self, x):
        return x.transpose(1, 2)


class FrameLogProbs(nn.Module):
    """[N, T, C] scores to CTC's [T, N, C] log-probabilities."""

    def forward(self, x):
        return x.log_softmax(-1).transpose(0, 1)


ACTS = {"relu": nn.ReLU, "gelu": GELU, "gelu_tanh": lambda: GELU(approximate="tanh"),
        "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "silu": nn.SiLU, "relu6": nn.ReLU6,
        "leaky_relu": lambda: nn.LeakyReLU(0.1), "elu": nn.ELU, "selu": nn.SELU,
        "celu": lambda: nn.CELU(0.7), "hardswish": nn.Hardswish, "hardsigmoid": nn.Hardsigmoid,
        "hardtanh": lambda: nn.Hardtanh(-0.5, 0.8), "softplus": lambda: nn.Softplus(2.0, 5.0),
        "mish": nn.Mish, "logsigmoid": nn.LogSigmoid, "prelu": lambda: nn.PReLU(init=0.2)}


# ---------------------------------------------------------------- building


def _windows_read(n, k, s, p, d, out):
    """Whether every window of a pooling reads an element of the input."""
    return all(any(0 <= o * s - p + t * d < n for t in range(k)) for o in range(out))


def make_layer(layer, shape):
    """(module, output shape) of a layer spec on `shape` ("img", C, H, W),
    ("seq", T, D) or ("vec", F); Invalid when it does not fit."""
    op, kind = layer["op"], shape[0]
    if op == "act":
        return ACTS[layer["fn"]](), shape
    if op == "views":
        return WritesThroughViews(layer["writes"]), shape
    if op == "index_writes":
        return IndexWrites(layer["writes"]), shape
    if op == "res":
        body, out = make_layers(layer["body"], shape)
        if out != shape:
            raise Invalid("a residual body changes the shape")
        return Residual(body), shape
    if op == "cat":
        outs, mods = [], []
        for b in layer["branches"]:
            m, s = make_layers(b, shape)
            mods.append(m)
            outs.append(s)
        if not outs or any(s[0] != kind for s in outs):
            raise Invalid("concatenated branches differ in kind")
        if kind == "img":
            if any(s[2:] != outs[0][2:] for s in outs):
                raise Invalid("concatenated branches differ in size")
            return Concat(mods, 1), ("img", sum(s[1] for s in outs)) + outs[0][2:]
        if kind == "seq":
            if any(s[1] != outs[0][1] for s in outs):
                raise Invalid("concatenated branches differ in tokens")
            return Concat(mods, 2), ("seq", outs[0][1], sum(s[2] for s in outs))
        return Concat(mods, 1), ("vec", sum(s[1] for s in outs))
    if kind == "img":
        _, c, h, w = shape
        if op == "conv":
            k, s, p, dil, g = layer["k"], layer["s"], layer["p"], layer.get("dil", 1), layer["g"]
            out = layer["out"]
            if c % g or out % g:
                raise Invalid("groups")
            if p == "same":
                if s != 1:
                    raise Invalid("same padding with a stride")
                conv, shape = nn.Conv2d(c, out, k, 1, "same", dil, g, layer["bias"]), \
                    ("img", out, h, w)
            else:
                span = dil * (k - 1) + 1
                oh, ow = pool_out(h, span, s, p), pool_out(w, span, s, p)
                if oh < 1 or ow < 1:
                    raise Invalid("conv output empty")
                conv, shape = nn.Conv2d(c, out, k, s, p, dil, g, layer["bias"]), \
                    ("img", out, oh, ow)
            if "wn" in layer:
                conv = nn.utils.weight_norm(conv, dim=layer["wn"])
            return conv, shape
        if op == "bn":
            return nn.BatchNorm2d(c), shape
        if op == "ln":
            return nn.LayerNorm([c, h, w]), shape
        if op in ("maxpool", "avgpool"):
            k, s, p, dil = layer["k"], layer["s"], layer["p"], layer.get("dil", 1)
            if p > k // 2:
                raise Invalid("pool padding over half the kernel")
            ceil = layer.get("ceil", False)
            reach = dil * (k - 1) + 1
            oh, ow = pool_out(h, reach, s, p, ceil), pool_out(w, reach, s, p, ceil)
            if oh < 1 or ow < 1 or h + 2 * p < reach or w + 2 * p < reach:
                raise Invalid("pool output empty")
            if not (_windows_read(h, k, s, p, dil, oh) and _windows_read(w, k, s, p, dil, ow)):
                # torch's result is undefined (and its backward writes past
                # the input); wholestep refuses it
                raise Invalid("a dilated pool's window reads only padding")
            mod = (nn.MaxPool2d(k, s, p, dilation=dil, ceil_mode=ceil) if op == "maxpool"
                   else nn.AvgPool2d(k, s, p, ceil_mode=ceil,
                                     count_include_pad=layer.get("cip", True),
                                     divisor_override=layer.get("div")))
            return mod, ("img", c, oh, ow)
        if op == "gn":
            if c % layer["g"]:
                raise Invalid("groups")
            return nn.GroupNorm(layer["g"], c), shape
        if op == "unpool":
            k, p = layer["k"], layer["p"]
            if h + 2 * p < k or w + 2 * p < k:
                raise Invalid("unpool window over the input")
            return PoolUnpool(k, p), shape
        if op == "up":
            mode = layer["mode"]
            corners = layer.get("corners") if mode != "nearest" else None
            return (nn.Upsample(scale_factor=layer["f"], mode=mode, align_corners=corners),
                    ("img", c, h * layer["f"], w * layer["f"]))
        if op == "pad":
            p, mode = layer["p"], layer["mode"]
            if mode == "reflect" and (p >= h or p >= w):
                raise Invalid("reflection padding of a dim not larger")
            return Pad(p, mode), ("img", c, h + 2 * p, w + 2 * p)
        if op == "convT":
            k, s, op_ = layer["k"], layer["s"], layer["op_"]
            if op_ >= s:
                raise Invalid("output padding not below the stride")
            oh, ow = (h - 1) * s + k + op_, (w - 1) * s + k + op_
            return (nn.ConvTranspose2d(c, layer["out"], k, s, output_padding=op_,
                                       bias=layer["bias"]), ("img", layer["out"], oh, ow))
        if op == "adaptive":
            o = layer["o"]
            pool = nn.AdaptiveMaxPool2d if layer.get("max") else nn.AdaptiveAvgPool2d
            return pool(o), ("img", c, o, o)
        if op == "se":
            return SqueezeExcite(c, layer["r"]), shape
        if op == "patches":
            k, st, p = layer["k"], layer["s"], layer["p"]
            oh, ow = pool_out(h, k, st, p), pool_out(w, k, st, p)
            if oh < 1 or ow < 1 or h + 2 * p < k or w + 2 * p < k:
                raise Invalid("no window")
            fold = layer.get("fold", False)
            return Patches(k, st, p, fold), shape if fold else ("img", c * k * k, oh, ow)
        if op == "tokens":
            return ToTokens(), ("seq", h * w, c)
        if op == "flatten":
            return nn.Flatten(), ("vec", c * h * w)
    if kind == "seq":
        _, t, d = shape
        try:
            made = seq_layers.make(layer, shape)
        except ValueError as e:
            raise Invalid(str(e)) from e
        if made is not None:
            return made
        if op == "linear":
            return nn.Linear(d, layer["out"], bias=layer["bias"]), ("seq", t, layer["out"])
        if op == "ln":
            return nn.LayerNorm(d), shape
        if op == "bn":
            return nn.BatchNorm1d(t), shape
        if op == "tokmix":
            return TokenMix(t, layer["bias"]), shape
        if op in ("attn", "mha"):
            if d % layer["heads"]:
                raise Invalid("heads do not divide the width")
            cls = Attention if op == "attn" else TorchMHA
            return cls(d, layer["heads"], layer["bias"]), shape
        if op == "softmax":
            return Softmax(), shape
        if op == "running":
            return RunningMean(), shape
        if op == "normalize":
            return Normalize(layer["p"]), shape
        if op == "reduce":
            dim = layer["dim"]
            return Reduce(layer["how"], dim), ("vec", d if dim == 1 else t)
        if op == "first":
            return First(), ("vec", d)
        if op == "centered":
            if layer.get("k") is not None and layer["k"] > t:
                raise Invalid("k-th of fewer tokens")
            return Centered(layer.get("k")), shape
    if kind == "vec":
        _, f = shape
        if op == "linear":
            return nn.Linear(f, layer["out"], bias=layer["bias"]), ("vec", layer["out"])
        if op == "ln":
            return nn.LayerNorm(f), shape
        if op == "bn":
            return nn.BatchNorm1d(f), shape
        if op == "softmax":
            return Softmax(), shape
        if op == "bilinear":
            return Bilinear(f, layer["out"]), ("vec", layer["out"])
    raise Invalid(f"layer {op} on {kind}")


def make_layers(layers, shape):
    mods = []
    for layer in layers:
        m, shape = make_layer(layer, shape)
        mods.append(m)
    return mods, shape


def input_shape(inp):
    if inp["kind"] == "img":
        return ("img", inp["c"], inp["h"], inp["w"])
    if inp["kind"] in ("seq", "tokens"):
        return ("seq", inp["t"], inp["d"])
    if inp["kind"] == "bags":
        return ("vec", inp["d"])
    return ("vec", inp["f"])


def build(spec):
    """(model, optimizer, loss_fn, batch) of a spec; Invalid when it does
    not make a model."""
    inp = spec["input"]
    torch.manual_seed(spec["seed"])
    mods = []
    if inp["kind"] == "tokens":
        mods.append(nn.Embedding(inp["vocab"], inp["d"]))
    if inp["kind"] == "bags":
        mods.append(nn.EmbeddingBag(inp["vocab"], inp["d"], mode=inp["mode"],
                                    padding_idx=inp.get("padding")))
    body, shape = make_layers(spec["layers"], input_shape(inp))
    mods += body
    classes = spec["classes"]
    out_shape = (spec["batch"], classes)
    if spec["loss"] == "ctc":
        if shape[0] != "seq":
            raise Invalid("ctc over a value without tokens")
        mods += [nn.Linear(shape[2], classes), FrameLogProbs()]
        width = 0
    elif spec.get("dense"):
        if shape[0] == "img":  # a 1x1 convolution per pixel: [N, C, H, W]
            mods.append(nn.Conv2d(shape[1], classes, 1))
            out_shape += shape[2:]
        elif shape[0] == "seq":  # a Linear per token, the classes second: [N, C, T]
            mods += [nn.Linear(shape[2], classes), ClassesSecond()]
            out_shape += (shape[1],)
        else:
            raise Invalid("a loss per position over a vector")
        width = 0
    elif shape[0] == "img":
        mods.append(nn.Flatten())
        width = shape[1] * shape[2] * shape[3]
    elif shape[0] == "seq":
        mods.append(Reduce("mean", 1))
        width = shape[2]
    else:
        width = shape[1]
    if width > 4096:
        raise Invalid("head too wide")
    if spec["loss"] != "ctc" and not spec.get("dense"):
        mods.append(nn.Linear(width, classes))
    model = nn.Sequential(*mods)
    if not spec.get("train", True):
        model.eval()
    gen = torch.Generator().manual_seed(spec["seed"] + 1)
    n = spec["batch"]

    def data():
        if inp["kind"] == "img":
            x = torch.randn(n, inp["c"], inp["h"], inp["w"], generator=gen)
        elif inp["kind"] == "seq":
            x = torch.randn(n, inp["t"], inp["d"], generator=gen)
        elif inp["kind"] in ("tokens", "bags"):
            x = torch.randint(0, inp["vocab"], (n, inp["t"]), generator=gen)
        else:
            x = torch.randn(n, inp["f"], generator=gen)
        if spec["loss"] == "ctc":
            y = ctc_targets(spec, n, shape[1], gen)  # the frames the body leaves
        else:
            y = fuzz_losses.targets(spec, out_shape, gen)
        return x, y

    batch = data()
    opt = make_optimizer(spec["optimizer"], model)
    if spec.get("warm"):  # the optimizer holds state from an eager step
        _check_runs.eager_step(model, opt, loss_function(spec), data(), 1)
        opt.zero_grad(set_to_none=True)
    return model, opt, loss_function(spec), batch


def ctc_blank(spec):
    return 0 if spec["blank"] == "first" else spec["classes"] - 1


def ctc_targets(spec, n, t, gen):
    """y [n, S + 2]: targets of the classes but the blank (padded to S, half
    the t frames), then input and target lengths. Each target fits its input
    (two frames a target is enough, repeats included) unless zero_infinity,
    which may meet samples without an alignment."""
    classes, blank = spec["classes"], ctc_blank(spec)
    most = max(1, t // 2)
    inputs = torch.randint(max(1, t - 2), t + 1, (n,), generator=gen)
    room = inputs if spec["zero_infinity"] else inputs // 2
    lengths = (torch.rand(n, generator=gen) * (room.clamp(max=most) + 1)).long()
    targets = torch.randint(0, classes - 1, (n, most), generator=gen)
    targets = targets + (targets >= blank).long()  # every class but the blank
    return torch.cat([targets, inputs[:, None], lengths[:, None]], 1)


def loss_function(spec):
    if spec["loss"] == "ctc":
        def ctc(log_probs, y):
            return F.ctc_loss(log_probs, y[:, :-2], y[:, -2], y[:, -1], blank=ctc_blank(spec),
                              reduction=spec["reduction"], zero_infinity=spec["zero_infinity"])
        return ctc
    return fuzz_losses.function(spec, spec["classes"])


def make_optimizer(o, model):
    params = list(model.parameters())
    if o.get("groups", 1) == 2 and len(params) > 1:
        extra = {k: v for k, v in o.get("group2", {}).items()}
        groups = [{"params": params[0::2]}, dict(extra, params=params[1::2])]
    else:
        groups = [{"params": params}]
    if o["kind"] == "sgd":
        return torch.optim.SGD(groups, lr=o["lr"], momentum=o["momentum"],
                               dampening=o.get("dampening", 0.0), nesterov=o["nesterov"],
                               weight_decay=o["wd"])
    cls = torch.optim.Adam if o["kind"] == "adam" else torch.optim.AdamW
    return cls(groups, lr=o["lr"], betas=tuple(o["betas"]), eps=o["eps"], weight_decay=o["wd"],
               amsgrad=o["amsgrad"])


# ---------------------------------------------------------------- generation


def _odd(r, hi):
    return r.choice([k for k in (1, 3, 5) if k <= hi] or [1])


def gen_layer(r, shape, depth):
    """A random layer spec that fits `shape` (or None)."""
    kind = shape[0]
    act = {"op": "act", "fn": r.choice(list(ACTS))}
    if r.random() < 0.03:
        return {"op": "index_writes", "writes": [
            [r.choice(["index_add", "put_accumulate", "index_copy", "scatter", "masked_scatter"]),
             [r.randrange(8) for _ in range(3)], [r.randrange(8) for _ in range(3)],
             r.choice([-0.5, 0.25, 0.5])] for _ in range(r.randint(1, 3))]}
    if r.random() < 0.04:
        return {"op": "views", "writes": [
            [r.choice(["head", "tail", "flat", "transposed", "row0"]), r.choice(["mul", "add"]),
             r.choice([-2.0, -0.5, 0.25, 1.5, 3.0]), r.random() < 0.3]
            for _ in range(r.randint(1, 4))]}
    if kind == "img":
        _, c, h, w = shape
        ops = ["conv"] * 5 + ["bn"] * 3 + ["act"] * 4 + ["maxpool", "avgpool"] * 2 + \
            ["adaptive", "se", "ln", "head_pattern", "tokens", "flatten", "gn", "pad", "patches",
             "unpool"]
        if h * w <= 64:
            ops += ["up", "convT"]
        if depth < 2:
            ops += ["res", "res", "cat"]
        op = r.choice(ops)
        if op == "conv":
            k = r.choice([1, 1, 3, 3, 5, 2])
            # 8 and 16: channels oneDNN's blocks divide (the blocked layouts)
            out = r.choice([c, max(1, c // 2), c * 2, r.randint(1, 12), 8, 16])
            g = c if r.random() < 0.15 and c > 1 else 1
            if g > 1:
                out = c * r.choice([1, 2])
            if r.random() < 0.3 and k % 2:
                layer = {"op": "conv", "out": out, "k": k, "s": 1, "p": "same",
                         "dil": r.choice([1, 1, 2]), "g": g, "bias": r.random() < 0.6}
            else:
                layer = {"op": "conv", "out": out, "k": k, "s": r.choice([1, 1, 2]),
                         "p": r.randint(0, k // 2 + 1), "dil": 1, "g": g,
                         "bias": r.random() < 0.6}
            if r.random() < 0.1:  # nn.utils.weight_norm over dim 0, or over all (None)
                layer["wn"] = r.choice([0, None])
            return layer
        if op == "bn":
            return {"op": "bn"}
        if op == "act":
            return act
        if op in ("maxpool", "avgpool"):
            k = r.choice([1, 2, 2, 3, 3])
            layer = {"op": op, "k": k, "s": r.choice([1, 2, k]), "p": r.randint(0, k // 2)}
            if r.random() < 0.3:
                layer["ceil"] = True
            if op == "maxpool" and k > 1 and r.random() < 0.2:
                layer["dil"] = r.choice([2, 3])
            if op == "avgpool":
                layer["cip"] = r.random() < 0.7
                if r.random() < 0.1:
                    layer["div"] = r.randint(1, 5)
            return layer
        if op == "gn":
            return {"op": "gn", "g": r.choice([d for d in (1, 2, 3, 4) if c % d == 0])}
        if op == "unpool":
            k = r.choice([2, 3])
            return {"op": "unpool", "k": k, "p": r.randint(0, k // 2)}
        if op == "up":
            mode = r.choice(["nearest", "bilinear", "bicubic"])
            return {"op": "up", "f": 2, "mode": mode, "corners": r.random() < 0.5}
        if op == "pad":
            return {"op": "pad", "p": r.randint(1, 2),
                    "mode": r.choice(["constant", "reflect", "replicate", "circular"])}
        if op == "convT":
            s = r.choice([1, 2])
            return {"op": "convT", "out": r.randint(1, 8), "k": r.choice([1, 2, 3]), "s": s,
                    "op_": r.randint(0, s - 1), "bias": r.random() < 0.6}
        if op == "adaptive":
            return {"op": "adaptive", "o": r.choice([1, 1, 2, 3]), "max": r.random() < 0.3}
        if op == "se":
            return {"op": "se", "r": r.randint(1, max(1, c // 2))}
        if op == "ln":
            return {"op": "ln"}
        if op == "head_pattern":  # conv -> AdaptiveAvgPool2d(1) -> Flatten (-> the Linear head)
            return [{"op": "conv", "out": r.randint(2, 12), "k": r.choice([1, 3]), "s": 1,
                     "p": "same", "dil": 1, "g": 1, "bias": r.random() < 0.8},
                    {"op": "adaptive", "o": 1}, {"op": "flatten"}]
        if op == "patches":
            k = r.choice([1, 2, 2, 3])
            layer = {"op": "patches", "k": k, "s": r.choice([1, 2, k]), "p": r.randint(0, k // 2)}
            if r.random() < 0.4:
                layer["fold"] = True
            return layer
        if op == "tokens":
            return {"op": "tokens"} if h * w <= 64 else None
        if op == "flatten":
            return {"op": "flatten"} if c * h * w <= 1024 else None
        if op == "res":
            body = [{"op": "conv", "out": c, "k": r.choice([1, 3]), "s": 1, "p": "same",
                     "dil": 1, "g": 1, "bias": r.random() < 0.5}]
            if r.random() < 0.5:
                body.append({"op": "bn"})
            if r.random() < 0.6:
                body.append(act)
            if r.random() < 0.3:
                body.append({"op": "se", "r": max(1, c // 2)})
            return {"op": "res", "body": body}
        if op == "cat":
            branches = []
            for _ in range(r.choice([2, 2, 3])):
                choice = r.random()
                if choice < 0.2:
                    branches.append([])
                elif choice < 0.4:
                    branches.append([{"op": "maxpool", "k": 3, "s": 1, "p": 1}])
                else:
                    b = [{"op": "conv", "out": r.randint(1, 8), "k": r.choice([1, 3]), "s": 1,
                          "p": "same", "dil": 1, "g": 1, "bias": r.random() < 0.5}]
                    if r.random() < 0.5:
                        b.append(act)
                    branches.append(b)
            return {"op": "cat", "branches": branches}
    if kind == "seq":
        _, t, d = shape
        ops = ["linear"] * 3 + ["ln"] * 2 + ["act"] * 2 + ["tokmix", "attn", "mha", "softmax",
                                                           "bn", "reduce", "first", "running",
                                                           "normalize", "centered"]
        ops += ["sequence_layer"] * 3
        if depth < 2:
            ops += ["res", "res", "cat", "mixer", "block"]
        op = r.choice(ops)
        if op == "sequence_layer":
            return seq_layers.gen(r, shape)
        heads = r.choice([h for h in (1, 2, 4) if d % h == 0])
        if op == "linear":
            return {"op": "linear", "out": r.choice([d, 2 * d, r.randint(2, 24)]),
                    "bias": r.random() < 0.8}
        if op in ("ln", "softmax", "bn", "first", "running"):
            return {"op": op}
        if op == "normalize":
            return {"op": op, "p": r.choice([1, 2, 2, 3, math.inf])}
        if op == "centered":  # after a product: no two tokens tie (torch picks its own)
            return [{"op": "linear", "out": d, "bias": True},
                    {"op": "centered", "k": r.choice([None, None, r.randint(1, t)])}]
        if op == "act":
            return act
        if op == "tokmix":
            return {"op": "tokmix", "bias": r.random() < 0.8}
        if op in ("attn", "mha"):
            return {"op": op, "heads": heads, "bias": r.random() < 0.8}
        if op == "reduce":
            return {"op": "reduce", "how": r.choice(["mean", "sum"]), "dim": r.choice([1, 1, 2])}
        if op == "res":
            inner = r.choice([{"op": "linear", "out": d, "bias": True},
                              {"op": "tokmix", "bias": True},
                              {"op": "attn", "heads": heads, "bias": True}])
            body = ([{"op": "ln"}] if r.random() < 0.6 else []) + [inner]
            if r.random() < 0.5:
                body.append(act)
            return {"op": "res", "body": body}
        if op == "mixer":  # LayerNorm, transpose, Linear over tokens; then over channels
            return [{"op": "res", "body": [{"op": "ln"}, {"op": "tokmix", "bias": True}]},
                    {"op": "res", "body": [{"op": "ln"}, {"op": "linear", "out": 2 * d,
                                                          "bias": True},
                                           {"op": "act", "fn": "gelu"},
                                           {"op": "linear", "out": d, "bias": True}]}]
        if op == "block":  # a transformer block
            return [{"op": "res", "body": [{"op": "ln"}, {"op": r.choice(["attn", "mha"]),
                                                          "heads": heads, "bias": True}]},
                    {"op": "res", "body": [{"op": "ln"}, {"op": "linear", "out": 2 * d,
                                                          "bias": True},
                                           {"op": "act", "fn": r.choice(["gelu", "relu"])},
                                           {"op": "linear", "out": d, "bias": True}]}]
        if op == "cat":
            return {"op": "cat", "branches": [
                [{"op": "linear", "out": r.randint(1, 12), "bias": r.random() < 0.7}]
                for _ in range(2)] + ([[]] if r.random() < 0.5 else [])}
    if kind == "vec":
        _, f = shape
        ops = ["linear"] * 3 + ["act"] * 2 + ["ln", "bn", "softmax", "bilinear"]
        if depth < 2:
            ops += ["res", "cat"]
        op = r.choice(ops)
        if op == "linear":
            # Now and then a weight of 512 KiB or more, which over a small
            # batch is a product of wholestep's own in both directions.
            wide = (1 << 17) // f + r.randint(1, 40)
            out = wide if f >= 32 and wide <= 4100 and r.random() < 0.15 else None
            return {"op": "linear", "out": out or r.choice([f, r.randint(2, 32)]),
                    "bias": r.random() < 0.8}
        if op in ("ln", "bn", "softmax"):
            return {"op": op}
        if op == "bilinear":
            return {"op": op, "out": r.randint(2, 12)}
        if op == "act":
            return act
        if op == "res":
            return {"op": "res", "body": [{"op": "linear", "out": f, "bias": True}, act]}
        if op == "cat":
            return {"op": "cat", "branches": [[{"op": "linear", "out": r.randint(1, 12),
                                                "bias": True}], []]}
    return None


def gen_layers(r, shape, count, depth=0):
    layers = []
    for _ in range(count * 4):
        if len(layers) >= count:
            break
        new = gen_layer(r, shape, depth)
        if new is None:
            continue
        new = new if isinstance(new, list) else [new]
        try:
            _, out = make_layers(new, shape)
        except Invalid:
            continue
        if out[0] == "img" and out[1] * out[2] * out[3] > 4096:
            continue
        layers += new
        shape = out
    return layers


def gen_optimizer(r):
    kind = r.choice(["sgd", "sgd", "adam", "adamw"])
    if kind == "sgd":
        momentum = r.choice([0.0, 0.9, 0.9, 0.5])
        nesterov = momentum > 0 and r.random() < 0.4
        o = {"kind": "sgd", "lr": r.choice([0.01, 0.05, 0.1, 0.003]), "momentum": momentum,
             "nesterov": nesterov, "wd": r.choice([0.0, 0.0, 1e-4, 5e-3]),
             "dampening": r.choice([0.0, 0.0, 0.1]) if momentum and not nesterov else 0.0}
    else:
        o = {"kind": kind, "lr": r.choice([1e-3, 3e-4, 1e-2]),
             "betas": r.choice(BETAS), "eps": r.choice([1e-8, 1e-6]),
             "wd": r.choice([0.0, 1e-2, 0.1]) if kind == "adamw" else r.choice([0.0, 0.0, 1e-4]),
             "amsgrad": r.random() < 0.25}
    if r.random() < 0.2:
        o["groups"] = 2
        o["group2"] = {"lr": o["lr"] * 0.5, "weight_decay": r.choice([0.0, 1e-3])}
    return o


def generate(seed):
    """The case for `seed`: a JSON-able spec."""
    r = random.Random(seed)
    kind = r.choices(["img", "seq", "tokens", "vec", "bags"], weights=[6, 3, 1, 1, 1])[0]
    if kind == "img":
        inp = {"kind": "img", "c": r.randint(1, 6), "h": r.choice([1, 2, 3, 4, 5, 7, 8, 9]),
               "w": 0}
        inp["w"] = inp["h"] if r.random() < 0.7 else r.choice([1, 2, 3, 4, 5, 6, 8])
    elif kind in ("seq", "tokens", "bags"):
        inp = {"kind": kind, "t": r.randint(1, 8), "d": r.choice([4, 6, 8, 12, 16])}
        if kind != "seq":
            inp["vocab"] = r.randint(5, 30)
        if kind == "bags":
            inp["mode"] = r.choice(["sum", "mean", "max"])
            if r.random() < 0.4:
                inp["padding"] = r.randint(0, 2)
    else:
        inp = {"kind": "vec", "f": r.randint(2, 24)}
    spec = {"seed": seed, "input": inp, "batch": r.choice([2, 3, 4, 5, 8]),
            "classes": r.randint(2, 10)}
    spec.update(fuzz_losses.gen(r, spec["classes"]))
    spec["layers"] = gen_layers(r, input_shape(inp), r.randint(1, 7))
    out_kind = make_layers(spec["layers"], input_shape(inp))[1][0]
    if kind in ("seq", "tokens") and r.random() < 0.3 and out_kind == "seq":
        spec = {k: v for k, v in spec.items() if k in ("seed", "input", "batch", "classes",
                                                        "layers")}
        spec.update(loss="ctc", reduction=r.choice(["mean", "sum"]),
                    zero_infinity=r.random() < 0.4,
                    blank=r.choice(["first", "last"]))
    elif spec["loss"] in fuzz_losses.CLASS_LOSSES and out_kind != "vec" and r.random() < 0.5:
        spec["dense"] = True  # the classes of every pixel or token
    spec["optimizer"] = gen_optimizer(r)
    if r.random() < 0.2:  # the training loop's options, in the step and in eager torch's loop
        loop = {"clip_grad_norm": r.choice([0.01, 0.1, 1.0])} if r.random() < 0.6 else {}
        if not loop or r.random() < 0.4:
            loop["accumulate"] = r.choice([2, 3])
        spec["loop"] = loop
    spec["warm"] = r.random() < 0.25
    spec["train"] = r.random() < 0.9
    spec["no_alias"] = r.choice(["single_graph", "three_graph"])
    # Images stored in oneDNN's blocks of channels or NCHW in one compiled
    # mode (channels_last is every other config's).
    spec["layouts"] = [r.choice(["single_graph", "three_graph"]), r.choice(["blocked", "nchw"])]
    return spec


# ---------------------------------------------------------------- running


def configs(spec):
    layouts = ([(spec["layouts"][0], {"layouts": spec["layouts"][1]})]
               if "layouts" in spec else [])
    return (CONFIGS + [(spec.get("no_alias", "single_graph"), {"aliasing": False})] + layouts
            + F64_CONFIGS)


def _is_f64(config):
    return config is not None and config[1].get("dtype") == "float64"


def _step_config(config):
    """A config as wst.check runs it: without the fuzzer's dtype key."""
    return config[0], {k: v for k, v in config[1].items() if k != "dtype"}


def label(config):
    return _check.config(config)[0]


def _all_zero(t):
    return t is not None and t.is_floating_point() and t.numel() > 0 and t.abs().max().item() == 0


def _category(mc, ref, noise=frozenset()):
    """What kind of failure a ModeCheck is: a mismatch (small: every
    tensor within SMALL of float64, or within SMALL_RATIO of its limit, or
    zero in float64 or in the mode and within SMALL (ZERO_F64 in float64)
    of the largest tensor of its kind:
    rounding-level; or large), a refusal (the generator made something
    unsupported), or an error (its first line with the numbers taken
    out). A tensor zero in float64 has no relative error to speak of: the
    gradient of a BatchNorm weight over a channel of equal values (a
    convolution whose windows see only padding, then a bias) is exactly 0
    in float64 and in torch, which accumulates the statistics in double,
    and 1e-6 of the other gradients in wholestep. The same the other way
    round: a LayerNorm over one element leaves exactly 0 in wholestep
    (x - mean) and 1e-14 in float64 torch, in every order alike. `noise`:
    the parameters whose tensors are rounding-level whatever their
    distance (_noise_gradients)."""
    if mc.error is None:
        small_d = SMALL_F64 if ref.precision == "float64" else SMALL
        zero_d = ZERO_F64 if ref.precision == "float64" else SMALL

        def small(name, d, s):
            if any(name == p or name.startswith(p + ".") for p in noise):
                if ref.precision != "float64":
                    return True
                # float64: the two noises, apart by no more than a rounding
                # noise around an exact zero can be (ZERO_F64 of the largest)
                return d * ref.scales[name] <= zero_d * _top(ref, name)
            if d <= small_d or d <= SMALL_RATIO * mc.limit(s):
                return True
            if ref.precision == "float64" and s >= CANCELLED_F64 and d <= CANCELLED_RATIO * s:
                return True
            truth = ref.truth[name][1]
            got = (mc.snapshot or {}).get(name, (None, None))[1]
            if not (_all_zero(truth) or _all_zero(got)):
                return False
            return d * ref.scales[name] <= zero_d * _top(ref, name)

        return ("small mismatch" if all(small(*f) for f in mc.failures())
                else "mismatch")
    first = mc.error.splitlines()[0]
    if "not supported" in first:
        return "refused"
    return "error: " + re.sub(r"\d+", "#", first)[:120]


def _top(ref, name):
    """The largest magnitude among the float64 tensors of `name`'s kind."""
    kind = ref.truth[name][0]
    return max(t.double().abs().max().item() for k, t in ref.truth.values()
               if k == kind and t.is_floating_point() and t.numel())


class Failure:
    def __init__(self, spec, config, category, tensor, detail):
        self.spec, self.config, self.category = spec, config, category
        self.tensor, self.detail = tensor, detail

    @property
    def label(self):
        return DETERMINISM if self.config is None else label(self.config)

    def describe(self):
        return f"seed {self.spec['seed']}: {self.label}: {self.category}: {self.detail}"


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k][1], b[k][1]) for k in a)


def torch_is_stable(spec, model, opt, loss_fn, batch):
    """Whether eager torch gives the same bits twice for the spec: its
    build (the warm-up step included) and its float32 step. Debian's torch
    1.13 did not always (GELU's backward from a transposed gradient, which
    GELU above now avoids), and a reference that changes run to run judges
    nothing."""
    twin = build(spec)[0]
    if not all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                   twin.state_dict().values())):
        return False
    loop = spec.get("loop")
    first = _check._eager_run(model, opt, loss_fn, batch, 1, loop=loop)
    return _same(first, _check._eager_run(model, opt, loss_fn, batch, 1, loop=loop))


def _sgd_for_float64(spec):
    """The spec the float64 configs run: Adam's and AdamW's replaced by SGD
    with momentum (their float64 steps are test_float64.py's). A gradient
    that is zero in exact arithmetic (softmax's along a constant shift) is
    rounding noise, which Adam's first steps make steps of noise / eps:
    1e-11 in float64, a million times its limit, in torch as in wholestep."""
    o = spec["optimizer"]
    if o["kind"] == "sgd":
        return spec
    sgd = {"kind": "sgd", "lr": o["lr"], "momentum": 0.9, "nesterov": False, "wd": o["wd"],
           "dampening": 0.0}
    for k in ("groups", "group2"):
        if k in o:
            sgd[k] = o[k]
    return dict(spec, optimizer=sgd)


def _noise_gradients(spec, model, opt, loss_fn, batch, f64=False):
    """The parameters whose gradient is zero in exact arithmetic (within
    NOISE_GRADIENT of the largest, in float64): such a gradient is rounding
    noise (a convolution's or a Linear's bias before a BatchNorm, which
    subtracts it again). Under Adam or AdamW (f64 False: the float32
    configs) the first step takes the noise's direction at the full
    learning rate; torch's BatchNorm sums in double and leaves less noise
    than a float32 sum, the same in every batch order, so the float32 spread
    does not cover another sound sum, and the float64 step judges them
    instead. In the float64 configs (f64 True, any optimizer) two sound
    float64 noises differ by more than torch's batch orders show (a
    BatchNorm over two samples amplifies them), and are judged within
    ZERO_F64 of the largest tensor of their kind (_category)."""
    if not f64 and (spec["optimizer"]["kind"] == "sgd" or spec.get("loop")):
        return frozenset()
    largest = _check_runs.float64_gradients(model, opt, loss_fn, batch, 1, False)
    grads = {k: g[0] for (k, p), g in zip(model.named_parameters(), largest)
             if g is not None and p.numel()}
    top = max(grads.values(), default=0.0)
    return frozenset(k for k, g in grads.items() if g <= NOISE_GRADIENT * top)


def _float32_chaos(checked, ref):
    """Whether a case's float32 mismatch is the model's, not the
    compiler's: every float32 config off alike, interpret among them
    (CheckResult.same_failure_everywhere), and the float64 step right in
    every float64 config: the mathematics is torch's, and the float32
    evaluation takes another decision where rounding decides (a median's
    pick, a ReLU input within rounding of zero)."""
    f64 = [mc for c, mc, _ in checked if _is_f64(c)]
    f32 = {mc.label: mc for c, mc, _ in checked if not _is_f64(c)}
    return bool(f64) and all(mc.passed for mc in f64) \
        and _check.CheckResult(f32, ref).same_failure_everywhere()


def _rounding_spread(case, ref, loop):
    """{tensor: how far float64 eager torch's value moves from ref's truth
    over DECIDED_RUNS runs whose state and batch move by one rounding,
    whose layers' outputs by a few, and the gradients of those outputs by a
    few of their largest element}."""
    gen = torch.Generator().manual_seed(DECIDED_SEED)
    spread = dict.fromkeys(ref.truth, 0.0)
    for _ in range(DECIDED_RUNS):
        snap = _check_runs._eager_run(*case, 1, torch.float64, perturb=gen, loop=loop,
                                      activations=gen, gradients=gen)
        for name, d in _check.distances(snap, ref.truth, ref.scales).items():
            spread[name] = max(spread[name], d)
    return spread


def _decided_by_rounding(mc, spread):
    """Whether every failing tensor of a ModeCheck is decided by rounding
    in float64 torch (DECIDED_F64) and off by no more than CANCELLED_RATIO
    times how far torch's own rounding moves it."""
    return all(spread.get(n, 0.0) >= DECIDED_F64 and d <= CANCELLED_RATIO * spread[n]
               for n, d, _ in mc.failures())


def _within_rounding_moves(mc, spread):
    """Whether every failing tensor of a float64 ModeCheck is off by no
    more than SMALL_RATIO times how far float64 torch's own value moves
    when its layers' outputs move by a few roundings (_rounding_spread):
    rounding-level, as a float32 mismatch within SMALL_RATIO of its limit.
    A BatchNorm over a channel of equal values (a convolution whose windows
    see only padding, then its bias) leaves x - mean exactly 0 in
    wholestep and a noise of 1e-16 in float64 torch, which the
    normalization multiplies by 1 / sqrt(eps) and the next Linear's weight
    gradient carries: 1.9e-12 of the largest momentum buffer in
    fuzz_regressions/batch_norm_constant_channel_in_float64_seed82065.json,
    where batch orders and perturbed inputs move torch by 4.9e-16 (the
    windows read no input) and perturbed layer outputs by 1.5e-11."""
    return all(d <= SMALL_RATIO * spread.get(n, 0.0) for n, d, _ in mc.failures())


def run_case(spec, only=None, determinism=True, orders=4):
    """The failures of a spec ([] when it passes; None when the spec is
    invalid or eager torch cannot run it). `only`: the config to run (None: all);
    determinism: whether single_graph must repeat its bits."""
    try:
        model, opt, loss_fn, batch = build(spec)
        if not torch_is_stable(spec, model, opt, loss_fn, batch):
            return None
        ref = _check.Reference(model, opt, loss_fn, batch, 1, orders, PERTURBED,
                               loop=spec.get("loop"))
    except Invalid:
        return None
    except Exception:  # noqa: BLE001 - eager torch refused the spec
        return None
    if not all(math.isfinite(t.double().abs().max().item())
               for k, t in ref.truth.values() if t.is_floating_point() and t.numel()):
        return None
    if not all(math.isfinite(s) for s in ref.spread.values()):
        return None  # float32 torch itself overflows
    wanted = configs(spec) if only is None else ([] if only == DETERMINISM else [only])
    failures = []
    checked = []  # (config, ModeCheck, its Reference)
    for f64 in (False, True):
        part = [c for c in wanted if _is_f64(c) == f64]
        if not part:
            continue
        case = (model, opt, loss_fn, batch)
        if f64:
            try:
                case = build(_sgd_for_float64(spec))
                part_ref = _check.Reference(*case, 1, orders, PERTURBED, torch.float64,
                                            spec.get("loop"))
            except Exception:  # noqa: BLE001 - eager torch refused the float64 copy
                continue
        else:
            part_ref = ref
        results = _check.run_checks(part_ref, *case, 1, [_step_config(c) for c in part], {})
        checked += [(c, mc, part_ref) for c, mc in zip(part, results.values())]
    f32 = [i for i, (c, _, _) in enumerate(checked) if not _is_f64(c)]
    if f32 and _check.CheckResult({checked[i][1].label: checked[i][1] for i in f32},
                                  ref).same_failure_everywhere():
        wide = _check.Reference(model, opt, loss_fn, batch, 1, orders, CHAOS_PERTURBED,
                                loop=spec.get("loop"))
        results = _check.run_checks(wide, model, opt, loss_fn, batch, 1,
                                    [_step_config(checked[i][0]) for i in f32], {})
        for i, mc in zip(f32, results.values()):
            checked[i] = (checked[i][0], mc, wide)
    chaos = _float32_chaos(checked, ref)
    noise = {False: frozenset(), True: frozenset()}
    for f64 in (False, True):
        if any(not mc.passed and mc.error is None and _is_f64(c) == f64 for c, mc, _ in checked):
            noise[f64] = _noise_gradients(spec, model, opt, loss_fn, batch, f64)
    decided = {}  # f64: _rounding_spread of that part's case, at its first large mismatch
    for config, mc, part_ref in checked:
        if mc.passed:
            continue
        f64 = _is_f64(config)
        cat = ("float32 chaos" if chaos and not f64 else _category(mc, part_ref, noise[f64]))
        if cat == "mismatch":
            if f64 not in decided:
                case = build(_sgd_for_float64(spec)) if f64 else (model, opt, loss_fn, batch)
                decided[f64] = _rounding_spread(case, part_ref, spec.get("loop"))
            if _decided_by_rounding(mc, decided[f64]):
                cat = "decided by rounding"
            elif f64 and _within_rounding_moves(mc, decided[f64]):
                cat = "small mismatch"
        if mc.error is not None:
            failures.append(Failure(spec, config, cat, None, mc.error.splitlines()[0][:300]))
        else:
            n, d, s = mc.failures()[0]
            failures.append(Failure(spec, config, cat, n, f"{n}: distance {d:.3g}, "
                                    f"{part_ref.precision} spread {s:.3g}"))
    if determinism and (only is None or only == DETERMINISM):
        loop = spec.get("loop", {})
        first = next((mc for c, mc, _ in checked
                      if c == ("single_graph", {}) and mc.snapshot is not None), None)
        try:
            if first is None:
                first_snap, _ = _check.compiled_run(model, opt, loss_fn, batch, 1,
                                                    "single_graph", dict(loop))
            else:
                first_snap = first.snapshot
            again, _ = _check.compiled_run(model, opt, loss_fn, batch, 1, "single_graph",
                                           dict(loop))
            differ = [n for n, (_, t) in first_snap.items()
                      if n not in again or not torch.equal(t, again[n][1])]
            if differ:
                failures.append(Failure(spec, None, "nondeterministic", differ[0],
                                        f"{len(differ)} tensors differ, first {differ[0]}"))
        except Exception:  # noqa: BLE001 - the run's error is reported above
            pass
    return failures


# ---------------------------------------------------------------- shrinking


def _lists(layers, path=()):
    """(path, list) of every layer list in a nested spec."""
    yield path, layers
    for i, layer in enumerate(layers):
        if layer["op"] == "res":
            yield from _lists(layer["body"], path + (i, "body"))
        elif layer["op"] == "cat":
            for j, b in enumerate(layer["branches"]):
                yield from _lists(b, path + (i, "branches", j))


def _at(layers, path):
    node = layers
    for p in path:
        node = node[p]
    return node


def _halve(v, lo):
    return max(lo, v // 2)


def candidates(spec):
    """Smaller variants of a spec, the biggest reductions first."""
    def variant(fn):
        s = copy.deepcopy(spec)
        fn(s)
        return s

    for path, layers in list(_lists(spec["layers"])):
        for i in range(len(layers)):
            yield variant(lambda s, p=path, i=i: _at(s["layers"], p).pop(i))
        for i, layer in enumerate(layers):
            if layer["op"] == "res":
                yield variant(lambda s, p=path, i=i: _at(s["layers"], p).__setitem__(
                    slice(i, i + 1), _at(s["layers"], p)[i]["body"]))
            if layer["op"] == "cat":
                for j in range(len(layer["branches"])):
                    yield variant(lambda s, p=path, i=i, j=j: _at(s["layers"], p).__setitem__(
                        slice(i, i + 1), _at(s["layers"], p)[i]["branches"][j]))
                    if len(layer["branches"]) > 2:
                        yield variant(lambda s, p=path, i=i, j=j:
                                      _at(s["layers"], p)[i]["branches"].pop(j))
    inp = spec["input"]
    for key, lo in (("batch", 1),):
        if spec[key] > lo:
            yield variant(lambda s: s.__setitem__("batch", _halve(s["batch"], lo)))
            yield variant(lambda s: s.__setitem__("batch", s["batch"] - 1))
    for key, lo in (("c", 1), ("h", 1), ("w", 1), ("t", 1), ("d", 1), ("f", 1), ("vocab", 2)):
        if key in inp and inp[key] > lo:
            yield variant(lambda s, k=key: s["input"].__setitem__(k, _halve(s["input"][k], lo)))
            yield variant(lambda s, k=key: s["input"].__setitem__(k, s["input"][k] - 1))
    if spec["classes"] > 2:
        yield variant(lambda s: s.__setitem__("classes", 2))
    for key, value in fuzz_losses.simpler(spec):
        yield variant(lambda s, k=key, v=value: s.pop(k) if v is None else s.__setitem__(k, v))
    for path, layers in list(_lists(spec["layers"])):
        for i, layer in enumerate(layers):
            for key, value in _simpler(layer):
                yield variant(lambda s, p=path, i=i, k=key, v=value:
                              _at(s["layers"], p)[i].__setitem__(k, v))
    o = spec["optimizer"]
    simpler = [("groups", 1), ("momentum", 0.0), ("nesterov", False), ("wd", 0.0),
               ("dampening", 0.0), ("amsgrad", False)]
    for key, value in simpler:
        if key in o and o[key] != value:
            yield variant(lambda s, k=key, v=value: s["optimizer"].__setitem__(k, v))
    if spec.get("warm"):
        yield variant(lambda s: s.__setitem__("warm", False))
    for key in spec.get("loop", {}):
        yield variant(lambda s, k=key: s["loop"].pop(k))
    if not spec.get("train", True):
        yield variant(lambda s: s.__setitem__("train", True))


def _simpler(layer):
    op = layer["op"]
    out = []
    if op == "conv":
        if layer["out"] > 1:
            out.append(("out", _halve(layer["out"], 1)))
        if layer["k"] > 1:
            out.append(("k", 1 if layer["k"] <= 3 else 3))
        if layer["s"] != 1:
            out.append(("s", 1))
        if layer["p"] not in (0, "same"):
            out.append(("p", 0))
        if layer.get("dil", 1) != 1:
            out.append(("dil", 1))
        if layer["g"] != 1:
            out.append(("g", 1))
        if layer["bias"]:
            out.append(("bias", False))
        if "wn" in layer and layer["wn"] is None:
            out.append(("wn", 0))
    elif op in ("linear",):
        if layer["out"] > 1:
            out.append(("out", _halve(layer["out"], 1)))
        if layer["bias"]:
            out.append(("bias", False))
    elif op in ("tokmix", "attn", "mha"):
        if layer.get("heads", 1) > 1:
            out.append(("heads", 1))
        if layer["bias"]:
            out.append(("bias", False))
    elif op in ("maxpool", "avgpool"):
        if layer.get("dil", 1) != 1:
            out.append(("dil", 1))
        if layer["p"]:
            out.append(("p", 0))
        if layer["s"] != layer["k"]:
            out.append(("s", layer["k"]))
        if layer["k"] > 1:
            out.append(("k", layer["k"] - 1))
    elif op == "adaptive" and (layer["o"] > 1 or layer.get("max")):
        out += [("o", 1)] if layer["o"] > 1 else []
        out += [("max", False)] if layer.get("max") else []
    elif op == "se" and layer["r"] > 1:
        out.append(("r", 1))
    elif op == "act" and layer["fn"] != "relu":
        out.append(("fn", "relu"))
    elif op == "normalize" and layer["p"] != 2:
        out.append(("p", 2))
    elif op == "reduce" and layer["how"] != "mean":
        out.append(("how", "mean"))
    else:
        out += seq_layers.simpler(layer)
    return out


def _size(spec):
    """A measure of a spec's size, for reporting."""
    return len(json.dumps(spec))


def shrink(failure, budget=120.0, log=print):
    """The smallest spec found within `budget` seconds that fails the same
    way (the same config, the same category). A mode's failure is judged
    with every config run, as the fuzzer and replay judge it: one config
    alone cannot tell a mismatch from float32 chaos (every float32 mode,
    interpret among them, off alike), and a spec shrunk to chaos would be
    saved as a failure its replay does not see."""
    deadline = time.monotonic() + budget
    only = DETERMINISM if failure.config is None else None

    def still_fails(s):
        got = run_case(s, only=only, determinism=failure.config is None)
        return next((f for f in got or [] if f.category == failure.category
                     and f.config == failure.config), None)

    best = failure
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for cand in candidates(best.spec):
            if time.monotonic() >= deadline:
                break
            f = still_fails(cand)
            if f is not None:
                best, progress = f, True
                log(f"  shrunk to {_size(cand)} characters: {f.detail}")
                break
    return best


# ---------------------------------------------------------------- regressions


def regression_path(failure):
    tag = re.sub(r"[^a-z0-9]+", "_", failure.label.lower()).strip("_")
    return REGRESSIONS / f"seed{failure.spec['seed']}_{tag}.json"


def save_regression(failure, original, directory=None, name=None, reason=None):
    """Writes the shrunk case as a regression spec, marked as an expected
    failure (its bug is open; the test's strict xfail reports when it is
    fixed, and the mark is then removed). `strict` records that a small
    (rounding-level) mismatch is the failure, so the replay counts those."""
    directory = Path(directory) if directory else REGRESSIONS
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (f"{name}.json" if name else regression_path(failure).name)
    record = {"spec": failure.spec,
              "config": None if failure.config is None else list(failure.config),
              "found": {"seed": original.spec["seed"], "mode": failure.label,
                        "category": failure.category, "tensor": failure.tensor,
                        "detail": failure.detail},
              "strict": failure.category == "small mismatch",
              "xfail": reason or f"open: {failure.label} {failure.category}: {failure.detail}"}
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def load_regressions(directory=None):
    directory = Path(directory) if directory else REGRESSIONS
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def replay(record):
    """The failures of a saved regression spec, in every config (small
    mismatches only when the record is strict)."""
    failures = run_case(record["spec"])
    if failures is None:
        raise Invalid("the regression spec no longer makes a model")
    failures = [f for f in failures if f.category not in UNJUDGED]
    if not record.get("strict"):
        failures = [f for f in failures if f.category != "small mismatch"]
    return failures


# ---------------------------------------------------------------- the loop


class Yield:
    """What a fuzzing run found: cases tried, invalid specs skipped,
    failures [(original, shrunk, saved path)], small mismatches [Failure],
    cases whose float32 step is chaotic [Failure] (_float32_chaos), cases
    whose mismatching tensors float64 torch decides by rounding [Failure]
    (_decided_by_rounding)."""

    def __init__(self):
        self.tried = self.invalid = 0
        self.found, self.small, self.chaos, self.decided = [], [], [], []


def fuzz(seconds, seed, out=None, shrink_budget=120.0, log=print, save=True, strict=False):
    """Cases from `seed` on for `seconds`; returns a Yield."""
    deadline = time.monotonic() + seconds
    y = Yield()
    case = seed
    while time.monotonic() < deadline:
        spec = generate(case)
        case += 1
        failures = run_case(spec)
        if failures is None:
            y.invalid += 1
            continue
        y.tried += 1
        if not strict:
            small = [f for f in failures if f.category == "small mismatch"]
            for f in small:
                log(f"small mismatch (rounding-level, not a failure) {f.describe()}")
            y.small += small
            failures = [f for f in failures if f.category != "small mismatch"]
        chaos = [f for f in failures if f.category == "float32 chaos"]
        if chaos:
            log(f"float32 chaos (every float32 mode off alike, the float64 step right; not a "
                f"failure) {chaos[0].describe()}")
            y.chaos.append(chaos[0])
        decided = [f for f in failures if f.category == "decided by rounding"]
        if decided:
            log(f"decided by rounding (float64 torch itself moves as far when its layers' "
                f"outputs move by one rounding; not a failure) {decided[0].describe()}")
            y.decided.append(decided[0])
        failures = [f for f in failures if f.category not in UNJUDGED]
        for f in failures:
            log(f"FAIL {f.describe()}")
            log("  spec: " + json.dumps(spec))
            small = shrink(f, shrink_budget, log) if shrink_budget > 0 else f
            path = save_regression(small, f, out) if save else None
            log(f"  shrunk: {json.dumps(small.spec)}" + (f"\n  saved {path}" if path else ""))
            y.found.append((f, small, path))
            break  # one failure per case is enough to shrink
    return y


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default=None, help="where to write regression specs "
                    "(default tests/python/fuzz_regressions)")
    ap.add_argument("--shrink-seconds", type=float, default=120)
    ap.add_argument("--strict", action="store_true",
                    help=f"count mismatches within {SMALL:g} of float64 as failures too")
    ap.add_argument("--case", type=int, default=None, help="run only this seed's case, verbose")
    args = ap.parse_args(argv)
    if args.case is not None:
        spec = generate(args.case)
        print(json.dumps(spec))
        model, opt, loss_fn, batch = build(spec)
        print(model)
        every = configs(spec)
        loop = spec.get("loop", {})
        _check.check(model, opt, loss_fn, *batch, modes=[c for c in every if not _is_f64(c)],
                     **loop)
        model, opt, loss_fn, batch = build(_sgd_for_float64(spec))
        _check.check(model, opt, loss_fn, *batch, dtype=torch.float64, **loop,
                     modes=[_step_config(c) for c in every if _is_f64(c)])
        failures = run_case(spec)
        judged = [f for f in failures or [] if f.category not in UNJUDGED + ("small mismatch",)]
        print("the fuzzer's verdict: " + ("an invalid spec" if failures is None
                                           else "FAIL" if judged else "pass"))
        for f in failures or []:
            print(f"  {f.describe()}" + ("" if f in judged else " (not a failure)"))
        return 1 if judged else 0
    seed = args.seed if args.seed is not None else int(time.time()) % 1000000
    print(f"torch fuzz: seed {seed}, {args.seconds:g} s", flush=True)
    t0 = time.monotonic()
    y = fuzz(args.seconds, seed, args.out, args.shrink_seconds,
             log=lambda s: print(s, flush=True), strict=args.strict)
    print(f"{y.tried} modules tried ({y.invalid} invalid specs skipped) in "
          f"{time.monotonic() - t0:.0f} s from seed {seed}: {len(y.found)} failures, "
          f"{len(y.small)} small (rounding-level) mismatches, {len(y.chaos)} cases of "
          f"float32 chaos, {len(y.decided)} decided by rounding")
    for f, small, path in y.found:
        print(f"  {f.describe()}\n    shrunk: {small.label}: {small.category}: {small.detail}"
              f"\n    {json.dumps(small.spec)}" + (f"\n    saved {path}" if path else ""))
    return 1 if y.found else 0


if __name__ == "__main__":
    sys.exit(main())
