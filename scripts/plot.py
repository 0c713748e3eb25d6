#!/usr/bin/python3
"""Draws the training curves of a `wholestep train --metrics FILE` run.

    /usr/bin/python3 scripts/plot.py runs/cnn/metrics.jsonl [-o curves.png]

Reads the metrics file (JSON Lines: "run", "train", "eval" and "sample"
records) and writes a PNG (default: the metrics file's name with .png): the
training loss per logged step with the held-out loss of each evaluation, and
beside it the evaluation accuracy where the model has one. A resumed run
appends a "run" record saying the step it restarted from; records of the
earlier part past that step (logged before it was stopped, then trained
again) are dropped. Uses Debian's python3-matplotlib.

Errors (a missing, empty or malformed file) are one line on stderr and exit
status 2; a missing matplotlib is exit status 1 naming the package.
"""
import argparse
import json
import math
import os
import sys


class MetricsError(Exception):
    pass


def read_metrics(path):
    """The train and eval records of the file, and the run's configuration."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except FileNotFoundError:
        raise MetricsError(f"{path}: no such file")
    except IsADirectoryError:
        raise MetricsError(f"{path}: is a directory, not a metrics file")
    except OSError as e:
        raise MetricsError(f"{path}: cannot read it ({e.strerror})")
    if not any(line.strip() for line in lines):
        raise MetricsError(f"{path}: the file is empty; a run writes its records with "
                           "`wholestep train --metrics FILE`")
    train, evals, config = [], [], {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            # A run killed while writing leaves at most its last line cut.
            if number == len(lines) and not line.endswith("\n"):
                print(f"plot.py: {where}: the last line is cut short (a killed run?); "
                      "ignored", file=sys.stderr)
                continue
            raise MetricsError(f"{where}: not JSON ({e.msg} at column {e.colno})")
        if not isinstance(record, dict) or "kind" not in record:
            raise MetricsError(f"{where}: a record must be a JSON object with a \"kind\"")
        kind = record["kind"]
        if kind == "run":
            # A (resumed) part of the run starting at this step replaces what
            # an earlier part logged after it.
            start = number_of(record, "step", where)
            config = record.get("config", {}) if isinstance(record.get("config"), dict) else {}
            train = [r for r in train if r["step"] <= start]
            evals = [r for r in evals if r["step"] <= start]
        elif kind in ("train", "eval"):
            number_of(record, "step", where)
            number_of(record, "loss", where, allow_null=True)
            if "accuracy" in record:
                number_of(record, "accuracy", where)
            (train if kind == "train" else evals).append(record)
    if not train:
        raise MetricsError(f"{path}: no \"train\" records; nothing to draw")
    return train, evals, config


def default_title(config, train, evals):
    """"cnn: adam lr 0.01 (cosine), 9370 steps; test accuracy 0.9123"."""
    title = config.get("model", "")
    if "optimizer" in config:
        title += f": {config['optimizer']} lr {config.get('lr')} ({config.get('schedule')})"
    title += f", {train[-1]['step']} steps"
    if evals and "accuracy" in evals[-1]:
        title += f"; {evals[-1].get('split', 'held-out')} accuracy {evals[-1]['accuracy']:.4f}"
    elif evals:
        title += f"; {evals[-1].get('split', 'held-out')} loss {evals[-1]['loss']:.4f}"
    return title.lstrip(":, ")


def number_of(record, key, where, allow_null=False):
    value = record.get(key, "missing")
    if value is None and allow_null:
        return math.nan  # a logged interval whose steps were all skipped
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricsError(f"{where}: \"{key}\" is {json.dumps(value)}; expected a number")
    return value


def plot(train, evals, title, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    accuracy = [r for r in evals if "accuracy" in r]
    panels = 2 if accuracy else 1
    fig, axes = plt.subplots(1, panels, figsize=(8, 5), dpi=100, squeeze=False)
    loss = axes[0][0]
    loss.plot([r["step"] for r in train], [number_of(r, "loss", "") for r in train],
              lw=1, label="training loss")
    if evals:
        split = evals[-1].get("split", "held-out")
        loss.plot([r["step"] for r in evals], [number_of(r, "loss", "") for r in evals],
                  "o-", ms=3, label=f"{split} loss")
    loss.set_xlabel("step")
    loss.set_ylabel("loss")
    loss.set_yscale("log")
    loss.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    # Between the powers of ten, only 2, 3 and 5 are labelled: all eight
    # crowd where a decade is short.
    def minor(y, _):
        lead = round(y / 10 ** math.floor(math.log10(y) + 1e-9))
        return f"{y:g}" if lead in (2, 3, 5) else ""
    loss.yaxis.set_minor_formatter(FuncFormatter(minor))
    loss.tick_params(axis="y", which="minor", labelsize=7)
    loss.grid(True, which="both", alpha=0.3)
    loss.legend(fontsize=8)
    if accuracy:
        acc = axes[0][1]
        steps = [r["step"] for r in accuracy]
        values = [r["accuracy"] for r in accuracy]
        acc.plot(steps, values, "o-", ms=3, color="tab:green",
                 label=f"{accuracy[-1].get('split', 'held-out')} accuracy")
        acc.annotate(f"{values[-1]:.4f}", (steps[-1], values[-1]), textcoords="offset points",
                     xytext=(-10, -14), ha="right", fontsize=8)
        acc.set_xlabel("step")
        acc.set_ylabel("accuracy")
        acc.grid(True, alpha=0.3)
        acc.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(
        prog="plot.py", description="Draw the loss and accuracy curves of a metrics file.")
    parser.add_argument("metrics", help="a `wholestep train --metrics` file (JSON Lines)")
    parser.add_argument("-o", "--output", help="the PNG to write (default: METRICS with .png)")
    parser.add_argument("--title", help="the figure's title (default: the model, its optimizer "
                        "and the last evaluation)")
    args = parser.parse_args(argv)
    out = args.output or os.path.splitext(args.metrics)[0] + ".png"
    try:
        train, evals, config = read_metrics(args.metrics)
        out_dir = os.path.dirname(out) or "."
        if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
            raise MetricsError(f"-o {out}: cannot write in {out_dir}")
    except MetricsError as e:
        print(f"plot.py: error: {e}", file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot.py: error: matplotlib is missing; install Debian's python3-matplotlib and "
              "run this script with /usr/bin/python3", file=sys.stderr)
        return 1
    plot(train, evals, args.title or default_title(config, train, evals), out)
    print(f"{out}: {len(train)} logged steps, {len(evals)} evaluations")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
