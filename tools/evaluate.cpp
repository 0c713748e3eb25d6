#include "evaluate.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "stop.hpp"

namespace cli {

using ws::models::DataKind;

HeldOut::HeldOut(const Common& c, const ws::models::Spec& spec, ws::models::Model& model) {
  if (spec.data == DataKind::fashion_mnist) {
    ws::data::FashionMnist test =
        read_data("--data", c.data_dir, [&] { return ws::data::FashionMnist("test", c.data_dir); });
    if (test.size() == 0)
      throw UsageError(fmt::format("--data {}: the test set holds no examples", c.data_dir));
    eval_.emplace(model, std::move(test));
  } else if (spec.data == DataKind::text) {
    val_.emplace(
        read_data("--text", c.text, [&] { return ws::data::ByteText(c.text).split("val"); }));
    eval_.emplace(model, *val_, spec.batch, spec.gpt.context);
  }
}

ws::models::EvalResult HeldOut::run() {
  const std::optional<ws::models::EvalResult> r = eval_->run(stop_here);
  if (!r) throw Interrupted{};
  return *r;
}

namespace {

// The default prompt: `context` bytes of the validation text from the start
// of its second paragraph (after its first blank line), else of its second
// line, else from its start.
std::string default_prompt(const ws::data::ByteText& val, int64_t context) {
  const std::string head = val.text(0, std::min<int64_t>(val.size(), 1024));
  size_t at = head.find("\n\n");
  if (at != std::string::npos)
    at += 2;
  else if ((at = head.find('\n')) != std::string::npos)
    at += 1;
  else
    at = 0;
  if (int64_t(at) >= val.size()) at = 0;
  return val.text(int64_t(at), std::min<int64_t>(context, val.size() - int64_t(at)));
}

// Bytes for a terminal: control characters other than a line break or a
// tab as \xNN.
std::string printable(const std::string& s) {
  std::string out;
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && ch != '\n' && ch != '\t') || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += ch;
  }
  return out;
}

}  // namespace

// --sample: text the trained model generates after a prompt (--prompt, or
// from the validation text), printed and written to the metrics. The prompt
// is printed (and flushed) first; a stop asked while generating ends it
// between two bytes (Interrupted, after `phase` says how far it got).
void print_sample(ws::models::Model& model, const SampleRequest& f, const ws::data::ByteText& val,
                  int64_t step, MetricsLog& metrics, std::string& phase) {
  auto& gpt = dynamic_cast<ws::models::Gpt&>(model);
  const std::string prompt = f.prompt.value_or(default_prompt(val, gpt.config.context));
  std::vector<int64_t> tokens(prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) tokens[i] = static_cast<unsigned char>(prompt[i]);
  fmt::print("prompt ({} bytes{}):\n{}\n", prompt.size(), f.prompt ? "" : " of the validation text",
             printable(prompt));
  std::fflush(stdout);
  const std::vector<int64_t> out = ws::models::generate(
      gpt, tokens,
      {.length = f.bytes, .temperature = f.temperature, .seed = f.seed, .stop = stop_here});
  if (int64_t(out.size()) < f.bytes) {
    phase = fmt::format("sampling, after {} of {} bytes", out.size(), f.bytes);
    throw Interrupted{};
  }
  const std::string text = ws::data::ByteText::decode(out);
  const std::string how = f.temperature == 0
                              ? std::string("greedy")
                              : fmt::format("temperature {}, seed {}", f.temperature, f.seed);
  fmt::print("sample ({} bytes, {}):\n{}\n", out.size(), how, printable(text));
  metrics.write({{"kind", "sample"},
                 {"step", step},
                 {"prompt", prompt},
                 {"text", text},
                 {"temperature", f.temperature},
                 {"seed", f.seed}});
}

}  // namespace cli
