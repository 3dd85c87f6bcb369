// `diloco inspect`: what is in a snapshot directory. With a root of snapshots it lists them
// (number, simulated time, actors, size, whether every file checks out); with one snapshot
// (or --snapshot N) it shows every actor file: role, size, checksum, cut time, whether it is
// intact, and the actor's own summary of its state (versions, steps, pending messages).
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "apps/commands.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "hosts/resume_check.hpp"
#include "runtime/channels.hpp"

namespace diloco {

namespace {

struct inspect_options {
  std::string dir;
  uint64_t snapshot = 0;
  bool config = false;
  common_options common;
};

const char* role_name(uint8_t role) {
  return role <= static_cast<uint8_t>(actor_role::regional)
             ? to_string(static_cast<actor_role>(role))
             : "?";
}

double tick_s(int64_t tick, int64_t scale) {
  return static_cast<double>(tick / (scale > 0 ? scale : 1)) * 1e-9;
}

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b < 10'000) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  } else if (b < 10'000'000) {
    std::snprintf(buf, sizeof buf, "%.1f kB", static_cast<double>(b) / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(b) / 1e6);
  }
  return buf;
}

std::string wall_time(int64_t ns_since_epoch) {
  const std::time_t t = static_cast<std::time_t>(ns_since_epoch / 1000000000);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return buf;
}

std::string fixed3(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

// Beyond the files: whether the snapshot loads as resume loads it ("" when it does). A
// PyTorch run's snapshot without its learner: `note` says what was not checked.
std::string structure_problem(const std::string& path, std::string& note) {
  auto loaded = load_snapshot(path);
  if (!loaded) return loaded.error().message();
  auto checked = check_snapshot_loads_for_inspect(*loaded);
  if (!checked) return checked.error().message();
  if (!*checked)
    note =
        "its learners are PyTorch learners: their states were not checked (python3 -m "
        "diloco inspect ... --learner MODULE:FUNCTION checks them)";
  return std::string();
}

uint64_t total_bytes(const snapshot_manifest& m) {
  uint64_t sum = 0;
  for (const auto& a : m.actors) sum += a.bytes;
  return sum;
}

// One snapshot in full. Returns true when every file checks out.
bool show_snapshot(const std::string& path, bool print_config) {
  const snapshot_inspection in = inspect_snapshot(path);
  std::printf("%s\n", path.c_str());
  if (!in.manifest) {
    std::printf("  not usable: %s\n", in.manifest_problem.c_str());
    return false;
  }
  const snapshot_manifest& m = *in.manifest;
  // A deployed (real-time) run's cut is on the wall clock; a simulation's in simulated time.
  const bool deployed = m.tick_scale == 1;
  std::printf("  snapshot %" PRIu64 " of run %016" PRIx64 ", cut at %s, %zu actors, %s\n",
              m.snapshot, m.run_id,
              deployed
                  ? (wall_time(m.resume_tick) + " (a deployed run)").c_str()
                  : ("simulated " + fixed3(tick_s(m.resume_tick, m.tick_scale)) + " s").c_str(),
              m.actors.size(), human_bytes(total_bytes(m)).c_str());
  std::printf("  %5s  %-11s  %-16s  %9s  %-16s  %10s  %-6s  %s\n", "actor", "role", "file", "bytes",
              "checksum", "cut (s)", "check", "state");
  size_t bad = 0;
  for (const auto& a : in.actors) {
    const manifest_entry& e = a.entry;
    // Deployed: seconds after the earliest cut.
    const double cut = deployed ? static_cast<double>(e.cut_tick - m.resume_tick) / 1e9
                                : tick_s(e.cut_tick, m.tick_scale);
    std::printf("  %5u  %-11s  %-16s  %9" PRIu64 "  %016" PRIx64 "  %10.3f  %-6s  %s\n", e.index,
                role_name(e.role), e.file.c_str(), e.bytes, e.checksum, cut,
                a.problem.empty() ? "OK" : "BAD", e.summary.c_str());
    if (!a.problem.empty()) ++bad;
  }
  for (const auto& a : in.actors) {
    if (!a.problem.empty()) std::printf("  problem: %s\n", a.problem.c_str());
  }
  if (bad == 0) {
    std::string note;
    if (const std::string why = structure_problem(path, note); !why.empty()) {
      std::printf("  problem: %s\n", why.c_str());
      ++bad;
    }
    if (!note.empty()) std::printf("  note: %s\n", note.c_str());
  }
  std::printf("  %s\n", bad != 0   ? "NOT usable: resume would skip it"
                        : deployed ? "every file checks out: `diloco node --resume` (on the "
                                     "leader) can continue the run from it"
                                   : "every file checks out: this snapshot can be resumed from");
  if (print_config) std::printf("\nconfiguration of the run:\n%s", m.config_text.c_str());
  return bad == 0;
}

// The snapshots under a root, one line each. Returns true when every one is usable.
bool list_root(const std::string& root, const std::vector<snapshot_listing>& listing) {
  std::printf("%s: %zu snapshot director%s\n", root.c_str(), listing.size(),
              listing.size() == 1 ? "y" : "ies");
  if (listing.empty()) return false;
  std::printf("  %-20s  %8s  %23s  %6s  %10s  %s\n", "directory", "snapshot", "time", "actors",
              "size", "check");
  size_t usable = 0;
  bool all_good = true;
  for (const auto& l : listing) {
    const snapshot_inspection in = inspect_snapshot(l.path);
    if (!in.manifest) {
      std::printf("  %-20s  %8" PRIu64 "  %23s  %6s  %10s  BAD: %s\n", l.name.c_str(), l.snapshot,
                  "-", "-", "-", in.manifest_problem.c_str());
      all_good = false;
      continue;
    }
    const auto& m = *in.manifest;
    std::string check = "OK";
    for (const auto& a : in.actors) {
      if (!a.problem.empty()) {
        check = "BAD: " + a.problem;
        break;
      }
    }
    if (check == "OK") {
      std::string note;
      if (const std::string why = structure_problem(l.path, note); !why.empty()) {
        check = "BAD: " + why;
      } else if (!note.empty()) {
        check = "OK (files; PyTorch learners unchecked)";
      }
    }
    const bool ok = check.rfind("OK", 0) == 0;
    if (ok) ++usable;
    all_good = all_good && ok;
    // Simulated seconds, or the wall-clock time of a deployed run's cut.
    const std::string when = m.tick_scale == 1 ? wall_time(m.resume_tick)
                                               : fixed3(tick_s(m.resume_tick, m.tick_scale)) + " s";
    std::printf("  %-20s  %8" PRIu64 "  %23s  %6zu  %10s  %s\n", l.name.c_str(), m.snapshot,
                when.c_str(), m.actors.size(), human_bytes(total_bytes(m)).c_str(), check.c_str());
  }
  std::printf("  %zu usable%s; `diloco inspect %s --snapshot N` shows one in full\n", usable,
              all_good ? "" : ", the others BAD (resume skips them)", root.c_str());
  return usable > 0 && all_good;
}

}  // namespace

int run_inspect(int argc, const char* const* argv) {
  inspect_options o;
  cli::arg_parser p("diloco inspect",
                    "Lists the snapshots under DIR (as written by `diloco simulate\n"
                    "--snapshot-dir DIR`) and checks every file, or shows one snapshot in\n"
                    "full: its actors, their roles, sizes, checksums and state summaries.\n"
                    "Exit status 1 when anything shown is not usable (a root: any\n"
                    "snapshot in it).");
  p.positional("DIR", &o.dir, "a snapshot root, or one snapshot directory");
  p.option("snapshot", &o.snapshot, "show this snapshot number of the root in full (0: list)");
  p.flag("config", &o.config, "with one snapshot: print the run's configuration too");
  add_common_options(p, o.common);
  if (auto st = p.parse(argc, argv); !st.ok()) return report_error("diloco inspect", st);
  if (p.help_requested()) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  if (!apply_common_options(o.common)) return 2;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(o.dir, ec)) {
    return report_error("diloco inspect", status(errc::not_found, o.dir + ": not a directory"));
  }
  // One snapshot directory: it has a manifest, or actor files of its own.
  const bool single =
      fs::exists(o.dir + "/MANIFEST", ec) || fs::exists(o.dir + "/actor-00000.dlsa", ec);
  if (single) {
    if (o.snapshot != 0) {
      return report_error("diloco inspect",
                          status(errc::invalid_argument,
                                 "--snapshot: " + o.dir + " is one snapshot, not a root of them"));
    }
    return show_snapshot(o.dir, o.config) ? 0 : 1;
  }
  auto listing = list_snapshots(o.dir);
  if (!listing) return report_error("diloco inspect", listing.error());
  if (o.snapshot == 0) return list_root(o.dir, *listing) ? 0 : 1;
  bool found = false, all_ok = true;
  for (const auto& l : *listing) {
    if (l.snapshot != o.snapshot) continue;
    if (found) std::printf("\n");
    found = true;
    all_ok = show_snapshot(l.path, o.config) && all_ok;
  }
  if (!found) {
    return report_error("diloco inspect",
                        status(errc::not_found, "--snapshot " + std::to_string(o.snapshot) +
                                                    ": no such snapshot in " + o.dir));
  }
  return all_ok ? 0 : 1;
}

}  // namespace diloco
