"""The coverage table's comparison of a step's two sides and its rendering
(torchvision_coverage.py runs the sides)."""

import os


def largest_abs(t):
    return float(t.abs().max()) if t.numel() else 0.0


def differences(workdir):
    """The loss's relative difference; the largest relative difference of a
    tensor's change in the step and of the tensor itself, wholestep against
    eager, as (value, tensor name): max|w - e| / max|e|, the denominator
    floored at 1e-3 of the largest among the tensors of its kind (parameters,
    buffers), as wst.check does (a change that is rounding noise, such as a
    running mean's over channels of zero mean, is not a scale)."""
    import torch
    before = torch.load(os.path.join(workdir, "before.pt"))
    eager = torch.load(os.path.join(workdir, "eager.pt"))
    ws = torch.load(os.path.join(workdir, "wholestep.pt"))
    parameters = set(before["parameters"])
    out = {"loss": abs(ws["loss"] - eager["loss"]) / max(abs(eager["loss"]), 1e-30),
           "integers_equal": all(torch.equal(ws["state"][n], e)
                                 for n, e in eager["state"].items()
                                 if not e.is_floating_point())}
    # Per tensor, in float64 one tensor at a time (the largest models' three
    # states in float64 at once outgrew the machine): max|e| and max|w - e|
    # of its change and of its value.
    stats = {}
    for n, e in eager["state"].items():
        if not e.is_floating_point():
            continue
        w, e, b = ws["state"][n].double(), e.double(), before["state"][n].double()
        stats[n] = {"change": (largest_abs(e - b), largest_abs(w - e)),
                    "value": (largest_abs(e), largest_abs(w - e))}
    for key in ("change", "value"):
        scale = {kind: max([s[key][0] for n, s in stats.items() if (n in parameters) == kind]
                           or [0.0]) for kind in (True, False)}
        worst = (0.0, "")
        for n, s in stats.items():
            denominator = max(s[key][0], 1e-3 * scale[n in parameters])
            if denominator:
                worst = max(worst, (s[key][1] / denominator, n))
        out[key] = worst
    return out


def fmt(x, spec):
    return "" if x is None else spec.format(x)


def cell(text):
    return str(text).replace("|", "\\|")


def peak_mib(side):
    """The side's last reported peak resident memory (it only grows)."""
    reached = [side[p]["rss_mib"] for p in ("imported", "stepped", "timed") if p in side]
    return reached[-1] if reached else None


def worst_text(worst):
    value, tensor = worst
    return f"{value:.1e} ({tensor})" if tensor else "0"


def step_ms(row):
    """Eager's and wholestep's median step times: from their alternating
    rounds in one process when the row has them, else each side's own."""
    both = row["wholestep"].get("alternated")
    if both:
        return both["eager_ms"], both["wholestep_ms"]
    return tuple(row[s].get("timed", {}).get("ms") for s in ("eager", "wholestep"))


def fewer_threads(row):
    """How many of wholestep's timed steps ran on fewer threads than its
    pool (a probe of one thread; the timed steps come after the first)."""
    ws = row["wholestep"]
    return (ws.get("alternated") or ws.get("timed") or {}).get("fewer_threads", 0)


def table_row(row):
    eager, ws = row["eager"], row["wholestep"]
    diff = row.get("diff")
    loss = change = value = ""
    if diff:
        loss = f"{diff['loss']:.1e}"
        change, value = worst_text(diff["change"]), worst_text(diff["value"])
        if not diff["integers_equal"]:
            change += "; integer buffers differ"
    e_ms, w_ms = step_ms(row)
    ratio = e_ms / w_ms if e_ms and w_ms else None
    trains = row["trains"]
    if row.get("eager_error") and not trains.startswith("too large"):
        trains += f" (eager torch: {row['eager_error']})"
    peaks = " / ".join(fmt(peak_mib(s), "{:.0f}") or "-" for s in (eager, ws))
    w_cell, fewer = fmt(w_ms, "{:.1f}"), fewer_threads(row)
    if fewer:
        w_cell += f" ({fewer} steps on one thread)"
    return [row["model"], row["input"], cell(trains), loss, cell(value), cell(change),
            fmt(e_ms, "{:.1f}"), w_cell, fmt(ratio, "{:.2f}x"),
            fmt(ws.get("stepped", {}).get("first_s"), "{:.1f}"), peaks]


COLUMNS = ["model", "input", "trains?", "loss diff", "largest tensor diff",
           "largest change diff", "eager ms", "wholestep ms", "eager / wholestep", "compile s",
           "peak RSS eager / wholestep (MiB)"]
LEGEND = """\
trains?: yes, or the first line of wholestep's error. loss diff: |loss_w - loss_e| / |loss_e| of the
first step. Over the parameters and floating-point buffers after that step (w wholestep, e eager
torch), the tensor named: largest tensor diff max|w - e| / max|e|; largest change diff the same of
the tensor's change in the step (after - before), which a wrong gradient moves far more; each
denominator floored at 1e-3 of the largest among parameters, or among buffers. ms: median per
step after warm-up (wholestep's past its first probe of one thread), both sides alternating in one
process (rounds of a few steps each); a wholestep step on one thread among them is counted beside
its time. compile:
wholestep's first step, trace included. peak RSS: VmHWM of each side's own process (imports
included: see the baseline above)."""


def markdown_table(rows):
    def line(cells):
        return "| " + " | ".join(cells) + " |"
    return "\n".join([line(COLUMNS), line(["---"] * len(COLUMNS))]
                     + [line(table_row(r)) for r in rows])
