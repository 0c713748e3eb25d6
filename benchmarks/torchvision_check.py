"""wst.check on every torchvision classification model: one SGD step of
each (lr 0.01, cross-entropy, num_classes=10, batch 4 of random images) in
every mode against float64 eager torch, within twice float32 eager torch's
spread over batch orders (the rule of python/wholestep/_check.py); with
--float64, wholestep's float64 step of each, within twice float64 torch's
spread (wst.check's dtype=torch.float64: rounding decides nothing there,
so a model's float32 chaos cannot hide a wrong step, nor pass for one).

The models are torchvision.models.list_models(module=torchvision.models),
built with weights=None and num_classes=10, dropout set to 0 (a
deterministic step), aux_logits=False for googlenet and inception_v3; at
64x64 (inception_v3 at 96x96, the smallest it takes being 75x75;
maxvit_t at 224x224, whose 7x7 partitions need a multiple of 224; the
vision transformers built for that size). A model with more parameters
than --max-params (torchvision's own count, from its weights' metadata:
the model is not built) is listed as too large and not run.
--family segmentation, video or users checks torchvision's segmentation
or video builders, or the models users write, instead, as
torchvision_coverage.py builds and feeds them (the loss over every pixel
for segmentation).

At 64x64 a ResNet-style network's last stage works on 2x2 maps, and its
BatchNorms normalize 16 values per channel (batch 4): the step is chaotic,
a ReLU input within rounding of zero flips sign with the evaluation order
inside one example and the changed gradient grows through the stack.
Batch orders do not reorder what happens inside one example, so their
spread can be far below what float32 reaches; --perturbed N (16) adds N float32
runs from parameters, buffers and batch perturbed by one rounding
(wst.check's `perturbed`), which measure it. A failure every mode shares,
interpret included, that such runs explain is not a wholestep bug.
regnet_x_400mf fails this way at 64x64 (every mode alike): one of 16
float32 runs from inputs perturbed by one rounding lands as far from
float64 as wholestep does, where the four batch orders stay 13x closer.
So does regnet_y_400mf: its one wrong gradient (block4-3.f.b.1.bias) is
wrong in one channel by exactly the upstream gradient of the one element
whose pre-ReLU value is -3.7e-5 in float64 (1e-5 of the largest), on the
other side of zero in wholestep's float32. A failing model's row ends with
its float64 step's verdict (wst.check's dtype=torch.float64, within float64
torch's spread, where rounding decides nothing; --no-float64-probe skips
it): a pass there says the float32 step is torch's step, taking other
float32 decisions.

Each row: pass; fail (the mode and its worst tensor: distance from float64
and float32 torch's spread; or the error's first line); refused (the
importer does not support an op the model uses, or a documented limit of
one: the error's first line); error (eager torch itself could not run
the model at this size); too large.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/torchvision_check.py
        [--models resnet18,mobilenet_v2] [--max-params 70e6] [--json out.json]
        [--family classification|segmentation|video|users] [--float64]
"""

import argparse
import json
import sys
import time

import torch
import torchvision

import wholestep.torch as wst

MODES = ("single_graph", "three_graph", "interpret")
# inception_v3 takes 75x75 at least; maxvit_t partitions into 7x7 windows of a 224x224 input.
SIZES = {"inception_v3": 96, "maxvit_t": 224}
# Vision transformers take their image size at construction.
SIZE_KWARG = {"vit_b_16": "image_size", "vit_b_32": "image_size", "vit_l_16": "image_size",
              "vit_l_32": "image_size", "vit_h_14": "image_size"}
VIT_SIZES = {"vit_h_14": 70}  # a multiple of its patch
NO_AUX = ("googlenet", "inception_v3")


def classification_models():
    return torchvision.models.list_models(module=torchvision.models)


def num_params(name):
    try:
        weights = torchvision.models.get_model_weights(name)
        return min(w.meta["num_params"] for w in weights)
    except Exception:  # noqa: BLE001 - no metadata: unknown
        return None


def input_size(name):
    return VIT_SIZES.get(name, SIZES.get(name, 64))


def build(name, as_built=False):
    """The classification model, built after torch.manual_seed(0), in train
    mode; without dropout and stochastic depth unless `as_built`."""
    kwargs = {"weights": None, "num_classes": 10}
    if name in NO_AUX:
        kwargs.update(aux_logits=False, init_weights=False)
    if name in SIZE_KWARG:
        kwargs[SIZE_KWARG[name]] = input_size(name)
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, **kwargs)
    return (model if as_built else deterministic(model)).train()


def deterministic(model):
    """`model` with its dropout and stochastic depth off: a step that eager
    torch and wholestep can be compared on."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Dropout, torch.nn.Dropout2d, torch.nn.Dropout3d)):
            m.p = 0.0
        if type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    return model


def _refused(text):
    """An error of the importer naming what it does not take (an op, or a
    documented limit of one), not a bug of wholestep's."""
    return text.startswith("Error:") and "internal error" not in text


def float64_probe(model, opt, loss_fn, x, y):
    """wholestep's float64 step of a model whose float32 step failed,
    judged within float64 torch's spread (wst.check's dtype): '; float64
    step: pass (...)' says the float32 failure is the model's chaos, not a
    wrong step."""
    result = wst.check(model, opt, loss_fn, x, y, modes=("single_graph",), perturbed=2,
                       dtype=torch.float64, verbose=False)
    m = result["single_graph"]
    if m.error is not None:
        return f"; float64 step: error: {m.error.splitlines()[0]}"
    n, d, s = (m.failures() or m.tensors)[0]
    verdict = "pass" if m.passed else f"FAIL ({len(m.failures())} tensors)"
    return f"; float64 step: {verdict} (nearest {n} {d:.2g}, float64 spread {s:.2g})"


def other_family_case(name, family):
    """(model, loss function, input, target) of a segmentation, video or
    users' model as torchvision_coverage.py builds and feeds it."""
    import torchvision_coverage as cov
    shape = cov.input_shape(name, family)
    x, y = cov.make_batch(name, shape, family)
    return cov.build(name, family), cov.loss_fn_of(name, family), x, y


def check_model(name, batch, modes, perturbed, max_params, probe=True,
                family="classification", dtype=None):
    """A row: {model, status, detail, seconds, params}; a float32 failure
    followed by the float64 step's verdict when `probe`. Other families
    than classification as torchvision_coverage.py builds and feeds them.
    `dtype` torch.float64: the float64 step checked instead (no probe)."""
    classification = family == "classification"
    row = {"model": name, "params": num_params(name) if classification else None,
           "input": None, "status": None, "detail": "", "seconds": 0.0, "modes": {}}
    if row["params"] is not None and row["params"] > max_params:
        row["status"] = "too large"
        row["detail"] = f"{row['params'] / 1e6:.1f}M parameters > {max_params / 1e6:g}M"
        return row
    t0 = time.perf_counter()
    try:
        if classification:
            size = input_size(name)
            gen = torch.Generator().manual_seed(1)
            x = torch.randn(batch, 3, size, size, generator=gen)
            y = torch.randint(0, 10, (batch,), generator=gen)
            model, loss_fn = build(name), torch.nn.functional.cross_entropy
        else:
            model, loss_fn, x, y = other_family_case(name, family)
            row["params"] = sum(p.numel() for p in model.parameters())
        row["input"] = "x".join(map(str, x.shape))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with torch.no_grad():
            model(x[:2].clone())
    except Exception as e:  # noqa: BLE001 - torch itself cannot run it here
        row["status"], row["detail"] = "error", f"eager torch: {str(e).splitlines()[0]}"
        row["seconds"] = time.perf_counter() - t0
        return row
    result = wst.check(model, opt, loss_fn, x, y, modes=modes, perturbed=perturbed,
                       dtype=dtype, verbose=False)
    row["seconds"] = time.perf_counter() - t0
    errors = [m.error for m in result.modes.values() if m.error is not None]
    for label, m in result.modes.items():
        worst = m.worst()
        row["modes"][label] = {
            "passed": m.passed, "error": m.error,
            "worst": None if worst is None else {"tensor": worst[0], "distance": worst[1],
                                                 "spread": worst[2]},
            "failures": len(m.failures()), "seconds": m.seconds}
    if result.passed:
        row["status"] = "pass"
        worst = max(((label, m.worst()) for label, m in result.modes.items()),
                    key=lambda lw: lw[1][1] / (2 * lw[1][2] + (2e-15 if dtype else 1e-6)))
        label, (n, d, s) = worst
        row["detail"] = f"closest: {label} {n} {d:.2g} (spread {s:.2g})"
    elif (errors and len(errors) == len(modes) and all(_refused(e) for e in errors)
          and len({e.splitlines()[0] for e in errors}) == 1):
        row["status"] = "refused"
        row["detail"] = errors[0].splitlines()[0]
    else:
        row["status"] = "fail"
        parts = []
        for label, m in result.modes.items():
            if m.passed:
                continue
            if m.error is not None:
                parts.append(f"{label}: {m.error.splitlines()[0]}")
            else:
                n, d, s = m.failures()[0]
                parts.append(f"{label}: {n} {d:.3g} (spread {s:.3g}, "
                             f"{len(m.failures())} tensors)")
        row["detail"] = "; ".join(parts)
        if probe and not errors and dtype is None:
            row["detail"] += float64_probe(model, opt, loss_fn, x, y)
        row["seconds"] = time.perf_counter() - t0
    return row


def table(rows):
    lines = ["| model | input | params | status | detail | time (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        params = f"{r['params'] / 1e6:.1f}M" if r["params"] else "?"
        lines.append(f"| {r['model']} | {r['input'] or '-'} | {params} | {r['status']} | "
                     f"{r['detail'].replace('|', '/')} | {r['seconds']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated (default: all)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-params", type=float, default=70e6,
                    help="larger models are listed as too large, not run")
    ap.add_argument("--perturbed", type=int, default=None,
                    help="runs from inputs perturbed by one rounding added to the spread "
                         "(wst.check's perturbed; 16, or 2 with --float64)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--no-float64-probe", action="store_true",
                    help="do not check a failing model's float64 step (wst.check's dtype)")
    ap.add_argument("--family", default="classification",
                    choices=("classification", "segmentation", "video", "users"),
                    help="the models checked: torchvision's classification (the default), "
                         "segmentation or video builders, or the models users write "
                         "(user_models.py), built and fed as torchvision_coverage.py does")
    ap.add_argument("--float64", action="store_true",
                    help="check each model's float64 step against float64 torch's spread "
                         "(wst.check's dtype=torch.float64) instead of its float32 step")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="write the rows to this file ('-': stdout)")
    args = ap.parse_args(argv)
    if args.family == "classification":
        known = classification_models()
    else:
        import torchvision_coverage
        known = [n for n, f in torchvision_coverage.families().items() if f == args.family]
    names = args.models.split(",") if args.models else known
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"not {args.family} models: {', '.join(unknown)}")
    if args.threads:
        torch.set_num_threads(args.threads)
        wst.set_num_threads(args.threads)
    modes = tuple(args.modes.split(","))
    if args.perturbed is None:
        args.perturbed = 2 if args.float64 else 16
    precision = "float64" if args.float64 else "float32"
    batch = args.batch if args.family == "classification" else "as torchvision_coverage.py"
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.get_num_threads()} threads; one SGD step (lr 0.01), {args.family}, "
          f"batch {batch}, "
          f"modes {', '.join(modes)}; limit per tensor 2 x {precision} spread (4 batch orders"
          + (f", {args.perturbed} perturbed" if args.perturbed else "") + ") + "
          + ("2e-15" if args.float64 else "1e-6"),
          file=sys.stderr if args.json == "-" else sys.stdout, flush=True)
    rows = []
    for name in names:
        row = check_model(name, args.batch, modes, args.perturbed, args.max_params,
                          probe=not args.no_float64_probe, family=args.family,
                          dtype=torch.float64 if args.float64 else None)
        rows.append(row)
        print(f"{name}: {row['status']} {row['detail']} ({row['seconds']:.1f} s)",
              file=sys.stderr if args.json == "-" else sys.stdout, flush=True)
    text = table(rows)
    if args.json == "-":
        json.dump({"rows": rows}, sys.stdout, indent=1, default=str)
        print()
    else:
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": rows}, f, indent=1, default=str)
    return 0 if all(r["status"] in ("pass", "too large") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
