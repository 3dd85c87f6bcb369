// `diloco`: the command line of the Decoupled DiLoCo runtime (apps/commands.cpp).
#include "apps/commands.hpp"

int main(int argc, char** argv) {
  return diloco::run_command_line(argc, argv);
}
