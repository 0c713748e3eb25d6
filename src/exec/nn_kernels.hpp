// Kernels of the neural-network ops: convolution, pooling, gather/scatter
// in their reference forms (any floating type, obviously correct loops: the
// oracle), and the counter-based random generator (philox.hpp). f32
// convolutions run on the compute backend (dnnl_backend.hpp), f64 ones as
// products of column matrices (f64_products.hpp).
//
// Layouts are PyTorch's: activations NCHW, conv weights [O, C/groups, KH, KW],
// all contiguous row-major.
#pragma once

#include <cstdint>

#include "exec/philox.hpp"
#include "ir/geometry.hpp"
#include "wholestep/dtype.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {

// Sizes, strides and padding: ir/geometry.hpp, shared with shape inference.
using ir::Conv2dGeom;
using ir::Pool2dGeom;

// Input position of output position `o` and kernel tap `k` along one dim.
inline int64_t in_pos(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return o * stride - pad + k * dil;
}

// y = conv(x, w), no bias.
template <class T>
void conv2d_ref(const Conv2dGeom& g, const T* x, const T* w, T* y);
// dx from dy [n, o, oh, ow] and w (the transposed convolution).
template <class T>
void conv2d_input_grad_ref(const Conv2dGeom& g, const T* dy, const T* w, T* dx);
// dw from x and dy.
template <class T>
void conv2d_weight_grad_ref(const Conv2dGeom& g, const T* x, const T* dy, T* dw);

// 2-d pooling over [n, c, h, w] -> [n, c, oh, ow]: see Pool2dGeom.
template <class T>
void max_pool2d_ref(const Pool2dGeom& g, const T* x, T* y);
// The gradient goes to the first maximal element of each window (PyTorch's
// choice); windows overlap, so contributions add.
template <class T>
void max_pool2d_grad_ref(const Pool2dGeom& g, const T* x, const T* dy, T* dx);
// The same results, bit for bit, from vectorized loops over the planes in
// parallel: what programs run. f32 planes must hold fewer than 2^31 elements.
template <class T>
void max_pool2d(const Pool2dGeom& g, const T* x, T* y);
template <class T>
void max_pool2d_grad(const Pool2dGeom& g, const T* x, const T* dy, T* dx);
// The same over images stored NHWC, [n, h, w, c] -> [n, oh, ow, c] (a
// layout of nhwc): each window's taps in the same order, every channel of a
// pixel at once; the same bits as the NCHW kernels on the transposed images.
template <class T>
void max_pool2d_nhwc(const Pool2dGeom& g, const T* x, T* y);
template <class T>
void max_pool2d_grad_nhwc(const Pool2dGeom& g, const T* x, const T* dy, T* dx);
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

// out holds, for each row of x along `axis` ([outer, n, inner] around it),
// the positions that sort it stably: ascending, or descending; equal
// elements keep their order and NaN ranks above every number (torch's
// sort(stable=True)).
template <class T>
void argsort_rows(const T* x, int64_t outer, int64_t n, int64_t inner, bool descending,
                  int64_t* out);

}  // namespace ws::exec
