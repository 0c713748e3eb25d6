"""The losses of torch_fuzz.py's cases but CTC: their specs, targets and
functions.

- cross_entropy: label smoothing, an ignored class (ignore_index: the
  positions of that class leave the mean), class weights, mean or sum,
  probabilities as targets; over the classes of a vector or, "dense",
  of every pixel [N, C, H, W] or token [N, C, T] (a segmentation's or a
  language model's loss);
- nll: nll_loss of log_softmax, with the same options but smoothing;
- bce_logits: binary_cross_entropy_with_logits with pos_weight and weight;
- mse, l1, smooth_l1 (beta), huber (delta); kl_div of log_softmax
  (batchmean, sum or mean; the target as probabilities or their logs);
  cosine_embedding (the output's halves, targets +-1, a margin);
  gaussian_nll (the output's square as the variance, some below eps);
  multi_margin (p 1 or 2, a margin, class weights) and multilabel_margin
  (each row's classes before its first -1, some twice).

Class weights and pos_weight are float32 constants in the loss function's
closure, made from the spec's seed, as users write them."""

import warnings

import torch

nn = torch.nn
F = nn.functional

# kl_div's reduction="mean" is drawn as users may write it; torch warns at
# every call that it is not the KL divergence's own mean.
warnings.filterwarnings("ignore", message="reduction: 'mean' divides the total loss")

# name -> weight of the draw
KINDS = {"cross_entropy": 8, "mse": 2, "gaussian_nll": 1, "nll": 1, "bce_logits": 1, "l1": 1,
         "smooth_l1": 1, "huber": 1, "kl_div": 1, "cosine_embedding": 1, "multi_margin": 1,
         "multilabel_margin": 1}
CLASS_LOSSES = ("cross_entropy", "nll")


def gen(r, classes):
    """A loss spec's keys ("loss" and its options) for `classes` outputs."""
    kind = r.choices(list(KINDS), weights=list(KINDS.values()))[0]
    if kind == "cosine_embedding" and classes % 2:
        kind = "mse"
    spec = {"loss": kind}
    if kind in CLASS_LOSSES:
        if kind == "cross_entropy" and r.random() < 0.15:
            spec["soft"] = True  # probabilities as targets: no ignored class
        elif r.random() < 0.3:
            spec["ignore"] = r.randrange(classes)
        if kind == "cross_entropy" and r.random() < 0.35:
            spec["ls"] = r.choice([0.1, 0.3])
        if r.random() < 0.3:
            spec["weight"] = True
        if spec.keys() - {"loss"} or r.random() < 0.2:
            spec["reduction"] = r.choice(["mean", "mean", "sum"])
        return spec
    spec["reduction"] = r.choice(["mean", "mean", "sum"])
    if kind == "gaussian_nll":
        spec.update(full=r.random() < 0.5, eps=r.choice([1e-6, 0.01, 0.5]))
    elif kind == "bce_logits":
        spec.update(pos_weight=r.random() < 0.5, weight=r.random() < 0.3)
    elif kind == "smooth_l1":
        spec["beta"] = r.choice([0.5, 1.0, 2.0])
    elif kind == "huber":
        spec["delta"] = r.choice([0.3, 1.0, 1.5])
    elif kind == "kl_div":
        spec.update(reduction=r.choice(["batchmean", "sum", "mean"]),
                    log_target=r.random() < 0.5)
    elif kind == "cosine_embedding":
        spec["margin"] = r.choice([0.0, 0.3])
    elif kind == "multi_margin":
        spec.update(reduction=r.choice(["mean", "sum"]), p=r.choice([1, 2]),
                    margin=r.choice([1.0, 0.5]), weight=r.random() < 0.3)
    return spec


def _constant(spec, salt, n):
    """A float32 constant of n positive entries the spec's seed makes."""
    g = torch.Generator().manual_seed(spec["seed"] * 31 + salt)
    return torch.rand(n, generator=g) + 0.25


def targets(spec, out_shape, gen):
    """The targets of a batch whose model output has `out_shape`
    ([N, C] or, dense, [N, C, ...])."""
    kind = spec["loss"]
    n, c, rest = out_shape[0], out_shape[1], tuple(out_shape[2:])
    if kind in CLASS_LOSSES:
        if spec.get("soft"):
            return torch.randn((n, c) + rest, generator=gen).softmax(1)
        return torch.randint(0, c, (n,) + rest, generator=gen)
    if kind == "bce_logits":
        return torch.rand(out_shape, generator=gen)
    if kind == "kl_div":
        logits = torch.randn(out_shape, generator=gen)
        return logits.log_softmax(1) if spec["log_target"] else logits.softmax(1)
    if kind == "cosine_embedding":
        return torch.randint(0, 2, (n,), generator=gen) * 2 - 1
    if kind == "multi_margin":
        return torch.randint(0, c, (n,), generator=gen)
    if kind == "multilabel_margin":  # classes (repeats possible), then -1 and anything
        classes = torch.randint(0, c, (n, c), generator=gen)
        ends = torch.randint(0, c + 1, (n, 1), generator=gen)
        return torch.where(torch.arange(c) == ends, -torch.ones_like(classes), classes)
    return torch.randn(out_shape, generator=gen)


def function(spec, classes):
    """loss(output, target) of a spec."""
    kind, red = spec["loss"], spec.get("reduction", "mean")
    weight = _constant(spec, 1, classes) if spec.get("weight") else None
    if kind in CLASS_LOSSES:
        ignore = spec.get("ignore", -100)
        if kind == "nll":
            return lambda out, y: F.nll_loss(F.log_softmax(out, 1), y, weight=weight,
                                             ignore_index=ignore, reduction=red)
        return lambda out, y: F.cross_entropy(out, y, weight=weight, ignore_index=ignore,
                                              reduction=red, label_smoothing=spec.get("ls", 0.0))
    if kind == "gaussian_nll":
        return lambda out, y: F.gaussian_nll_loss(out, y, out * out, full=spec["full"],
                                                  eps=spec["eps"], reduction=red)
    if kind == "bce_logits":
        pos = _constant(spec, 2, classes) if spec["pos_weight"] else None
        return lambda out, y: F.binary_cross_entropy_with_logits(out, y, weight=weight,
                                                                 pos_weight=pos, reduction=red)
    if kind == "smooth_l1":
        return lambda out, y: F.smooth_l1_loss(out, y, beta=spec["beta"], reduction=red)
    if kind == "huber":
        return lambda out, y: F.huber_loss(out, y, delta=spec["delta"], reduction=red)
    if kind == "l1":
        return lambda out, y: F.l1_loss(out, y, reduction=red)
    if kind == "kl_div":
        return lambda out, y: F.kl_div(F.log_softmax(out, 1), y, reduction=red,
                                       log_target=spec["log_target"])
    if kind == "multi_margin":
        return lambda out, y: F.multi_margin_loss(out, y, p=spec["p"], margin=spec["margin"],
                                                  weight=weight, reduction=red)
    if kind == "multilabel_margin":
        return lambda out, y: F.multilabel_margin_loss(out, y, reduction=red)
    if kind == "cosine_embedding":
        half = classes // 2
        return lambda out, y: F.cosine_embedding_loss(out[:, :half], out[:, half:], y,
                                                      margin=spec["margin"], reduction=red)
    return lambda out, y: F.mse_loss(out, y, reduction=red)


def simpler(spec):
    """(key, value) changes that make a loss spec simpler (None: drop the
    key)."""
    out = []
    for key in ("weight", "pos_weight", "soft", "log_target"):
        if spec.get(key):
            out.append((key, None if key in ("soft", "weight") else False))
    for key in ("ignore", "ls", "dense"):
        if key in spec:
            out.append((key, None))
    if spec.get("reduction", "mean") != "mean":
        out.append(("reduction", "mean"))
    return out
