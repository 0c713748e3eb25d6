"""Models written the way PyTorch users write them, at sizes they train:
the coverage table's "users" family (torchvision_coverage.py).

The classes are the PyTorch frontend tests' (tests/python/torch_models.py),
one definition of each; here they are built larger: a character LSTM, GRU
and Elman RNN (two layers of 256 over 64 characters, batch 32), the GPT
whose attention masks with a registered tril buffer, a Transformer encoder
LM, a UNet with transposed convolutions and per-pixel classes, a Conv1d
audio classifier, a GroupNorm/SiLU CNN, a Conv1d/GRU speech recognizer
trained with the CTC loss (80 features, 100 frames, 29 classes) and the
spatial transformer of PyTorch's tutorial (affine_grid, grid_sample).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import torch_models as tm  # noqa: E402

VOCAB = 65  # the characters of a small text corpus


def tokens(batch, length, vocab=VOCAB):
    """(inputs, next-token targets) [batch, length] from a generator."""
    def make(gen):
        return (tm.torch.randint(0, vocab, (batch, length), generator=gen),
                tm.torch.randint(0, vocab, (batch, length), generator=gen))
    return make, (batch, length)


def signals(shape, classes, per_pixel=False):
    """(N(0, 1) inputs of `shape`, labels per sample or per pixel)."""
    def make(gen):
        labels = (shape[0], *shape[2:]) if per_pixel else (shape[0],)
        return (tm.torch.randn(*shape, generator=gen),
                tm.torch.randint(0, classes, labels, generator=gen))
    return make, shape


def utterances(batch, frames, features, classes, most):
    """(spectrograms, targets and lengths) as tm.ctc_loss reads them."""
    def make(gen):
        return tm.utterances(gen, batch, frames, features, classes, most)
    return make, (batch, features, frames)


def char_rnn(kind):
    return lambda: tm.CharRNN(kind, vocab=VOCAB, d=64, hidden=256)


# name -> (build, (make batch(generator), input shape), loss)
MODELS = {
    "char_lstm": (char_rnn("LSTM"), tokens(32, 64), tm.lm_loss),
    "char_gru": (char_rnn("GRU"), tokens(32, 64), tm.lm_loss),
    "char_rnn": (char_rnn("RNN"), tokens(32, 64), tm.lm_loss),
    "gpt_masked_fill": (lambda: tm.MaskedGPT(vocab=VOCAB, d=128, heads=4, context=64, layers=4),
                        tokens(16, 64), tm.lm_loss),
    "transformer_lm": (lambda: tm.TokenLM(vocab=1000, d=128, heads=4, ff=512, layers=2,
                                          context=64),
                       tokens(16, 64, vocab=1000), tm.lm_loss),
    "unet": (lambda: tm.UNet(classes=3, c=16), signals((4, 3, 64, 64), 3, per_pixel=True),
             tm.segmentation_loss),
    "audio_conv1d": (tm.AudioNet, signals((16, 1, 4000), 10), tm.F.cross_entropy),
    "groupnorm_silu": (tm.GroupNormNet, signals((8, 3, 64, 64), 10), tm.smoothed_loss),
    "speech_ctc": (lambda: tm.SpeechCTC(features=80, hidden=128, classes=29),
                   utterances(16, 100, 80, 29, 30), tm.ctc_loss),
    "spatial_transformer": (tm.SpatialTransformer, signals((16, 3, 28, 28), 10),
                            tm.F.cross_entropy),
}
