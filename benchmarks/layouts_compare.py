"""Same-run comparison of the step option `layouts` on torchvision's CNNs.

Compiles one SGD step (lr 0.01, momentum 0.9, weight decay 5e-4,
cross-entropy) of each model once per value of the step option `layouts`
(nchw first: the base), single_graph, each over its own copy
of the model made from the same initial values, and times R alternating
rounds of K steps of each on one fixed random batch (K: as many as take
about 0.3 s). Prints, per model, the median ms per step of each, its speedup
over nchw, and the transposes per step (the conversions the layout pass put
at its groups' edges, counted in the graph the step runs).

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/layouts_compare.py
        [--models resnet18,mobilenet_v2] [--layouts nchw,channels_last,blocked]
        [--rounds R] [--batch B] [--image-size S]
"""

import argparse
import copy
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_sides as sides  # noqa: E402  (the optimizer)
import torchvision_compare as tc  # noqa: E402  (the table's models and batches)

LAYOUTS = ("nchw", "channels_last", "blocked")


def transposes(step):
    return sum(1 for line in step.graphs_text().splitlines()
               if line.startswith("  %") and " = transpose " in line)


def compare(name, layouts, args):
    import torch
    import wholestep.torch as wst
    torch.manual_seed(0)
    model = tc.make_model(name, args.image_size)
    batch = tc.make_batch(name, args.batch, args.image_size)
    steps = {}
    for layout in layouts:
        m = copy.deepcopy(model)
        steps[layout] = wst.compile_train_step(m, sides.make_sgd(m), tc.loss_fn_of(name),
                                               on_nonfinite="ignore", layouts=layout)
        for _ in range(3):
            steps[layout](*batch)
    t0 = time.perf_counter()
    steps["nchw"](*batch)
    k = max(1, min(20, int(0.3 / (time.perf_counter() - t0))))
    times = {layout: [] for layout in layouts}
    for r in range(args.rounds):
        for layout in (layouts if r % 2 == 0 else layouts[::-1]):
            t0 = time.perf_counter()
            for _ in range(k):
                steps[layout](*batch)
            times[layout].append((time.perf_counter() - t0) / k * 1e3)
    base = statistics.median(times["nchw"])
    cells = [name]
    for layout in layouts:
        ms = statistics.median(times[layout])
        cells += [f"{ms:.2f}", f"{base / ms:.2f}x", str(transposes(steps[layout]))]
    return "| " + " | ".join(cells) + " |"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(tc.CNNS))
    p.add_argument("--layouts", default=",".join(LAYOUTS))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    args = p.parse_args()
    layouts = ["nchw"] + [lay for lay in args.layouts.split(",") if lay != "nchw"]
    import torch
    import wholestep.torch as wst
    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    wst.set_num_threads(threads)
    print(f"CPU: {tc.pc.cpu_summary()}; {threads} threads; batch {args.batch} at "
          f"{args.image_size}x{args.image_size}; {args.rounds} alternating rounds")
    head = ["model"] + [f"{layout} {what}" for layout in layouts
                        for what in ("ms", "speedup", "transposes")]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for name in args.models.split(","):
        print(compare(name, layouts, args), flush=True)


if __name__ == "__main__":
    main()
