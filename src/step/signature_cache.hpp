// The compiled-signature cache of TrainStep and Forward: what a compiled
// function made for each input signature (its data arguments' types), so a
// signature seen before runs without tracing again. At most `max_cached`
// are kept, the least recently used freed first; tracing more than
// `recompile_warning` times prints a warning, as each new shape compiles
// again (a batch size that changes every call, say).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ir/graph.hpp"
#include "tensor/tensor_impl.hpp"

namespace ws::step {

struct CacheLimits {
  int max_cached = 0;  // signatures kept; 0: no limit
  int recompile_warning = 0;
};

template <class Compiled>
class SignatureCache {
 public:
  // `who` names the compiled function in errors and the warning ("train
  // step", "forward").
  SignatureCache(std::string who, CacheLimits limits) : who_(std::move(who)), limits_(limits) {}

  // The compiled form for `data`'s signature; `compile(types, loc)` makes
  // it when the signature is new. The common case, the signature of the
  // last call, is checked without allocating.
  template <class CompileFn>
  Compiled& lookup(const std::vector<Tensor>& data, Loc sloc, CompileFn&& compile) {
    bool same = last_ && last_->signature.size() == data.size();
    for (size_t i = 0; i < data.size(); ++i) {
      if (!data[i].defined() || data[i].is_traced())
        throw Error(fmt::format("{}: argument {} must be a concrete tensor{}", who_, i,
                                at(SourceLoc::from(sloc))));
      same = same && last_->signature[i] == data[i].impl()->type;
    }
    if (same) {
      last_->last_used = ++clock_;
      return *last_->compiled;
    }
    std::vector<ir::Type> types;
    std::string key;
    for (const Tensor& t : data) {
      types.push_back(t.impl()->type);
      key += types.back().str() + ";";
    }
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      // The least recently used signature makes room first, so the peak is
      // the limit's, not one more.
      if (limits_.max_cached > 0 && entries_.size() >= size_t(limits_.max_cached)) {
        auto lru = entries_.begin();
        for (auto e = entries_.begin(); e != entries_.end(); ++e)
          if (e->second.last_used < lru->second.last_used) lru = e;
        if (last_ == &lru->second) last_ = nullptr;
        entries_.erase(lru);
      }
      std::unique_ptr<Compiled> made = compile(types, SourceLoc::from(sloc));
      it = entries_.emplace(key, Entry{std::move(types), std::move(made)}).first;
      if (++traces_ > limits_.recompile_warning)
        std::fprintf(stderr,
                     "wholestep: warning: the %s has been traced %lld times (new input "
                     "signature %s); each new shape compiles again\n",
                     who_.c_str(), (long long)traces_, key.c_str());
    }
    last_ = &it->second;
    last_->last_used = ++clock_;
    return *last_->compiled;
  }

  // The compiled form the last call used, or nullptr (none yet, or freed).
  Compiled* last() const { return last_ ? last_->compiled.get() : nullptr; }
  // Signatures traced so far, again after one was freed.
  int64_t traces() const { return traces_; }
  size_t size() const { return entries_.size(); }
  void clear() {
    entries_.clear();
    last_ = nullptr;
  }

 private:
  struct Entry {
    std::vector<ir::Type> signature;
    std::unique_ptr<Compiled> compiled;
    uint64_t last_used = 0;  // the call that last used it, for eviction
  };

  std::string who_;
  CacheLimits limits_;
  std::map<std::string, Entry> entries_;  // by signature, "f32[64,784];i64[64];"
  Entry* last_ = nullptr;
  int64_t traces_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace ws::step
