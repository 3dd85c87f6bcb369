// Error values for the numerical core and everything built on it (LevelDB's Status idea).
//
// Operating errors (bad input, I/O, corrupt data, non-finite numbers from a peer) are returned
// as a `status` or a `result<T>` with a message a user can act on. Programmer errors (reading
// the value of a failed result, its error when it holds a value) stop the process in every
// build, naming file and line (base/check.hpp). This header depends on nothing else, so every
// module can use it.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "base/check.hpp"

namespace diloco {

enum class errc {
  ok = 0,
  invalid_argument,  // a config value, flag or call argument out of its domain
  io_error,          // the OS refused a read or write
  corrupt_data,      // bytes that do not decode: bad magic, checksum, truncated, bad field
  non_finite,        // NaN or Inf where numbers must be finite
  shape_mismatch,    // a tensor or blob of the wrong size
  not_found,         // a named thing (file, actor, key) does not exist
  stale,             // a message that refers to a version outside the accepted window
  user_code,         // a user's learner (model, optimizer, training step) failed or misbehaved
};

const char* to_string(errc code);

class [[nodiscard]] status {
 public:
  status() = default;
  status(errc code, std::string message) : code_(code), message_(std::move(message)) {
    DILOCO_CHECK(code != errc::ok,
                 "a failed status made with the code ok (use status() for success)");
  }

  bool ok() const { return code_ == errc::ok; }
  errc code() const { return code_; }
  const std::string& message() const { return message_; }

  // "corrupt_data: blob.bin: checksum mismatch" style text for logs and CLI output.
  std::string to_string() const;

  // Prepends context ("while reading x: ") to the message of a failed status.
  status with_context(const std::string& context) const;

 private:
  errc code_ = errc::ok;
  std::string message_;
};

inline status ok_status() {
  return status();
}

// A value or the error that prevented it. Access to the wrong alternative is a programmer error.
template <class T>
class [[nodiscard]] result {
 public:
  result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like expected<T>
  result(status error) : v_(std::move(error)) {
    DILOCO_CHECK(!std::get<status>(v_).ok(), "a result holds a value or a failed status");
  }

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    DILOCO_CHECK(ok(), "the value of a result that holds an error");
    return std::get<0>(v_);
  }
  const T& value() const& {
    DILOCO_CHECK(ok(), "the value of a result that holds an error");
    return std::get<0>(v_);
  }
  T&& value() && {
    DILOCO_CHECK(ok(), "the value of a result that holds an error");
    return std::get<0>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const status& error() const {
    DILOCO_CHECK(!ok(), "the error of a result that holds a value");
    return std::get<1>(v_);
  }

 private:
  std::variant<T, status> v_;
};

}  // namespace diloco
