// Errors. A `ws::Error` is the user's mistake: it names the operation, the
// shapes involved and the user's source location. A `ws::InternalError` is a
// broken invariant inside wholestep (a bug in wholestep, never the user's).
#pragma once

#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ws {

// Where in the user's program a value was made. Empty when unknown.
struct SourceLoc {
  std::string file;
  int line = 0;

  // `l`, or the location a ScopedSourceLoc set on this thread.
  static SourceLoc from(const std::source_location& l);
  bool known() const { return !file.empty(); }
  // "file.cpp:12", or "" when unknown.
  std::string str() const;
  friend bool operator==(const SourceLoc&, const SourceLoc&) = default;
};

// While alive, SourceLoc::from gives `loc` on this thread, whatever C++
// line it is asked about: a frontend for another language that runs the
// library's C++ composites (the PyTorch importer) stamps its user's line on
// the nodes they record and the errors they raise.
class ScopedSourceLoc {
 public:
  explicit ScopedSourceLoc(SourceLoc loc);
  ~ScopedSourceLoc();
  ScopedSourceLoc(const ScopedSourceLoc&) = delete;
  ScopedSourceLoc& operator=(const ScopedSourceLoc&) = delete;

 private:
  const SourceLoc* prev_;
  SourceLoc loc_;
};

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation the system refused: the sizes asked for (a batch, a model)
// need more memory than the machine gives, which is not a bug. `bytes` is
// the size of the one allocation that failed.
class OutOfMemory : public Error {
 public:
  OutOfMemory(size_t bytes, const std::string& what)
      : Error("out of memory: " + what + " needs " + std::to_string(bytes) + " bytes"),
        bytes_(bytes) {}
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Appends " (at file:line)" when the location is known.
std::string at(const SourceLoc& loc);

namespace detail {
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond);
  CheckFailure(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure() noexcept(false);
  template <class T>
  CheckFailure& operator<<(const T& v) {
    msg_ << v;
    return *this;
  }

 private:
  std::ostringstream msg_;
};
}  // namespace detail

}  // namespace ws

// Internal invariant: `WS_CHECK(n > 0) << "n=" << n;` throws ws::InternalError.
#define WS_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::ws::detail::CheckFailure(__FILE__, __LINE__, #cond)
