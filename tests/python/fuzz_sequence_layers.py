"""Layers over token features [N, T, D] that torch_fuzz.py draws from
here: recurrent networks (nn.LSTM, nn.GRU, nn.RNN with tanh or ReLU; one
or two layers, one way or both, batch first or not, with or without
biases, LSTM's projection, a learned initial state) and 1-d convolutions
and pooling along the tokens (the features as channels). Dropout between
recurrent layers is not drawn: its random mask makes a step that cannot be
compared with eager torch's."""

import torch

nn = torch.nn

CELLS = ["LSTM", "GRU", "RNN_TANH", "RNN_RELU"]


def pool_out(n, k, s, p, ceil=False):
    """Output length of a window k, stride s, padding p over n (torch's
    rule: with ceil_mode, a last window starting in the padding dropped)."""
    span = n + 2 * p - k
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


class Recurrent(nn.Module):
    """A recurrent network over [N, T, D], handed [T, N, D] when it is not
    batch first; a learned initial state broadcast over the batch (an
    LSTM's cell state starts at zero)."""

    def __init__(self, d, layer):
        super().__init__()
        cell, hidden = layer["cell"], layer["hidden"]
        kw = {"num_layers": layer["layers"], "bias": layer["bias"],
              "batch_first": layer["batch_first"], "bidirectional": layer["bidir"]}
        if cell == "LSTM":
            self.rnn = nn.LSTM(d, hidden, proj_size=layer.get("proj", 0), **kw)
        elif cell == "GRU":
            self.rnn = nn.GRU(d, hidden, **kw)
        else:
            self.rnn = nn.RNN(d, hidden, nonlinearity=cell[4:].lower(), **kw)
        states = layer["layers"] * (2 if layer["bidir"] else 1)
        width = layer.get("proj") or hidden
        self.h0 = nn.Parameter(torch.randn(states, 1, width) * 0.5) if layer.get("h0") else None

    def forward(self, x):
        first = self.rnn.batch_first
        if not first:
            x = x.transpose(0, 1)
        if self.h0 is None:
            y = self.rnn(x)[0]
        else:
            h = self.h0.expand(-1, x.shape[0 if first else 1], -1).contiguous()
            if isinstance(self.rnn, nn.LSTM):
                c = torch.zeros(h.shape[0], h.shape[1], self.rnn.hidden_size, dtype=h.dtype)
                h = (h, c)
            y = self.rnn(x, h)[0]
        return y if first else y.transpose(0, 1)


class AlongTokens(nn.Module):
    """A 1-d layer (convolution, pooling) along the tokens of [N, T, D],
    the features as its channels."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return self.layer(x.transpose(1, 2)).transpose(1, 2)


def gen(r, shape):
    """A random layer spec of this module for ("seq", T, D)."""
    _, t, d = shape
    op = r.choice(["rnn", "rnn", "conv1d", "pool1d"])
    if op == "rnn":
        cell = r.choice(CELLS)
        layer = {"op": "rnn", "cell": cell, "hidden": r.randint(2, 10),
                 "layers": r.choice([1, 1, 2]), "bidir": r.random() < 0.4,
                 "batch_first": r.random() < 0.6, "bias": r.random() < 0.85,
                 "h0": r.random() < 0.25}
        if cell == "LSTM" and layer["hidden"] > 2 and r.random() < 0.25:
            layer["proj"] = r.randint(1, layer["hidden"] - 1)
        return layer
    if op == "conv1d":
        k = r.choice([1, 2, 3, 3, 5])
        out = r.choice([d, r.randint(1, 12)])
        g = d if r.random() < 0.2 and d > 1 else 1
        if g > 1:
            out = d * r.choice([1, 2])
        return {"op": "conv1d", "out": out, "k": k, "s": r.choice([1, 1, 2]),
                "p": r.randint(0, k // 2), "dil": r.choice([1, 1, 2]), "g": g,
                "bias": r.random() < 0.7}
    k = r.choice([2, 2, 3])
    layer = {"op": "pool1d", "max": r.random() < 0.5, "k": k, "s": r.choice([1, 2, k]),
             "p": r.randint(0, k // 2), "ceil": r.random() < 0.3}
    if not layer["max"]:
        layer["cip"] = r.random() < 0.7
    return layer


def make(layer, shape):
    """(module, output shape) of a layer spec of this module on ("seq",
    T, D); None for another module's op; ValueError when it does not fit."""
    op = layer["op"]
    if op not in ("rnn", "conv1d", "pool1d"):
        return None
    _, t, d = shape
    if op == "rnn":
        width = (layer.get("proj") or layer["hidden"]) * (2 if layer["bidir"] else 1)
        if layer.get("proj", 0) >= layer["hidden"]:
            raise ValueError("an LSTM's projection not below its hidden size")
        return Recurrent(d, layer), ("seq", t, width)
    k, s, p = layer["k"], layer["s"], layer["p"]
    if op == "conv1d":
        if d % layer["g"] or layer["out"] % layer["g"]:
            raise ValueError("groups")
        span = layer["dil"] * (k - 1) + 1
        out_t = pool_out(t, span, s, p)
        if out_t < 1:
            raise ValueError("conv1d output empty")
        conv = nn.Conv1d(d, layer["out"], k, s, p, layer["dil"], layer["g"], layer["bias"])
        return AlongTokens(conv), ("seq", out_t, layer["out"])
    if p > k // 2 or t + 2 * p < k:
        raise ValueError("pool1d window")
    out_t = pool_out(t, k, s, p, layer["ceil"])
    if out_t < 1:
        raise ValueError("pool1d output empty")
    pool = (nn.MaxPool1d(k, s, p, ceil_mode=layer["ceil"]) if layer["max"] else
            nn.AvgPool1d(k, s, p, ceil_mode=layer["ceil"],
                         count_include_pad=layer.get("cip", True)))
    return AlongTokens(pool), ("seq", out_t, d)


def simpler(layer):
    """(key, value) changes that make a layer spec of this module simpler."""
    op, out = layer["op"], []
    if op == "rnn":
        for key, value in (("layers", 1), ("bidir", False), ("batch_first", True),
                           ("h0", False), ("bias", True), ("cell", "RNN_TANH")):
            if layer.get(key, value) != value:
                out.append((key, value))
        if layer.get("proj"):
            out.append(("proj", 0))
        if layer["hidden"] > 1 and not layer.get("proj"):
            out.append(("hidden", max(1, layer["hidden"] // 2)))
    elif op == "conv1d":
        for key, value in (("k", 1), ("s", 1), ("p", 0), ("dil", 1), ("g", 1),
                           ("bias", False)):
            if layer[key] != value:
                out.append((key, value))
    elif op == "pool1d":
        for key, value in (("p", 0), ("ceil", False), ("s", layer["k"])):
            if layer[key] != value:
                out.append((key, value))
    return out
