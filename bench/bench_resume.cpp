// A resume's reading of a snapshot, alone: the steps `diloco simulate --resume ROOT` takes
// before its actors run, and the load each actor makes of its part when it starts, with
// nothing after them (so that a heap profiler's counts are the resume's and nothing else's).
//   1. choose: the newest complete snapshot whose files pass their checksums and whose every
//      part passes the check (choose_snapshot with check_snapshot_loads, as resume does);
//   2. load: every actor's part loaded in full into a fresh state of its role (load_part, the
//      load restore_actor makes), then dropped.
// Baseline in the same run: the same actor files read into one reused buffer (read(2) only).
// Prints the seconds of each step and the ratio of the whole to the baseline.
// bench/resume_traffic.sh runs it under valgrind's DHAT to count the memory it moves.
//
// With --read, the actor files are read into memory of their own instead of mapped (what a file
// system that cannot map files gets): bench/resume_traffic.sh counts those bytes under DHAT,
// which sees heap blocks, not mappings.
//
// Usage: bench_resume ROOT [--reps N] [--read]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/state_io.hpp"
#include "bench/bench_util.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "config/resolve.hpp"
#include "hosts/resume_check.hpp"
#include "runtime/env.hpp"

using namespace diloco;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "bench_resume: %s\n", what.c_str());
  std::exit(1);
}

// Files read through one reused buffer: what the page cache and read(2) cost. Returns their
// bytes.
uint64_t read_files(const std::vector<std::string>& paths) {
  std::vector<uint8_t> buf(size_t{4} << 20);
  uint64_t total = 0;
  for (const auto& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(path + ": cannot open");
    for (;;) {
      const ssize_t r = ::read(fd, buf.data(), buf.size());
      if (r < 0) fail(path + ": read failed");
      if (r == 0) break;
      total += static_cast<uint64_t>(r);
    }
    ::close(fd);
  }
  bench::do_not_optimize(buf[0]);
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) fail("usage: bench_resume ROOT [--reps N] [--read]");
  const std::string root = argv[1];
  int reps = 1;
  bool mapped = true;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--read") == 0) {
      set_file_mapping(false);
      mapped = false;
    } else {
      fail(std::string("unknown argument ") + argv[i]);
    }
  }
  {  // the newest snapshot's files into the page cache first, for every step alike
    auto listing = list_snapshots(root);
    if (!listing) fail(listing.error().to_string());
    std::vector<std::string> files;
    if (!listing->empty()) {
      for (const auto& f : std::filesystem::directory_iterator(listing->back().path))
        if (f.is_regular_file()) files.push_back(f.path().string());
    }
    read_files(files);
  }
  std::vector<double> choose_s, load_s, raw_s;
  uint64_t bytes = 0;
  std::string chosen;
  for (int r = 0; r < reps; ++r) {
    double t0 = bench::now_s();
    auto choice = choose_snapshot(root, std::nullopt, check_snapshot_loads);
    if (!choice) fail(choice.error().to_string());
    choose_s.push_back(bench::now_s() - t0);
    const loaded_snapshot& s = choice->snapshot;
    chosen = s.path;
    const snapshot_manifest& m = s.manifest;
    auto config = reopen_recorded(m.config_text, s.path + "/MANIFEST", m.run_id);
    if (!config) fail(config.error().to_string());
    auto env = actor_env::make(*config, m.tick_scale != 1);
    if (!env) fail(env.error().to_string());
    t0 = bench::now_s();
    bytes = 0;
    std::vector<std::string> actor_files;
    for (uint32_t i = 0; i < s.parts.size(); ++i) {
      actor_files.push_back(s.path + "/" + m.actors[i].file);
      const status st = load_part(*env, i, s.parts[i].view(), actor_files.back());
      if (!st.ok()) fail(st.to_string());
      bytes += m.actors[i].bytes;
    }
    load_s.push_back(bench::now_s() - t0);
    t0 = bench::now_s();
    if (read_files(actor_files) != bytes) fail("the actor files changed size while it ran");
    raw_s.push_back(bench::now_s() - t0);
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double c = median(choose_s), l = median(load_s), raw = median(raw_s);
  const double mb = static_cast<double>(bytes) / 1e6;
  std::printf("bench_resume: %s, %.1f MB in its actor files, %s, median of %d\n", chosen.c_str(),
              mb, mapped ? "mapped" : "read", reps);
  std::printf("  choose (read, checksum, check every part)  %8.3f s  %8.0f MB/s\n", c, mb / c);
  std::printf("  load every part in full                     %8.3f s  %8.0f MB/s\n", l, mb / l);
  std::printf("  baseline: read(2) of the same files         %8.3f s  %8.0f MB/s\n", raw, mb / raw);
  std::printf("resume reading: %.2fx the baseline's time\n", (c + l) / raw);
  return 0;
}
