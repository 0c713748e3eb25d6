"""Same-run comparison of wholestep's PyTorch frontend against torch eager on unmodified torchvision models.

Trains each model one SGD step at a time (lr 0.01, momentum 0.9, weight decay
5e-4, cross-entropy) four ways in this one process: torch eager as
pytorch_compare.TorchSide runs it (zero_grad(set_to_none=True), forward, loss,
backward, opt.step(), loss.item()); the same over AOTAutograd's module
(functorch.compile.aot_module with TorchScript graphs and the min-cut
partitioner, the design of the seeds' texts: forward and backward graphs,
torch's optimizer outside them); and wholestep.torch.compile_train_step in
its single_graph and three_graph modes. The models are torchvision's resnet18, resnet50, resnext50_32x4d,
alexnet, mobilenet_v2, mnasnet1_0, vgg16 and squeezenet1_1 (num_classes=10,
weights=None), vit_b_16 (torchvision.models.vit_b_16, i.e. VisionTransformer
with patch 16, 12 layers, 12 heads, hidden 768, MLP 3072, at --image-size
instead of 224), and `bert`, a BERT-like encoder written here
(nn.TransformerEncoder of post-LayerNorm GELU layers, token and position
nn.Embedding, a Linear LM head, cross-entropy over every token). Each side has
its own copy of the model, made from the same initial values, and its own
optimizer; all train on one fixed random batch. wholestep does not check
the loss (on_nonfinite="ignore"), as eager does not.

For each model: the compile time of AOTAutograd and of each wholestep mode
(the first step, capture included), warm-up steps on every side (not timed),
then R alternating rounds of K steps per side -- eager, aot, three_graph,
single_graph -- with the single graph's floor (TrainStep.floor: its
convolutions and products alone, each a oneDNN primitive in the layouts it
picks) measured once a round, and one Markdown table of median ms/step, the
speedup of each side over eager (and its geometric mean over the models),
the step over its floor, the threads wholestep's steps ran on, the compile
times, and wholestep's kernels per step and planned peak memory. A model that fails to
compile or run in a wholestep mode keeps its row, which gives the error's
first line; the other sides are still timed.

Run with Debian's interpreter (the one python3-torch is installed for) on a
build of the Python package:

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/torchvision_compare.py
        [--models resnet18,bert] [--rounds R] [--threads N] [--batch B]
        [--image-size S] [--json out.json]

The environment is handled as in benchmarks/pytorch_compare.py (whose helpers
this script imports): every OPENBLAS_*, OMP_*, GOMP_*, DNNL_*, ONEDNN_* and
MKL_* variable is removed; if PyTorch's OpenBLAS then picks a core below the
CPU's instruction set, OPENBLAS_CORETYPE is set to the right one (PyTorch's
best case; wholestep does not use OpenBLAS) and the header says so. Both sides
use N threads (torch.set_num_threads, OpenBLAS's pool, wst.set_num_threads);
torch's optimizer runs the faster of its foreach and per-parameter paths,
measured during warm-up (AOTAutograd's takes the same). The script refuses
to run when torch's products are not on OpenBLAS (Debian's python3-torch
falls back to the reference BLAS without libopenblas0-openmp) or when
networkx, which AOTAutograd's min-cut partitioner needs, is missing.
"""

import argparse
import copy
import gc
import importlib.util
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytorch_compare as pc  # noqa: E402  (the helpers of the C++-model comparison)
import torch_env  # noqa: E402
from compare_sides import (SGD, AotSide, EagerSide, WholestepSide, first_line,  # noqa: E402
                           require_peers)

CNNS = ("resnet18", "resnet50", "resnext50_32x4d", "alexnet", "mobilenet_v2", "mnasnet1_0",
        "vgg16", "squeezenet1_1")
MODELS = CNNS + ("vit_b_16", "bert")
MODES = ("three_graph", "single_graph")
PEERS = ("eager", "aot")  # torch eager; AOTAutograd (AotSide)
SIDES = PEERS + MODES
# BERT-mini's shape (4 layers, hidden 256, 4 heads, FFN 1024), a smaller vocabulary.
BERT = dict(vocab=8192, seq_len=128, d_model=256, heads=4, layers=4, ffn=1024)
VIT_PATCH = 16


# ---------------------------------------------------------------------------
# Models, batches and losses


def make_bert(vocab, seq_len, d_model, heads, layers, ffn):
    """Token + position embeddings, LayerNorm, post-LN GELU encoder layers
    (no dropout), a Linear LM head: logits for every token."""
    import torch
    import torch.nn as nn

    class BertLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(seq_len, d_model)
            self.norm = nn.LayerNorm(d_model)
            layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=ffn, dropout=0.0,
                                               activation="gelu", batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d_model, vocab)

        def forward(self, tokens):
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            h = self.norm(self.tok(tokens) + self.pos(positions))
            return self.head(self.encoder(h))

    return BertLike()


def token_cross_entropy(logits, targets):
    """Mean cross-entropy over every token of the batch."""
    import torch.nn.functional as F
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_model(name, image_size):
    import torchvision
    if name == "bert":
        return make_bert(**BERT)
    if name == "vit_b_16":
        return torchvision.models.vit_b_16(weights=None, num_classes=10, image_size=image_size)
    return getattr(torchvision.models, name)(weights=None, num_classes=10)


def make_batch(name, batch, image_size):
    """One fixed random batch: images in [-1, 1) and labels in [0, 10), or
    tokens and target tokens in [0, vocab)."""
    import torch
    g = torch.Generator().manual_seed(0)
    if name == "bert":
        shape = (batch, BERT["seq_len"])
        return tuple(torch.randint(0, BERT["vocab"], shape, generator=g) for _ in range(2))
    x = torch.rand(batch, 3, image_size, image_size, generator=g) * 2 - 1
    return x, torch.randint(0, 10, (batch,), generator=g)


def loss_fn_of(name):
    import torch.nn.functional as F
    return token_cross_entropy if name == "bert" else F.cross_entropy


def input_of(name, args):
    if name == "bert":
        return f"{args.batch}x{BERT['seq_len']} tokens"
    return f"{args.batch}x3x{args.image_size}x{args.image_size}"


def configurations(args):
    """The lines saying what vit_b_16 and bert are."""
    s = args.image_size
    tokens = (s // VIT_PATCH) ** 2 + 1
    return [f"vit_b_16: torchvision.models.vit_b_16(weights=None, num_classes=10, "
            f"image_size={s}), i.e. VisionTransformer(image_size={s}, patch_size={VIT_PATCH}, "
            f"num_layers=12, num_heads=12, hidden_dim=768, mlp_dim=3072): {tokens} tokens",
            f"bert: nn.Embedding({BERT['vocab']}, {BERT['d_model']}) + position "
            f"nn.Embedding({BERT['seq_len']}, {BERT['d_model']}), LayerNorm, "
            f"nn.TransformerEncoder({BERT['layers']} x TransformerEncoderLayer(d_model="
            f"{BERT['d_model']}, nhead={BERT['heads']}, dim_feedforward={BERT['ffn']}, "
            f"dropout=0, activation='gelu', batch_first=True)), Linear LM head; sequence "
            f"{BERT['seq_len']}, loss over all {args.batch * BERT['seq_len']} tokens"]


# ---------------------------------------------------------------------------
# The three sides


def compare_model(name, args):
    """Compile times, warm-up, then alternating rounds: a result dict."""
    import torch
    result = {"input": input_of(name, args), "times": {}, "compile_s": {}, "errors": {},
              "stats": {}}
    loss_fn = loss_fn_of(name)
    batch = make_batch(name, args.batch, args.image_size)
    torch.manual_seed(0)
    try:
        model = make_model(name, args.image_size)
        model.train()
        copies = [copy.deepcopy(model) for _ in MODES]  # before any step: the same values
        eager = EagerSide(model, batch)
        slowest = pc.warm_up_torch(eager, args.warmup, args.torch_foreach)
    except Exception as e:  # noqa: BLE001
        result["errors"]["eager"] = first_line(e)
        print(f"  eager: {result['errors']['eager']}", file=sys.stderr, flush=True)
        return result
    result["torch_optim"] = "foreach" if eager.foreach else "for-loop"
    aot = None
    try:
        aot = AotSide(copy.deepcopy(model), batch, eager.foreach)
    except Exception as e:  # noqa: BLE001
        result["errors"]["aot"] = first_line(e)
    if aot is not None:
        t0 = time.perf_counter()
        aot.attempt(aot.step)
        result["compile_s"]["aot"] = time.perf_counter() - t0
        warm = aot.attempt(aot.run, args.warmup)
        if warm:
            slowest = max(slowest, min(warm))
    sides = {}
    for mode, m in zip(MODES, copies):
        side = sides[mode] = WholestepSide(m, batch, loss_fn, mode)
        side.attempt(side.compile)
        warm = side.attempt(side.settle, args.warmup)
        if warm:
            slowest = max(slowest, min(warm))  # the least disturbed step
    steps = args.steps_per_round or min(200, max(1, round(pc.ROUND_S * 1e3 / slowest)))
    times = {side: [] for side in SIDES}
    floors = []  # the single graph's floor, measured once a round
    floored = sides["single_graph"]
    for _ in range(args.rounds):
        time.sleep(pc.PAUSE_S)
        times["eager"] += eager.run(steps)
        if aot is not None:
            time.sleep(pc.PAUSE_S)
            times["aot"] += aot.attempt(aot.run, steps) or []
        for mode, side in sides.items():
            time.sleep(pc.PAUSE_S)
            times[mode] += side.attempt(side.run, steps) or []
        floor = floored.attempt(floored.compiled.floor, *batch) if floored.compiled else None
        if floor:
            floors.append(floor)
    if floors:
        result["floor_ms"] = statistics.median(f["ms"] for f in floors)
        result["floor_parts"] = floors[-1]["parts"]
    if aot is not None and aot.error is not None:
        result["errors"]["aot"] = aot.error
    result["steps"] = steps
    result["fewer_threads"] = {mode: (side.fewer_threads(), sum(side.teams.values()))
                               for mode, side in sides.items() if side.pool is not None}
    result["teams"] = {mode: side.teams for mode, side in sides.items()}
    for side_name, ts in times.items():
        result["times"][side_name] = statistics.median(ts) if ts else None
    for mode, side in sides.items():
        result["compile_s"][mode] = side.compile_s
        if side.error is not None:
            result["errors"][mode] = side.error
            result["times"][mode] = None
        elif side.compiled is not None:
            result["stats"][mode] = side.compiled.stats()
    return result


# ---------------------------------------------------------------------------
# The table


def speedup(r, mode):
    t = r["times"]
    return t["eager"] / t[mode] if t.get("eager") and t.get(mode) else None


def over_floor(r):
    t = r["times"].get("single_graph")
    return t / r["floor_ms"] if t and r.get("floor_ms") else None


def teams(r, mode):
    """The threads mode's timed steps ran on: "2", or "2 (6 of 90 on 1)"."""
    counts = {int(k): n for k, n in r.get("teams", {}).get(mode, {}).items()}
    if not counts:
        return ""
    main = max(counts, key=counts.get)
    rest = ", ".join(f"{n} of {sum(counts.values())} on {k}"
                     for k, n in sorted(counts.items()) if k != main)
    return f"{main} ({rest})" if rest else str(main)


def geomeans(results):
    """Per side: the geometric mean of the speedups over eager and its count."""
    out = {}
    for mode in ("aot",) + MODES:
        s = [x for x in (speedup(r, mode) for r in results.values()) if x]
        out[mode] = (math.exp(sum(map(math.log, s)) / len(s)) if s else None, len(s))
    return out


def pair(values, spec):
    return " / ".join(pc.fmt_num(v, spec) for v in values)


def mib(stats, mode):
    peak = stats.get(mode, {}).get("peak_bytes")
    return None if peak is None else peak / 2**20


def table_row(name, r, rounds):
    t, stats = r["times"], r["stats"]
    by_error = {}  # one error, the sides that hit it
    for side, e in r["errors"].items():
        by_error.setdefault(e, []).append(side)
    errors = "; ".join(f"{' and '.join(sides)}: {e}" for e, sides in by_error.items())
    steps = f"{rounds}x{r['steps']}" if "steps" in r else ""
    return [name, r["input"], steps, pc.fmt_num(t.get("eager")), pc.fmt_num(t.get("aot")),
            *(pc.fmt_num(t.get(m)) for m in MODES),
            *(pc.fmt_num(speedup(r, m), "{:.2f}x") for m in ("aot",) + MODES),
            pc.fmt_num(r.get("floor_ms")), pc.fmt_num(over_floor(r), "{:.2f}x"),
            " / ".join(teams(r, m) for m in MODES),
            pair((r["compile_s"].get(m) for m in ("aot",) + MODES), "{:.1f}"),
            pair((stats.get(m, {}).get("kernels") for m in MODES), "{}"),
            pair((mib(stats, m) for m in MODES), "{:.0f}"),
            r.get("torch_optim", ""), errors.replace("|", "\\|")]


COLUMNS = ["model", "input", "steps", "eager ms", "aot ms", "three_graph ms", "single_graph ms",
           "eager / aot", "eager / three", "eager / single", "floor ms", "single / floor",
           "threads three / single", "compile aot / three / single (s)",
           "kernels three / single", "peak three / single (MiB)", "eager SGD", "errors"]
LEGEND = """\
steps: rounds x steps per round, per side; ms: median ms per step. aot: AOTAutograd
(functorch.compile.aot_module, TorchScript graphs, the min-cut partitioner) and torch's
optimizer. eager / aot, eager / three, eager / single: torch eager's time over the other side's
(above 1: faster than eager). floor: the single graph's convolutions and matrix products alone,
each one oneDNN primitive in the layouts it picks or, if faster, the step's (TrainStep.floor),
the median of one measure a round; single / floor: how far the step is above it. threads: the
team wholestep's timed steps ran on (and how many ran on another). compile: the first step,
capture included. kernels and peak: wholestep's kernels per step and planned peak memory
(parameters, optimizer state, arenas). eager SGD: the faster of torch's foreach and
per-parameter (for-loop) paths, picked during warm-up (aot takes the same). A failed side's
error is its first line."""


def markdown_table(results, rounds):
    def line(cells):
        return "| " + " | ".join(cells) + " |"

    rows = [line(COLUMNS), line(["---"] * len(COLUMNS))]
    rows += [line(table_row(name, r, rounds)) for name, r in results.items()]
    means = geomeans(results)
    cells = ["geometric mean", "", "", "", "", "", ""]
    cells += [f"{pc.fmt_num(g, '{:.2f}x')} ({n} models)" for g, n in means.values()]
    rows.append(line(cells + [""] * (len(COLUMNS) - len(cells))))
    return "\n".join(rows)


def teams_line(results, threads):
    """The teams wholestep's timed steps ran on: the whole pool, or where
    a step moved to one thread (docs/performance.md, "A loaded machine"),
    how many of them."""
    fewer = [f"{name} {mode}: {n} of {total}" for name, r in results.items()
             for mode, (n, total) in r.get("fewer_threads", {}).items() if n]
    return (f"wholestep's timed steps ran on one thread: {'; '.join(fewer)}" if fewer else
            f"wholestep's timed steps all ran on the whole pool ({threads} threads)")


def header(args):
    lines = [f"CPU: {pc.cpu_summary()}; {args.threads} threads on both sides",
             f"batch {args.batch}; images {args.image_size}x{args.image_size}; SGD lr "
             f"{SGD['lr']}, momentum {SGD['momentum']}, weight decay {SGD['weight_decay']}; "
             f"{args.rounds} alternating rounds after {args.warmup} warm-up steps per side"]
    lines += configurations(args)
    lines += torch_env.torch_report(args, args.threads)
    return lines


# ---------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated, of " +
                   ", ".join(MODELS))
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds per model")
    p.add_argument("--steps-per-round", type=int, default=0,
                   help="steps per side per round (0: as many as take the slowest side about "
                        f"{pc.ROUND_S} s, 1 to 200)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps per side")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                   help="threads for both sides (default: the CPUs this process may use)")
    p.add_argument("--batch", type=int, default=8, help="images or sequences per batch")
    p.add_argument("--image-size", type=int, default=64,
                   help=f"image height and width (a multiple of {VIT_PATCH} for vit_b_16; "
                        "alexnet needs 63 or more)")
    p.add_argument("--torch-foreach", choices=("auto", "on", "off"), default="auto",
                   help="torch optimizer path: auto picks the faster of foreach and the "
                        "per-parameter loop during warm-up")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--user-blas-core", help=argparse.SUPPRESS)
    p.add_argument("--forced-blas-core", help=argparse.SUPPRESS)
    args = p.parse_args()
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        p.error(f"unknown models {', '.join(unknown)}; known: {', '.join(MODELS)}")
    args.models = names
    return args


def main():
    args = parse_args()
    if args.user_blas_core is None:
        if importlib.util.find_spec("torch") is None:
            sys.exit(f"{sys.executable} has no torch: run with /usr/bin/python3 (python3-torch)")
        return pc.settle_environment(__file__)  # does not return
    try:
        import wholestep.torch as wst
    except ImportError as e:
        sys.exit(f"cannot import wholestep.torch ({e}): build the package and set "
                 f"PYTHONPATH=build/python")
    torch_env.require_optimized_blas("torchvision_compare")
    require_peers()
    pc.set_torch_threads(args.threads)
    wst.set_num_threads(args.threads)
    lines = header(args)
    print("\n".join(lines), flush=True)
    results = {}
    for name in args.models:
        print(f"{name}...", file=sys.stderr, flush=True)
        results[name] = compare_model(name, args)
        gc.collect()
    table = markdown_table(results, args.rounds)
    print()
    print(table)
    print()
    print(LEGEND)
    print(teams_line(results, args.threads))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": lines, "threads": args.threads, "batch": args.batch,
                       "image_size": args.image_size, "rounds": args.rounds,
                       "warmup": args.warmup, "bert": BERT, "sgd": SGD, "models": results,
                       "geomean": {m: {"speedup": g, "models": n}
                                   for m, (g, n) in geomeans(results).items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
