// scripts/plot.py on metrics files: a PNG of a real run's curves, the part
// of a resumed run that was trained again drawn once, and every bad file a
// one-line error (exit status 2).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "cli_run.hpp"

namespace {

using namespace ws::testing;
namespace fs = std::filesystem;

// plot.py runs on Debian's Python, where python3-matplotlib is installed.
Result plot(const std::string& args) {
  return run_command(fmt::format("/usr/bin/python3 {}/scripts/plot.py {}", WS_SOURCE_DIR, args));
}

uint32_t big_endian(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = v << 8 | uint8_t(b[at + i]);
  return v;
}

TEST(PlotScript, DrawsAPngOfATrainingRunsMetrics) {
  const std::string dir = temp_dir("plot");
  const Result train =
      run("train --model mlp --threads 1 --steps 40 --log-every 10 --eval-every 20 --metrics " +
          dir + "/m.jsonl");
  ASSERT_EQ(train.status, 0) << train.err;
  const Result r = plot(dir + "/m.jsonl -o " + dir + "/curves.png");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, dir + "/curves.png: 5 logged steps, 2 evaluations\n");
  const std::string png = slurp(dir + "/curves.png");
  ASSERT_GT(png.size(), 24u);
  EXPECT_EQ(png.substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  EXPECT_EQ(big_endian(png, 16), 800u);  // width
  EXPECT_EQ(big_endian(png, 20), 500u);  // height
  // Without -o, the PNG is named after the metrics file.
  ASSERT_EQ(plot(dir + "/m.jsonl").status, 0);
  EXPECT_EQ(slurp(dir + "/m.png").substr(0, 4), "\x89PNG");
  fs::remove_all(dir);
}

// A run stopped after logging step 30 but saved at step 20, then resumed
// from 20: steps 21-30 were trained twice, and only the resumed part's
// records count.
TEST(PlotScript, AResumedRunsRepeatedStepsAreDrawnOnce) {
  const std::string dir = temp_dir("plot_resume");
  std::ofstream(dir + "/m.jsonl")
      << R"({"kind":"run","step":0,"config":{"model":"mlp"}})"
         "\n"
      << R"({"kind":"train","step":10,"loss":2.0})"
         "\n"
      << R"({"kind":"train","step":20,"loss":1.5})"
         "\n"
      << R"({"kind":"eval","split":"test","step":20,"loss":1.6,"accuracy":0.5})"
         "\n"
      << R"({"kind":"train","step":30,"loss":1.2})"
         "\n"
      << R"({"kind":"run","step":20,"resumed_from":"ck/checkpoint-20"})"
         "\n"
      << R"({"kind":"train","step":30,"loss":1.25})"
         "\n"
      << R"({"kind":"train","step":40,"loss":1.0})"
         "\n";
  const Result r = plot(dir + "/m.jsonl");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, dir + "/m.png: 4 logged steps, 1 evaluations\n");
  fs::remove_all(dir);
}

TEST(PlotScript, BadFilesAreOneLineErrors) {
  const std::string dir = temp_dir("plot_errors");
  auto expect_error = [&](const std::string& file, const std::string& message) {
    SCOPED_TRACE(file);
    const Result r = plot(file);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err, "plot.py: error: " + message + "\n");
  };
  expect_error(dir + "/none.jsonl", dir + "/none.jsonl: no such file");
  expect_error(dir, dir + ": is a directory, not a metrics file");
  std::ofstream(dir + "/empty.jsonl") << "\n";
  expect_error(dir + "/empty.jsonl",
               dir +
                   "/empty.jsonl: the file is empty; a run writes its records with `wholestep "
                   "train --metrics FILE`");
  std::ofstream(dir + "/bad.jsonl") << R"({"kind":"train","step":1,"loss":2})"
                                       "\n"
                                    << "{not json\n"
                                    << R"({"kind":"train","step":2,"loss":1})"
                                       "\n";
  expect_error(dir + "/bad.jsonl",
               dir +
                   "/bad.jsonl:2: not JSON (Expecting property name enclosed in double quotes "
                   "at column 2)");
  std::ofstream(dir + "/loss.jsonl") << R"({"kind":"train","step":1,"loss":"low"})"
                                        "\n";
  expect_error(dir + "/loss.jsonl", dir + "/loss.jsonl:1: \"loss\" is \"low\"; expected a number");
  std::ofstream(dir + "/kind.jsonl") << "[1, 2]\n";
  expect_error(dir + "/kind.jsonl",
               dir + "/kind.jsonl:1: a record must be a JSON object with a \"kind\"");
  std::ofstream(dir + "/evals.jsonl") << R"({"kind":"eval","step":5,"loss":1})"
                                         "\n";
  expect_error(dir + "/evals.jsonl", dir + "/evals.jsonl: no \"train\" records; nothing to draw");
  std::ofstream(dir + "/ok.jsonl") << R"({"kind":"train","step":1,"loss":2})"
                                      "\n";
  expect_error(dir + "/ok.jsonl -o " + dir + "/no/such/dir/x.png",
               "-o " + dir + "/no/such/dir/x.png: cannot write in " + dir + "/no/such/dir");
  // A last line cut short (a run killed mid-write) is skipped with a warning.
  std::ofstream(dir + "/cut.jsonl") << R"({"kind":"train","step":1,"loss":2})"
                                       "\n"
                                    << R"({"kind":"train","st)";
  const Result cut = plot(dir + "/cut.jsonl");
  EXPECT_EQ(cut.status, 0) << cut.err;
  EXPECT_NE(cut.err.find("cut.jsonl:2: the last line is cut short"), std::string::npos) << cut.err;
  fs::remove_all(dir);
}

}  // namespace
