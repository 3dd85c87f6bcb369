// The Catch2 runner shared by every test executable (Catch2 2 or 3: tests/catch.hpp).
#define CATCH_CONFIG_RUNNER
#include "tests/catch.hpp"

int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
