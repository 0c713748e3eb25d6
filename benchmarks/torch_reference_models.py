"""wholestep's reference models (mlp, tiny_mlp, cnn, gpt) in PyTorch, built
from the specs the peer_server reports, with their losses, optimizers and
batches: the PyTorch side of pytorch_compare.py."""

def parse_type(text):
    """"f32[128,784]" -> ("f32", [128, 784])."""
    dtype, _, dims = text.partition("[")
    return dtype, [int(d) for d in dims.rstrip("]").split(",") if d]


def make_mlp(sizes):
    """Linear layers fc1, fc2, ... with ReLU between; the input is flattened."""
    import torch.nn as nn

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.n = len(sizes) - 1
            for i in range(self.n):
                self.add_module(f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))

        def forward(self, x):
            h = x.flatten(1)
            for i in range(self.n):
                h = getattr(self, f"fc{i + 1}")(h)
                if i + 1 < self.n:
                    h = h.relu()
            return h

    return Mlp()


def make_cnn():
    """Three Conv(3x3, pad 1, no bias)+BatchNorm2d+ReLU blocks, mean pool, Linear."""
    import torch.nn as nn

    class GlobalAvgPool2d(nn.Module):
        def forward(self, x):
            return x.mean((2, 3))

    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            layers = []
            for cin, cout, stride in ((1, 32, 1), (32, 64, 2), (64, 64, 2)):
                layers += [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
                           nn.BatchNorm2d(cout), nn.ReLU()]
            self.net = nn.Sequential(*layers, GlobalAvgPool2d(), nn.Linear(64, 10))

        def forward(self, x):
            return self.net(x.view(x.shape[0], 1, 28, 28) if x.dim() == 2 else x)

    return Cnn()


def make_gpt(vocab, context, d_model, heads, layers, mlp_ratio, dropout):
    """Byte-level GPT: pre-LayerNorm blocks, causal attention, exact (erf) GELU."""
    import math
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.proj = nn.Linear(d_model, d_model)
            self.attn_dropout = nn.Dropout(dropout)
            self.allowed = torch.ones(context, context, dtype=torch.bool).tril()  # not a buffer

        def forward(self, x):
            B, T, D = x.shape
            q, k, v = (t.view(B, T, heads, D // heads).transpose(1, 2)
                       for t in self.qkv(x).split(D, dim=2))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // heads))
            att = att.masked_fill(~self.allowed[:T, :T], float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            return self.proj((att @ v).transpose(1, 2).reshape(B, T, D))

    class GptBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.attn = CausalSelfAttention()
            self.ln2 = nn.LayerNorm(d_model)
            self.fc1 = nn.Linear(d_model, mlp_ratio * d_model)
            self.fc2 = nn.Linear(mlp_ratio * d_model, d_model)
            self.act = nn.GELU()  # exact, as ws::nn::GELU's default
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            h = x + self.drop(self.attn(self.ln1(x)))
            return h + self.drop(self.fc2(self.act(self.fc1(self.ln2(h)))))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(context, d_model)
            for i in range(layers):
                self.add_module(f"block{i}", GptBlock())
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab)

        def forward(self, tokens):
            h = self.tok(tokens) + self.pos.weight[: tokens.shape[1]]
            for i in range(layers):
                h = getattr(self, f"block{i}")(h)
            return self.head(self.ln_f(h))

    return Gpt()


def make_model(spec, dropout=None):
    name = spec["name"].split(":")[0]  # "mlp:adam": the mlp, with Adam
    if name == "cnn":
        return make_cnn()
    if name == "gpt":
        keys = ("vocab", "context", "d_model", "heads", "layers", "mlp_ratio")
        p = float(spec["dropout"]) if dropout is None else dropout
        return make_gpt(*(int(spec[k]) for k in keys), dropout=p)
    return make_mlp([int(s) for s in spec["sizes"].split(",")])


def loss_of(spec, model, x, y):
    """Mean cross-entropy; gpt predicts every position's next byte."""
    import torch.nn.functional as F
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def make_optimizer(spec, model, foreach):
    """The optimizer and hyperparameters the wholestep side reports."""
    import torch
    kind, lr, wd = spec["optimizer"], float(spec["lr"]), float(spec["weight_decay"])
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=float(spec["momentum"]),
                               dampening=float(spec["dampening"]), weight_decay=wd,
                               nesterov=spec["nesterov"] == "1", foreach=foreach)
    cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    return cls(model.parameters(), lr=lr, betas=(float(spec["beta1"]), float(spec["beta2"])),
               eps=float(spec["eps"]), weight_decay=wd, foreach=foreach)


def random_batch(spec, seed=0):
    """Random data of the wholestep batch's shapes and dtypes: floats in [-1, 1),
    labels in [0, classes), tokens in [0, vocab)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    high = int(spec.get("vocab", 10))

    def make(text):
        dtype, shape = parse_type(text)
        if dtype == "i64":
            return torch.randint(0, high, shape, generator=g, dtype=torch.int64)
        return torch.rand(shape, generator=g) * 2 - 1

    return make(spec["x"]), make(spec["y"])
