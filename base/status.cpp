#include "base/status.hpp"

namespace diloco {

const char* to_string(errc code) {
  switch (code) {
    case errc::ok:
      return "ok";
    case errc::invalid_argument:
      return "invalid_argument";
    case errc::io_error:
      return "io_error";
    case errc::corrupt_data:
      return "corrupt_data";
    case errc::non_finite:
      return "non_finite";
    case errc::shape_mismatch:
      return "shape_mismatch";
    case errc::not_found:
      return "not_found";
    case errc::stale:
      return "stale";
    case errc::user_code:
      return "user_code";
  }
  return "unknown";
}

std::string status::to_string() const {
  if (ok()) return "ok";
  return std::string(diloco::to_string(code_)) + ": " + message_;
}

status status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return status(code_, context + ": " + message_);
}

}  // namespace diloco
