"""Small configurations of the models the PyTorch frontend is tested on,
and a 10-step comparison against torch eager."""

import copy

import torch
import torchvision

nn = torch.nn
F = nn.functional


class TokenLM(nn.Module):
    """A BERT-like encoder: embedding, positional embedding, a
    TransformerEncoder, a linear LM head over the vocabulary."""

    def __init__(self, vocab=50, d=32, heads=2, ff=64, layers=2, context=8, dropout=0.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(context, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        h = self.embed(tokens) + self.pos
        return self.head(self.encoder(h))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def small_vit():
    return torchvision.models.VisionTransformer(image_size=32, patch_size=4, num_layers=2,
                                                num_heads=2, hidden_dim=64, mlp_dim=128,
                                                num_classes=10)


# name -> (make model, make batch(generator), loss function)
def _images(n, size):
    def batch(gen):
        return (torch.randn(n, 3, size, size, generator=gen),
                torch.randint(0, 10, (n,), generator=gen))
    return batch


def _tokens(gen):
    x = torch.randint(0, 50, (4, 8), generator=gen)
    return x, torch.randint(0, 50, (4, 8), generator=gen)


MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), _images(16, 64),
                 F.cross_entropy),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(num_classes=10, dropout=0.0), _images(8, 64),
                     F.cross_entropy),
    "vit": (small_vit, _images(4, 32), F.cross_entropy),
    "transformer_lm": (TokenLM, _tokens, lm_loss),
}

OPTIMIZERS = {
    "sgd_nesterov_wd": lambda p, scale=1: torch.optim.SGD(p, lr=0.002 * scale, momentum=0.9,
                                                          nesterov=True, weight_decay=5e-4),
    "adam": lambda p, scale=1: torch.optim.Adam(p, lr=1e-4 * scale),
    "adamw": lambda p, scale=1: torch.optim.AdamW(p, lr=1e-4 * scale, weight_decay=0.01),
}

# Learning-rate scales: the ReLU networks with BatchNorm over few values
# per channel train chaotically at these batch sizes (float32 torch itself
# leaves float64 by 1e-3 within ten steps at the scale of 1: a sign flip of
# an input within rounding of zero grows step by step); a smaller step
# keeps the comparison meaningful.
LR_SCALE = {"mobilenet_v2": 0.1, "resnet18": 0.1}


def make(name, seed=0):
    make_model, make_batch, loss_fn = MODELS[name]
    torch.manual_seed(seed)
    model = make_model()
    gen = torch.Generator().manual_seed(seed + 1)
    batches = [make_batch(gen) for _ in range(11)]
    return model, batches, loss_fn


def eager_steps(model, opt, loss_fn, batches):
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def gradients(model, loss_fn, batch):
    model.zero_grad(set_to_none=True)
    loss_fn(model(batch[0]), batch[1]).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def distance(a, b):
    """The largest element difference between two state dicts' float
    tensors, relative to the tensor's largest magnitude (plus 1)."""
    worst = 0.0
    for k, v in a.items():
        if torch.is_tensor(v) and v.is_floating_point():
            w = b[k].to(v.dtype)
            worst = max(worst, ((v.double() - w.double()).abs().max()
                                / (1 + v.double().abs().max())).item())
    return worst


def gradient_error(grads, ref):
    """The largest gradient difference from `ref`, per tensor relative to
    its largest magnitude, floored at 1e-3 of the largest of any tensor (a
    gradient that is zero in float64 is rounding noise in float32)."""
    top = max(g.double().abs().max().item() for g in ref.values())
    return max(((grads[k].double() - g.double()).abs().max()
                / max(g.double().abs().max().item(), 1e-3 * top)).item()
               for k, g in ref.items())


def permuted(batches, perm):
    return [(x[perm], y[perm]) for x, y in batches]


def float64_copy(model):
    return copy.deepcopy(model).double()


def as_float64(batches):
    return [(x.double() if x.is_floating_point() else x, y) for x, y in batches]


__all__ = ["MODELS", "OPTIMIZERS", "LR_SCALE", "make", "eager_steps", "gradients", "gradient_error",
           "distance",
           "permuted", "float64_copy", "as_float64"]
