"""wst.compare: copies of one model trained in each mode on one batch,
round robin, and what the command line's `wholestep compare` prints for
them (time per step, kernels, bytes copied and between graphs, peak,
agreement). Like wst.check (_check.py, whose copies it uses), it leaves the
caller's model, optimizer, batch and random state as they were."""

import copy
import math
import statistics
import time

from ._check_runs import _copy_batch, _own_random_state, clone_optimizer, config


def _max_rel_diff(a_model, b_model):
    """The largest over parameters and buffers of max|a - b| / max|b| (as
    the command line's compare); the tensor's name."""
    worst, at = 0.0, ""
    b_state = dict(b_model.named_parameters())
    b_state.update(b_model.named_buffers())
    a_state = dict(a_model.named_parameters())
    a_state.update(a_model.named_buffers())
    for name, b in b_state.items():
        a = a_state[name].detach().double()
        b = b.detach().double()
        if not b.numel():
            continue
        scale = b.abs().max().item()
        d = (a - b).abs().max().item()
        d = d / scale if scale > 0 else d
        if not d <= worst:
            worst, at = d, name
    return worst, at


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


def compare(model, optimizer, loss_fn, *batch, steps=10, warmup=2, num_inputs=1,
            modes=("interpret", "three_graph", "single_graph"), verbose=True, **options):
    """Trains copies of `model` in each of `modes` for `warmup` + `steps`
    steps on `batch`, round robin, and prints what `wholestep compare`
    prints: the median ms/step of the timed steps, graphs and kernels per
    step, bytes copied in and out, bytes between graphs, arena and peak
    bytes, and each mode's largest parameter or buffer difference from the
    first mode's after the last step (max|a - b| / max|b|). The model and
    the optimizer are left as they were. Returns the rows as dicts."""
    from .torch import compile_train_step
    if not batch:
        raise ValueError("compare: no batch given (the model's inputs, then the targets)")
    if isinstance(modes, str):
        modes = (modes,)
    runs = []
    for entry in modes:
        label, mode, opts = config(entry)
        opts = dict(options, **opts)
        label = config((mode, opts))[0]
        m = copy.deepcopy(model)
        o = clone_optimizer(optimizer, model, m)
        step = compile_train_step(m, o, loss_fn, mode=mode, num_inputs=num_inputs, **opts)
        runs.append({"label": label, "model": m, "step": step, "times": [], "loss": None})
    with _own_random_state():
        for i in range(warmup + steps):
            for r in runs:
                args = _copy_batch(batch)
                t0 = time.perf_counter()
                loss = r["step"](*args)
                ms = (time.perf_counter() - t0) * 1e3
                if i >= warmup:
                    r["times"].append(ms)
                r["loss"] = float(loss)
    rows = []
    ref = runs[0]["model"]
    for r in runs:
        stats = r["step"].stats()
        diff, at = _max_rel_diff(r["model"], ref)
        rows.append({"mode": r["label"], "ms_per_step": statistics.median(r["times"])
                     if r["times"] else 0.0, "graphs": stats["graphs"],
                     "kernels": stats["kernels"], "bytes_copied": stats["bytes_copied"],
                     "interface_bytes": stats["interface_bytes"],
                     "arena_bytes": stats["arena_bytes"], "peak_bytes": stats["peak_bytes"],
                     "persistent_bytes": stats["persistent_bytes"], "flops": stats["flops"],
                     "final_loss": r["loss"], "max_rel_diff": diff, "max_diff_at": at})
    if verbose:
        print(format_comparison(rows, type(model).__name__, batch, optimizer, steps, warmup))
    return rows


def format_comparison(rows, name, batch, optimizer, steps, warmup):
    shape = "x".join(str(s) for s in batch[0].shape) if batch[0].dim() else "scalar"
    lines = [f"comparing modes on {name} (input {shape}, {type(optimizer).__name__}): {steps} "
             f"timed steps after {warmup} warm-up, round robin, median ms/step; max diff is "
             f"parameters and buffers vs {rows[0]['mode']} after the last step",
             f"{'mode':<22} {'ms/step':>9} {'speedup':>8} {'graphs':>7} {'kernels':>8} "
             f"{'copied/step':>12} {'between':>12} {'arena':>12} {'peak':>12} {'max diff':>10}"]
    base = rows[0]["ms_per_step"]
    for r in rows:
        speed = base / r["ms_per_step"] if r["ms_per_step"] > 0 else math.inf
        lines.append(f"{r['mode']:<22} {r['ms_per_step']:>9.2f} {speed:>7.2f}x "
                     f"{r['graphs']:>7} {r['kernels']:>8} {_mib(r['bytes_copied']):>12} "
                     f"{_mib(r['interface_bytes']):>12} {_mib(r['arena_bytes']):>12} "
                     f"{_mib(r['peak_bytes']):>12} {r['max_rel_diff']:>10.2e}")
    return "\n".join(lines)
