// `diloco replay`: re-executes actors from a tape recorded with `diloco simulate --tape` and
// checks that they send what they sent then; stops before an input to dump an actor's state;
// exports the tape for trace viewers.
#include <algorithm>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "apps/commands.hpp"
#include "apps/progress.hpp"
#include "apps/run_options.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "config/cluster_file.hpp"
#include "config/resolve.hpp"
#include "hosts/simulation.hpp"
#include "observe/tape_export.hpp"
#include "protocol/wire.hpp"

namespace diloco {

namespace {

struct replay_cli {
  std::vector<std::string> tape_paths;
  std::string tape_path;  // what names the replay in messages: the one path given, or the first
  int64_t actor = -1;
  int64_t until = -1;
  std::string state_out;
  bool debug_break = false;
  bool partial = false;
  bool export_only = false;
  std::string chrome, shiviz;
  bool logical = false;  // --trace-clock logical
  std::vector<std::pair<std::string, std::string>> sets;
  common_options common;
};

std::string clock_text(const std::vector<uint64_t>& c) {
  if (c.empty()) return "-";
  std::string s = "[";
  for (size_t i = 0; i < c.size(); ++i) s += (i ? " " : "") + std::to_string(c[i]);
  return s + "]";
}

std::string describe_input(const tape& t, const tape_event& e) {
  std::string s = to_string(e.kind);
  s += " " + wire_tag_name(e.type);
  if ((e.kind == tape_kind::message || e.kind == tape_kind::dropped) && !e.clock.empty())
    s += " from " + tape_actor_name(t, e.peer);
  char at[64];
  if (t.header.virtual_time) {
    std::snprintf(at, sizeof at, " at %.6f s",
                  static_cast<double>(e.tick / t.header.tick_scale) * 1e-9);
    return s + at;
  }
  // Real time: the host's steady clock, whose zero is the host's boot; shown from the first
  // event its process recorded.
  const size_t i = static_cast<size_t>(&e - t.events.data());
  size_t first = i;
  while (first > 0 && t.segment(first - 1) == t.segment(i)) --first;
  std::snprintf(at, sizeof at, " %.6f s into the recording",
                static_cast<double>(e.tick - t.events[first].tick) * 1e-9);
  return s + at;
}

bool under_debugger() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("TracerPid:", 0) == 0) return std::stol(line.substr(10)) != 0;
  }
  return false;
}

status write_text(const std::string& path, const std::string& text) {
  return write_file_atomic(path,
                           byte_view(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

// Where a merged tape's event was recorded ("" for one file).
std::string recorded_where(const tape& t, size_t event) {
  if (t.segments.empty() || event >= t.events.size()) return "";
  const tape_segment& seg = t.segments[t.segment(event)];
  return " on node " + seg.node + ", process " + std::to_string(seg.incarnation);
}

// The tapes given: one file as it is; several, or a directory of them, merged into one run.
result<tape> load_tapes(const std::vector<std::string>& given, bool partial) {
  std::vector<std::string> files;
  for (const auto& path : given) {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec)) {
      files.push_back(path);
      continue;
    }
    std::vector<std::string> inside;
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      if (entry.path().extension() == ".tape") inside.push_back(entry.path().string());
    }
    if (ec) return status(errc::io_error, path + ": " + ec.message());
    if (inside.empty()) return status(errc::invalid_argument, path + ": holds no .tape files");
    std::sort(inside.begin(), inside.end());
    files.insert(files.end(), inside.begin(), inside.end());
  }
  if (files.size() == 1) return read_tape(files.front(), partial);
  std::vector<tape> tapes;
  for (const auto& f : files) {
    // A node killed while recording left its tape cut: whether that is expected (a later
    // process of the node follows) is merge_tapes' to say.
    auto t = read_tape(f, true);
    if (!t) return t.error();
    tapes.push_back(std::move(*t));
  }
  return merge_tapes(std::move(tapes), partial);
}

// Which volumes of a rotating recording are there.
std::string volumes_text(uint32_t first, uint32_t count) {
  std::string s = "volumes " + std::to_string(first) + " to " + std::to_string(first + count - 1);
  if (first > 0)
    s += " (the earlier ones rotated away: each actor's replay begins at its checkpoint, and its "
         "input numbers count from there)";
  return s;
}

// The tape's header and segments, and how many inputs it holds.
uint64_t print_tape_summary(const replay_cli& o, const tape& t) {
  uint64_t inputs = 0;
  for (const auto& e : t.events)
    inputs += e.kind != tape_kind::sent && e.kind != tape_kind::read ? 1 : 0;
  std::printf("diloco replay: %s: run %016" PRIx64 ", seed %" PRIu64
              ", %zu actors, %zu events (%" PRIu64 " inputs), %zu payloads, %zu blobs, %s\n",
              o.tape_path.c_str(), t.header.run_id, t.header.seed, t.header.roles.size(),
              t.events.size(), inputs, t.payloads.size(), t.blobs.size(),
              t.complete ? "complete" : "CUT SHORT");
  if (!t.truncation.empty() && t.segments.empty()) std::printf("  %s\n", t.truncation.c_str());
  if (t.segments.empty() && t.volumes > 1)
    std::printf("  %s\n", volumes_text(t.first_volume, t.volumes).c_str());
  for (const auto& seg : t.segments) {
    std::printf(
        "  node %s process %u: %s%s%s%s\n", seg.node.c_str(), seg.incarnation, seg.path.c_str(),
        seg.volumes > 1 || seg.first_volume > 0
            ? ("; " + volumes_text(seg.first_volume, seg.volumes)).c_str()
            : "",
        seg.cut ? ", cut short (the process died): " : "", seg.cut ? seg.truncation.c_str() : "");
  }
  std::fflush(stdout);
  return inputs;
}

// --chrome-trace and --shiviz.
status export_tape(const replay_cli& o, const tape& t) {
  if (!o.chrome.empty()) {
    if (auto st = write_text(o.chrome, chrome_trace_json(t, o.logical)); !st.ok()) return st;
    std::printf("Chrome trace written: %s (open in chrome://tracing or ui.perfetto.dev)\n",
                o.chrome.c_str());
  }
  if (!o.shiviz.empty()) {
    if (auto st = write_text(o.shiviz, shiviz_log(t)); !st.ok()) return st;
    std::printf("ShiViz log written: %s (load it at the ShiViz site as a file)\n",
                o.shiviz.c_str());
  }
  return {};
}

// A tape recorded with a user's learner names it; replaying it with another model (or the
// built-in MLP) diverges at the first loss a learner reports: say so up front.
void warn_of_other_learner(const replay_cli& o, const tape& t) {
  const std::string& recorded = t.header.learner;
  if (recorded == process_model_name()) return;
  auto what = [](const std::string& m) { return m.empty() ? std::string("the built-in MLP") : m; };
  std::fprintf(
      stderr,
      "diloco replay: the tape was recorded with %s as the learner; this replay runs "
      "%s, so its learners will diverge%s\n",
      what(recorded).c_str(), what(process_model_name()).c_str(),
      recorded.empty()
          ? ""
          : (" (python3 -m diloco replay " + o.tape_path + " --learner " + recorded + ")").c_str());
}

// --until: says where the replay stopped and, with --break under a debugger, traps.
void stop_at_until(const replay_cli& o, const tape& t, const tape_event& e) {
  std::printf("stopping before input %" PRId64 " of %s: %s (tape event %" PRIu64 "%s)\n", o.until,
              tape_actor_name(t, e.actor).c_str(), describe_input(t, e).c_str(), e.seq,
              recorded_where(t, static_cast<size_t>(&e - t.events.data())).c_str());
  if (!o.debug_break) return;
  if (under_debugger()) {
    std::printf("raising SIGTRAP: the actor's next input is the one above\n");
    std::fflush(stdout);
    std::raise(SIGTRAP);
  } else {
    std::printf("--break: not under a debugger, not stopping (run under gdb --args ...)\n");
  }
}

// --until: the actor's state before that input, framed, to --state-out.
status write_until_state(const replay_cli& o, const tape& t, const replay_result& r) {
  const std::string path = !o.state_out.empty()
                               ? o.state_out
                               : o.tape_path + ".actor-" + std::to_string(o.actor) + ".before-" +
                                     std::to_string(o.until) + ".state";
  const auto framed =
      make_frame({'D', 'L', 'S', 'T'}, 1, byte_view(r.state.data(), r.state.size()));
  if (auto st = write_file_atomic(path, byte_view(framed.data(), framed.size())); !st.ok())
    return st;
  std::printf("state of %s before input %" PRId64 ": %s\n  %zu bytes written to %s\n",
              tape_actor_name(t, static_cast<uint32_t>(o.actor)).c_str(), o.until,
              r.summary.c_str(), r.state.size(), path.c_str());
  return {};
}

void print_divergence(const replay_cli& o, const tape& t, const replay_divergence& d) {
  std::printf("DIVERGENCE in %s (actor %u)\n", tape_actor_name(t, d.actor).c_str(), d.actor);
  std::string input = "?";
  if (d.input_event < t.events.size()) input = describe_input(t, t.events[d.input_event]);
  std::printf("  while handling its input %" PRIu64 " (tape event %" PRIu64 "%s): %s\n",
              d.input_index, d.input_seq, recorded_where(t, d.input_event).c_str(), input.c_str());
  std::printf("  its send %" PRIu64 ": %s\n", d.sent_index, d.what.c_str());
  std::printf("  vector clock recorded: %s\n  vector clock replayed: %s\n",
              clock_text(d.recorded_clock).c_str(), clock_text(d.replayed_clock).c_str());
  std::string given;
  for (const auto& path : o.tape_paths) given += path + " ";
  std::printf("  inspect it: diloco replay %s--actor %u --until %" PRIu64 "\n", given.c_str(),
              d.actor, d.input_index);
}

void print_match(const replay_result& r) {
  std::string more;
  if (r.inputs_matched > 0)
    more += ", " + std::to_string(r.inputs_matched) + " inputs matched to their senders' sends";
  if (r.reads_given > 0) more += ", " + std::to_string(r.reads_given) + " clock reads given back";
  if (r.checkpoints_checked > 0)
    more += ", " + std::to_string(r.checkpoints_checked) + " checkpointed states matched";
  if (r.sends_past_cut > 0)
    more += ", " + std::to_string(r.sends_past_cut) + " sends past a cut recording unchecked";
  std::printf("replay matches the recording: %zu actor%s, %" PRIu64 " inputs, %" PRIu64
              " sends checked%s%s\n",
              r.actors.size(), r.actors.size() == 1 ? "" : "s", r.inputs, r.sends_checked,
              more.c_str(), r.stopped_at_until ? " (up to --until)" : "");
}

}  // namespace

int run_replay(int argc, const char* const* argv) {
  replay_cli o;
  cli::arg_parser p(
      "diloco replay",
      "Re-executes the actors of a run recorded with `diloco simulate --tape TAPE` or\n"
      "`diloco node --tape DIR` (give every node's tapes, or the directory of them),\n"
      "each from its recorded inputs at their recorded times, and checks that every\n"
      "message it sends is the recorded one (type, destination, content digest,\n"
      "vector clock). Reports the first divergence: the actor, its input being handled,\n"
      "the send that differs and both vector clocks. Exit status 1 on a divergence.");
  p.positional_list("TAPE", &o.tape_paths,
                    "the tape file; for a deployed run every node's tapes (files, or a "
                    "directory holding them): they replay as one run");
  p.option("actor", &o.actor, "replay only this actor index (inspect lists them; default: all)");
  p.option("until", &o.until,
           "with --actor: stop before its input number N (0-based) and dump its state");
  p.option("state-out", &o.state_out,
           "with --until: write the state here (default: TAPE.actor-A.before-N.state)");
  p.flag("break", &o.debug_break,
         "with --until: raise SIGTRAP before the input is delivered, when under a debugger");
  p.flag("partial", &o.partial, "accept a tape cut short (the recording process died)");
  p.option("chrome-trace", &o.chrome, "write the tape as Chrome trace event JSON to this file");
  p.option(
      "trace-clock",
      [&o](const std::string& v) {
        if (v != "real" && v != "logical")
          return status(errc::invalid_argument, "'" + v + "': expected real or logical");
        o.logical = v == "logical";
        return status{};
      },
      "CLOCK", "real",
      "the time of a deployed run's Chrome trace: real (each node's clock less its offset, "
      "estimated from the messages between the nodes) or logical (Lamport time)");
  p.option("shiviz", &o.shiviz, "write the tape as a ShiViz vector-clock log to this file");
  p.flag("export-only", &o.export_only, "only export (with --chrome-trace / --shiviz), no replay");
  p.option(
      "set", [&o](const std::string& kv) { return add_set_flag(kv, o.sets); }, "KEY=VALUE", "",
      "replay under a changed configuration (to see where a change makes the run differ)");
  add_common_options(p, o.common);
  if (auto st = p.parse(argc, argv); !st.ok()) return report_error("diloco replay", st);
  if (p.help_requested()) {
    std::fputs(p.help().c_str(), stdout);
    return 0;
  }
  if (!apply_common_options(o.common)) return 2;

  auto t = load_tapes(o.tape_paths, o.partial);
  if (!t) return report_error("diloco replay", t.error());
  o.tape_path = o.tape_paths.size() == 1 ? o.tape_paths.front() : t->segments.front().path;
  const uint64_t inputs = print_tape_summary(o, *t);
  if (auto st = export_tape(o, *t); !st.ok()) return report_error("diloco replay", st);
  if (o.export_only) return 0;
  warn_of_other_learner(o, *t);
  auto recorded = reopen_recorded(t->header.config_text, o.tape_path, t->header.run_id);
  if (!recorded) return report_error("diloco replay", recorded.error());
  auto config = resolve_config("", o.sets, &*recorded);  // --set on top of the tape's
  if (!config) return report_error("diloco replay", config.error());

  replay_options ro;
  ro.actor = o.actor;
  ro.until = o.until;
  progress_line progress("replay", static_cast<double>(inputs), "inputs");
  ro.on_progress = [&](uint64_t done, uint64_t total) {
    progress.update(static_cast<double>(std::min(done, total)));
  };
  ro.at_until = [&](const tape_event& e) { stop_at_until(o, *t, e); };
  auto r = replay_tape(*config, *t, ro);
  if (!r) return report_error("diloco replay", r.error());
  progress.finish(static_cast<double>(r->inputs));
  if (r->stopped_at_until) {
    if (auto st = write_until_state(o, *t, *r); !st.ok()) return report_error("diloco replay", st);
  }
  if (r->divergence) {
    print_divergence(o, *t, *r->divergence);
    return 1;
  }
  print_match(*r);
  return 0;
}

}  // namespace diloco
