// The reduce fusions' walk (see fused_loop.hpp): one task takes a batch of
// results whose sequences are single short runs side by side (a chunk
// computes them all, each sums its run in one call), or a block of results
// whose sequences are several runs each (BatchNorm's channels), visited in
// memory order, every result's accumulator seeing its own runs in order
// (sums over short runs gather whole chunks of runs at a time).
// Either way each result gets reduce_sum's or reduce_max's bits; then the
// epilogue runs over the batch's or block's results at once, every epilogue
// value an array of them (one call per op, not one per op and result).
// A column sum (run_columns) streams chunks of whole rows into a
// ColumnStream per group of rows, or runs its loop, then reduce_sum; then
// the epilogue over runs of columns.
#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "exec/fused_loop.hpp"
#include "exec/parallel.hpp"
#include "exec/reduce.hpp"
#include "exec/strided_walk.hpp"

namespace ws::exec {
namespace {

// The sum or maximum of one contiguous run, as reduce_sum and reduce_max
// give it.
template <class T>
T reduce_run(const T* x, int64_t n, bool is_max) {
  if (!is_max) return sum(x, n);
  MaxStream<T> m;
  m.add(x, n);
  return m.finish();
}

// Results a reduce fusion's task accumulates together (when their sequences
// are several runs each).
constexpr int64_t kResultBlock = 8;
// Tasks a reduce fusion whose results' sequences are all gathered is cut
// into at least, when it has the results: two threads get even shares.
constexpr int64_t kGatheredTasks = 8;

// The accumulator of one reduction for one result: a stream, or a sum's
// whole sequence gathered when it fits (a BatchNorm channel over a small
// batch of small maps: then one sum() over it replaces a stream fed a few
// elements at a time, the same bits by SumStream's contract).
constexpr int64_t kGatherBytes = 2048;
union Accumulator {
  Accumulator() {}
  SumStream<float> sum_f32;
  SumStream<double> sum_f64;
  MaxStream<float> max_f32;
  MaxStream<double> max_f64;
  alignas(64) std::byte gathered[kGatherBytes];
};

}  // namespace

void FusedLoop::run_epilogue(int64_t k0, int64_t n, const void* const* ins, void* const* outs,
                             const void** ptr, std::byte (*vals)[kEpilogueRun * 8],
                             const std::byte* const* red) const {
  for (int32_t v : per_result_) {
    const Value& val = values_[size_t(v)];
    if (val.kind == Kind::red_input)
      ptr[v] = static_cast<const std::byte*>(ins[val.index]) + k0 * val.esize;
    else if (val.kind == Kind::red_output)
      ptr[v] = static_cast<std::byte*>(outs[val.index]) + k0 * val.esize;
    else
      ptr[v] = vals[v];
  }
  for (size_t i = 0; i < reductions_.size(); ++i) {
    const Reduction& r = reductions_[i];
    const Value& val = values_[size_t(r.value)];
    if (val.kind == Kind::red_output)
      std::memcpy(static_cast<std::byte*>(outs[val.index]) + k0 * val.esize, red[i],
                  size_t(n * val.esize));
    ptr[r.value] = red[i];
  }
  run_steps(epilogue_.data(), epilogue_.data() + epilogue_.size(), ptr, n, k0);
  for (auto [v, j] : red_copy_outs_) {
    const int64_t es = values_[size_t(v)].esize;
    std::memcpy(static_cast<std::byte*>(outs[j]) + k0 * es, ptr[v], size_t(n * es));
  }
}

// A column sum streams its rows when they make at least a group per thread
// (column_groups: 1024 rows or more per thread), else it runs in phases.
// Streamed, the operand is read once (twice in phases, and written once
// more when the loop computes it); but a group is the least a thread can
// take (a block's rows feed each lane in order), and splitting the columns
// instead cuts the loop's chunks to one row's range each, which cost more
// than the pass they save. Whole steps, same run, 2 threads, AMD EPYC Zen
// 5, channels_last, against phases always: streaming always lost 3-5%
// (mobilenet_v2 34.6 / 33.7 ms, resnet18 39.9 / 38.2, resnet50 103.6 /
// 98.6), streaming only where each thread has a group won 3-9% (30.9, 37.1,
// 95.9). Both ways give every column reduce_sum's bits. In place of phases,
// a sum whose operand is one op over stored arrays reads them through the op
// (column_load_). Streamed, a compiled loop's whole rows are summed as the
// code computes them (column_fn_); with fewer rows, the tile of each
// thread's columns the code would then walk ran slower than the paths
// above (mobilenet_v2's sums over 128 and 512 rows 1.1-2x, alone and in
// the step).
void FusedLoop::run_columns(const void* const* ins, void* const* outs, void* scratch) const {
  WS_CHECK(scratch) << "fused loop: a column sum without scratch";
  std::byte* sc = static_cast<std::byte*>(scratch);
  const bool streams = column_streamed_ && column_groups_.groups * col_blocks_ >= team();
  if (column_load_.on && !streams)
    run_column_load(ins, outs, sc);
  else if (streams)
    run_column_streams(ins, outs, sc);
  else
    run_column_phases(ins, outs, sc);
  // The epilogue, over runs of columns (the sums at the start of scratch).
  const int64_t es = int64_t(dtype_size(reductions_[0].dtype));
  parallel_for(
      results_, kEpilogueRun * 16,
      [&](int64_t begin, int64_t end) {
        alignas(64) std::byte vals[kMaxFusedValues][kEpilogueRun * 8];
        const void* ptr[kMaxFusedValues];
        fixed_pointers(ins, nullptr, ptr);
        for (int64_t k0 = begin; k0 < end; k0 += kEpilogueRun) {
          const std::byte* red[1] = {sc + k0 * es};
          run_epilogue(k0, std::min(end - k0, kEpilogueRun), ins, outs, ptr, vals, red);
        }
      },
      1);
}

void FusedLoop::run_column_load(const void* const* ins, void* const* outs,
                                std::byte* scratch) const {
  if (loop_writes_)
    run_loop(ins, outs, grain_ * std::max<int64_t>(1, numel_ / results_), -1, nullptr);
  auto at = [&](int32_t v) -> const void* {
    const Value& val = values_[size_t(v)];
    return val.kind == Kind::input ? ins[val.index] : outs[val.index];
  };
  const ColumnLoad& c = column_load_;
  const void* b = c.b >= 0 ? at(c.b) : nullptr;
  if (c.op == ColumnOperand::widened)
    column_sums(c.op, column_walk_, column_strides_, static_cast<const float*>(at(c.a)),
                static_cast<const float*>(b), reinterpret_cast<double*>(scratch));
  else if (reductions_[0].dtype == DType::f32)
    column_sums(c.op, column_walk_, column_strides_, static_cast<const float*>(at(c.a)),
                static_cast<const float*>(b), reinterpret_cast<float*>(scratch));
  else
    column_sums(c.op, column_walk_, column_strides_, static_cast<const double*>(at(c.a)),
                static_cast<const double*>(b), reinterpret_cast<double*>(scratch));
}

// Scratch: the sums, then (from the first 64-byte boundary after them) the
// operand or the groups' sums.
void FusedLoop::run_column_phases(const void* const* ins, void* const* outs,
                                  std::byte* scratch) const {
  const Reduction& r = reductions_[0];
  const Value& src = values_[size_t(r.src)];
  const int64_t es = int64_t(dtype_size(r.dtype)), cols = results_;
  WS_CHECK(src.kind == Kind::input || src.kind == Kind::output || src.kind == Kind::buffer ||
           src.kind == Kind::gather || src.kind == Kind::tiled)
      << "fused loop: a column sum of a value read as " << int(src.kind);
  // 1. The loop, leaving the operand in its result, or in scratch (a
  // computed value, or a broadcast operand gathered chunk by chunk).
  std::byte* sc = scratch + column_work_offset(cols, es);
  const void* x = src.kind == Kind::input    ? ins[src.index]
                  : src.kind == Kind::output ? outs[src.index]
                                             : sc;
  if (!steps_.empty() || x == sc)
    run_loop(ins, outs, grain_ * std::max<int64_t>(1, numel_ / results_), r.src,
             x == sc ? sc : nullptr);
  // 2. The column sums, as the reduce_sum kernel sums them.
  if (r.dtype == DType::f32)
    reduce_sum(column_walk_, column_strides_, static_cast<const float*>(x),
               reinterpret_cast<float*>(scratch));
  else
    reduce_sum(column_walk_, column_strides_, static_cast<const double*>(x),
               reinterpret_cast<double*>(scratch));
}

void FusedLoop::run_column_streams(const void* const* ins, void* const* outs,
                                   std::byte* scratch) const {
  const Reduction& r = reductions_[0];
  const int64_t rows = col_outer_ * col_inner_, cols = col_width_;
  // Tasks: a group of a block's rows and a range of its columns that a
  // chunk holds.
  const ColumnGroups& cg = column_groups_;
  const int64_t ranges = (cols + kFusedChunk - 1) / kFusedChunk;
  const int64_t width = (cols + ranges - 1) / ranges;
  const int64_t tasks = cg.groups * col_blocks_ * ranges, span = cg.blocks * kSumBlock;
  const int64_t grain = std::max<int64_t>(1, grain_ * rows / std::max<int64_t>(1, numel_ / tasks));
  auto sum_columns = [&](auto zero) {
    using T = decltype(zero);
    T* sums = reinterpret_cast<T*>(scratch);
    T* parts = reinterpret_cast<T*>(scratch + column_work_offset(results_, int64_t(sizeof(T))));
    parallel_for(
        tasks, grain,
        [&](int64_t begin, int64_t end) {
          alignas(64) std::byte bufs[kMaxFusedBuffers][kFusedChunk * 8];
          const void* ptr[kMaxFusedValues];
          Segments sg;
          fixed_pointers(ins, bufs, ptr);
          // The streams' lanes and carry entries, kept by the thread.
          thread_local std::vector<T> state;
          const size_t need = size_t(ColumnStream<T>::storage_size(width));
          if (state.size() < need) state.resize(need);
          for (int64_t q = begin; q < end; ++q) {
            const int64_t group = q / (ranges * col_blocks_), b = q / ranges % col_blocks_;
            const int64_t c0 = q % ranges * width, w = std::min(width, cols - c0);
            const int64_t r0 = group * span, r1 = std::min(rows, r0 + span);
            ColumnStream<T> stream(w, state.data());
            if (column_fn_[0] && w == cols) {
              // Whole rows a block at a time through the code, summed into
              // the stream's lanes as they are computed.
              for (int64_t i = r0; i < r1; i += kSumBlock) {
                const int64_t n = std::min(kSumBlock, r1 - i);
                fill_rows(ins, outs, b, i, n, stream.lanes());
                stream.add_filled(n);
              }
            } else {
              // Whole rows, several to a chunk (up to the end of an image's
              // rows of a blocked one), or one row's range at a time.
              const int64_t per_chunk = w == cols ? std::max<int64_t>(1, kFusedChunk / cols) : 1;
              for (int64_t i = r0; i < r1;) {
                const int64_t n = std::min({per_chunk, r1 - i, col_inner_ - i % col_inner_});
                const int64_t s = column_row_at(b, i) + c0;
                run_chunk(s, n * w, ins, outs, bufs, ptr, sg);
                stream.add(static_cast<const T*>(ptr[r.src]), n, w);
                copy_out(s, n * w, ptr, outs);
                i += n;
              }
            }
            stream.finish((cg.groups > 1 ? parts + group * results_ : sums) + b * cols + c0);
          }
        },
        1);
    if (cg.groups > 1) {  // each column's groups, in order
      thread_local std::vector<T> state;
      const size_t need = size_t(ColumnStream<T>::storage_size(results_));
      if (state.size() < need) state.resize(need);
      ColumnStream<T> stream(results_, state.data());
      for (int64_t g = 0; g < cg.groups; ++g)
        stream.push_sums(parts + g * results_, std::min(cg.blocks, cg.all - g * cg.blocks));
      stream.finish(sums);
    }
  };
  if (r.dtype == DType::f32)
    sum_columns(0.0f);
  else
    sum_columns(0.0);
}

void FusedLoop::run_reduce(const void* const* ins, void* const* outs) const {
  const int64_t run = reduced_.back(), runs = ws::numel(reduced_) / run;
  const int64_t nk = int64_t(kept_.size()), nr = int64_t(reduced_.size()) - 1;
  WS_CHECK(reductions_.size() <= 4) << "fused loop: " << reductions_.size() << " reductions";
  // Results whose sequence is one short run lie side by side (the reduced
  // dim is the innermost): a chunk holds several, and each sums its run in
  // one call, as reduce_sum does.
  const int64_t batch = runs == 1 ? std::max<int64_t>(1, kFusedChunk / run) : 1;
  // Sums whose whole sequence fits an accumulator are gathered there.
  bool gather[4] = {};
  int64_t seq_bytes[4] = {};
  for (size_t i = 0; i < reductions_.size(); ++i) {
    seq_bytes[i] = runs * run * int64_t(dtype_size(reductions_[i].dtype));
    gather[i] = batch == 1 && !reductions_[i].is_max && seq_bytes[i] <= kGatherBytes;
  }
  // Results a task takes: a batch, or a block whose short runs coalesce.
  // When every reduction gathers and the runs are short (BatchNorm over
  // 4x4 and 2x2 maps), a block spans up to a whole chunk of runs, its
  // sequences gathered in a buffer of the thread's: eight results' runs of
  // 16 or 4 elements made chunks too short to pay for their steps.
  const bool gathered = batch == 1 && run * kResultBlock < kFusedChunk &&
                        std::all_of(gather, gather + reductions_.size(), [](bool g) { return g; });
  int64_t block = 2 * run <= kFusedChunk ? kResultBlock : 1;
  if (gathered) {
    const int64_t most = std::min(kFusedChunk / run, kEpilogueRun);
    const int64_t tasks =
        std::max((results_ + most - 1) / most, std::min(kGatheredTasks, results_ / kResultBlock));
    block = std::max(kResultBlock, (results_ + tasks - 1) / tasks);
  }
  const int64_t group = batch > 1 ? batch : block;
  parallel_for(
      (results_ + group - 1) / group, std::max<int64_t>(1, grain_ / group),
      [&](int64_t begin, int64_t end) {
        alignas(64) std::byte bufs[kMaxFusedBuffers][kFusedChunk * 8];
        const void* ptr[kMaxFusedValues];
        alignas(64) std::byte vals[kMaxFusedValues][kEpilogueRun * 8];
        alignas(64) std::byte redv[4][kEpilogueRun * 8];  // the reductions' values
        const std::byte* red[4] = {redv[0], redv[1], redv[2], redv[3]};
        Accumulator acc[4][kResultBlock];
        // Where result j of the block gathers reduction i's sequence (a
        // gathered block's: at most 4 x 128 x kGatherBytes, kept by the
        // thread for the next run).
        thread_local std::vector<std::byte> wide;
        int64_t wide_at[4] = {};
        if (gathered) {
          int64_t bytes = 0;
          for (size_t i = 0; i < reductions_.size(); ++i)
            wide_at[i] = bytes, bytes += block * seq_bytes[i];
          if (int64_t(wide.size()) < bytes) wide.resize(size_t(bytes));
        }
        auto gathered_at = [&](size_t i, int64_t j) {
          return gathered ? wide.data() + wide_at[i] + j * seq_bytes[i] : acc[i][j].gathered;
        };
        Segments sg;
        fixed_pointers(ins, bufs, ptr);
        for (int64_t q = begin; q < end; ++q) {
          if (batch > 1) {
            const int64_t k0 = q * batch, k1 = std::min(results_, k0 + batch);
            const int64_t s = k0 * run, len = (k1 - k0) * run;
            run_chunk(s, len, ins, outs, bufs, ptr, sg);
            copy_out(s, len, ptr, outs);
            const void* src[4];
            for (size_t i = 0; i < reductions_.size(); ++i) src[i] = ptr[reductions_[i].src];
            for (int64_t e0 = k0; e0 < k1; e0 += kEpilogueRun) {
              const int64_t e1 = std::min(k1, e0 + kEpilogueRun);
              for (int64_t k = e0; k < e1; ++k)
                for (size_t i = 0; i < reductions_.size(); ++i) {
                  const Reduction& r = reductions_[i];
                  const int64_t off = (k - k0) * run;
                  if (r.dtype == DType::f32)
                    reinterpret_cast<float*>(redv[i])[k - e0] =
                        reduce_run(static_cast<const float*>(src[i]) + off, run, r.is_max);
                  else
                    reinterpret_cast<double*>(redv[i])[k - e0] =
                        reduce_run(static_cast<const double*>(src[i]) + off, run, r.is_max);
                }
              run_epilogue(e0, e1 - e0, ins, outs, ptr, vals, red);
            }
            continue;
          }
          // A block of neighbouring results, their runs visited in memory
          // order: for BatchNorm's [N, C, HW] over N and HW, run n of every
          // channel in the block before run n+1, so each thread streams
          // through its channels' slice of every image. Each result's
          // accumulator still sees its own runs in order: the same bits.
          const int64_t k0 = q * block, k1 = std::min(results_, k0 + block);
          int64_t base[kEpilogueRun];
          Odometer<1> kept(int(nk), kept_.data(), {kept_stride_.data()}, k0);
          for (int64_t k = k0; k < k1; ++k, kept.next()) {
            base[k - k0] = kept.off[0];
            for (size_t i = 0; i < reductions_.size(); ++i) {
              const Reduction& r = reductions_[i];
              if (gather[i]) continue;
              Accumulator& a = acc[i][k - k0];
              if (r.is_max)
                r.dtype == DType::f32 ? (void)new (&a.max_f32) MaxStream<float>
                                      : (void)new (&a.max_f64) MaxStream<double>;
              else
                r.dtype == DType::f32 ? (void)new (&a.sum_f32) SumStream<float>
                                      : (void)new (&a.sum_f64) SumStream<double>;
            }
          }
          Odometer<1> runs_at(int(nr), reduced_.data(), {red_stride_.data()});
          for (int64_t q2 = 0; q2 < runs; ++q2, runs_at.next()) {
            const int64_t run_off = runs_at.off[0];
            for (int64_t k = k0; k < k1;) {
              const int64_t start = base[k - k0] + run_off;
              // Short runs of neighbouring results that lie side by side
              // (channels of one image) go through the loop as one chunk.
              int64_t m = 1;
              const bool fits = run < kFusedChunk;
              while (fits && k + m < k1 && base[k + m - k0] + run_off == start + m * run &&
                     (m + 1) * run <= kFusedChunk)
                ++m;
              for (int64_t s = start; s < start + m * run;) {
                const int64_t len = fits ? m * run : std::min(s + kFusedChunk, start + run) - s;
                run_chunk(s, len, ins, outs, bufs, ptr, sg);
                for (size_t i = 0; i < reductions_.size(); ++i) {
                  const Reduction& r = reductions_[i];
                  const int64_t es = int64_t(dtype_size(r.dtype));
                  for (int64_t j = 0; j < (fits ? m : 1); ++j) {
                    const void* x = static_cast<const std::byte*>(ptr[r.src]) + j * run * es;
                    const int64_t n = fits ? run : len;
                    if (gather[i]) {  // this run's place in the result's sequence
                      std::memcpy(gathered_at(i, k + j - k0) + (q2 * run + s - start) * es, x,
                                  size_t(n * es));
                      continue;
                    }
                    Accumulator& a = acc[i][k + j - k0];
                    if (r.is_max)
                      r.dtype == DType::f32 ? a.max_f32.add(static_cast<const float*>(x), n)
                                            : a.max_f64.add(static_cast<const double*>(x), n);
                    else
                      r.dtype == DType::f32 ? a.sum_f32.add(static_cast<const float*>(x), n)
                                            : a.sum_f64.add(static_cast<const double*>(x), n);
                  }
                }
                copy_out(s, len, ptr, outs);
                s += len;
              }
              k += m;
            }
          }
          for (int64_t k = k0; k < k1; ++k)
            for (size_t i = 0; i < reductions_.size(); ++i) {
              const Reduction& r = reductions_[i];
              if (gather[i]) {
                const std::byte* g = gathered_at(i, k - k0);
                if (r.dtype == DType::f32)
                  reinterpret_cast<float*>(redv[i])[k - k0] =
                      sum(reinterpret_cast<const float*>(g), runs * run);
                else
                  reinterpret_cast<double*>(redv[i])[k - k0] =
                      sum(reinterpret_cast<const double*>(g), runs * run);
                continue;
              }
              Accumulator& a = acc[i][k - k0];
              if (r.dtype == DType::f32)
                reinterpret_cast<float*>(redv[i])[k - k0] =
                    r.is_max ? a.max_f32.finish() : a.sum_f32.finish();
              else
                reinterpret_cast<double*>(redv[i])[k - k0] =
                    r.is_max ? a.max_f64.finish() : a.sum_f64.finish();
            }
          run_epilogue(k0, k1 - k0, ins, outs, ptr, vals, red);
        }
      },
      1);
}

}  // namespace ws::exec
