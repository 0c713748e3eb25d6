"""wst.check: one model's step in every mode against float64 eager
torch (wst.compare, which times them side by side, is _compare.py; the
runs it compares, eager and compiled, are _check_runs.py's).

``check`` judges each compiled mode by the rule the tests use. One training
step in float64 eager torch (a float64 copy of the model, the same batch)
is the truth. Float32 eager torch runs the same step over several orders of
the batch's rows (identity, reversed, random permutations; each on a fresh
copy): the same mathematics, other roundings. (With dtype=torch.float64,
wholestep's step and the orders run in float64 instead, the same rule with
float64's rounding.) For every tensor the step
leaves (each parameter, each buffer, each optimizer state tensor, and the
loss) the distance of a result from float64 is

    dist = max|a - b| / scale,   scale = max(max|b|, 1e-3 * the largest max|b|
                                             among the tensors of its kind)

(b the float64 tensor; the kinds: parameters, buffers, each optimizer
state slot such as ``momentum_buffer``, the loss). The floor keeps a tensor
that is zero in float64 (the gradient of a convolution's bias before a
BatchNorm, held in its momentum buffer) from dividing rounding noise by
nothing. A tensor's float32 spread is the largest distance among the
float32 orders; a mode passes a tensor when its distance is at most
``2 * spread + 1e-6`` (``2 * spread + 2e-15`` in float64). Integer
tensors (``num_batches_tracked``) must be equal.

The step's training-loop options (LOOP_OPTIONS) are part of what is
checked, on both sides: with ``clip_grad_norm`` eager torch calls
``clip_grad_norm_`` on the optimizer's parameters between the backward
and the update (with ``error_if_nonfinite``), and with ``accumulate=k``
each side makes k calls on the batch (eager: k backward passes, then one
update). They are the same for every mode: the truth is one.

Nothing here changes the caller's model, optimizer, batch or torch's
random state: every run is on a deep copy of the model with a clone of the
optimizer (same class, groups, hyperparameters and state).
"""

import math
import time

import torch

from ._check_runs import (_ORDER_SEED, _eager_run, _float_dtype, _own_random_state,
                          clone_optimizer, compiled_run, config, torch_agrees_with_itself)

REL_FLOOR = 1e-3   # of the largest tensor of the same kind
# Added to 2 * spread (a relative distance): about 17 roundings of the
# runs' dtype (float32 steps; float64 steps, dtype=torch.float64).
ABS_TERM = 1e-6
ABS_TERM_F64 = 2e-15
# In float64 the loss is judged at a scale of at least this: a loss is a sum
# of terms of order one (log-probabilities, distances), and float64 torch's
# own loss can be as far from exact as 1e-16 of them, the same in every run
# (spread 0): a confident prediction's NLL, log(1 + e) with e below
# float64's rounding of 1, is 1e-10 of itself off in torch and wholestep
# alike, on either side.
LOSS_SCALE_F64 = 1.0

DEFAULT_MODES = ("single_graph", "three_graph", "interpret")
# compile_train_step's options that change what a step computes, which the
# eager truth must do too.
LOOP_OPTIONS = ("clip_grad_norm", "error_if_nonfinite", "accumulate")


# ---------------------------------------------------------------- distances


def _scales(ref):
    """Each float tensor's scale: its largest magnitude, floored at
    REL_FLOOR of the largest among the tensors of its kind."""
    top = {}
    for kind, t in ref.values():
        if t.is_floating_point() and t.numel():
            top[kind] = max(top.get(kind, 0.0), t.double().abs().max().item())
    out = {}
    for name, (kind, t) in ref.items():
        if t.is_floating_point() and t.numel():
            out[name] = max(t.double().abs().max().item(), REL_FLOOR * top[kind], 1e-30)
    return out


def distance(a, b, scale):
    """max|a - b| / scale; inf for a shape mismatch or a non-finite value
    where float64 has a finite one; integers: 0 when equal, else inf."""
    if a.shape != b.shape:
        return math.inf
    if not b.is_floating_point():
        return 0.0 if torch.equal(a.to(b.dtype), b) else math.inf
    if not a.numel():
        return 0.0
    a, b = a.double(), b.double()
    same_nonfinite = (~torch.isfinite(b)) & ((a == b) | (torch.isnan(a) & torch.isnan(b)))
    if not bool((torch.isfinite(a) | same_nonfinite).all()):
        return math.inf
    diff = torch.where(same_nonfinite, torch.zeros_like(a), a - b).abs().max().item()
    return diff / scale


def distances(snap, ref, scales):
    """{name: distance from float64} of a snapshot (inf where it misses a
    tensor float64 has)."""
    out = {}
    for name, (_, b) in ref.items():
        if name not in snap:
            out[name] = math.inf
        else:
            out[name] = distance(snap[name][1], b, scales.get(name, 1.0))
    return out


def limit(spread, abs_term=ABS_TERM):
    return 2 * spread + abs_term


# ---------------------------------------------------------------- results


class ModeCheck:
    """One mode's verdict: `passed`, `tensors` [(name, distance, spread)]
    worst first (by distance over its limit), `error` (the exception's
    text, when the step raised), `loss`."""

    def __init__(self, label, mode, options):
        self.label, self.mode, self.options = label, mode, options
        self.tensors, self.error, self.exception, self.loss = [], None, None, None
        self.snapshot, self.seconds = None, 0.0
        self.abs_term = ABS_TERM  # the reference's (Reference.judge)

    def limit(self, spread):
        return limit(spread, self.abs_term)

    @property
    def passed(self):
        return self.error is None and all(d <= self.limit(s) for _, d, s in self.tensors)

    def failures(self):
        return [(n, d, s) for n, d, s in self.tensors if not d <= self.limit(s)]

    def worst(self):
        return self.tensors[0] if self.tensors else None

    def summary(self):
        """One line: the verdict and the worst tensor (or the error)."""
        if self.error is not None:
            return f"error: {self.error.splitlines()[0] if self.error else ''}"
        if not self.tensors:
            return "pass (no tensors)"
        n, d, s = self.tensors[0]
        bad = len(self.failures())
        head = "pass" if not bad else f"FAIL ({bad} of {len(self.tensors)} tensors)"
        return f"{head}; worst {n}: distance {d:.3g}, spread {s:.3g}"


def _ratio(d, s):
    if s > 0:
        return d / s
    return 0.0 if d == 0 else math.inf


class CheckResult:
    """check()'s answer: `modes` {label: ModeCheck} in the order run;
    `passed` when every mode passed."""

    def __init__(self, modes, reference):
        self.modes, self.reference = modes, reference
        self.orders, self.n_tensors = reference.orders, len(reference.truth)

    @property
    def passed(self):
        return all(m.passed for m in self.modes.values())

    def __getitem__(self, label):
        return self.modes[label]

    def report(self, worst=3):
        ref = self.reference
        lines = [f"wholestep check: one {ref.precision} step, {self.n_tensors} tensors "
                 f"(parameters, buffers, optimizer state, loss) against float64 eager torch; "
                 f"limit per tensor 2 x {ref.precision} spread ({self.orders} batch orders"
                 + (f", {ref.perturbed} perturbed" if ref.perturbed else "")
                 + f") + {ref.abs_term:g}"]
        width = max([len(k) for k in self.modes] + [4])
        for label, m in self.modes.items():
            verdict = "pass" if m.passed else "FAIL"
            if m.error is not None:
                lines.append(f"  {label:<{width}}  {verdict}  {m.error.splitlines()[0]}")
                continue
            bad = len(m.failures())
            lines.append(f"  {label:<{width}}  {verdict}  "
                         + (f"{bad} of {len(m.tensors)} tensors beyond the limit" if bad
                            else f"all {len(m.tensors)} tensors within the limit")
                         + f"  ({m.seconds:.2f} s)")
            shown = m.failures()[:max(worst, 1)] if bad else m.tensors[:worst]
            if shown:
                tw = max(len(n) for n, _, _ in shown)
                lines.append(f"      {'tensor':<{tw}}  {'distance':>9}  {'spread':>10}  "
                             f"{'ratio':>8}")
                for n, d, s in shown:
                    lines.append(f"      {n:<{tw}}  {d:>9.3g}  {s:>10.3g}  {_ratio(d, s):>8.3g}")
        lines.append("verdict: " + ("pass" if self.passed else "FAIL: " + ", ".join(
            k for k, m in self.modes.items() if not m.passed)))
        if self.same_failure_everywhere() and ref.precision == "float32":
            lines.append(
                "every mode, interpret included, is off by the same amount: the float32 step "
                "of the model as wholestep evaluates it, not its compiler. If the model is "
                "chaotic in float32 (a ReLU input within rounding of zero decides a gradient), "
                "float32 torch from inputs perturbed by one rounding lands as far: try "
                f"perturbed={max(4 * ref.perturbed, 16)}; and dtype=torch.float64 checks "
                f"wholestep's float64 step, where rounding decides nothing")
        return "\n".join(lines)

    def same_failure_everywhere(self):
        """Whether every mode failed, interpret among them (by its mode:
        the label carries the step's options, as "interpret
        (accumulate=3)"), with the same worst tensor at the same distance
        (within 1%)."""
        ms = list(self.modes.values())
        if all(m.mode != "interpret" for m in ms) or any(m.passed or m.error for m in ms):
            return False
        worst = [m.failures()[0] for m in ms]
        return all(w[0] == worst[0][0] and abs(w[1] - worst[0][1]) <= 0.01 * worst[0][1]
                   for w in worst)

    __str__ = report


# ---------------------------------------------------------------- check


class Reference:
    """Float64 eager torch's step and eager torch's spread around it in
    `dtype` (None: the model's own; the precision of the steps it judges),
    for one model, optimizer and batch: over `orders` batch orders, and
    `perturbed` more runs with the parameters, buffers and batch each
    multiplied by 1 + u, |u| within one rounding of `dtype` (what it
    reaches through cancellations inside one example, which batch orders
    do not reorder). `loop`: the step's LOOP_OPTIONS, which every run
    applies."""

    def __init__(self, model, optimizer, loss_fn, batch, num_inputs=1, orders=4, perturbed=0,
                 dtype=None, loop=None):
        self.dtype = dtype
        self.loop = dict(loop or {})
        unknown = set(self.loop) - set(LOOP_OPTIONS)
        if unknown:
            raise ValueError(f"check: {sorted(unknown)} are not training-loop options "
                             f"({', '.join(LOOP_OPTIONS)})")
        loop = self.loop
        run_dtype = dtype or _float_dtype(model)
        if run_dtype not in (torch.float32, torch.float64):
            raise ValueError(f"check: steps in {run_dtype} are not judged: float32 or float64")
        self.precision = "float64" if run_dtype == torch.float64 else "float32"
        self.abs_term = ABS_TERM_F64 if run_dtype == torch.float64 else ABS_TERM
        if not torch_agrees_with_itself(model, optimizer, loss_fn, batch, num_inputs):
            raise ValueError(
                "check: float64 torch's gradients of this model change when each layer's output "
                "gradient is made contiguous first: torch's own kernels disagree (torch 1.13's "
                "BatchNorm backward reads the gradient of a transpose and a mean over a batch of "
                "one in the wrong layout), so there is no truth to judge the step against; check "
                "with a larger batch")
        with _own_random_state():
            self.truth = _eager_run(model, optimizer, loss_fn, batch, num_inputs,
                                    dtype=torch.float64, loop=loop)
            self.scales = _scales(self.truth)
            if run_dtype == torch.float64 and "loss" in self.scales:
                self.scales["loss"] = max(self.scales["loss"], LOSS_SCALE_F64)
            n = batch[0].shape[0] if batch and batch[0].dim() else 1
            gen = torch.Generator().manual_seed(_ORDER_SEED)
            perms = [None, torch.arange(n).flip(0)]
            perms += [torch.randperm(n, generator=gen) for _ in range(max(orders - 2, 0))]
            self.spread = {name: 0.0 for name in self.truth}
            for perm in perms[:max(orders, 1)]:
                self._widen(_eager_run(model, optimizer, loss_fn, batch, num_inputs, dtype,
                                       perm=perm, loop=loop))
            noise = torch.Generator().manual_seed(_ORDER_SEED + 1)
            for _ in range(perturbed):
                self._widen(_eager_run(model, optimizer, loss_fn, batch, num_inputs, dtype,
                                       perturb=noise, loop=loop))
        self.orders, self.perturbed = max(orders, 1), perturbed

    def _widen(self, snap):
        """The spread widened by one run's snapshot, which is dropped before
        the next run starts (a large model's runs fit in memory one at a
        time)."""
        for name, d in distances(snap, self.truth, self.scales).items():
            self.spread[name] = max(self.spread[name], d)

    def judge(self, check, snap):
        """Fills a ModeCheck's tensors from its snapshot."""
        check.snapshot = snap
        check.abs_term = self.abs_term
        check.loss = float(snap["loss"][1]) if "loss" in snap else None
        rows = [(n, d, self.spread[n]) for n, d in distances(snap, self.truth,
                                                             self.scales).items()]
        rows.sort(key=lambda r: (-(r[1] / check.limit(r[2])) if not math.isnan(r[1])
                                 else -math.inf, r[0]))
        check.tensors = rows
        return check


def run_checks(reference, model, optimizer, loss_fn, batch, num_inputs, modes, options):
    """A ModeCheck per `modes` entry (errors caught and recorded); each
    mode's step takes the reference's training-loop options."""
    out = {}
    for entry in modes:
        label, mode, opts = config(entry)
        for key in set(LOOP_OPTIONS) & (set(opts) | set(options)):
            raise ValueError(f"check: {key} applies to every mode (the eager truth is one "
                             f"step): pass it to check() itself, not in one mode's options")
        opts = dict(options, **opts, **reference.loop)
        label = config((mode, opts))[0]
        mc = ModeCheck(label, mode, opts)
        t0 = time.perf_counter()
        try:
            with _own_random_state():
                snap, _ = compiled_run(model, optimizer, loss_fn, batch, num_inputs, mode, opts,
                                       reference.dtype)
            reference.judge(mc, snap)
        except Exception as e:  # noqa: BLE001 - every failure is the verdict
            mc.error = f"{type(e).__name__}: {e}"
            mc.exception = e
        mc.seconds = time.perf_counter() - t0
        out[label] = mc
    return out


def check(model, optimizer, loss_fn, *batch, num_inputs=1, modes=DEFAULT_MODES, orders=4,
          perturbed=4, dtype=None, verbose=True, **options):
    """One training step of `model` with `optimizer` and `loss_fn` on
    `batch` (the model's inputs, then the loss function's targets) in each
    of `modes`, judged against float64 eager torch within twice eager
    torch's spread over `orders` batch orders (the module docstring gives
    the rule; `perturbed` widens the spread by that many runs from inputs
    perturbed by one rounding, 0 for none). `dtype`: the precision of the
    steps judged and of the spread (None: the model's own, float32 for a
    float32 model); torch.float64 runs wholestep's step on float64 copies
    and judges it within float64 torch's spread, where rounding decides
    nothing: what separates a float32 step that is chaotic (a ReLU input
    within rounding of zero) from a wrong one. `modes` entries are mode
    names or (mode, {step option: value}) pairs; `options` go to every
    mode, and those of the training loop (`clip_grad_norm`,
    `error_if_nonfinite`, `accumulate`) to the eager truth too. Runs on
    copies: the model, the optimizer and the batch are left as they were.
    Prints the verdict and the worst tensors when `verbose`; returns a
    CheckResult."""
    if not batch:
        raise ValueError("check: no batch given (the model's inputs, then the targets)")
    if isinstance(modes, str):
        modes = (modes,)
    loop = {k: options.pop(k) for k in LOOP_OPTIONS if k in options}
    ref = Reference(model, optimizer, loss_fn, batch, num_inputs, orders, perturbed, dtype, loop)
    result = CheckResult(run_checks(ref, model, optimizer, loss_fn, batch, num_inputs, modes,
                                    options), ref)
    if verbose:
        print(result.report())
    return result


__all__ = ["check", "CheckResult", "ModeCheck", "clone_optimizer"]
