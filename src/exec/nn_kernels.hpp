// Kernels of the neural-network ops: convolution, pooling, gather/scatter
// in their reference forms (any floating type, obviously correct loops: the
// oracle), and the counter-based random generator (philox.hpp). f32
// convolutions run on the compute backend (dnnl_backend.hpp).
//
// Layouts are PyTorch's: activations NCHW, conv weights [O, C/groups, KH, KW],
// all contiguous row-major.
#pragma once

#include <cstdint>

#include "exec/philox.hpp"
#include "wholestep/dtype.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {

// A 2-d convolution's sizes. Output size per spatial dim:
//   oh = (h + 2*ph - dh*(kh-1) - 1) / sh + 1
struct Conv2dGeom {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input [n, c, h, w]
  int64_t o = 0, kh = 0, kw = 0;       // weight [o, c/groups, kh, kw]
  int64_t oh = 0, ow = 0;              // output [n, o, oh, ow]
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t groups = 1;
};

// y = conv(x, w), no bias.
template <class T>
void conv2d_ref(const Conv2dGeom& g, const T* x, const T* w, T* y);
// dx from dy [n, o, oh, ow] and w (the transposed convolution).
template <class T>
void conv2d_input_grad_ref(const Conv2dGeom& g, const T* dy, const T* w, T* dx);
// dw from x and dy.
template <class T>
void conv2d_weight_grad_ref(const Conv2dGeom& g, const T* x, const T* dy, T* dw);

// 2-d pooling over [n, c, h, w] -> [n, c, oh, ow]. Padding counts as -inf
// for max; for avg it counts as zeros in the divisor when count_include_pad
// (PyTorch's default), else the divisor is the number of in-bounds elements.
struct Pool2dGeom {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t kh = 1, kw = 1, oh = 0, ow = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0;
  bool count_include_pad = true;
};

template <class T>
void max_pool2d_ref(const Pool2dGeom& g, const T* x, T* y);
// The gradient goes to the first maximal element of each window (PyTorch's
// choice); windows overlap, so contributions add.
template <class T>
void max_pool2d_grad_ref(const Pool2dGeom& g, const T* x, const T* dy, T* dx);
template <class T>
void avg_pool2d_ref(const Pool2dGeom& g, const T* x, T* y);
template <class T>
void avg_pool2d_grad_ref(const Pool2dGeom& g, const T* dy, T* dx);

// out[i, :] = table[idx[i], :] for i < n; table is [rows, width]. An index
// outside [0, rows) throws ws::Error naming the index, its position, `rows`
// and `loc`.
template <class T>
void gather_rows(const T* table, int64_t rows, int64_t width, const int64_t* idx, int64_t n, T* out,
                 const SourceLoc& loc);
// out[idx[i], :] += src[i, :]; out ([rows, width]) is zeroed first. Same
// index check as gather_rows.
template <class T>
void scatter_add_rows(const T* src, int64_t width, const int64_t* idx, int64_t n, int64_t rows,
                      T* out, const SourceLoc& loc);

}  // namespace ws::exec
