// The command line's run options: --compare.
#include "tests/catch.hpp"

#include "apps/run_options.hpp"

using namespace diloco;

TEST_CASE("run options: --compare names known systems") {
  CHECK(parse_compare_list("dp,diloco").ok());
  CHECK(parse_compare_list("vanilla,dp").value() == std::vector<std::string>{"vanilla", "dp"});
  CHECK_FALSE(parse_compare_list("dp,ddp").ok());
  CHECK_THAT(parse_compare_list("sync").error().message(),
             Catch::Contains("dp, diloco or vanilla"));
}
