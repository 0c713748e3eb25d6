// ws::StepOptions by name (wholestep/step_options.hpp): the table
// step_options.def declares each field once, and its description, its
// default and setting it by name agree with the struct.
#include <gtest/gtest.h>

#include <set>

#include "test_util.hpp"
#include "wholestep/step_options.hpp"

namespace ws {
namespace {

using testing::error_of;

// A value of `info` other than `from`, allowed.
StepOptionValue another(const StepOptionInfo& info, const StepOptionValue& from) {
  switch (info.kind) {
    case StepOptionKind::flag: return !std::get<bool>(from);
    case StepOptionKind::integer: return std::get<int64_t>(from) + 3;
    case StepOptionKind::number: return std::get<double>(from) + 0.25;
    case StepOptionKind::choice:
      for (const char* name : info.choices)
        if (name != std::get<std::string>(from)) return std::string(name);
  }
  ADD_FAILURE() << info.name << " has one value";
  return from;
}

TEST(StepOptions, EveryFieldIsDescribedOnceInTheStructsOrderWithItsDefault) {
  const std::vector<StepOptionInfo> infos = step_option_infos();
  ASSERT_GE(infos.size(), 14u);
  std::set<std::string_view> names;
  for (const StepOptionInfo& info : infos) {
    EXPECT_TRUE(names.insert(info.name).second) << info.name;
    EXPECT_FALSE(info.meaning.empty()) << info.name;
    EXPECT_EQ(info.meaning.find('\n'), std::string_view::npos) << info.name;
    if (!info.needs.empty()) {
      EXPECT_EQ(step_option_info(info.needs).kind, StepOptionKind::flag) << info.name;
    }
  }
  EXPECT_EQ(infos.front().name, "mode");
  const StepOptions d;
  EXPECT_EQ(get_step_option(d, "mode"), StepOptionValue(std::string("single_graph")));
  EXPECT_EQ(get_step_option(d, "fuse"), StepOptionValue(true));
  EXPECT_EQ(get_step_option(d, "memory_budget"), StepOptionValue(0.0));
  EXPECT_EQ(get_step_option(d, "on_nonfinite"), StepOptionValue(std::string("error")));
  EXPECT_EQ(get_step_option(d, "bucket_bytes"), StepOptionValue(int64_t(64) << 10));
  EXPECT_EQ(step_option_info("bucket_bytes").needs, "data_parallel");
  // Each field, visited with its own type, holds what get_step_option says.
  size_t visited = 0;
  for_each_step_option(d, [&](const StepOptionInfo& info, const auto&) {
    EXPECT_EQ(info.name, infos[visited].name);
    ++visited;
  });
  EXPECT_EQ(visited, infos.size());
}

TEST(StepOptions, EachOptionSetByNameChangesItsFieldAlone) {
  for (const StepOptionInfo& info : step_option_infos()) {
    SCOPED_TRACE(std::string(info.name));
    StepOptions o;
    const StepOptionValue value = another(info, get_step_option(o, info.name));
    set_step_option(o, info.name, value);
    EXPECT_EQ(get_step_option(o, info.name), value);
    for (const StepOptionInfo& other : step_option_infos()) {
      if (other.name == info.name) continue;
      EXPECT_EQ(get_step_option(o, other.name), get_step_option(StepOptions{}, other.name))
          << other.name;
    }
  }
  StepOptions o;
  set_step_option(o, "mode", std::string("three_graph"));
  set_step_option(o, "memory_budget", int64_t(4096));  // an integer is a number
  set_step_option(o, "max_cached", int64_t(2));
  EXPECT_EQ(o.mode, StepMode::three_graph);
  EXPECT_EQ(o.memory_budget, 4096);
  EXPECT_EQ(o.max_cached, 2);
}

TEST(StepOptions, WrongNamesKindsAndValuesAreErrorsSayingWhatIsAllowed) {
  StepOptions o;
  EXPECT_EQ(error_of([&] { set_step_option(o, "fusion", true); }),
            "unknown step option 'fusion'; the step options are mode, aliasing, fuse, recompute, "
            "memory_budget, layouts, accumulate, on_nonfinite, detect_anomaly, max_cached, "
            "recompile_warning, "
            "data_parallel, bucket_bytes, sync_batch_norm, zero, adapt_threads");
  EXPECT_EQ(error_of([&] { set_step_option(o, "fuse", int64_t(1)); }),
            "step option fuse=1: must be true or false");
  EXPECT_EQ(error_of([&] { set_step_option(o, "max_cached", 2.5); }),
            "step option max_cached=2.5: must be an integer from 0 to 2147483647");
  EXPECT_EQ(error_of([&] { set_step_option(o, "memory_budget", -1.0); }),
            "step option memory_budget=-1: must be a finite number >= 0");
  EXPECT_EQ(error_of([&] { set_step_option(o, "mode", std::string("fast")); }),
            "step option mode='fast': must be interpret, three_graph or single_graph");
  EXPECT_EQ(error_of([&] { set_step_option(o, "bucket_bytes", int64_t(0)); }),
            "step option bucket_bytes=0: must be an integer from 1 to 9223372036854775807");
  EXPECT_EQ(o.fuse, true) << "a refused value changes nothing";
}

TEST(StepOptions, ChecksTogetherNameTheOptionThatIsNeeded) {
  EXPECT_NO_THROW(check_step_options({}));
  EXPECT_EQ(error_of([] { check_step_options({.zero = true}); }),
            "step option zero=true needs data_parallel: it has no effect without it");
  EXPECT_EQ(error_of([] { check_step_options({.bucket_bytes = 1024}); }),
            "step option bucket_bytes=1024 needs data_parallel: it has no effect without it");
  EXPECT_NO_THROW(check_step_options({.data_parallel = true, .bucket_bytes = 1024, .zero = true}));
  EXPECT_NE(error_of([] {
              check_step_options({.detect_anomaly = true});
            }).find("it needs mode interpret, not single_graph"),
            std::string::npos);
  EXPECT_EQ(error_of([] { check_step_options({.max_cached = -1}); }),
            "step option max_cached=-1: must be an integer from 0 to 2147483647");
}

}  // namespace
}  // namespace ws
