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


class MaskedGPT(nn.Module):
    """The GPT most copied: attention masked by a registered lower-triangular
    buffer with masked_fill, pre-norm blocks with GELU, tied nothing."""

    def __init__(self, vocab=50, d=32, heads=2, context=8, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(nn.ModuleDict({
            "ln1": nn.LayerNorm(d), "qkv": nn.Linear(d, 3 * d), "proj": nn.Linear(d, d),
            "ln2": nn.LayerNorm(d), "fc": nn.Linear(d, 4 * d), "out": nn.Linear(4 * d, d)})
            for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.heads = heads
        self.register_buffer("bias", torch.tril(torch.ones(context, context))
                             .view(1, 1, context, context))

    def forward(self, idx):
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T))
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln1"](x)).split(x.shape[-1], dim=2)
            q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / k.shape[-1] ** 0.5)
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(B, T, -1)
            x = x + blk["proj"](y)
            x = x + blk["out"](F.gelu(blk["fc"](blk["ln2"](x))))
        return self.head(self.ln(x))


class UNet(nn.Module):
    """A two-level UNet: convolutions with BatchNorm, max pooling down,
    transposed convolutions up, skip connections, per-pixel classes."""

    def __init__(self, classes=3, c=8):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o),
                                 nn.ReLU(inplace=True), nn.Conv2d(o, o, 3, padding=1),
                                 nn.ReLU())
        self.down1, self.down2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = block(4 * c, 2 * c)
        self.up1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.dec1 = block(2 * c, c)
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        m = self.mid(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(m), d2], 1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], 1))
        return self.head(u1)


class AudioNet(nn.Module):
    """A 1-d convolutional classifier of waveforms (Conv1d, BatchNorm1d,
    MaxPool1d, LeakyReLU, global average)."""

    def __init__(self, classes=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(1, 8, 9, stride=2, padding=4), nn.BatchNorm1d(8), nn.LeakyReLU(0.1),
            nn.MaxPool1d(2), nn.Conv1d(8, 16, 5, padding=2), nn.BatchNorm1d(16), nn.ELU(),
            nn.MaxPool1d(2, ceil_mode=True), nn.Conv1d(16, 16, 3, dilation=2, padding=2),
            nn.Hardswish())
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        return self.fc(self.net(x).mean(-1))


class GroupNormNet(nn.Module):
    """A CNN with GroupNorm and SiLU, upsampling and padding in between."""

    def __init__(self, classes=10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(),
            nn.MaxPool2d(3, 2, ceil_mode=True), nn.Conv2d(16, 16, 3), nn.GroupNorm(2, 16),
            nn.Mish(), nn.Upsample(scale_factor=2, mode="bilinear"), nn.ReflectionPad2d(1),
            nn.Conv2d(16, 32, 3, stride=2), nn.Softplus(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(32, classes))

    def forward(self, x):
        return self.net(x)


class CharRNN(nn.Module):
    """A character model: an embedding, a two-layer recurrent net (LSTM,
    GRU or RNN; batch first or not, one way or both), a linear head."""

    def __init__(self, kind="LSTM", batch_first=True, bidirectional=False, vocab=50, d=16,
                 hidden=32):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.rnn = getattr(nn, kind)(d, hidden, num_layers=2, batch_first=batch_first,
                                     bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), vocab)
        self.batch_first = batch_first

    def forward(self, tokens):
        x = self.embed(tokens if self.batch_first else tokens.t())
        h, _ = self.rnn(x)
        return self.head(h if self.batch_first else h.transpose(0, 1))


class SpatialTransformer(nn.Module):
    """The spatial transformer network of PyTorch's tutorial, smaller: a
    localization net predicts an affine transform (initialized to the
    identity), F.affine_grid and F.grid_sample warp the input with it, a
    small CNN classifies the warped image."""

    def __init__(self, classes=10):
        super().__init__()
        self.localization = nn.Sequential(nn.Conv2d(3, 8, 5), nn.MaxPool2d(2), nn.ReLU(),
                                          nn.Conv2d(8, 10, 3), nn.AdaptiveMaxPool2d(3),
                                          nn.ReLU())
        self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(), nn.Linear(32, 6))
        with torch.no_grad():
            self.fc_loc[2].weight.zero_()
            self.fc_loc[2].bias.copy_(torch.tensor([1.0, 0, 0, 0, 1, 0]))
        self.classify = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                                      nn.Flatten(), nn.Linear(32, classes))

    def forward(self, x):
        theta = self.fc_loc(self.localization(x).flatten(1)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return self.classify(F.grid_sample(x, grid, align_corners=False))


class SNDiscriminator(nn.Module):
    """A GAN discriminator as SNGAN writes it: every convolution and the
    head spectrally normalized (nn.utils.spectral_norm: in each training
    forward a power iteration updates the buffers u and v in place, then the
    weight is divided by its estimated largest singular value), one with two
    iterations, one transposed (normalized along dim 1), LeakyReLU."""

    def __init__(self, classes=10):
        super().__init__()
        sn = nn.utils.spectral_norm
        self.body = nn.Sequential(
            sn(nn.Conv2d(3, 16, 3, 1, 1)), nn.LeakyReLU(0.1),
            sn(nn.Conv2d(16, 32, 4, 2, 1), n_power_iterations=2), nn.LeakyReLU(0.1),
            sn(nn.ConvTranspose2d(32, 16, 4, 2, 1)), nn.LeakyReLU(0.1),
            nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.head = sn(nn.Linear(64, classes))

    def forward(self, x):
        return self.head(self.body(x))


class SpeechCTC(nn.Module):
    """A speech recognizer as CTC tutorials write it: Conv1d features over
    a spectrogram [N, F, T], BatchNorm1d, a bidirectional GRU, per-frame
    log-probabilities of the classes (blank 0) as [T, N, C]."""

    def __init__(self, features=16, hidden=24, classes=8):
        super().__init__()
        self.conv = nn.Conv1d(features, hidden, 3, padding=1)
        self.bn = nn.BatchNorm1d(hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x))).transpose(1, 2)
        h, _ = self.gru(h)
        return self.out(h).log_softmax(2).transpose(0, 1)


def ctc_loss(log_probs, y):
    """y [N, S + 2]: each sample's targets padded to S, then its input and
    target lengths (a sample too short for its targets costs 0)."""
    return F.ctc_loss(log_probs, y[:, :-2], y[:, -2], y[:, -1], zero_infinity=True)


def segmentation_loss(logits, target):
    return F.cross_entropy(logits, target, ignore_index=2)


def smoothed_loss(logits, target):
    return F.cross_entropy(logits, target, label_smoothing=0.1)


# name -> (make model, make batch(generator), loss function)
def _images(n, size):
    def batch(gen):
        return (torch.randn(n, 3, size, size, generator=gen),
                torch.randint(0, 10, (n,), generator=gen))
    return batch


def _tokens(gen):
    x = torch.randint(0, 50, (4, 8), generator=gen)
    return x, torch.randint(0, 50, (4, 8), generator=gen)


def _waves(gen):
    return torch.randn(8, 1, 64, generator=gen), torch.randint(0, 10, (8,), generator=gen)


def utterances(gen, n=6, frames=20, features=16, classes=8, most=6):
    """Spectrograms [n, features, frames] and y [n, most + 2]: up to `most`
    targets of classes 1 to classes - 1 (repeats included), then input
    lengths of frames - 6 to frames and the target lengths."""
    target_lengths = torch.randint(1, most + 1, (n, 1), generator=gen)
    input_lengths = torch.randint(frames - 6, frames + 1, (n, 1), generator=gen)
    targets = torch.randint(1, classes, (n, most), generator=gen)
    return (torch.randn(n, features, frames, generator=gen),
            torch.cat([targets, input_lengths, target_lengths], 1))


def _utterances(gen):
    return utterances(gen)


def _pixels(gen):
    return (torch.randn(2, 3, 16, 16, generator=gen),
            torch.randint(0, 3, (2, 16, 16), generator=gen))


MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), _images(16, 64),
                 F.cross_entropy),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(num_classes=10, dropout=0.0),
                     _images(8, 64), F.cross_entropy),
    "vit": (small_vit, _images(4, 32), F.cross_entropy),
    "transformer_lm": (TokenLM, _tokens, lm_loss),
    "gpt_masked_fill": (MaskedGPT, _tokens, lm_loss),
    "unet": (UNet, _pixels, segmentation_loss),
    "audio_conv1d": (AudioNet, _waves, F.cross_entropy),
    "groupnorm_silu": (GroupNormNet, _images(4, 20), smoothed_loss),
    "char_lstm": (CharRNN, _tokens, lm_loss),
    "char_gru": (lambda: CharRNN("GRU", batch_first=False, bidirectional=True), _tokens, lm_loss),
    "char_rnn": (lambda: CharRNN("RNN"), _tokens, lm_loss),
    "speech_ctc": (SpeechCTC, _utterances, ctc_loss),
    "spatial_transformer": (SpatialTransformer, _images(4, 20), F.cross_entropy),
    "sn_discriminator": (SNDiscriminator, _images(4, 16), F.cross_entropy),
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


def largest_gradient(ref):
    return max(g.double().abs().max().item() for g in ref.values())


def zero_in_float64(ref):
    """The names of the gradients of `ref` (float64) that are zero but for
    float64's rounding: at most 1e-12 of the largest of any tensor (a bias
    before a BatchNorm, whose exact gradient is 0)."""
    top = largest_gradient(ref)
    return {k for k, g in ref.items() if g.double().abs().max().item() <= 1e-12 * top}


def gradient_error(grads, ref, skip=()):
    """The largest gradient difference from `ref`, per tensor relative to
    its largest magnitude, floored at 1e-3 of the largest of any tensor (a
    small gradient is rounding noise in float32); tensors in `skip` left
    out."""
    top = largest_gradient(ref)
    return max(((grads[k].double() - g.double()).abs().max()
                / max(g.double().abs().max().item(), 1e-3 * top)).item()
               for k, g in ref.items() if k not in skip)


def permuted(batches, perm):
    return [(x[perm], y[perm]) for x, y in batches]


def float64_copy(model):
    return copy.deepcopy(model).double()


def as_float64(batches):
    return [(x.double() if x.is_floating_point() else x, y) for x, y in batches]


__all__ = ["MODELS", "OPTIMIZERS", "LR_SCALE", "make", "eager_steps", "gradients", "gradient_error",
           "largest_gradient", "zero_in_float64",
           "distance",
           "permuted", "float64_copy", "as_float64"]
