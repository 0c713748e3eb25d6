#!/usr/bin/python3
"""Same-run comparison of wholestep's data-parallel step against PyTorch's
DistributedDataParallel: 2 processes x 1 thread, as a Markdown table.

Sides, for each model (cnn and gpt by default):
  torch_ddp   PyTorch DDP, gloo backend, 2 processes x 1 thread
  torch_1x1   PyTorch eager, 1 process x 1 thread (no DDP)
  ws_2x1      `mpirun -np 2 wholestep compare --data-parallel --threads 1`
  ws_1x2      `wholestep compare --threads 2`, one process
  ws_1x1      `wholestep compare --threads 1`, one process
  ws_2x1_zero as ws_2x1, with --zero (ZeRO stage 1); not run unless named
Each wholestep side runs the modes three_graph and single_graph (--modes), so
the table has a row per side and mode.

PyTorch trains the reference models of pytorch_compare.py (torch_reference_models.py,
built from the specs build/benchmarks/peer_server reports: the same models,
optimizers, batch sizes and hyperparameters) eagerly on random batches
(random_batch; rank r of DDP uses seed r), with torch.set_num_threads(1) and one
OpenBLAS thread, in pytorch_compare's clean environment (and its OpenBLAS core
override when the core OpenBLAS picks is a fallback). The per-rank batch is the
model's batch; 2 processes train a global batch of twice that. examples/s
counts the global batch.

Rounds alternate between the sides: in each round every side in turn starts
its processes (a new process group, a new MPI job), warms up --warmup steps,
times --steps steps and ends; a side's figure for the round is its median
ms/step (for DDP the slower rank's step, step by step), and the table gives
the median over rounds.

The wholestep sides run `build/wholestep compare --model M --modes
three_graph,single_graph --steps K --warmup W --threads T --json FILE`
(2 ranks: under mpirun, with --data-parallel), and read the JSON FILE (rank 0
writes it): a list of rows (or {"rows": [...]}) {mode, ms_per_step,
examples_per_s, comm_bytes, comm_wait_ms, hidden_share}. When
`wholestep compare --help` does not list --data-parallel, this script stops
with exit status 2 ("wholestep data-parallel mode not built yet"); `--sides
torch_ddp,torch_1x1` runs the PyTorch sides alone.

--link 1gbit|200mbit|veth (as root): every 2-process side, DDP included, runs
across two network namespaces joined by a veth pair limited to that rate
(veth: no limit), over TCP (netns_link.py): rank 0 in the first namespace,
rank 1 in the second; gloo uses the veth (GLOO_SOCKET_IFNAME, MASTER_ADDR the
first namespace's address), Open MPI its TCP BTL (--mca pml ob1, btl tcp,self).
--link none (default): both processes on this host's loopback and Open MPI's
default transports. Nothing runs bound to a core (mpirun --bind-to none).

    /usr/bin/python3 benchmarks/ddp_compare.py [--models cnn,gpt] [--rounds 5]
        [--steps 20] [--warmup 5] [--link none|veth|1gbit|200mbit]
        [--sides torch_ddp,torch_1x1,ws_2x1,ws_1x2,ws_1x1,ws_2x1_zero]
        [--mca KEY VALUE]...
"""

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import netns_link
from pytorch_compare import ROOT, Peer, TorchSide, check_structure, run_probe, warm_up_torch
from torch_env import best_openblas_core, clean_env, cpu_flags, is_fallback_core, set_torch_threads
from torch_reference_models import random_batch

DEFAULT_SIDES = ("torch_ddp", "torch_1x1", "ws_2x1", "ws_1x2", "ws_1x1")
SIDES = DEFAULT_SIDES + ("ws_2x1_zero",)
# processes, threads; a side named *_zero runs with --zero (ZeRO stage 1)
WS_SIDES = {"ws_2x1": (2, 1), "ws_2x1_zero": (2, 1), "ws_1x2": (1, 2), "ws_1x1": (1, 1)}
SHAPES = {"torch_ddp": (2, 1), "torch_1x1": (1, 1), **WS_SIDES}
WS_MODES = ("three_graph", "single_graph")
WS_FIELDS = ("ms_per_step", "examples_per_s", "comm_bytes", "comm_wait_ms", "hidden_share")
NOT_BUILT = "wholestep data-parallel mode not built yet"
PAUSE_S = 0.25  # between sides: lets the other side's spinning threads go to sleep


# ---------------------------------------------------------------------------
# The PyTorch worker: one process of a side, run as this script with --worker


def worker_main(args):
    """Trains one rank (world size from the environment's WORLD_SIZE) and
    prints its step times as one JSON line."""
    import torch
    import torch.distributed as dist
    set_torch_threads(1)
    spec = json.loads(args.spec)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    side = TorchSide(spec, foreach=args.torch_foreach == "on")
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=args.timeout))
        side.model = torch.nn.parallel.DistributedDataParallel(side.model)
    side.x, side.y = random_batch(spec, seed=rank)
    warm_up_torch(side, args.warmup, args.torch_foreach)
    if world > 1:
        dist.barrier()
    times = side.run(args.steps)
    if world > 1:
        dist.destroy_process_group()
    print(json.dumps({"rank": rank, "times": times, "foreach": side.foreach}))
    return 0


# ---------------------------------------------------------------------------
# Running the sides


class Runner:
    """Where the processes of a side run: this host (link None) or the two
    namespaces of a netns_link.Link."""

    def __init__(self, args, link, torch_env):
        self.args = args
        self.link = link
        self.torch_env = torch_env
        self.cli = os.path.join(args.build_dir, "wholestep")

    def torch_side(self, spec, world):
        """One run of PyTorch on `world` processes: the median over steps of
        the slowest rank's step time, ms; and the optimizer path."""
        a = self.args
        argv = [sys.executable, os.path.abspath(__file__), "--worker", "--spec", json.dumps(spec),
                "--steps", str(a.steps), "--warmup", str(a.warmup),
                "--torch-foreach", a.torch_foreach]
        port = free_port() if self.link is None else random.randrange(20000, 60000)
        procs = []
        try:
            for rank in range(world):
                env = dict(self.torch_env, RANK=str(rank), WORLD_SIZE=str(world),
                           MASTER_PORT=str(port))
                cmd = argv
                if world > 1 and self.link is None:
                    env.update(MASTER_ADDR="127.0.0.1", GLOO_SOCKET_IFNAME="lo")
                elif world > 1:
                    env.update(MASTER_ADDR=self.link.addresses[0],
                               GLOO_SOCKET_IFNAME=self.link.devices[rank])
                    cmd = self.link.wrap(rank, argv)
                procs.append(netns_link.start_group(cmd, env=env, stdout=subprocess.PIPE,
                                                    text=True))
            outs = [p.communicate(timeout=a.timeout)[0] for p in procs]
        finally:
            for p in procs:
                netns_link.kill_group(p)
        if any(p.returncode != 0 for p in procs):
            sys.exit(f"PyTorch side on {world} process(es) failed (see its messages above)")
        results = [json.loads(out.strip().splitlines()[-1]) for out in outs]
        slowest = [max(ts) for ts in zip(*(r["times"] for r in results))]
        return statistics.median(slowest), results[0]["foreach"]

    def ws_argv(self, model, processes, threads, json_path, zero=False):
        argv = [self.cli, "compare", "--model", model, "--modes", ",".join(WS_MODES),
                "--steps", str(self.args.steps), "--warmup", str(self.args.warmup),
                "--threads", str(threads), "--json", json_path]
        if processes == 1:
            return argv
        argv.append("--data-parallel")
        if zero:
            argv.append("--zero")
        mca = self.args.mca or ()
        if self.link is not None:
            return self.link.mpirun_argv(argv, mca)
        return netns_link.local_mpirun_argv(argv, processes, mca)

    def ws_side(self, model, side):
        """One run of a wholestep side: {mode: row} from its JSON file."""
        processes, threads = WS_SIDES[side]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rows.json")
            argv = self.ws_argv(model, processes, threads, path, zero=side.endswith("_zero"))
            return run_wholestep(argv, path,
                                 clean_env(os.environ), self.args.timeout)


def run_wholestep(argv, json_path, env, timeout):
    """Runs the wholestep command line `argv` (which writes `json_path`) and
    returns its rows by mode: {mode: {ms_per_step, examples_per_s, comm_bytes,
    comm_wait_ms, hidden_share}} (a field it leaves out is None)."""
    rc, out, err = netns_link.run_group(argv, timeout=timeout, check=False, env=env)
    if rc != 0 or not os.path.exists(json_path):
        sys.stderr.write(out + err)
        sys.exit(f"wholestep failed (exit status {rc}): {' '.join(argv)}")
    with open(json_path) as f:
        data = json.load(f)
    rows = data["rows"] if isinstance(data, dict) else data
    return {r["mode"]: {k: r.get(k) for k in WS_FIELDS} for r in rows}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def data_parallel_built(cli):
    """True when `wholestep compare --help` lists --data-parallel."""
    if not os.access(cli, os.X_OK):
        sys.exit(f"{cli} not found: build wholestep (./scripts/setup.sh) or pass --build-dir")
    out = subprocess.run([cli, "compare", "--help"], capture_output=True, text=True).stdout
    return "--data-parallel" in out


def compare_model(runner, spec, sides, args):
    """Alternating rounds over `sides` for one model: {row name: {field: median}},
    and each PyTorch side's optimizer path in its last round {side: foreach}."""
    samples, foreach = {}, {}

    def add(name, fields):
        for k, v in fields.items():
            samples.setdefault(name, {}).setdefault(k, []).append(v)

    batch = int(spec["batch"])
    for _ in range(args.rounds):
        for side in sides:
            time.sleep(PAUSE_S)
            if side.startswith("torch"):
                world = 2 if side == "torch_ddp" else 1
                ms, foreach[side] = runner.torch_side(spec, world)
                add(side, {"ms_per_step": ms, "examples_per_s": world * batch * 1e3 / ms})
            else:
                for mode, row in runner.ws_side(spec["name"], side).items():
                    # compare --zero runs each mode with ZeRO, named
                    # "<mode> (zero)": the zero side keeps those alone.
                    zero_mode = mode.endswith(" (zero)")
                    if zero_mode == side.endswith("_zero"):
                        add(f"{side} {mode.removesuffix(' (zero)')}", row)
    medians = {name: {k: median_or_none(v) for k, v in fields.items()}
               for name, fields in samples.items()}
    return medians, foreach


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# ---------------------------------------------------------------------------
# The table


def lscpu_model():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model name":
            return value.strip()
    return "unknown CPU"


def fmt(x, spec="{:.2f}"):
    return "n/a" if x is None else spec.format(x)


def row_label(side, mode, foreach):
    if not side.startswith("torch"):
        return f"wholestep {mode}" + (", ZeRO-1" if side.endswith("_zero") else "")
    path = f"{'foreach' if foreach.get(side) else 'for-loop'} optimizer"
    return f"PyTorch DDP (gloo, {path})" if side == "torch_ddp" else f"PyTorch eager ({path})"


def table_row(name, r, results, foreach):
    """The cells of row `name` ("torch_ddp", "ws_2x1 single_graph") of `results`."""
    side, _, mode = name.partition(" ")
    one = results.get("torch_1x1" if side.startswith("torch") else f"ws_1x1 {mode}", {})
    ddp = results.get("torch_ddp", {}).get("examples_per_s")
    eps = r.get("examples_per_s")
    vs_one = eps / one["examples_per_s"] if eps and one.get("examples_per_s") else None
    vs_ddp = eps / ddp if eps and ddp and side != "torch_ddp" else None
    mb = r["comm_bytes"] / 1e6 if r.get("comm_bytes") is not None else None
    return [row_label(side, mode, foreach), "{} x {}".format(*SHAPES[side]),
            fmt(r.get("ms_per_step")), fmt(eps, "{:.0f}"), fmt(vs_one), fmt(vs_ddp), fmt(mb),
            fmt(r.get("comm_wait_ms")), fmt(r.get("hidden_share"))]


def print_table(model, spec, results, foreach, args, link):
    import torch
    batch = int(spec["batch"])
    where = ("this host (loopback, Open MPI's default transports)" if link is None else
             link.describe())
    print(f"\n### {model}: batch {batch} per process ({2 * batch} global with 2 processes), "
          f"{spec['optimizer']}\n")
    print(f"CPU: {lscpu_model()}, {os.cpu_count()} CPUs; threads per process as in each row; "
          f"2-process sides on {where}; PyTorch {torch.__version__}, Open MPI "
          f"{netns_link.open_mpi_version()}"
          + "".join(f", --mca {k} {v}" for k, v in args.mca or ()))
    print(f"{args.rounds} rounds alternating the sides, each {args.warmup} warm-up + "
          f"{args.steps} timed steps; medians\n")
    print("| side | processes x threads | ms/step | examples/s | vs 1x1 | vs DDP | comm MB "
          "| comm wait ms | hidden share |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, r in results.items():
        print("| " + " | ".join(table_row(name, r, results, foreach)) + " |")
    print("\nexamples/s: the global batch (2 processes: both ranks' examples) per second. "
          "vs 1x1: examples/s over\nthe same framework's (and mode's) 1 process x 1 thread "
          "(target for 2 x 1: 1.8); vs DDP: over PyTorch\nDDP's (target for wholestep 2 x 1: "
          "2). comm MB (comm_bytes / 1e6), comm wait ms, hidden share: as\nwholestep reports "
          "them in its JSON.")


# ---------------------------------------------------------------------------


def torch_environment():
    """pytorch_compare's environment for PyTorch: clean, with OPENBLAS_CORETYPE
    set when OpenBLAS's own choice is a fallback core."""
    env = clean_env(os.environ)
    core = run_probe("blas", env).get("core")
    best = best_openblas_core(cpu_flags())
    if core and best and is_fallback_core(core, cpu_flags()):
        env["OPENBLAS_CORETYPE"] = best
    return env


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="cnn,gpt", help="comma-separated reference models")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per model")
    p.add_argument("--steps", type=int, default=20, help="timed steps per side per round")
    p.add_argument("--warmup", type=int, default=5, help="warm-up steps per side per round")
    p.add_argument("--link", choices=tuple(netns_link.LINK_RATES), default="none",
                   help="none: this host; else 2-process sides across two namespaces over "
                        "TCP, veth limited to the rate (veth: no limit); needs root")
    p.add_argument("--sides", default=",".join(DEFAULT_SIDES), help="comma-separated, of " +
                   ", ".join(SIDES))
    p.add_argument("--mca", nargs=2, action="append", metavar=("KEY", "VALUE"),
                   help="an Open MPI parameter for the wholestep 2-process side (repeatable)")
    p.add_argument("--torch-foreach", choices=("auto", "on", "off"), default="auto",
                   help="PyTorch optimizer path (auto: each process picks the faster in "
                        "warm-up)")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--timeout", type=float, default=900, help="seconds per side and round")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    return p.parse_args()


def main():
    args = parse_args()
    if args.worker:
        return worker_main(args)
    if importlib.util.find_spec("torch") is None:
        sys.exit(f"{sys.executable} has no torch: run with /usr/bin/python3 (python3-torch)")
    sides = [s for s in args.sides.split(",") if s]
    unknown = set(sides) - set(SIDES)
    if unknown:
        sys.exit(f"unknown sides {', '.join(sorted(unknown))}: expected some of {SIDES}")
    if any(s in WS_SIDES for s in sides) and \
            not data_parallel_built(os.path.join(args.build_dir, "wholestep")):
        print(NOT_BUILT, file=sys.stderr)
        return 2
    names = [m for m in args.models.split(",") if m]
    peer = Peer(os.path.join(args.build_dir, "benchmarks", "peer_server"), 1, names)
    specs = peer.models()
    same = all([check_structure(peer, specs[n]) for n in names])
    peer.close()
    if not same:
        sys.exit("the PyTorch models differ from wholestep's: not timing them")
    env = torch_environment()
    rate = netns_link.LINK_RATES[args.link]
    with netns_link.Link(rate) if args.link != "none" else contextlib.nullcontext() as link:
        runner = Runner(args, link, env)
        for name in names:
            results, foreach = compare_model(runner, specs[name], sides, args)
            print_table(name, specs[name], results, foreach, args, link)
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
