// Matrix products of few rows (A of at most kFewRows rows and a B of at
// least kFewRowsMinB bytes: a linear layer's forward and input gradient
// over a small batch, X W^T and dY W), computed by our own loops rather than
// oneDNN's. Such a product does a few multiply-adds per element of B and
// reads B once, mostly from memory: its time is the time to stream B.
// oneDNN 2.6's gemm:jit streamed it at 5-9 GB/s on a 2-core AMD EPYC Zen 3
// ([8 x 9216] x [9216 x 4096]^T in 16 ms, [8 x 4096] x [4096 x 9216] in
// 27); these loops at 9-13 (11.5 and 17.5 ms), each thread a range of C's
// columns, B's rows fetched ahead in software, A copied once at a row
// stride that keeps its rows out of each other's L1 sets.
//
// Each element of C is summed in an order of its own, whatever part of C a
// thread computes and whatever the team:
//  - B as it lies ([k, n]: dY W): C(i, j) = fma(A(i, K-1), B(K-1, j), ...
//    fma(A(i, 0), B(0, j), 0)), one rounding per term, q = 0 first;
//  - B transposed ([n, k] stored: X W^T): K in chunks of kFewRowsChunk, in
//    order; a chunk's sum is W partial sums (W the vector width, simd.hpp:
//    8 with AVX2, 16 with AVX-512), partial l the fma chain over the chunk's
//    q with q % W == l (the last chunk's last partials reading zeros past
//    K), added in a fixed tree (l + W/2 onto l, then + W/4, ..., + 1); C(i,
//    j) the chunks' sums added in order.
// Then the bias is added (one rounding), then out's old value (residual).
// The bits depend on the vector width, as oneDNN's do on the ISA.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/dnnl_backend.hpp"
#include "exec/reference.hpp"

namespace ws::exec {

// A of at most 16 rows; B of at least 512 KiB. Below that B stays in the
// caches, and the loops' parallel region costs more than they gain. The
// same CPU, B from memory, the same run (ms, these loops / oneDNN): [8 x
// 256] x [256 x 512] 0.04 / 0.06, [8 x 512] x [512 x 1000] 0.16 / 0.26 and
// 0.19 / 0.24, [16 x 4096] x [4096 x 4096] 9.1 / 9.3 and 12.5 / 16.9. A
// one-row product with B transposed (a matrix-vector product) stays
// oneDNN's: 3.6 / 3.3 ms over [4096 x 4096].
constexpr int64_t kFewRows = 16;
constexpr int64_t kFewRowsMinB = int64_t(512) << 10;
constexpr int64_t kFewRowsChunk = 512;

// One [m, k] x [k, n] product: A(i, q) at i * a_m + q * a_k (A is copied
// first, so any strides); B(q, j) at q * ldb + j, or with `tb` at j * ldb +
// q; C(i, j) at i * c_m + j * c_n.
struct FewRowProduct {
  int64_t m = 0, n = 0, k = 0;
  int64_t a_m = 0, a_k = 0, ldb = 0, c_m = 0, c_n = 0;
  bool tb = false;
};

// Whether these loops take product d of operands and result read at these
// element strides (over their shapes; the last two dims are the matrix),
// and if so, the product in p: B must lie along its rows of N (as it lies)
// or of K (transposed, by the attribute or by its strides alone: a
// transpose folded into the product).
bool few_row_product_of(const MatmulDims& d, const std::vector<int64_t>& sa,
                        const std::vector<int64_t>& sb, const std::vector<int64_t>& so,
                        FewRowProduct& p);

// W of the order above: the library's vector width, in floats.
int64_t few_row_lanes();

// The backend op of such a product: with `bias` it adds a bias per column
// (matmul_bias, run's `extra`), with `residual` then adds that to out's old
// value (matmul_bias_add), each one rounding.
std::shared_ptr<const BackendOp> make_few_row_product(const FewRowProduct& p, bool bias,
                                                      bool residual);

}  // namespace ws::exec
