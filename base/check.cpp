#include "base/check.hpp"

#include <cstdio>
#include <cstdlib>

namespace diloco {

void check_failed(const char* condition, const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: internal error: %s (%s does not hold)\n", file, line, what,
               condition);
  std::fflush(nullptr);
  std::abort();
}

}  // namespace diloco
