// Recording overhead: the same simulated run with and without a replay tape, measured in the
// same process, alternating so drift hits both alike. Two workloads:
//   - training: the built-in cluster (4 learners, real compute) on a smaller budget;
//   - messages: the cost model (no math) with failures, where recording is the largest share.
// Prints wall times, the ratio recorded/plain (target <= 1.10 for training), events and tape
// size. Usage: bench_tape [--budget TOKENS] [--reps N] [--days D]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "config/resolve.hpp"
#include "hosts/simulation.hpp"

using namespace diloco;

namespace {

struct measured {
  double plain_s = 0, recorded_s = 0;
  uint64_t events = 0, tape_bytes = 0, tape_events = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

measured measure(const run_config& c, int reps) {
  std::vector<double> plain, recorded;
  measured m;
  const std::string path = "/tmp/bench_tape." + std::to_string(::getpid()) + ".tape";
  for (int r = 0; r <= reps; ++r) {  // r == 0 warms up
    double t0 = bench::now_s();
    auto a = run_simulation(c);
    const double tp = bench::now_s() - t0;
    if (!a) {
      std::fprintf(stderr, "bench_tape: %s\n", a.error().to_string().c_str());
      std::exit(1);
    }
    std::remove(path.c_str());
    t0 = bench::now_s();
    auto rec = tape_recorder::create(path, make_tape_header(c, 1, "", true));
    if (!rec) std::exit(1);
    sim_options o;
    o.tape = *rec;
    auto b = run_simulation(c, o);
    if (!b || !(*rec)->close().ok()) std::exit(1);
    const double tr = bench::now_s() - t0;
    if (a->trace_hash != b->trace_hash) {
      std::fprintf(stderr, "bench_tape: recording changed the run\n");
      std::exit(1);
    }
    m.events = a->events;
    m.tape_bytes = (*rec)->bytes_written();
    m.tape_events = (*rec)->events();
    std::remove(path.c_str());
    if (r == 0) continue;
    plain.push_back(tp);
    recorded.push_back(tr);
  }
  m.plain_s = median(plain);
  m.recorded_s = median(recorded);
  return m;
}

void print(const char* name, const measured& m) {
  std::printf(
      "%-9s plain %7.3f s  recorded %7.3f s  ratio %.3f  events %9llu  tape %8.1f MB "
      "(%llu records, %.1f MB/s)\n",
      name, m.plain_s, m.recorded_s, m.recorded_s / m.plain_s,
      static_cast<unsigned long long>(m.events), static_cast<double>(m.tape_bytes) / 1e6,
      static_cast<unsigned long long>(m.tape_events),
      static_cast<double>(m.tape_bytes) / 1e6 / m.recorded_s);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t budget = 320000;
  int reps = 3;
  double days = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--budget") == 0) budget = std::strtoull(argv[i + 1], nullptr, 10);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--days") == 0) days = std::atof(argv[i + 1]);
  }
  run_config train = builtin_run_config();
  train.token_budget = budget;
  derive_dependent(train);
  print("training", measure(train, reps));

  run_config msgs = builtin_run_config();
  msgs.compute = compute_mode::cost;
  msgs.learners = 8;
  msgs.chips_per_learner = 10000;
  msgs.duration_s = days * 86400.0;
  msgs.interruptions.mtbi_hours = 1.0 * 365 * 24;
  msgs.interruptions.elastic = true;
  print("messages", measure(msgs, reps));
  return 0;
}
