#!/usr/bin/python3
"""A training step on a quiet machine and beside one busy neighbour.

Runs `wholestep train` on a reference model (the cnn by default) in each
variant -- the default threads, one thread, and optionally the same two of
another build (--before) -- first on quiet cores, then with one busy process
(`sh -c 'while :; do :; done'`) beside it, alternating the variants within
each round. A run's figure is the median of its logged windows' ms/step
(--log-every steps each; the first window, which compiles, is left out),
and a variant's is the median over rounds. The table gives each loaded
figure against the one-thread loaded figure of the same build, and each
quiet figure against the --before build's.

    benchmarks/loaded_machine.py --before /tmp/old/wholestep --rounds 5
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def run_ms_per_step(cli, model, steps, log_every, extra):
    """The median ms/step of one run's logged windows after the first."""
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        subprocess.run([cli, "train", "--model", model, "--steps", str(steps),
                        "--eval-every", "0", "--log-every", str(log_every),
                        "--metrics", metrics] + extra,
                       check=True, stdout=subprocess.DEVNULL)
        with open(metrics) as f:
            records = [json.loads(line) for line in f]
    windows = [r["ms_per_step"] for r in records if r["kind"] == "train"]
    return statistics.median(windows[1:] if len(windows) > 1 else windows)


def start_neighbour():
    return subprocess.Popen(["sh", "-c", "while :; do :; done"],
                            start_new_session=True)


def stop_neighbour(p):
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default="build/wholestep")
    ap.add_argument("--before", help="another build's wholestep, measured alike")
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    builds = [("now", args.cli)]
    if args.before:
        builds.append(("before", args.before))
    variants = []
    for name, cli in builds:
        variants.append((f"{name}, default threads", name, cli, []))
        variants.append((f"{name}, --threads 1", name, cli, ["--threads", "1"]))

    times = {(v[0], cond): [] for v in variants for cond in ("quiet", "loaded")}
    for r in range(args.rounds):
        for cond in ("quiet", "loaded"):
            neighbour = start_neighbour() if cond == "loaded" else None
            try:
                order = variants if r % 2 == 0 else list(reversed(variants))
                for label, _, cli, extra in order:
                    ms = run_ms_per_step(cli, args.model, args.steps,
                                         args.log_every, extra)
                    times[(label, cond)].append(ms)
                    print(f"round {r + 1} {cond:6s} {label:24s} {ms:8.2f} ms/step",
                          file=sys.stderr, flush=True)
            finally:
                if neighbour:
                    stop_neighbour(neighbour)

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.model} ms/step on {cpu_model()}, {os.cpu_count()} cores; median of "
          f"{args.rounds} rounds, each the median of {args.log_every}-step windows of "
          f"{args.steps} steps; loaded: one `while :; do :; done` beside it")
    print(f"{'variant':26s} {'quiet':>8s} {'loaded':>8s} {'loaded/1-thread loaded':>23s} "
          f"{'quiet/before':>13s}")
    for label, build, _, extra in variants:
        solo = med[(f"{build}, --threads 1", "loaded")]
        before = med.get(("before, " + label.split(", ", 1)[1], "quiet"))
        vs_before = (f"{med[(label, 'quiet')] / before:12.3f}x"
                     if before and build == "now" else f"{'-':>13s}")
        print(f"{label:26s} {med[(label, 'quiet')]:8.2f} {med[(label, 'loaded')]:8.2f} "
              f"{med[(label, 'loaded')] / solo:22.2f}x {vs_before}")


if __name__ == "__main__":
    main()
