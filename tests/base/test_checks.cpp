// Programmer errors in base/ stop the process in every build, naming file and line: each case
// runs in a child process, whose stderr and end are checked.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/catch.hpp"
#include <csignal>
#include <functional>
#include <string>
#include <vector>

#include "base/job_pool.hpp"
#include "base/span.hpp"
#include "base/status.hpp"

namespace diloco {
namespace {

struct ending {
  bool aborted = false;
  std::string stderr_text;
};

// Runs `body` in a forked child with its stderr in a pipe.
ending run_in_child(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGABRT, SIG_DFL);  // not the test framework's handler, which reports to stdout
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  ending e;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) e.stderr_text.append(buf, n);
  ::close(fds[0]);
  int wstatus = 0;
  REQUIRE(::waitpid(pid, &wstatus, 0) == pid);
  e.aborted = WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGABRT;
  return e;
}

void check_stops(const std::function<void()>& body, const std::string& file,
                 const std::string& what) {
  const ending e = run_in_child(body);
  CHECK(e.aborted);
  CHECK_THAT(e.stderr_text, Catch::Contains(file + ":") && Catch::Contains(what) &&
                                Catch::Contains("internal error"));
}

TEST_CASE("the value of a failed result stops the process, naming the line", "[checks]") {
  check_stops(
      [] {
        result<int> r = status(errc::not_found, "no such file");
        (void)r.value();
      },
      "base/status.hpp", "the value of a result that holds an error");
  check_stops(
      [] {
        result<int> r = 3;
        (void)r.error();
      },
      "base/status.hpp", "the error of a result that holds a value");
  check_stops([] { (void)status(errc::ok, "fine"); }, "base/status.hpp",
              "a failed status made with the code ok");
  check_stops([] { result<int> r = ok_status(); }, "base/status.hpp",
              "a result holds a value or a failed status");
}

TEST_CASE("a subspan past the end and a pool without threads stop the process", "[checks]") {
  check_stops(
      [] {
        std::vector<float> v(8);
        span<float> s(v);
        (void)s.subspan(4, 5);
      },
      "base/span.hpp", "a subspan past the span's end");
  check_stops([] { job_pool pool(0); }, "base/job_pool.hpp", "a job_pool with no threads");
}

TEST_CASE("correct use of results and spans goes through", "[checks]") {
  const ending e = run_in_child([] {
    result<int> r = 3;
    std::vector<float> v(8, 1.0f);
    span<float> s(v);
    if (r.value() != 3 || s.subspan(4, 4).size() != 4 || s.subspan(8, 0).size() != 0) std::abort();
  });
  CHECK_FALSE(e.aborted);
  CHECK(e.stderr_text.empty());
}

}  // namespace
}  // namespace diloco
