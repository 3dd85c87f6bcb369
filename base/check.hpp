// Programmer errors: an invariant of our own code that does not hold (never bad input, which
// gets a status naming what is wrong). DILOCO_CHECK is on in every build, whatever NDEBUG
// says: it prints the file, the line, the condition and what it means, then aborts.
#pragma once

namespace diloco {

[[noreturn]] void check_failed(const char* condition, const char* what, const char* file, int line);

}  // namespace diloco

#define DILOCO_CHECK(condition, what) \
  ((condition) ? static_cast<void>(0) \
               : ::diloco::check_failed(#condition, what, __FILE__, __LINE__))
