// Kernels of the neural-network ops: convolution, pooling, gather/scatter
// and the counter-based random generator, in their reference forms (any
// floating type, obviously correct loops: the oracle). f32 convolutions run
// on the compute backend (dnnl_backend.hpp).
//
// Layouts are PyTorch's: activations NCHW, conv weights [O, C/groups, KH, KW],
// all contiguous row-major.
#pragma once

#include <cstdint>

#include "ir/geometry.hpp"
#include "wholestep/dtype.hpp"
#include "wholestep/error.hpp"

namespace ws::exec {

// Sizes, strides and padding: ir/geometry.hpp, shared with shape inference.
using ir::Conv2dGeom;
using ir::Pool2dGeom;

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

// Counter-based uniform numbers in [0, 1): element i is a pure function of
// (seed, offset + i) through Philox-4x32-10 (key = seed, counter = offset + i
// as a 64-bit value in the low two words), first output word, top 24 bits
// scaled by 2^-24. The same (seed, offset) gives the same numbers in any
// kernel, any mode, any thread split.
template <class T>
void philox_uniform(uint64_t seed, uint64_t offset, T* out, int64_t n);
// One Philox-4x32-10 block: the four output words for a counter and key
// (Random123's philox4x32_R(10, ...)); philox_uniform is built on it.
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

}  // namespace ws::exec
