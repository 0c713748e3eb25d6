#include "capture/collective.hpp"

#include "capture/tracer.hpp"
#include "ir/attr.hpp"
#include "ir/builder.hpp"

namespace ws::capture {

namespace {
thread_local bool sync_stats = false;
}  // namespace

Tensor all_reduce_mean(const Tensor& x, Loc loc) {
  const SourceLoc sl = SourceLoc::from(loc);
  if (Tracer* tr = Tracer::current()) {
    const ir::ValueId v = tr->value_of(x, sl);
    ir::Builder& b = tr->builder();
    const SourceLoc saved = b.loc;
    b.loc = sl;
    const ir::ValueId out = b.all_reduce(v, "mean");
    b.loc = saved;
    return tr->wrap(out);
  }
  const Tensor flat = x.reshape({x.numel()}, loc);
  ir::Attrs attrs =
      ir::make_attrs<ir::Op::all_reduce_start>({{"reduce", std::string("mean")}, {"seq", 0}});
  const Tensor started = apply(ir::Op::all_reduce_start, {&flat}, attrs, loc);
  return apply(ir::Op::wait, {&started}, {}, loc).reshape(x.shape(), loc);
}

bool sync_batch_statistics() { return sync_stats; }

SyncBatchStatistics::SyncBatchStatistics(bool on) : prev_(sync_stats) { sync_stats = on; }
SyncBatchStatistics::~SyncBatchStatistics() { sync_stats = prev_; }

}  // namespace ws::capture
