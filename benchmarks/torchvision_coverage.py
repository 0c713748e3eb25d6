"""Which torchvision models wholestep.torch trains: one SGD step of each, compiled and eager.

For every builder of torchvision.models (classification),
torchvision.models.segmentation and torchvision.models.video
(torchvision.models.list_models of each module), built with weights=None,
num_classes=10 (and weights_backbone=None), dropout and stochastic depth
off: one SGD step (lr 0.01, momentum 0.9, weight decay 5e-4, as
torchvision_compare.py) through wholestep.torch.compile_train_step, and the
same step in eager torch from the same initial state (both built after
torch.manual_seed(0); the children check that the initial parameters and
buffers are the same bits). Each side runs in a fresh process of its own,
so that its peak resident memory (VmHWM, the maxrss of its own image) is
its own: a process that imports torch, torchvision and wholestep.torch,
builds the model, takes the steps and times them. Then the models users
write (user_models.py, the "users" family: recurrent language models, a
masked GPT, a UNet, a Conv1d classifier, ...) at the sizes given there.

Inputs, at small sizes the models accept: classification batch 4 of
64x64 images (inception_v3 75x75, its smallest; maxvit_t 224x224, whose
partitions of 7x7 need the side to be a multiple of 224; the vision
transformers built for their size as in torchvision_check.py);
segmentation batch 2 of 64x64, the loss cross-entropy over every pixel of
the "out" logits (written over [N*H*W, classes]: wholestep's cross-entropy
takes [N, C]); video batch 2 of 8 frames of 64x64 (s3d, mvit_v1_b and
mvit_v2_s 16 frames of 224x224: s3d's last pooling window is 2x7x7, and
the MViT builders fix that size). Random inputs from a seeded generator.

Each row: the input; whether wholestep trains it (yes, or the first line
of its error); the loss's relative difference to eager torch's and the
largest difference of the step's change of a parameter or buffer,
relative to eager's change of that tensor (|dw - de|max / |de|max, d the
tensor after the step minus before; the tensor named); the median step time
of each side after warm-up, taken in wholestep's process once its memory
is measured: eager torch over its own copy of the model, then --rounds
rounds of --round-steps steps of each side in turn (fewer, at least one,
once they took --seconds), so that a host's slow and fast phases fall on
both sides alike (eager: the faster of torch's foreach and per-parameter
SGD, picked during warm-up, as torchvision_compare.py; --rounds 0 times
each side alone in its process, --steps steps); wholestep's compile time (its first step, trace
included); and each process's peak resident memory. A side that runs out
of memory (each child's data segment is limited to --memory-limit) or of
time (--timeout, each side) says so; a model too large in both is listed
as too large for the machine's memory.

The environment is pytorch_compare.py's: threading and kernel-selection
variables removed, OPENBLAS_CORETYPE set when PyTorch's OpenBLAS picks a
core below the CPU's instruction set. PyTorch must use OpenBLAS built for
OpenMP (Debian's libopenblas0-openmp), its best configuration here;
--any-blas runs with whatever it has.

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/torchvision_coverage.py
        [--models resnet18,fcn_resnet50,r3d_18] [--timeout 900] [--json out.json]
"""

import argparse
import hashlib
import importlib.util
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_compare as pc  # noqa: E402  (environment, eager timing)
import torch_env  # noqa: E402
import compare_sides as sides  # noqa: E402  (the two sides of one SGD step)
import coverage_report  # noqa: E402  (the differences and the table)
import user_models  # noqa: E402

BATCH = {"classification": 4, "segmentation": 2, "video": 2}
IMAGE_SIZE = {"inception_v3": 75, "maxvit_t": 224}  # else torchvision_check's (64 mostly)
VIDEO_SIZE = {"s3d": (16, 224, 224), "mvit_v1_b": (16, 224, 224),
              "mvit_v2_s": (16, 224, 224)}  # frames, height, width
DEFAULT_VIDEO = (8, 64, 64)
REPORT = "@@ "  # a child's lines to the parent: REPORT + JSON


# ---------------------------------------------------------------------------
# Models, inputs, losses


def families():
    """{model name: family}, in list_models' order, then the models users
    write (user_models.py)."""
    import torchvision.models as tvm
    out = {}
    for family, module in (("classification", tvm), ("segmentation", tvm.segmentation),
                           ("video", tvm.video)):
        out.update((name, family) for name in tvm.list_models(module=module))
    out.update((name, "users") for name in user_models.MODELS)
    return out


def input_shape(name, family):
    """The model's input: [N, 3, (T,) H, W] (users: as its batch makes)."""
    if family == "users":
        return user_models.MODELS[name][1][1]
    batch = BATCH[family]
    if family == "video":
        return (batch, 3, *VIDEO_SIZE.get(name, DEFAULT_VIDEO))
    if family == "segmentation":
        return (batch, 3, 64, 64)
    import torchvision_check
    side = IMAGE_SIZE.get(name) or torchvision_check.input_size(name)
    return (batch, 3, side, side)


def shape_text(shape):
    return "x".join(map(str, shape))


def build(name, family, as_built=False):
    """The model, built after torch.manual_seed(0), in train mode, without
    dropout or stochastic depth unless `as_built` (torchvision's models)."""
    import torch
    import torchvision
    import torchvision_check
    if family == "users":
        torch.manual_seed(0)
        return user_models.MODELS[name][0]().train()
    if family == "classification":
        return torchvision_check.build(name, as_built)
    kwargs = {"weights": None, "num_classes": 10}
    if family == "segmentation":
        kwargs["weights_backbone"] = None
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, **kwargs)
    return (model if as_built else torchvision_check.deterministic(model)).train()


def make_batch(name, shape, family):
    """Images or clips in N(0, 1) and labels in [0, 10) (per pixel for
    segmentation), or the user model's batch, from a seeded generator."""
    import torch
    g = torch.Generator().manual_seed(1)
    if family == "users":
        return user_models.MODELS[name][1][0](g)
    x = torch.randn(*shape, generator=g)
    labels = (shape[0], *shape[2:]) if family == "segmentation" else (shape[0],)
    return x, torch.randint(0, 10, labels, generator=g)


def pixel_cross_entropy(output, target):
    """Mean cross-entropy over every pixel of a segmentation model's "out"."""
    import torch.nn.functional as F
    logits = output["out"]
    classes = logits.shape[1]
    return F.cross_entropy(logits.permute(0, 2, 3, 1).reshape(-1, classes), target.reshape(-1))


def loss_fn_of(name, family):
    import torch.nn.functional as F
    if family == "users":
        return user_models.MODELS[name][2]
    return pixel_cross_entropy if family == "segmentation" else F.cross_entropy


# ---------------------------------------------------------------------------
# A child: one side of one model


class EagerStep(sides.EagerSide):
    """torchvision_compare's eager side with this model's loss."""

    def __init__(self, model, batch, loss_fn):
        super().__init__(model, batch)
        self.loss_fn = loss_fn

    def loss(self):
        return self.loss_fn(self.model(self.x), self.y)


def report(**fields):
    print(REPORT + json.dumps(fields), flush=True)


def max_rss_mib():
    """This process's peak resident memory: VmHWM, its own since the exec
    (getrusage's ru_maxrss keeps the forking parent's across it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def state_digest(model):
    """A hash of every parameter's and buffer's bits."""
    h = hashlib.sha1()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def median_ms(times):
    return statistics.median(times) if times else None


def run_side(args):
    """The --side child: build, (eager: save the initial state), one step
    from it, its state saved, warm-up, --steps timed steps; REPORT lines as
    it goes, so that a timeout keeps what was reached."""
    import torch
    import torchvision  # noqa: F401  (part of the baseline memory)
    import wholestep.torch as wst
    pc.set_torch_threads(args.threads)
    wst.set_num_threads(args.threads)
    report(phase="imported", rss_mib=max_rss_mib())
    family = families()[args.model]
    shape = input_shape(args.model, family)
    model = build(args.model, family)
    batch = make_batch(args.model, shape, family)
    loss_fn = loss_fn_of(args.model, family)
    params = sum(p.numel() for p in model.parameters())
    report(phase="built", params=params, digest=state_digest(model))
    if args.side == "eager":
        torch.save({"state": model.state_dict(),
                    "parameters": [n for n, _ in model.named_parameters()]},
                   os.path.join(args.out, "before.pt"))
        side = EagerStep(model, batch, loss_fn)
        t0 = time.perf_counter()
        loss = side.step()
        first_s = time.perf_counter() - t0
    else:
        side = sides.WholestepSide(model, batch, loss_fn, args.mode)
        side.compile()
        loss, first_s = side.first_loss.item(), side.compile_s
    torch.save({"loss": loss, "state": model.state_dict()},
               os.path.join(args.out, f"{args.side}.pt"))
    report(phase="stepped", loss=loss, first_s=first_s, rss_mib=max_rss_mib())
    if args.side == "eager":
        pc.warm_up_torch(side, args.warmup, "auto")
        extra = {"torch_optim": "foreach" if side.foreach else "for-loop"}
    else:
        side.settle(args.warmup)
        stats = side.compiled.stats()
        extra = {"kernels": stats["kernels"], "planned_peak_mib": stats["peak_bytes"] / 2**20}
        side.teams.clear()  # the timed steps' teams from here
    times = []  # --steps of them, fewer once --seconds have passed
    deadline = time.perf_counter() + args.seconds
    while len(times) < args.steps and (not times or time.perf_counter() < deadline):
        times += side.run(1)
    if args.side == "wholestep":
        extra["fewer_threads"] = side.fewer_threads()
        side.teams.clear()
    report(phase="timed", ms=median_ms(times), steps=len(times), rss_mib=max_rss_mib(), **extra)
    if args.side == "wholestep" and args.rounds > 0:
        alternate(args, side, family, shape, loss_fn)


def alternate(args, ws_side, family, shape, loss_fn):
    """The speed comparison: eager torch over its own copy of the model
    (built alike, the faster optimizer path picked in its warm-up), then
    --rounds rounds, each --round-steps steps of eager torch and as many of
    wholestep, so that both sides see the same phases of a shared or
    throttled host; the medians of the per-step times. After the memory
    figures, which stay this side's own."""
    model = build(args.model, family)
    eager = EagerStep(model, make_batch(args.model, shape, family), loss_fn)
    pc.warm_up_torch(eager, max(1, args.warmup), "auto")
    times = {"eager": [], "wholestep": []}
    deadline = time.perf_counter() + args.seconds
    for r in range(args.rounds):
        if r and time.perf_counter() > deadline:
            break
        for name, side in (("eager", eager), ("wholestep", ws_side)):
            times[name] += side.run(args.round_steps)
    report(phase="alternated", eager_ms=median_ms(times["eager"]),
           wholestep_ms=median_ms(times["wholestep"]), steps=len(times["eager"]),
           torch_optim="foreach" if eager.foreach else "for-loop",
           fewer_threads=ws_side.fewer_threads())


# ---------------------------------------------------------------------------
# The parent: two children per model, then the comparison


def limit_memory(limit_bytes):
    """The child's data segment (its heap and private mappings): a model too
    large fails to allocate instead of waking the kernel's OOM killer."""
    def apply():
        resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))
    return apply


def out_of_memory(text):
    return any(s in text for s in ("MemoryError", "can't allocate memory", "bad_alloc",
                                   "Cannot allocate memory", "out of memory"))


def error_line(stderr):
    """The first line of the exception a child's traceback ends with."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    tail = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    for line in lines[tail[-1] + 1:] if tail else []:
        if not line.startswith((" ", "\t")) and not line.startswith("During handling"):
            return line.strip()
    return lines[-1].strip() if lines else ""


def run_child(side, name, args, workdir):
    """Runs one side of one model: {phase: fields} of what it reported,
    plus "status" (ok, error, timeout, out of memory, crashed) and
    "error"."""
    argv = [sys.executable, os.path.abspath(__file__), "--side", side, "--model", name,
            "--out", workdir, "--threads", str(args.threads), "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--seconds", str(args.seconds), "--mode", args.mode,
            "--rounds", str(args.rounds), "--round-steps", str(args.round_steps)]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit_memory(int(args.memory_limit * 2**30)),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=args.timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and anything it started
        out, err = proc.communicate()
        timed_out = True
    result = {"seconds": time.perf_counter() - started}
    for line in out.splitlines():
        if line.startswith(REPORT):
            fields = json.loads(line[len(REPORT):])
            result[fields.pop("phase")] = fields
    if timed_out:
        reached = [p for p in ("built", "stepped", "timed") if p in result]
        result["status"] = "timeout"
        result["error"] = (f"timeout after {args.timeout:g} s "
                           f"({'after ' + reached[-1] if reached else 'building'})")
    elif proc.returncode == 0:
        result["status"] = "ok"
    elif proc.returncode < 0:
        result["status"] = "crashed"
        result["error"] = (f"killed by {signal.Signals(-proc.returncode).name}: "
                           f"{error_line(err)}").rstrip(": ")
    else:
        line = error_line(err)
        result["status"] = "out of memory" if out_of_memory(err) else "error"
        result["error"] = line
    return result


def run_model(name, family, args):
    """The row of one model."""
    row = {"model": name, "family": family, "input": shape_text(input_shape(name, family))}
    with tempfile.TemporaryDirectory(prefix="coverage-", dir=args.workdir) as workdir:
        sides = {s: run_child(s, name, args, workdir) for s in ("eager", "wholestep")}
        row.update(sides)
        digests = {sides[s].get("built", {}).get("digest") for s in sides}
        if None not in digests and len(digests) != 1:
            row["error"] = "the two sides built different initial states"
        elif all("stepped" in sides[s] for s in sides):
            row["diff"] = coverage_report.differences(workdir)
    eager, ws = sides["eager"], sides["wholestep"]
    row["params"] = (eager.get("built") or ws.get("built") or {}).get("params")
    limit = f"{args.memory_limit:.1f} GiB"
    if eager["status"] == ws["status"] == "out of memory":
        row["trains"] = f"too large for this machine's memory (eager torch too; limit {limit})"
    elif ws["status"] == "out of memory" and "stepped" not in ws:
        row["trains"] = f"out of memory (limit {limit}): {ws['error']}"
    elif "stepped" in ws:
        row["trains"] = "yes" if "error" not in row else row["error"]
        if ws["status"] != "ok":
            row["trains"] += f" (then {ws['error']})"
    else:
        row["trains"] = ws.get("error") or "no"
    if "stepped" not in eager:
        row["eager_error"] = eager.get("error")
    return row


def meminfo_gib(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 2**20
    return None


def header(args):
    import torchvision
    lines = [f"CPU: {pc.cpu_summary()}; {args.threads} threads on both sides; torchvision "
             f"{torchvision.__version__}",
             f"one SGD step (lr {sides.SGD['lr']}, momentum {sides.SGD['momentum']}, weight decay "
             f"{sides.SGD['weight_decay']}), then {args.steps} timed steps after warm-up (fewer "
             f"past {args.seconds:g} s), "
             f"wholestep {args.mode}; each side in its own process, data segment limited "
             f"to {args.memory_limit:.1f} GiB, {args.timeout:g} s",
             (f"times: {args.rounds} rounds of {args.round_steps} steps a side alternating in "
              f"wholestep's process (fewer past {args.seconds:g} s)" if args.rounds > 0 else
              "times: each side alone in its own process")]
    lines += torch_env.torch_report(args, args.threads)
    return lines


def check_blas(args):
    """PyTorch's best configuration here: OpenBLAS on OpenMP."""
    import torch  # noqa: F401  (maps torch's BLAS)
    lib = torch_env.loaded_openblas()
    threading = torch_env.openblas_threading(lib) if lib else None
    if threading == "OpenMP" or args.any_blas:
        return
    found = f"OpenBLAS on {threading}" if lib else ("not OpenBLAS: " + (", ".join(
        torch_env.mapped_libraries(("libblas", "blis", "mkl"))) or "unknown"))
    sys.exit(f"PyTorch's BLAS is {found}; its best configuration here is OpenBLAS on OpenMP "
             f"(apt-get install libopenblas0-openmp), or pass --any-blas")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", help="comma-separated names (default: every model of the "
                   "three modules)")
    p.add_argument("--timeout", type=float, default=900,
                   help="seconds each side of a model may take (its process is killed)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per side")
    p.add_argument("--seconds", type=float, default=60,
                   help="fewer timed steps (at least one) once they took this long")
    p.add_argument("--rounds", type=int, default=5,
                   help="alternating rounds of eager and wholestep steps in one process, "
                   "whose medians the table's times are (0: each side timed alone in its own "
                   "process); fewer once they took --seconds")
    p.add_argument("--round-steps", type=int, default=2, help="steps per side in each round")
    p.add_argument("--warmup", type=int, default=1,
                   help="warm-up steps per side (eager: per optimizer path, 4 rounds)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads for both sides (default: the CPUs this process may use)")
    p.add_argument("--mode", default="single_graph", choices=("single_graph", "three_graph"))
    p.add_argument("--memory-limit", type=float, default=0.8 * (meminfo_gib("MemAvailable")
                                                                or 8),
                   help="GiB each side's process may allocate (default: 80%% of the memory "
                        "available at the start)")
    p.add_argument("--workdir", help="where the sides leave their states (default: the "
                   "system's temporary directory)")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--any-blas", action="store_true",
                   help="run even if PyTorch does not use OpenBLAS on OpenMP")
    p.add_argument("--side", choices=("eager", "wholestep"), help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--user-blas-core", help=argparse.SUPPRESS)
    p.add_argument("--forced-blas-core", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main():
    args = parse_args()
    if args.side:
        return run_side(args)
    if args.user_blas_core is None:
        if importlib.util.find_spec("torch") is None:
            sys.exit(f"{sys.executable} has no torch: run with /usr/bin/python3 (python3-torch)")
        return pc.settle_environment(__file__)  # does not return
    if importlib.util.find_spec("wholestep") is None:
        sys.exit("cannot import wholestep.torch: build the package and set "
                 "PYTHONPATH=build/python")
    check_blas(args)
    pc.set_torch_threads(args.threads)
    known = families()
    names = args.models.split(",") if args.models else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"not torchvision classification, segmentation or video models: "
                 f"{', '.join(unknown)}")
    lines = header(args)
    print("\n".join(lines), flush=True)
    rows = []
    for name in names:
        row = run_model(name, known[name], args)
        rows.append(row)
        seconds = row["eager"]["seconds"] + row["wholestep"]["seconds"]
        print(f"{name}: {row['trains']} ({seconds:.0f} s)", file=sys.stderr, flush=True)
        if args.json:  # after every model: a run cut short keeps its rows
            with open(args.json, "w") as f:
                json.dump({"header": lines, "rows": rows}, f, indent=1, default=str)
    baseline = next((r[s]["imported"]["rss_mib"] for r in rows for s in ("eager", "wholestep")
                     if "imported" in r[s]), None)
    print()
    if baseline is not None:
        print(f"baseline: a process that imported torch, torchvision and wholestep.torch "
              f"peaked at {baseline:.0f} MiB")
        print()
    print(coverage_report.markdown_table(rows))
    print()
    print(coverage_report.LEGEND)
    return 0


if __name__ == "__main__":
    sys.exit(main())
