// safetensors, the format of PyTorch's and Hugging Face's weights: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range, then the bytes. The reader trusts nothing: every
// range is checked against the file and the others before a tensor is made.
#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/files.hpp"
#include "wholestep/checkpoint.hpp"

namespace ws {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

// The reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeader = 100'000'000;

const char* st_dtype(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
    case DType::b8: return "BOOL";
  }
  return "?";
}

std::optional<DType> parse_dtype(const std::string& s) {
  for (DType d : {DType::f32, DType::f64, DType::i64, DType::b8})
    if (s == st_dtype(d)) return d;
  return std::nullopt;
}

std::span<const std::byte> bytes_of(const Tensor& t) {
  const void* p = nullptr;
  switch (t.dtype()) {
    case DType::f32: p = t.data<float>(); break;
    case DType::f64: p = t.data<double>(); break;
    case DType::i64: p = t.data<int64_t>(); break;
    case DType::b8: p = t.data<uint8_t>(); break;
  }
  return {static_cast<const std::byte*>(p), t.nbytes()};
}

}  // namespace

void write_safetensors(const std::string& path, const nn::NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<std::span<const std::byte>> parts;
  parts.reserve(tensors.size() + 2);
  uint64_t offset = 0;
  std::vector<std::span<const std::byte>> data;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || header.contains(name))
      throw Error(fmt::format("write_safetensors {}: tensor name '{}' is {}", path, name,
                              name == "__metadata__" ? "reserved" : "used twice"));
    if (t.is_traced())
      throw Error(
          fmt::format("write_safetensors {}: tensor '{}' is a traced value, not data", path, name));
    const std::span<const std::byte> b = bytes_of(t);
    header[name] = {{"dtype", st_dtype(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + b.size()}}};
    offset += b.size();
    data.push_back(b);
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');  // the data starts 8-byte aligned
  uint64_t n = text.size();
  std::byte length[8];
  std::memcpy(length, &n, 8);
  parts.push_back(length);
  parts.push_back(std::as_bytes(std::span(text)));
  parts.insert(parts.end(), data.begin(), data.end());
  io::write_file_atomically(path, parts);
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::vector<std::byte> file = io::read_file(path, "read_safetensors");
  auto bad = [&](const std::string& what) {
    return Error(fmt::format("read_safetensors {}: {}", path, what));
  };
  if (file.size() < 8)
    throw bad(fmt::format("{} bytes, shorter than the 8-byte header length", file.size()));
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  if (n > kMaxHeader) throw bad(fmt::format("header length {} is above 100 MB", n));
  if (n > file.size() - 8)
    throw bad(fmt::format("header length {} runs past the end of the file ({} bytes): truncated", n,
                          file.size()));
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + n);
  } catch (const nlohmann::json::exception& e) {
    throw bad(fmt::format("the header is not JSON: {}", e.what()));
  }
  if (!header.is_object()) throw bad("the header is not a JSON object");
  const std::byte* data = file.data() + 8 + n;
  const uint64_t data_size = file.size() - 8 - n;

  SafetensorsFile out;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    const std::string name = item.key();
    const nlohmann::json& v = item.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw bad("__metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) throw bad(fmt::format("__metadata__ value '{}' is not a string", k));
        out.metadata[k] = s.get<std::string>();
      }
      continue;
    }
    auto tensor_bad = [&](const std::string& what) {
      return bad(fmt::format("tensor '{}': {}", name, what));
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      throw tensor_bad("needs dtype, shape and data_offsets");
    const nlohmann::json &dt = v["dtype"], &sh = v["shape"], &off = v["data_offsets"];
    if (!dt.is_string()) throw tensor_bad("dtype is not a string");
    const std::optional<DType> dtype = parse_dtype(dt.get<std::string>());
    if (!dtype)
      throw tensor_bad(fmt::format("dtype {} is not one of F32, F64, I64, BOOL", dt.dump()));
    if (!sh.is_array()) throw tensor_bad("shape is not an array");
    Entry e{name, *dtype, {}, 0, 0};
    uint64_t bytes = dtype_size(*dtype);
    for (const nlohmann::json& d : sh) {
      if (!d.is_number_unsigned())
        throw tensor_bad(fmt::format("shape {} is not sizes", sh.dump()));
      const uint64_t size = d.get<uint64_t>();
      if (size > uint64_t(INT64_MAX) || __builtin_mul_overflow(bytes, size, &bytes))
        throw tensor_bad(fmt::format("shape {} overflows", sh.dump()));
      e.shape.push_back(int64_t(size));
    }
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw tensor_bad(fmt::format("data_offsets {} is not [begin, end]", off.dump()));
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.end < e.begin || e.end - e.begin != bytes)
      throw tensor_bad(fmt::format("data_offsets [{}, {}] hold {} bytes; {}{} needs {}", e.begin,
                                   e.end, e.end - std::min(e.begin, e.end), dt.get<std::string>(),
                                   shape_str(e.shape), bytes));
    entries.push_back(std::move(e));
  }
  // The byte ranges tile the data exactly, in offset order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  uint64_t at = 0;
  for (const Entry& e : entries) {
    if (e.begin != at)
      throw bad(fmt::format("tensor '{}': data_offsets begin at {}, where {} was expected ({})",
                            e.name, e.begin, at, e.begin < at ? "overlap" : "gap"));
    at = e.end;
  }
  if (at != data_size)
    throw bad(fmt::format("the tensors hold {} bytes but the file has {} after the header ({})", at,
                          data_size, at > data_size ? "truncated" : "trailing bytes"));
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    if (e.end > e.begin)
      std::memcpy(const_cast<std::byte*>(bytes_of(t).data()), data + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace ws
