// `diloco`: the command line of the Decoupled DiLoCo runtime (apps/commands.cpp).
#include "apps/commands.hpp"

#ifdef DILOCO_WITH_MIMALLOC
#include <mimalloc.h>
#endif

int main(int argc, char** argv) {
#ifdef DILOCO_WITH_MIMALLOC
  // The process allocates with mimalloc (linked ahead of libc; docs/build.md). The call keeps
  // the library among the executable's dependencies under --as-needed.
  (void)mi_version();
#endif
  return diloco::run_command_line(argc, argv);
}
