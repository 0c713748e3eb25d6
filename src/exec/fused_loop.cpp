// The run of a fused loop (fused_loop.hpp): chunks in parallel, each's
// pointers, gathers and segments, and its steps.
#include "exec/fused_loop.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "exec/loops.hpp"
#include "exec/parallel.hpp"
#include "exec/strided_walk.hpp"

namespace ws::exec {
namespace {

using Kind = FusedLoop::Kind;

// Elements [s, s + len) of a broadcast value over the whole walk, into y.
void gather_range(const Shape& walk, const FusedLoop::Value& val, const void* x, int64_t s,
                  int64_t len, std::byte* y) {
  if (val.esize == 8)
    strided_gather(walk, val.strides, static_cast<const uint64_t*>(x),
                   reinterpret_cast<uint64_t*>(y), s, s + len);
  else if (val.esize == 4)
    strided_gather(walk, val.strides, static_cast<const uint32_t*>(x),
                   reinterpret_cast<uint32_t*>(y), s, s + len);
  else
    strided_gather(walk, val.strides, static_cast<const uint8_t*>(x), reinterpret_cast<uint8_t*>(y),
                   s, s + len);
}

}  // namespace

// Pointers that stay put for a whole run of the kernel: one-element
// operands, constants, and buffers.
void FusedLoop::fixed_pointers(const void* const* ins, std::byte (*bufs)[kFusedChunk * 8],
                               const void** ptr) const {
  for (size_t v = 0; v < values_.size(); ++v) {
    const Value& val = values_[v];
    if (val.kind == Kind::scalar)
      ptr[v] = ins[val.index];
    else if (val.kind == Kind::constant)
      ptr[v] = &constants_[size_t(val.index)];
    else if (val.kind == Kind::buffer && bufs)
      ptr[v] = bufs[val.buf];
    else if (val.kind == Kind::tiled && bufs) {
      // The row's run, repeated over a chunk and one row more (a chunk
      // starts anywhere in a row).
      const auto* src = static_cast<const std::byte*>(ins[val.index]);
      const int64_t row = row_len_ * val.esize, n = (kFusedChunk + row_len_) * val.esize;
      for (int64_t b = 0; b < n; b += row)
        std::memcpy(bufs[val.buf] + b, src, size_t(std::min(row, n - b)));
    }
  }
}

// Pointers to the loop values that move with the chunk, for elements
// [s, s + len) of the loop, gathering broadcast operands that are neither
// one value nor a run along a row.
void FusedLoop::chunk_pointers(int64_t s, int64_t len, const void* const* ins, void* const* outs,
                               std::byte (*bufs)[kFusedChunk * 8], const void** ptr) const {
  for (int32_t v : moving_) {
    const Value& val = values_[size_t(v)];
    switch (val.kind) {
      case Kind::input:
        ptr[v] = static_cast<const std::byte*>(ins[val.index]) + s * val.esize;
        break;
      case Kind::output: ptr[v] = static_cast<std::byte*>(outs[val.index]) + s * val.esize; break;
      case Kind::gather:
        gather_range(walk_, val, ins[val.index], s, len, bufs[val.buf]);
        ptr[v] = bufs[val.buf];
        break;
      case Kind::tiled: ptr[v] = bufs[val.buf] + s % row_len_ * val.esize; break;
      default: break;
    }
  }
}

// The row pieces of the chunk [s, s + len), and where each slot lies in
// each.
void FusedLoop::segments(int64_t s, int64_t len, const void* const* ins, Segments& sg) const {
  const int64_t c0 = s % row_len_;
  const int64_t n = (c0 + len + row_len_ - 1) / row_len_;
  WS_CHECK(n <= kMaxSegments) << "fused loop: a chunk of " << n << " segments";
  sg.n = n;
  for (int64_t k = 0; k < n; ++k) {
    sg.start[k] = k == 0 ? 0 : k * row_len_ - c0;
    sg.len[k] = std::min((k + 1) * row_len_ - c0, len) - sg.start[k];
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::byte* base = static_cast<const std::byte*>(ins[slots_[i].index]);
    const std::byte** at = sg.at[i];
    walk_rows<1>(walk_, {slots_[i].stride}, s, s + len,
                 [&at, base](int64_t, const int64_t* off, int64_t) { *at++ = base + off[0]; });
  }
}

void FusedLoop::prefetch(int64_t s, int64_t e, const void* const* ins, void* const* outs) const {
  for (const Stream& st : streams_) {
    const auto* base = static_cast<const std::byte*>(st.result ? outs[st.index] : ins[st.index]);
    // A result's lines too are asked for reading: asking for writing
    // measured the same.
    for (int64_t b = s * st.esize; b < e * st.esize; b += 64) __builtin_prefetch(base + b, 0, 3);
  }
}

void FusedLoop::run_steps(const Step* first, const Step* last, const void* const* ptr, int64_t len,
                          int64_t s) {
  for (const Step* p = first; p != last; ++p) {
    const Step& st = *p;
    if (st.draw) {
      st.draw(uint64_t(*static_cast<const int64_t*>(ptr[st.args[0]])),
              uint64_t(*static_cast<const int64_t*>(ptr[st.args[1]]) + st.skip + s),
              const_cast<void*>(ptr[st.out]), len);
      continue;
    }
    st.fn(st.args[0] >= 0 ? ptr[st.args[0]] : nullptr, st.args[1] >= 0 ? ptr[st.args[1]] : nullptr,
          st.args[2] >= 0 ? ptr[st.args[2]] : nullptr, const_cast<void*>(ptr[st.out]), len,
          st.arrays);
  }
}

void FusedLoop::run_chunk(int64_t s, int64_t len, const void* const* ins, void* const* outs,
                          std::byte (*bufs)[kFusedChunk * 8], const void** ptr,
                          Segments& sg) const {
  chunk_pointers(s, len, ins, outs, bufs, ptr);
  const Step* steps = steps_.data();
  if (jit_fn_ && per_segment_) return compiled_segments(s, len, ins, ptr, sg);
  if (jit_fn_) {
    const int64_t whole = len / 8 * 8;
    if (whole > 0) jit_fn_(ptr, whole);
    if (whole == len) return;
    // The last elements through the steps, every array from its element
    // `whole` on.
    const void* tail[kMaxFusedValues];
    for (size_t v = 0; v < values_.size(); ++v) {
      const Kind k = values_[v].kind;
      if (k == Kind::scalar || k == Kind::constant)
        tail[v] = ptr[v];
      else if (k == Kind::input || k == Kind::output || k == Kind::tiled || k == Kind::gather ||
               k == Kind::buffer)
        tail[v] = static_cast<const std::byte*>(ptr[v]) + whole * values_[v].esize;
      else
        tail[v] = nullptr;
    }
    return run_steps(steps, steps + steps_.size(), tail, len - whole, s + whole);
  }
  if (broadcasts_.empty() || !segmented_ || !per_segment_)
    return run_steps(steps, steps + steps_.size(), ptr, len, s);
  segments(s, len, ins, sg);
  for (size_t i = 0; i < steps_.size();) {
    if (!steps_[i].per_segment) {
      run_steps(steps + i, steps + i + 1, ptr, len, s);
      ++i;
      continue;
    }
    // A run of steps reading broadcast operands: segment by segment.
    size_t j = i;
    while (j < steps_.size() && steps_[j].per_segment) ++j;
    for (int64_t k = 0; k < sg.n; ++k)
      for (size_t t = i; t < j; ++t) {
        const Step& st = steps[t];
        const void* a[3];
        for (int q = 0; q < 3; ++q)
          a[q] = st.cls[q] == 2 ? sg.at[st.slot[q]][k]
                 : st.cls[q] == 1
                     ? static_cast<const std::byte*>(ptr[st.args[q]]) + sg.start[k] * st.es[q]
                 : st.args[q] >= 0 ? ptr[st.args[q]]
                                   : nullptr;
        std::byte* y =
            static_cast<std::byte*>(const_cast<void*>(ptr[st.out])) + sg.start[k] * st.es[3];
        st.fn(a[0], a[1], a[2], y, sg.len[k], st.arrays);
      }
    i = j;
  }
}

void FusedLoop::copy_out(int64_t s, int64_t len, const void* const* ptr, void* const* outs) const {
  for (auto [v, j] : copy_outs_) {
    const int64_t es = values_[size_t(v)].esize;
    std::memcpy(static_cast<std::byte*>(outs[j]) + s * es, ptr[v], size_t(len * es));
  }
}

void FusedLoop::run(const void* const* ins, void* const* outs, void* scratch) const {
  if (product_.k > 0) return run_product(ins, outs, scratch);
  if (columns_) return run_columns(ins, outs, scratch);
  if (!reductions_.empty()) return run_reduce(ins, outs);
  if (!block_steps_.empty()) return run_blocks(ins, outs);
  if (jit_fn_ && broadcasts_.empty() && copy_outs_.empty()) return run_compiled(ins, outs);
  run_loop(ins, outs, grain_, -1, nullptr);
}

void FusedLoop::run_loop(const void* const* ins, void* const* outs, int64_t grain, int32_t keep,
                         std::byte* kept) const {
  parallel_for(
      numel_, grain,
      [&](int64_t begin, int64_t end) { loop_range(ins, outs, begin, end, keep, kept); }, 1);
}

void FusedLoop::loop_range(const void* const* ins, void* const* outs, int64_t begin, int64_t end,
                           int32_t keep, std::byte* kept) const {
  alignas(64) std::byte bufs[kMaxFusedBuffers][kFusedChunk * 8];
  const void* ptr[kMaxFusedValues];
  Segments sg;
  fixed_pointers(ins, bufs, ptr);
  for (int64_t s = begin; s < end;) {
    const int64_t len = std::min(s + chunk_, end) - s;
    if (!streams_.empty()) prefetch(s + len, std::min(s + len + chunk_, end), ins, outs);
    run_chunk(s, len, ins, outs, bufs, ptr, sg);
    copy_out(s, len, ptr, outs);
    if (kept) {
      const int64_t es = values_[size_t(keep)].esize;
      std::memcpy(kept + s * es, ptr[keep], size_t(len * es));
    }
    s += len;
  }
}

void FusedLoop::run_range(const void* const* ins, void* const* outs, int64_t begin,
                          int64_t end) const {
  WS_CHECK(streaming()) << "fused loop: a range of a loop that is not streaming";
  if (!block_steps_.empty()) return blocks_range(ins, outs, begin, end);
  if (jit_fn_ && copy_outs_.empty()) return compiled_range(ins, outs, begin, end);
  loop_range(ins, outs, begin, end, -1, nullptr);
}

namespace {

void k_fused(const Kernel& k, void* const* s) {
  const void* ins[kMaxOperands];
  void* outs[kMaxOperands + 1];
  for (size_t i = 0; i < k.in.size(); ++i) ins[i] = s[k.in[i]];
  outs[0] = s[k.out];
  for (size_t j = 0; j < k.extra_out.size(); ++j)
    outs[j + 1] = k.extra_out[j] >= 0 ? s[k.extra_out[j]] : nullptr;
  k.loop->run(ins, outs, k.scratch >= 0 ? s[k.scratch] : nullptr);
}

}  // namespace

void choose_fused_kernel(Kernel& k, const ir::Graph& body) {
  if (k.in.size() > kMaxOperands || k.extra_out.size() > kMaxOperands)
    throw Error(fmt::format("fusion: {} operands and {} results; a fused kernel takes at most {}{}",
                            k.in.size(), k.extra_out.size() + 1, kMaxOperands, at(k.loc)));
  std::vector<int32_t> outs = {k.out};
  outs.insert(outs.end(), k.extra_out.begin(), k.extra_out.end());
  k.loop = std::make_shared<FusedLoop>(body, k.in, outs);
  k.fn = k_fused;
  k.name = k.loop->name().c_str();
}

}  // namespace ws::exec
