"""Packed sequences (nn.utils.rnn.pack_padded_sequence, then nn.LSTM,
nn.GRU or nn.RNN, then pad_packed_sequence) while a model is traced
(_traceable.traceable() enters and leaves it).

torch packs a padded batch into the rows of its sequences' valid steps,
a shape that is a value of the data (the sum of the lengths), and reads
the lengths to do it. While tracing, the packed batch is the padded batch
itself, time-major, with its lengths kept beside it; a recurrent layer
given one runs over every step and keeps each sequence's state past its
last step where it was (its output there zero), so each sequence's outputs
and last state are those of torch's packed run; pad_packed_sequence
writes padding_value past each length. The functions are caught where
torch's own call them (torch._VF), so they are whatever name the user
imported them under; the lengths' sortedness (enforce_sorted) and range
are checks of the step, failing it with torch's messages.

The packed batch's steps are those of the padded input, so the longest
sequence must fill it (a batch padded to its longest sequence, as a
collate function pads it): otherwise the packed shape would be a value of
the data, and the step fails saying so. A projection (LSTM's proj_size)
is not translated."""

import torch
from torch.nn.utils.rnn import PackedSequence

from ._ir import TRACED

TRACED.append(("`nn.utils.rnn.pack_padded_sequence` into `nn.LSTM`, `nn.GRU`, `nn.RNN`, "
               "`pad_packed_sequence` (rewritten while tracing)", ["check (wholestep)"],
               "the longest sequence fills the padded batch; no `proj_size`; the packed "
               "batch's `data` is the padded batch, time-major"))

F = torch.nn.functional

# id(time-major padded data) -> (that data, its int64 lengths [B])
_PADDED = {}


def _pack(input, lengths, batch_first):
    """torch._VF._pack_padded_sequence: (data, batch_sizes), the data the
    padded batch time-major, batch_sizes how many sequences reach each step
    (torch's, where the longest sequence fills the batch)."""
    data = input.transpose(0, 1) if batch_first else input * 1  # a tensor of its own
    steps = data.shape[0]
    lengths = torch.ops.wholestep.check(
        lengths, lengths > 0,
        "Length of all samples has to be greater than 0, but found an element in 'lengths' "
        "that is <= 0")
    if lengths.numel() > 1:
        lengths = torch.ops.wholestep.check(
            lengths, (lengths[:-1] >= lengths[1:]).all(),
            "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
            "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence "
            "to sidestep this requirement if you do not need ONNX exportability.")
    lengths = torch.ops.wholestep.check(
        lengths, (lengths <= steps).all() & (lengths == steps).any(),
        f"pack_padded_sequence: the longest sequence does not fill the padded batch's {steps} "
        f"steps: the packed batch's shape would be a value of the data (pad each batch to its "
        f"longest sequence)")
    _PADDED[id(data)] = (data, lengths)
    batch_sizes = (lengths[None, :] > torch.arange(steps)[:, None]).sum(1)
    return data, batch_sizes


def _pad(data, batch_sizes, batch_first, padding_value, total_length):
    """torch._VF._pad_packed_sequence of a batch _pack made."""
    if id(data) not in _PADDED:
        raise NotImplementedError("pad_packed_sequence of a PackedSequence wholestep did not "
                                  "make (pack_padded_sequence's, or a recurrent layer's)")
    data, lengths = _PADDED[id(data)]
    steps = data.shape[0]
    valid = torch.arange(steps)[:, None] < lengths[None, :]
    valid = valid.reshape(*valid.shape, *[1] * (data.dim() - 2))
    out = torch.where(valid, data, torch.full_like(data, padding_value))
    if total_length > steps:
        out = torch.cat([out, out.new_full((total_length - steps, *out.shape[1:]),
                                           padding_value)])
    return (out.transpose(0, 1) if batch_first else out), lengths


def _cell(mode, gates_x, gates_h, h, c):
    """One step of a layer from its input's and state's projections and its
    state: the new state (h, c), as torch's cells compute it."""
    if mode == "LSTM":
        i, f, g, o = (gates_h + gates_x).chunk(4, -1)
        c = f.sigmoid() * c + i.sigmoid() * g.tanh()
        return o.sigmoid() * c.tanh(), c
    if mode == "GRU":
        xr, xz, xn = gates_x.chunk(3, -1)
        hr, hz, hn = gates_h.chunk(3, -1)
        reset, update = (xr + hr).sigmoid(), (xz + hz).sigmoid()
        new = (xn + hn * reset).tanh()
        return (h - new) * update + new, None
    pre = gates_x + gates_h
    return (pre.tanh() if mode == "RNN_TANH" else pre.relu()), None


def _layer(module, mode, x, h, c, valid, layer, reverse):
    """One direction of one layer over every step: its outputs [T, B, H]
    (zero past each length) and last state."""
    suffix = f"_l{layer}" + ("_reverse" if reverse else "")
    w_ih, w_hh = getattr(module, "weight_ih" + suffix), getattr(module, "weight_hh" + suffix)
    b_ih = getattr(module, "bias_ih" + suffix) if module.bias else None
    b_hh = getattr(module, "bias_hh" + suffix) if module.bias else None
    gates_x = F.linear(x, w_ih, b_ih)
    steps = x.shape[0]
    out = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        gates_h = F.linear(h, w_hh, b_hh)
        new_h, new_c = _cell(mode, gates_x[t], gates_h, h, c)
        keep = valid[t][:, None]
        h = torch.where(keep, new_h, h)
        if c is not None:
            c = torch.where(keep, new_c, c)
        out[t] = torch.where(keep, new_h, torch.zeros_like(new_h))
    return torch.stack(out), h, c


def _packed_forward(module, packed, hx):
    """A recurrent layer over a batch _pack made: (PackedSequence, state),
    as torch's forward returns them."""
    mode = module.mode
    if getattr(module, "proj_size", 0):
        raise NotImplementedError("an LSTM with proj_size over a packed sequence")
    data, lengths = _PADDED[id(packed.data)]
    steps, batch = data.shape[:2]
    dirs = 2 if module.bidirectional else 1
    size = (module.num_layers * dirs, batch, module.hidden_size)
    if hx is None:
        h0 = data.new_zeros(size)
        c0 = data.new_zeros(size) if mode == "LSTM" else None
    else:
        h0, c0 = hx if mode == "LSTM" else (hx, None)
        if packed.sorted_indices is not None:
            h0 = h0.index_select(1, packed.sorted_indices)
            c0 = None if c0 is None else c0.index_select(1, packed.sorted_indices)
    valid = torch.arange(steps)[:, None] < lengths[None, :]
    x, last_h, last_c = data, [], []
    for layer in range(module.num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            out, h, c = _layer(module, mode, x, h0[k], None if c0 is None else c0[k], valid,
                               layer, d == 1)
            outs.append(out)
            last_h.append(h)
            last_c.append(c)
        x = torch.cat(outs, -1) if dirs == 2 else outs[0]
        if module.dropout and module.training and layer < module.num_layers - 1:
            x = F.dropout(x, module.dropout, True)
    _PADDED[id(x)] = (x, lengths)
    output = PackedSequence(x, packed.batch_sizes, packed.sorted_indices,
                            packed.unsorted_indices)
    h_n = torch.stack(last_h)
    c_n = torch.stack(last_c) if mode == "LSTM" else None
    if packed.unsorted_indices is not None:
        h_n = h_n.index_select(1, packed.unsorted_indices)
        c_n = None if c_n is None else c_n.index_select(1, packed.unsorted_indices)
    return output, ((h_n, c_n) if mode == "LSTM" else h_n)


def _forward(original):
    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence) and id(input.data) in _PADDED:
            return _packed_forward(self, input, hx)
        if isinstance(input, PackedSequence):
            raise NotImplementedError("a recurrent layer over a PackedSequence wholestep did "
                                      "not make (pack_sequence's, or one built by hand)")
        return original(self, input, hx)
    return forward


def enter():
    _PADDED.clear()
    kept = [(cls, "forward", cls.forward)
            for cls in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU)]
    for cls in (torch.nn.RNN, torch.nn.LSTM, torch.nn.GRU):
        cls.forward = _forward(cls.forward)
    # torch._VF looks its functions up in torch's C module: set here, they
    # are found first, and deleted they are looked up there again
    torch._VF._pack_padded_sequence = _pack
    torch._VF._pad_packed_sequence = _pad
    return kept


def leave(kept):
    _PADDED.clear()
    for name in ("_pack_padded_sequence", "_pad_packed_sequence"):
        torch._VF.__dict__.pop(name, None)
    for owner, name, original in kept:
        setattr(owner, name, original)
