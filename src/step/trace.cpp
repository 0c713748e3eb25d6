// Chrome trace JSON of a profiled step (the Trace Event Format that
// chrome://tracing and Perfetto read): one complete event ("ph": "X") per
// kernel, in microseconds, on one track (tid) per program, so three_graph
// shows its forward, backward and optimizer graphs one after another.
#include <map>

#include <nlohmann/json.hpp>

#include "wholestep/step.hpp"

namespace ws {

std::string chrome_trace(const StepProfile& p) {
  nlohmann::json events = nlohmann::json::array();
  std::map<std::string, int> tracks;
  for (const KernelEvent& e : p.last_step) {
    auto [it, added] = tracks.emplace(e.program, int(tracks.size()) + 1);
    if (added)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 1},
                        {"tid", it->second},
                        {"args", {{"name", e.program}}}});
    nlohmann::json args = {{"op", e.op}, {"program", e.program}};
    if (!e.where.empty()) args["at"] = e.where;
    events.push_back({{"name", e.where.empty() ? e.name : e.name + " " + e.where},
                      {"cat", e.op},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", it->second},
                      {"ts", e.start_ms * 1e3},
                      {"dur", e.ms * 1e3},
                      {"args", std::move(args)}});
  }
  return nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}}.dump(1);
}

}  // namespace ws
