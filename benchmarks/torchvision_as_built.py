"""Whether wholestep.torch trains torchvision's models as a user builds them:
their default dropout and stochastic depth on (the coverage table and
torchvision_check.py turn them off, to compare a step with eager's), in
train mode, two SGD steps of compile_train_step on the inputs and losses
torchvision_coverage.py uses, at batch 2. A random draw differs from
torch's, so nothing is compared: a row says whether the model traces,
compiles and takes two finite steps, or the first line of its error.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/torchvision_as_built.py
        [--models efficientnet_b0,r3d_18] [--max-params 70e6] [--families classification]
"""

import argparse
import math
import sys
import time

import torch
import torchvision

import torchvision_check as check
import torchvision_coverage as cov
import wholestep.torch as wst

FAMILIES = ("classification", "segmentation", "video")


def try_model(name, family):
    """(status, detail, seconds) of two compiled steps of the model as built."""
    t0 = time.perf_counter()
    shape = cov.input_shape(name, family)
    shape = (2,) + tuple(shape[1:])
    x, y = cov.make_batch(name, shape, family)
    try:
        model = cov.build(name, family, as_built=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        step = wst.compile_train_step(model, opt, cov.loss_fn_of(name, family))
        losses = [float(step(x, y)) for _ in range(2)]
    except Exception as e:  # noqa: BLE001 - the row says what stopped it
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0]}", time.perf_counter() - t0
    if not all(math.isfinite(v) for v in losses):
        return "error", f"losses {losses}", time.perf_counter() - t0
    return "trains", f"losses {losses[0]:.4g}, {losses[1]:.4g}", time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated (default: every model of the families)")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--max-params", type=float, default=70e6,
                    help="larger classification models are listed, not run")
    args = ap.parse_args(argv)
    families = {n: f for n, f in cov.families().items() if f in args.families.split(",")}
    names = args.models.split(",") if args.models else list(families)
    unknown = [n for n in names if n not in families]
    if unknown:
        ap.error(f"not models of {args.families}: {', '.join(unknown)}")
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}; two SGD steps "
          f"of each model as built (dropout and stochastic depth on), batch 2", flush=True)
    failed = 0
    for name in names:
        params = check.num_params(name) if families[name] == "classification" else None
        if params is not None and params > args.max_params:
            print(f"{name}: not run ({params / 1e6:.1f}M parameters > "
                  f"{args.max_params / 1e6:g}M)", flush=True)
            continue
        status, detail, seconds = try_model(name, families[name])
        failed += status != "trains"
        print(f"{name}: {status}: {detail} ({seconds:.1f} s)", flush=True)
    print(f"{failed} of the models run did not train")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
