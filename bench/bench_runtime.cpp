// Runtime overhead: one learner inside the actor system (deterministic scheduler, vector
// clocks, stamping, syncs with its syncer shard every H steps) against the bare training loop
// of the same model, batch and steps, measured in the same run. Prints tokens/s of both and
// the ratio (target >= 0.95).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "config/resolve.hpp"
#include "hosts/simulation.hpp"
#include "tensor/trainer.hpp"

using namespace diloco;

int main(int argc, char** argv) {
  int steps = 3000;
  int reps = 3;
  int period = 0;  // 0: the built-in cluster's H
  std::string only;
  int threads = 0;  // "bare" or "actor": run one side (for profiling)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--period") == 0) period = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
  }
  run_config c = builtin_run_config();
  c.learners = 1;
  c.shards = 1;
  c.quorum = 1;
  if (period > 0) c.period_steps = period;
  c.token_budget = static_cast<uint64_t>(steps) * static_cast<uint64_t>(c.batch);
  derive_dependent(c);
  auto data = data_source::build(c.data, c.model.context);
  if (!data) return 1;

  std::vector<double> det_ratio, rt_ratio;
  run_config rt = c;
  rt.clock = schedule_clock::local;  // real time: a schedule step is the learner's own step
  for (int r = 0; r < reps; ++r) {
    // Alternate the two so drift of the machine hits both alike.
    double bare_tok_s = 0;
    if (only != "actor") {
      inner_trainer bare(c.model, *data, c.batch, c.seed, 0, 1);
      const double t0 = bench::now_s();
      for (int s = 0; s < steps; ++s) bare.step(c.inner);
      bare_tok_s = static_cast<double>(steps) * c.batch / (bench::now_s() - t0);
    }
    if (only == "bare") {
      std::printf("bare %.1f tokens/s\n", bare_tok_s);
      continue;
    }
    auto sim = run_simulation(c);
    realtime_options ro;
    ro.threads = threads;
    auto real = run_realtime(rt, ro);
    if (!sim || !real) {
      std::fprintf(stderr, "%s\n", (sim ? real.error() : sim.error()).to_string().c_str());
      return 1;
    }
    const double det_tok_s = static_cast<double>(sim->tokens()) / sim->run_wall_s;
    const double rt_tok_s = static_cast<double>(real->tokens()) / real->run_wall_s;
    std::printf(
        "rep %d: bare %.1f tokens/s, deterministic actors %.1f (%.3f), threaded actors %.1f "
        "(%.3f)\n",
        r, bare_tok_s, det_tok_s, det_tok_s / bare_tok_s, rt_tok_s, rt_tok_s / bare_tok_s);
    det_ratio.push_back(det_tok_s / bare_tok_s);
    rt_ratio.push_back(rt_tok_s / bare_tok_s);
  }
  if (det_ratio.empty()) return 0;
  std::sort(det_ratio.begin(), det_ratio.end());
  std::sort(rt_ratio.begin(), rt_ratio.end());
  // Each rep's ratio is measured back to back; the median resists the machine's drift.
  std::printf("ratio_deterministic_vs_bare=%.3f\n", det_ratio[det_ratio.size() / 2]);
  std::printf("ratio_threaded_vs_bare=%.3f\n", rt_ratio[rt_ratio.size() / 2]);
  return 0;
}
