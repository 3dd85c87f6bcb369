// `diloco chaos`: goodput under failures at scale. Sweeps chip counts and systems in the
// cost-model runtime (the real actors, steps as durations) and prints goodput and uptime next
// to the published data-parallel rows. With --calibrate it first fits the failure model's two
// free parameters (recovery and rescale times) to those rows.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "apps/parallel.hpp"
#include "apps/progress.hpp"
#include "hosts/simulation.hpp"
#include "protocol/digest.hpp"

namespace diloco {

namespace {

// The published data-parallel goodput at a per-chip MTBI of 1 year: the calibration targets.
const std::vector<uint64_t> published_chips = {150000, 300000, 600000, 1200000, 2400000};
const std::vector<double> published_dp = {0.72, 0.57, 0.38, 0.27, 0.18};
const std::vector<double> published_elastic = {0.88, 0.80, 0.69, 0.58, 0.40};

struct chaos_options {
  double days = 30;
  double mtbi_years = 1;
  double recovery_s = failure_model{}.recovery_s;
  double rescale_s = failure_model{}.rescale_s;
  int unit_chips = static_cast<int>(failure_model{}.unit_chips);
  std::string chips = "150000,300000,600000,1200000,2400000";
  std::string learners = "2,4,8,16";
  int regions = 0;  // Decoupled learners in this many regions, each with a regional syncer
  bool decoupled_elastic = true;
  bool calibrate = false;
  uint64_t seed = 1;
  double step_time_s = 10;
  int threads = machine_threads();
  bool trace = false;
  common_options common;
};

struct system_spec {
  std::string name;
  int learners;
  bool elastic;
  int regions = 0;  // regional syncers (0: the learners sync with the shards directly)
};

struct cell {
  double goodput = 0;
  double uptime = 0;
  uint64_t events = 0;
  uint64_t trace = 0;              // the run's trace hash (--trace; 0 without)
  double wan_bytes_per_token = 0;  // what the shards sent and received, per token
};

result<std::vector<uint64_t>> parse_list(const std::string& flag, const std::string& text) {
  std::vector<uint64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    auto v = text::parse_uint(item);
    if (!v || *v == 0)
      return status(errc::invalid_argument,
                    "--" + flag + ": '" + item + "' is not a positive integer");
    out.push_back(*v);
  }
  if (out.empty()) return status(errc::invalid_argument, "--" + flag + ": empty list");
  return out;
}

run_config cost_config(const chaos_options& o, uint64_t chips, const system_spec& sys) {
  run_config c = builtin_run_config();
  c.compute = compute_mode::cost;
  c.seed = o.seed;
  c.learners = sys.learners;
  c.quorum = 1;
  c.chips_per_learner = chips / static_cast<uint64_t>(sys.learners);
  c.duration_s = o.days * 86400.0;
  c.speed.step_time_s = o.step_time_s;
  c.interruptions.mtbi_hours = o.mtbi_years * 365.0 * 24.0;
  c.interruptions.recovery_s = o.recovery_s;
  c.interruptions.rescale_s = o.rescale_s;
  c.interruptions.unit_chips = static_cast<uint32_t>(o.unit_chips);
  c.interruptions.elastic = sys.elastic;
  if (sys.regions > 0) {
    // The learners in contiguous blocks, one block per region; every region with a regional
    // syncer behind the default link.
    for (int r = 0; r < sys.regions; ++r) {
      region_config g;
      g.name = "r" + std::to_string(r);
      g.latency_s = c.link.latency_s;
      g.bandwidth_gbps = c.link.bandwidth_gbps;
      g.syncer = true;
      c.regions.push_back(g);
    }
    c.speeds.assign(static_cast<size_t>(sys.learners), c.speed);
    for (int l = 0; l < sys.learners; ++l)
      c.speeds[static_cast<size_t>(l)].region =
          "r" + std::to_string(l * sys.regions / sys.learners);
  }
  return c;
}

result<cell> run_cell(const chaos_options& o, uint64_t chips, const system_spec& sys) {
  const run_config c = cost_config(o, chips, sys);
  if (auto st = c.validate(); !st.ok()) return st;
  sim_options so;
  so.trace = o.trace;
  auto r = run_simulation(c, so);
  if (!r) return r.error();
  return cell{
      r->goodput(), r->uptime(), r->events, r->trace_hash,
      static_cast<double>(r->wide_area_bytes()) / std::max(1.0, static_cast<double>(r->tokens()))};
}

// Golden-section search of the parameter in [lo, hi] minimizing the squared error of one
// system's goodput against its published row.
result<double> fit(chaos_options o, double chaos_options::*param, const system_spec& sys,
                   const std::vector<double>& target, double lo, double hi, const char* what) {
  auto loss = [&](double x) -> result<double> {
    o.*param = x;
    std::vector<result<cell>> cells(published_chips.size(), status(errc::not_found, "not run"));
    parallel_jobs(cells.size(), o.threads,
                  [&](size_t i) { cells[i] = run_cell(o, published_chips[i], sys); });
    double sse = 0;  // summed in chip order, whatever the threads
    for (size_t i = 0; i < cells.size(); ++i) {
      if (!cells[i]) return cells[i].error();
      sse += (cells[i]->goodput - target[i]) * (cells[i]->goodput - target[i]);
    }
    return sse;
  };
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double a = lo, b = hi;
  double x1 = b - phi * (b - a), x2 = a + phi * (b - a);
  auto f1 = loss(x1), f2 = loss(x2);
  if (!f1 || !f2) return (f1 ? f2 : f1).error();
  for (int it = 0; it < 24 && b - a > 0.05; ++it) {
    if (*f1 < *f2) {
      b = x2;
      x2 = x1;
      f2 = f1;
      x1 = b - phi * (b - a);
      f1 = loss(x1);
      if (!f1) return f1.error();
    } else {
      a = x1;
      x1 = x2;
      f1 = f2;
      x2 = a + phi * (b - a);
      f2 = loss(x2);
      if (!f2) return f2.error();
    }
    spdlog::debug("calibrating {}: [{:.2f}, {:.2f}]", what, a, b);
  }
  const double best = (a + b) / 2;
  auto f = loss(best);
  if (!f) return f.error();
  std::printf("calibrated %s = %.1f s (rms error %.2f points over %zu chip counts)\n", what, best,
              100.0 * std::sqrt(*f / static_cast<double>(published_chips.size())),
              published_chips.size());
  return best;
}

// --calibrate: the recovery and rescale times that fit the published data-parallel rows.
status calibrate(chaos_options& o, const system_spec& dp_none, const system_spec& dp_elastic) {
  auto r = fit(o, &chaos_options::recovery_s, dp_none, published_dp, 1, 600, "recovery time");
  if (!r) return r.error();
  o.recovery_s = *r;
  auto t = fit(o, &chaos_options::rescale_s, dp_elastic, published_elastic, 1, 300, "rescale time");
  if (!t) return t.error();
  o.rescale_s = *t;
  return {};
}

std::string chips_label(uint64_t chips) {
  char buf[32];
  if (chips >= 1000000) {
    std::snprintf(buf, sizeof buf, "%.1fM", static_cast<double>(chips) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%lluk", static_cast<unsigned long long>(chips / 1000));
  }
  return buf;
}

// The goodput table, and beside it the published data-parallel rows when the chip counts are
// theirs.
void print_table(const std::vector<system_spec>& systems, const std::vector<uint64_t>& chips,
                 const std::vector<std::vector<cell>>& table) {
  std::printf("\ngoodput %% (uptime %%)   ");
  for (uint64_t n : chips) std::printf("%16s", chips_label(n).c_str());
  std::printf("\n");
  for (size_t s = 0; s < systems.size(); ++s) {
    std::printf("%-22s", systems[s].name.c_str());
    for (const auto& c : table[s]) std::printf("   %5.1f (%5.1f)", 100 * c.goodput, 100 * c.uptime);
    std::printf("\n");
  }
  if (chips == published_chips) {
    std::printf("\npublished              ");
    for (uint64_t n : chips) std::printf("%16s", chips_label(n).c_str());
    std::printf("\n");
    auto compare = [&](const char* name, const std::vector<double>& pub,
                       const std::vector<cell>& ours) {
      std::printf("%-22s", name);
      for (double v : pub) std::printf("%16.0f", 100 * v);
      std::printf("\n%-22s", "  simulated - published");
      for (size_t i = 0; i < pub.size(); ++i)
        std::printf("%+16.1f", 100 * (ours[i].goodput - pub[i]));
      std::printf("\n");
    };
    compare("DP, no elasticity", published_dp, table[0]);
    compare("DP, elastic", published_elastic, table[1]);
  }
}

}  // namespace

namespace {

// The command's options, into `o`.
void define_options(cli::arg_parser& p, chaos_options& o) {
  p.option("days", &o.days, "simulated days per run");
  p.option("mtbi-years", &o.mtbi_years, "per-chip mean time between interruptions");
  p.seconds("recovery-s", &o.recovery_s,
            "a failed non-elastic learner is down this long (calibrated default)");
  p.seconds("rescale-s", &o.rescale_s,
            "an elastic learner pauses this long per failure (calibrated default)");
  p.option("unit-chips", &o.unit_chips, "chips an elastic learner loses per failure");
  p.option("chips", &o.chips, "total chip counts to sweep (comma separated)");
  p.option("learners", &o.learners, "Decoupled DiLoCo learner counts to sweep");
  p.option("regions", &o.regions,
           "also run each Decoupled system with its learners in this many regions, each with a "
           "regional syncer (0: none)");
  p.option(
      "decoupled-elastic",
      [&o](const std::string& v) {
        if (v != "true" && v != "false")
          return status(errc::invalid_argument, "expected true or false");
        o.decoupled_elastic = v == "true";
        return status();
      },
      "BOOL", "true", "Decoupled learners shrink and grow (true) or go down and restart (false)");
  p.flag("calibrate", &o.calibrate,
         "first fit recovery and rescale times to the published DP rows");
  p.option("seed", &o.seed, "run seed: the interruption processes");
  p.seconds("step-time-s", &o.step_time_s,
            "simulated seconds per inner step (sets how often fragments sync)");
  p.option("threads", &o.threads,
           "runs at once (default: the machine's cores); the table is the same for any number");
  p.flag("trace", &o.trace,
         "fold every message of every run into its trace hash and print the sweep's (the "
         "runs' hashes in table order), to check that two builds or thread counts process "
         "the same events; off by default: the hash is about a tenth of the sweep's work");
}

// Every cell of the table: a cost-model run per system and chip count, with the events they
// processed added to `events`. The cells are independent runs: they go on `threads` threads,
// each into its own slot. The largest first (a run's events grow with its learners, then its
// chips), so that no thread is left with a long one at the end.
result<std::vector<std::vector<cell>>> sweep(const chaos_options& o,
                                             const std::vector<system_spec>& systems,
                                             const std::vector<uint64_t>& chips,
                                             progress_line& progress, uint64_t& events) {
  const size_t per = chips.size();
  std::vector<result<cell>> cells(systems.size() * per, status(errc::not_found, "not run"));
  std::vector<size_t> order(cells.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto la = systems[a / per].learners, lb = systems[b / per].learners;
    return la != lb ? la > lb : chips[a % per] > chips[b % per];
  });
  parallel_jobs(
      cells.size(), o.threads,
      [&](size_t k) {
        const size_t i = order[k];
        cells[i] = run_cell(o, chips[i % per], systems[i / per]);
      },
      [&](size_t done) { progress.update(static_cast<double>(done)); });
  std::vector<std::vector<cell>> table(systems.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!cells[i]) return cells[i].error();
    events += cells[i]->events;
    table[i / per].push_back(*cells[i]);
  }
  return table;
}

}  // namespace

int run_chaos(int argc, const char* const* argv) {
  chaos_options o;
  cli::arg_parser p(
      "diloco chaos",
      "Goodput under failures at scale: for each chip count and system, a cost-model run\n"
      "(the real actors, steps as durations, no math) with per-chip interruptions as\n"
      "Poisson processes. Prints goodput (useful chip-time / total chip-time) and uptime\n"
      "(time in which training progresses anywhere) next to the published data-parallel rows.\n"
      "Systems: data parallel without and with elasticity (one learner owning every chip)\n"
      "and Decoupled DiLoCo with M learners of chips / M each.");
  define_options(p, o);
  add_common_options(p, o.common);
  if (auto st = p.parse(argc, argv); !st.ok()) return report_error("diloco chaos", st);
  if (p.help_requested()) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  if (!apply_common_options(o.common)) return 2;
  if (o.threads < 1) {
    return report_error("diloco chaos",
                        status(errc::invalid_argument,
                               "--threads: must be at least 1, got " + std::to_string(o.threads)));
  }
  if (!(o.days > 0) || !(o.mtbi_years > 0)) {
    return report_error("diloco chaos",
                        status(errc::invalid_argument, "--days and --mtbi-years must be > 0"));
  }
  auto chips = parse_list("chips", o.chips);
  if (!chips) return report_error("diloco chaos", chips.error());
  auto learner_counts = parse_list("learners", o.learners);
  if (!learner_counts) return report_error("diloco chaos", learner_counts.error());

  std::printf(
      "diloco chaos: seed %llu, %d thread%s, %.0f simulated days per run, per-chip MTBI %.2f "
      "years\n",
      static_cast<unsigned long long>(o.seed), o.threads, o.threads == 1 ? "" : "s", o.days,
      o.mtbi_years);
  const auto wall_start = std::chrono::steady_clock::now();
  const system_spec dp_none{"DP, no elasticity", 1, false};
  const system_spec dp_elastic{"DP, elastic", 1, true};
  if (o.calibrate) {
    if (auto st = calibrate(o, dp_none, dp_elastic); !st.ok())
      return report_error("diloco chaos", st);
  }
  std::printf("failure model: recovery %.1f s, rescale %.1f s, elastic unit %d chips\n\n",
              o.recovery_s, o.rescale_s, o.unit_chips);

  std::vector<system_spec> systems = {dp_none, dp_elastic};
  if (o.regions < 0)
    return report_error("diloco chaos",
                        status(errc::invalid_argument,
                               "--regions: must be 0 or more, got " + std::to_string(o.regions)));
  for (uint64_t m : *learner_counts) {
    systems.push_back(
        {"Decoupled M=" + std::to_string(m), static_cast<int>(m), o.decoupled_elastic});
    if (o.regions > 0 && m >= static_cast<uint64_t>(o.regions))
      systems.push_back({"  + " + std::to_string(o.regions) + " regional syncers",
                         static_cast<int>(m), o.decoupled_elastic, o.regions});
  }
  progress_line progress("chaos", static_cast<double>(systems.size() * chips->size()), "runs");
  uint64_t events = 0;
  const auto sweep_start = std::chrono::steady_clock::now();
  auto table = sweep(o, systems, *chips, progress, events);
  if (!table) return report_error("diloco chaos", table.error());
  const double sweep_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sweep_start).count();
  progress.finish(static_cast<double>(systems.size() * chips->size()));

  print_table(systems, *chips, *table);
  if (o.regions > 0) {
    // What the regional syncers change: the bytes that cross the wide-area links.
    std::printf("\nwide-area bytes per token (the shards' traffic), at each chip count:\n");
    for (size_t k = 0; k < systems.size(); ++k) {
      if (systems[k].name.rfind("Decoupled", 0) != 0 && systems[k].regions == 0) continue;
      std::printf("%-28s", systems[k].name.c_str());
      for (const auto& c : (*table)[k]) std::printf(" %10.2f", c.wan_bytes_per_token);
      std::printf("\n");
    }
  }
  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (o.trace) {
    uint64_t trace = 0;
    for (const auto& row : *table)
      for (const auto& c : row) trace = mix(trace, c.trace);
    std::printf("\ntrace: %016llx (the %zu runs' trace hashes in table order)",
                static_cast<unsigned long long>(trace), systems.size() * chips->size());
  }
  std::printf("\nsweep: %zu runs, %llu events in %.2f s (%.0f events/s); all done in %.2f s\n",
              systems.size() * chips->size(), static_cast<unsigned long long>(events), sweep_s,
              static_cast<double>(events) / sweep_s, total_s);
  return 0;
}

}  // namespace diloco
