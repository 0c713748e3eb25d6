#!/usr/bin/python3
"""Two hosts on one machine: network namespaces joined by a veth pair, its
rate optionally limited, and Open MPI jobs of two ranks across them over TCP.

    with Link(rate="200mbit") as link:   # removed on exit, exception, SIGINT, SIGTERM
        link.run_mpi(["./prog"])          # rank 0 in link.namespaces[0], rank 1 in [1]
        subprocess.run(link.wrap(1, ["./server"]))   # any command in one namespace

Each namespace also gets its own UTS namespace, its host name that of the
namespace, so the two ranks look like two hosts to Open MPI (distinct session
directories and node names) and to the programs. The limit is
`tc qdisc ... root tbf` on both ends of the veth, so each direction gets the
rate. Needs root, iproute2 and util-linux (unshare).

How one mpirun spans two namespaces: mpirun runs in the first namespace with
a host file of the two veth addresses. The first address is local there, so
mpirun starts rank 0 itself; for the second it starts its daemon (orted)
through the rsh launcher, which `plm_rsh_agent` replaces by a small script
that runs the daemon's command line in the second namespace (`ip netns exec`)
instead of over ssh. The daemon reaches mpirun over the veth
(`oob_tcp_if_include`) and starts rank 1; each rank talks to its own daemon's
PMIx server over that namespace's loopback. The ranks communicate with the
TCP BTL over the veth (`--mca pml ob1 --mca btl tcp,self`, `btl_tcp_if_include`).
Launching both ranks from a root-namespace mpirun (MPMD,
`-np 1 ip netns exec ns0 prog : -np 1 ip netns exec ns1 prog`) does not work:
the ranks cannot reach mpirun's PMIx server, which listens on the root
namespace's loopback ("OPAL ERROR: Unreachable in file ext3x_client.c" in
MPI_Init). Binding is off (`--bind-to none`): each side's mpirun or daemon
sees a whole machine and would bind both ranks to the same core.

Open MPI 4.1's TCP BTL gets about half the rate each way out of a 2-rank
MPI_Allreduce across a limited link, although one-way transfers get all of
it: both directions share one connection, and the rendezvous handshake of
each large message queues behind the other direction's data. Messages up to
`btl_tcp_eager_limit` bytes skip the handshake; `probe --mca
btl_tcp_eager_limit 16777280` shows the difference.

Command line (as root):
    netns_link.py probe [--rates none,1gbit,200mbit] [--reps 5] [--sizes 1,4,16]
                        [--mca KEY VALUE]...
        MPI_Allreduce (and one-way MPI_Send) bandwidth of two ranks across the
        link at each rate (mpi_allreduce_probe.c, built with mpicc into a
        temporary directory), as a Markdown table
    netns_link.py mpirun [--rate 200mbit] [--mca KEY VALUE]... -- PROG ARGS...
        one two-rank job across a new link
    netns_link.py cleanup
        removes the namespaces of this script's processes that no longer run
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "wsl"  # namespaces "wsl<pid>n<k>-<i>", devices "wsl<pid>n<k>v<i>"
NAME_RE = re.compile(rf"^{PREFIX}(\d+)n\d+-[01](\..+)?$")  # a namespace, or a link's directory
LINK_RATES = {"none": None, "veth": None, "1gbit": "1gbit", "200mbit": "200mbit"}
KILL_GRACE_S = 2.0
_count = 0


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


def tbf_args(rate):
    """tbf parameters for `rate`: a burst of 1 ms at the rate (at least 32 KiB,
    enough for the kernel's timer) and a queue of 20 ms, about a switch's."""
    bits = parse_rate(rate)
    burst = max(32 << 10, int(bits / 8 / 1000))
    return ["tbf", "rate", rate, "burst", str(burst), "latency", "20ms"]


def parse_rate(rate):
    """"200mbit" -> 2e8 bits/s (tc's units: kbit, mbit, gbit, bare bits)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.lower())
    if not m:
        raise ValueError(f"rate {rate!r}: expected like 200mbit or 1gbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def signals_raise():
    """Makes SIGTERM and SIGHUP raise SystemExit like SIGINT raises
    KeyboardInterrupt, so `with Link()` unwinds; returns the old handlers.
    A signal ignored (nohup) stays ignored."""
    def handler(signum, _frame):
        raise SystemExit(128 + signum)
    return {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)
            if signal.getsignal(s) != signal.SIG_IGN}


class Link:
    """Two namespaces and a veth pair between them (see the module's docstring)."""

    def __init__(self, rate=None):
        global _count
        _count += 1
        base = f"{PREFIX}{os.getpid()}n{_count}"
        self.rate = rate
        self.namespaces = [f"{base}-0", f"{base}-1"]
        self.devices = [f"{base}v0", f"{base}v1"]
        net = f"10.{200 + os.getpid() % 50}.{_count % 256}"
        self.subnet = f"{net}.0/24"
        self.addresses = [f"{net}.1", f"{net}.2"]
        self.tmp = None
        self._handlers = None

    def __enter__(self):
        self._handlers = signals_raise()
        try:
            self.create()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc):
        self.remove()

    def create(self):
        if os.geteuid() != 0:
            raise PermissionError("network namespaces need root")
        self.tmp = tempfile.mkdtemp(prefix=self.namespaces[0] + ".")
        for ns in self.namespaces:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", self.devices[0], "type", "veth", "peer", "name", self.devices[1])
        for ns, dev, addr in zip(self.namespaces, self.devices, self.addresses):
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
        self.set_rate(self.rate)
        self._write_launcher()

    def set_rate(self, rate):
        """Limits both directions to `rate` (a tc rate: "1gbit"), or lifts the limit (None)."""
        for ns, dev in zip(self.namespaces, self.devices):
            sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
            if rate:
                sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", *tbf_args(rate))
        self.rate = rate

    def remove(self):
        """Ends every process left in the namespaces and deletes them (the veth
        goes with them) and the temporary directory. Safe on a partial link."""
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for ns in self.namespaces:
                remove_namespace(ns)
            if self.tmp:
                shutil.rmtree(self.tmp, ignore_errors=True)
                self.tmp = None
            for s, h in (self._handlers or {}).items():
                signal.signal(s, h)
            self._handlers = None
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def describe(self):
        limit = f"limited to {self.rate} each way" if self.rate else "without a limit"
        return f"two network namespaces over TCP, their veth {limit}"

    def wrap(self, i, argv):
        """`argv` run in namespace i, with the host name of that namespace."""
        return ["ip", "netns", "exec", self.namespaces[i], "unshare", "--uts", "sh", "-c",
                f'hostname {self.namespaces[i]} && exec "$@"', "sh", *argv]

    def _write_launcher(self):
        """The host file and the rsh launcher mpirun uses to start its daemon on
        the second address: the daemon's command line (one shell command, as
        ssh would get it) run in the second namespace."""
        with open(os.path.join(self.tmp, "hosts"), "w") as f:
            f.write("".join(f"{a} slots=1\n" for a in self.addresses))
        path = os.path.join(self.tmp, "launch")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n"
                    f'[ "$1" = {self.addresses[1]} ] || '
                    '{ echo "launch: unknown host $1" >&2; exit 1; }\n'
                    "shift\n"
                    f"exec ip netns exec {self.namespaces[1]} unshare --uts sh -c "
                    f"'hostname {self.namespaces[1]} && exec sh -c \"$0\"' \"$*\"\n")
        os.chmod(path, 0o755)

    def mpirun_argv(self, argv, mca=()):
        """The command running `argv` as 2 ranks, rank i in namespace i, over
        TCP through the veth; `mca`: more (key, value) pairs."""
        pairs = [("plm_rsh_agent", os.path.join(self.tmp, "launch")), ("pml", "ob1"),
                 ("btl", "tcp,self"), ("btl_tcp_if_include", self.subnet),
                 ("oob_tcp_if_include", self.subnet), *mca]
        return self.wrap(0, ["mpirun", "--allow-run-as-root", "--hostfile",
                             os.path.join(self.tmp, "hosts"), "-np", "2", "--bind-to", "none",
                             *(w for k, v in pairs for w in ("--mca", k, v)), *argv])

    def run_mpi(self, argv, mca=(), **kwargs):
        """Runs mpirun_argv(argv, mca) to the end (run_group's keywords)."""
        return run_group(self.mpirun_argv(argv, mca), **kwargs)


def local_mpirun_argv(argv, np=2, mca=()):
    """`argv` as `np` ranks on this host, Open MPI's default transports, unbound."""
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return ["mpirun", *root, "-np", str(np), "--bind-to", "none",
            *(w for k, v in mca for w in ("--mca", k, v)), *argv]


def kill_group(proc):
    """SIGTERM to the process group of `proc`, SIGKILL after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            pass


def start_group(argv, **kwargs):
    """Popen in a new session (stdin from /dev/null): kill_group ends it and its children."""
    return subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL, **kwargs)


def run_group(argv, timeout=None, check=True, env=None, capture=True):
    """Runs `argv` in a new session; on a timeout or an exception here
    (SIGINT, SIGTERM) the whole group is ended before the exception goes on.
    Returns (returncode, stdout, stderr) (outputs None unless captured)."""
    pipe = subprocess.PIPE if capture else None
    proc = start_group(argv, stdout=pipe, stderr=pipe, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        kill_group(proc)
        raise
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, out, err)
    return proc.returncode, out, err


def remove_namespace(ns):
    """Ends the processes in `ns` (SIGTERM, then SIGKILL) and deletes it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + KILL_GRACE_S
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
            time.sleep(0.05)
        if not pids:
            break
    sh("ip", "netns", "del", ns, check=False)


def cleanup():
    """Removes the namespaces and temporary directories of PREFIX whose
    creating process has ended."""
    removed = []
    names = [w[0] for w in map(str.split, sh("ip", "netns", "list").stdout.splitlines()) if w]
    for name in names + os.listdir(tempfile.gettempdir()):
        m = NAME_RE.match(name)
        if not m or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        if name in names:
            remove_namespace(name)
        else:
            shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)
        removed.append(name)
    print("removed: " + (", ".join(removed) or "nothing"))


# ---------------------------------------------------------------------------
# The probe: MPI_Allreduce bandwidth across the link


def build_probe(directory):
    """mpi_allreduce_probe.c compiled with mpicc into `directory`; returns its path."""
    exe = os.path.join(directory, "mpi_allreduce_probe")
    sh("mpicc", "-O2", "-o", exe, os.path.join(HERE, "mpi_allreduce_probe.c"))
    return exe


def parse_probe(text):
    """The probe's output: ([placement line, ...], [(bytes, ms, Mbit/s, send Mbit/s), ...])."""
    ranks, rows = [], []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["rank"]:
            ranks.append(" ".join(words[1:]))
        elif words[:1] == ["allreduce"]:
            rows.append((int(words[1]), *map(float, words[2:5])))
    return ranks, rows


def probe(args):
    rates = [None if r == "none" else r for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_probe(tmp)
        argv = [exe, str(args.reps), *args.sizes.split(",")]
        with Link() as link:
            mca = "".join(f", --mca {k} {v}" for k, v in args.mca or ())
            print(f"Open MPI {open_mpi_version()}, 2 ranks over TCP across the veth of "
                  f"{link.namespaces[0]} ({link.addresses[0]}) and {link.namespaces[1]} "
                  f"({link.addresses[1]}){mca}; medians of {args.reps} calls")
            table = []
            for rate in rates:
                link.set_rate(rate)
                _, out, _ = link.run_mpi(argv, mca=args.mca or (), timeout=args.timeout)
                ranks, rows = parse_probe(out)
                print(f"limit {rate or 'none'}: " + "; ".join(ranks))
                table += [(rate or "none", *row) for row in rows]
    print()
    print("| limit | MiB | allreduce ms | allreduce Mbit/s | one-way send Mbit/s |")
    print("|---|--:|--:|--:|--:|")
    for rate, size, ms, mbit, send in table:
        print(f"| {rate} | {size / 2**20:g} | {ms:.2f} | {mbit:.0f} | {send:.0f} |")
    print("\nMbit/s: bytes per rank over the median time (for 2 ranks what each rank sends "
          "and receives,\nwhatever the algorithm); one-way: rank 1 to rank 0 alone.")
    return 0


def open_mpi_version():
    out = sh("mpirun", "--version", check=False).stdout
    m = re.search(r"\(Open MPI\) (\S+)", out)
    return m.group(1) if m else "?"


def run_command(args):
    with Link(rate=args.rate) as link:
        rc, _, _ = link.run_mpi(args.argv, mca=args.mca or (), check=False, capture=False)
    return rc


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pr = sub.add_parser("probe", help="Allreduce bandwidth across the link at each rate")
    pr.add_argument("--rates", default="none,1gbit,200mbit", help="comma-separated tc rates")
    pr.add_argument("--reps", type=int, default=5, help="timed calls per size")
    pr.add_argument("--sizes", default="1,4,16", help="MiB, comma-separated")
    pr.add_argument("--timeout", type=float, default=600, help="seconds per job")
    pr.add_argument("--mca", nargs=2, action="append", metavar=("KEY", "VALUE"),
                    help="an Open MPI parameter for the jobs (repeatable)")
    mr = sub.add_parser("mpirun", help="one 2-rank job across a new link")
    mr.add_argument("--rate", help="tc rate of the link (default: no limit)")
    mr.add_argument("--mca", nargs=2, action="append", metavar=("KEY", "VALUE"),
                    help="an Open MPI parameter for the job (repeatable)")
    mr.add_argument("argv", nargs="+", help="the program and its arguments (after --)")
    sub.add_parser("cleanup", help="remove namespaces left by ended runs")
    args = p.parse_args()
    if args.command == "cleanup":
        return cleanup()
    return probe(args) if args.command == "probe" else run_command(args)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
