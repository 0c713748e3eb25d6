"""Same-run comparison of wholestep against PyTorch eager on the reference models.

Trains mlp, tiny_mlp, cnn and gpt with the batch sizes, optimizers and
hyperparameters of benchmarks/step_bench.cpp on both sides: PyTorch eager
(Debian's python3-torch) in this process, wholestep in the `peer_server`
process (build/benchmarks/peer_server, commands on its stdin). For each model
it alternates rounds -- K PyTorch steps, K wholestep three_graph steps, K
wholestep single_graph steps -- R times after a warm-up on both sides, and
prints one table of median ms/step, ratios, GFLOP/s, and the single_graph step
time over the time of its matrix products and convolutions run alone.

Run with Debian's interpreter (the one python3-torch is installed for):

    /usr/bin/python3 benchmarks/pytorch_compare.py [--models mlp,cnn] [--rounds R]
        [--steps-per-round K] [--threads N] [--build-dir build] [--check]

or benchmarks/compare_pytorch.sh, which installs python3-torch, builds and runs
this. `--check` compares the two sides' models instead of timing them: the
parameter and buffer names and shapes, and the losses of a few training steps
from the same initial values and batch (dropout off).

Fairness: both sides use N threads (default: the CPUs this process may run
on; PyTorch: torch.set_num_threads(N) and N OpenBLAS threads) and run with
every OPENBLAS_*, OMP_*, GOMP_*, DNNL_*, ONEDNN_* and MKL_* variable removed
from their environment. PyTorch is first probed in that clean environment; if
the OpenBLAS it loads picks a core below the CPU's instruction set (an SSE-era
fallback, or an AVX2 core on an AVX-512 CPU), this script re-executes itself
with OPENBLAS_CORETYPE set to the right core (SkylakeX or Haswell), PyTorch's
best case, and says so in the header; wholestep gets no such help. PyTorch's
optimizer runs the faster of its foreach and per-parameter paths (measured
during warm-up; --torch-foreach). Steps per round default to about a second of
the slowest side, and each side starts after a short pause, so the other side's
idle threads have stopped spinning.
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch_env
from torch_env import (best_openblas_core, clean_env, cpu_flags, cpu_summary, is_fallback_core,
                       loaded_openblas, set_torch_threads)
from torch_reference_models import (loss_of, make_cnn, make_model, make_optimizer, parse_type,
                                    random_batch)

MODES = ("three_graph", "single_graph")
PAUSE_S = 0.25  # between the sides: lets the other side's spinning threads go to sleep
ROUND_S = 1.0  # the slowest side's time per round when the steps per round are automatic
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------
# Environment: what a user gets, and PyTorch's best OpenBLAS core (torch_env.py)


def run_probe(kind, env):
    """Runs this script with `--probe kind` in `env` and returns its JSON."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", kind],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def settle_environment(script=__file__):
    """First pass: probe PyTorch's OpenBLAS in a clean environment, then
    re-execute `script` (this one, or another benchmark that takes
    --user-blas-core and --forced-blas-core) in the environment chosen for
    PyTorch."""
    env = clean_env(os.environ)
    probed = run_probe("blas", env)
    core = probed.get("core") or "none"
    forced = ""
    best = best_openblas_core(cpu_flags())
    if probed.get("core") and best and is_fallback_core(core, cpu_flags()):
        env["OPENBLAS_CORETYPE"] = best
        forced = best
    argv = [sys.executable, os.path.abspath(script)] + sys.argv[1:]
    argv += ["--user-blas-core", core, "--forced-blas-core", forced]
    sys.stdout.flush()
    os.execve(sys.executable, argv, env)


def probe_main(kind, threads):
    """The `--probe` subprocess: one JSON line about this process's kernels."""
    import torch
    if kind == "blas":
        lib = loaded_openblas()
        print(json.dumps({"core": lib.openblas_get_corename().decode() if lib else None}))
    elif kind == "onednn":
        torch.set_num_threads(threads)
        model = make_cnn()
        x = torch.rand(64, 784) * 2 - 1
        torch.nn.functional.cross_entropy(model(x), torch.randint(0, 10, (64,))).backward()
        print(json.dumps({}))


# ---------------------------------------------------------------------------
# The wholestep side


class Peer:
    """The peer_server process: one command per line, answers end with "ok"."""

    def __init__(self, path, threads, models):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} not found: build it (./scripts/setup.sh) or pass --build-dir")
        command = [path, "--threads", str(threads), "--models", ",".join(models)]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=clean_env(os.environ))
        if self.proc.stdout.readline().strip() != "ready":
            sys.exit("peer_server did not start (see its message above)")

    def ask(self, command, allow_error=False):
        """The answer's lines; an "error" answer ends this script unless
        allow_error (then None)."""
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        lines = []
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit(f"peer_server exited during '{command}'")
            line = line.rstrip("\n")
            if line == "ok":
                return lines
            if line.startswith("error "):
                if allow_error:
                    return None
                sys.exit(f"peer_server: '{command}': {line[6:]}")
            lines.append(line)

    def fields(self, command):
        """Answer lines "key value..." as {key: [value, ...]}."""
        return {words[0]: words[1:] for words in map(str.split, self.ask(command))}

    def models(self):
        specs = {}
        for line in self.ask("models"):
            words = line.split()
            spec = dict(w.split("=", 1) for w in words[2:])
            spec["name"] = words[1]
            specs[spec["name"]] = spec
        return specs

    def run(self, model, mode, steps):
        f = self.fields(f"run {model} {mode} {steps}")
        return [float(t) for t in f["times"]], int(f["flops"][0])

    def close(self):
        self.ask("quit")
        self.proc.wait()


# ---------------------------------------------------------------------------
# The PyTorch side: the reference models (torch_reference_models.py), trained eagerly


class TorchSide:
    """One model trained eagerly: zero_grad(set_to_none) + forward + loss +
    backward + optimizer step (+ reading the loss, as wholestep returns it)."""

    def __init__(self, spec, foreach):
        import torch
        torch.manual_seed(0)
        self.spec = spec
        self.model = make_model(spec)
        self.model.train()
        self.x, self.y = random_batch(spec)
        self.opt = make_optimizer(spec, self.model, foreach)
        self.foreach = foreach

    def set_foreach(self, foreach):
        """Switches the optimizer's implementation; its state carries over."""
        self.foreach = foreach
        for group in self.opt.param_groups:
            group["foreach"] = foreach

    def loss(self):
        return loss_of(self.spec, self.model, self.x, self.y)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss()
        loss.backward()
        self.opt.step()
        return loss.item()

    def run(self, steps):
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            self.step()
            times.append((time.perf_counter() - t0) * 1e3)
        return times


def warm_up_torch(side, steps, choice):
    """Warm-up; with choice "auto", also picks the faster optimizer path
    (foreach or the per-parameter loop) by median step time. Returns the
    median ms of the chosen path."""
    if choice != "auto":
        side.set_foreach(choice == "on")
        return statistics.median(side.run(steps))
    medians = {}
    for foreach in (False, True, False, True):
        side.set_foreach(foreach)
        medians.setdefault(foreach, []).append(statistics.median(side.run(steps)))
    best = min(medians, key=lambda f: min(medians[f]))
    side.set_foreach(best)
    return min(medians[best])


# ---------------------------------------------------------------------------
# Model check: the same architecture on both sides


def torch_structure(model):
    params = [(n, list(p.shape)) for n, p in model.named_parameters()]
    buffers = [(n, list(b.shape)) for n, b in model.named_buffers()
               if not n.endswith("num_batches_tracked")]  # PyTorch-only counter, unused here
    return params, buffers


def peer_structure(peer, name):
    params, buffers = [], []
    for line in peer.ask(f"params {name}"):
        kind, *rest = line.split()
        if kind in ("param", "buffer"):
            (params if kind == "param" else buffers).append((rest[0], parse_type(rest[1])[1]))
    return params, buffers


def check_structure(peer, spec):
    """Prints both parameter counts; returns False if names or shapes differ."""
    import math
    ours = peer_structure(peer, spec["name"])
    theirs = torch_structure(make_model(spec))
    count = [sum(math.prod(s) for _, s in side[0]) for side in (ours, theirs)]
    same = ours == theirs
    print(f"{spec['name']:>9}: parameters wholestep {count[0]:,}, PyTorch {count[1]:,} "
          f"({len(ours[0])} and {len(theirs[0])} tensors, {len(ours[1])} and "
          f"{len(theirs[1])} buffers): {'same names and shapes' if same else 'DIFFERENT'}")
    if not same:
        for a, b in zip(ours[0] + ours[1], theirs[0] + theirs[1]):
            if a != b:
                print(f"           first difference: wholestep {a}, PyTorch {b}")
                break
    return same


def read_export(path):
    """The tensors peer_server's `export` wrote: {kind: {name: tensor}}."""
    import torch
    dtypes = {"f32": torch.float32, "i64": torch.int64}
    out = {}
    with open(path, "rb") as f:
        while header := f.readline():
            kind, name, dtype, shape, nbytes = header.decode().split()
            data = bytearray(f.read(int(nbytes)))
            t = torch.frombuffer(data, dtype=dtypes[dtype]) if data else torch.empty(0)
            out.setdefault(kind, {})[name] = t.reshape(parse_type(dtype + shape)[1]).clone()
    return out


def check_numerics(peer, spec, steps=4, rtol=1e-4):
    """Trains both sides from wholestep's initial values and batch (dropout
    off) and compares the losses step by step; returns False on a mismatch."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "export.bin")
        answer = [line.split() for line in peer.ask(f"export {spec['name']} {path} {steps}")]
        ws_losses = {words[1]: [float(v) for v in words[2:]] for words in answer}
        tensors = read_export(path)
    model = make_model(spec, dropout=0.0)
    model.train()
    state = {**tensors["param"], **tensors.get("buffer", {})}
    missing = model.load_state_dict(state, strict=False).missing_keys
    assert all(k.endswith("num_batches_tracked") for k in missing), missing
    x, y = tensors["input"]["x"], tensors["input"]["y"]
    opt = make_optimizer(spec, model, foreach=False)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(spec, model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ok = True
    for mode, theirs in ws_losses.items():
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(theirs, losses))
        ok &= worst <= rtol
        print(f"           losses over {steps} steps, {mode}: largest relative difference "
              f"{worst:.1e} ({'ok' if worst <= rtol else 'MISMATCH'}, tolerance {rtol:.0e})")
    print("           PyTorch: " + " ".join(f"{v:.6f}" for v in losses))
    return ok


def run_check(peer, specs):
    ok = True
    for spec in specs:
        ok &= check_structure(peer, spec)
        ok &= check_numerics(peer, spec)
    print("models match" if ok else "models DIFFER")
    return ok


# ---------------------------------------------------------------------------
# Header: CPU, threads, kernels of each side


def print_header(args, peer, threads):
    *info, threads_line = peer.ask("info")
    print(f"CPU: {cpu_summary()}")
    print(f"wholestep (clean environment): ws::num_threads() {threads_line.split()[-1]}")
    for line in info:
        print("  " + line)
    for line in torch_env.torch_report(args, threads):
        print(line)


# ---------------------------------------------------------------------------
# The comparison


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def compare_model(peer, spec, args):
    """Alternating rounds for one model after a warm-up on both sides: median
    ms per step of each side, flops per step, and the contractions' time."""
    name = spec["name"]
    side = TorchSide(spec, foreach=args.torch_foreach == "on")
    slowest = warm_up_torch(side, args.warmup, args.torch_foreach)
    for mode in MODES:
        slowest = max(slowest, statistics.median(peer.run(name, mode, args.warmup)[0]))
    steps = args.steps_per_round or min(200, max(5, round(ROUND_S * 1e3 / slowest)))
    times = {"torch": [], **{m: [] for m in MODES}}
    flops = 0
    for _ in range(args.rounds):
        time.sleep(PAUSE_S)
        times["torch"] += side.run(steps)
        for mode in MODES:
            time.sleep(PAUSE_S)
            ms, flops = peer.run(name, mode, steps)
            times[mode] += ms
    time.sleep(PAUSE_S)
    prof = peer.ask(f"profile {name} single_graph {steps}", allow_error=True)
    contraction = None
    for line in prof or []:
        if line.startswith("contraction_ms"):
            contraction = float(line.split()[1])
    return {"times": {k: median(v) for k, v in times.items()}, "flops": flops, "steps": steps,
            "contraction_ms": contraction,
            "torch_optim": f"{type(side.opt).__name__} {'foreach' if side.foreach else 'for-loop'}"}


def fmt_num(x, spec="{:.2f}"):
    return "n/a" if x is None or x != x else spec.format(x)


COLUMNS = ["model", "steps", "PyTorch ms", "three ms", "single ms", "PT/three", "PT/single",
           "GF/s PT", "GF/s three", "GF/s single", "single/contr", "PyTorch optimizer"]
LEGEND = """\
steps: rounds x steps per round, per side. PT/three, PT/single: PyTorch ms over wholestep ms
(above 1: wholestep is faster). GF/s: the step's matrix-product and convolution flops
(wholestep's count; the same model on both sides) per second. single/contr: single_graph ms
over the time of its matrix products and convolutions run alone (TrainStep::profile)."""


def table_row(name, r, rounds):
    t = r["times"]
    gflops = [r["flops"] / (t[k] * 1e6) if r["flops"] else None for k in ("torch", *MODES)]
    contr = t["single_graph"] / r["contraction_ms"] if r["contraction_ms"] else None
    return [name, f"{rounds}x{r['steps']}", fmt_num(t["torch"]), fmt_num(t["three_graph"]),
            fmt_num(t["single_graph"]), fmt_num(t["torch"] / t["three_graph"]),
            fmt_num(t["torch"] / t["single_graph"]), *(fmt_num(g, "{:.1f}") for g in gflops),
            fmt_num(contr), r["torch_optim"]]


def print_table(results, rounds):
    rows = [table_row(name, r, rounds) for name, r in results.items()]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(COLUMNS)]

    def line(cells):
        text = (c.ljust(w) if i in (0, len(cells) - 1) else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths)))
        return "  ".join(text).rstrip()

    print(line(COLUMNS))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))
    print(LEGEND)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", default="mlp,tiny_mlp,cnn,gpt",
                   help="comma-separated; <model>:<optimizer> (mlp:adam) overrides its optimizer")
    p.add_argument("--rounds", type=int, default=10, help="alternating rounds per model")
    p.add_argument("--steps-per-round", type=int, default=0,
                   help="steps per side per round (0: as many as take the slowest side about "
                        f"{ROUND_S} s, 5 to 200)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps per side")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads for both sides (default: the CPUs this process may use)")
    p.add_argument("--torch-foreach", choices=("auto", "on", "off"), default="auto",
                   help="PyTorch optimizer path: auto picks the faster of foreach and the "
                        "per-parameter loop during warm-up")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                   help="wholestep build directory holding benchmarks/peer_server")
    p.add_argument("--check", action="store_true",
                   help="compare the models of both sides (structure and losses), no timing")
    p.add_argument("--probe", help=argparse.SUPPRESS)
    p.add_argument("--user-blas-core", help=argparse.SUPPRESS)
    p.add_argument("--forced-blas-core", help=argparse.SUPPRESS)
    return p.parse_args()


def main():
    args = parse_args()
    if args.probe:
        return probe_main(args.probe, args.threads)
    if args.user_blas_core is None:
        if importlib.util.find_spec("torch") is None:
            sys.exit(f"{sys.executable} has no torch: run with /usr/bin/python3 (python3-torch)")
        return settle_environment()  # does not return
    set_torch_threads(args.threads)
    names = [m for m in args.models.split(",") if m]
    peer = Peer(os.path.join(args.build_dir, "benchmarks", "peer_server"), args.threads, names)
    specs = peer.models()
    ordered = [specs[n] for n in names]
    if args.check:
        ok = run_check(peer, ordered)
        peer.close()
        return 0 if ok else 1
    if not all([check_structure(peer, s) for s in ordered]):
        sys.exit("the PyTorch models differ from wholestep's: not timing them")
    print()
    print_header(args, peer, args.threads)
    print(f"{args.rounds} alternating rounds per model after {args.warmup} warm-up steps per "
          "side; medians in ms per step")
    results = {}
    for spec in ordered:
        results[spec["name"]] = compare_model(peer, spec, args)
        sys.stdout.flush()
        print(f"  {spec['name']} done", file=sys.stderr, flush=True)
    peer.close()
    print()
    print_table(results, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
