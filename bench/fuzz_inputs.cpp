// Seeded mutation fuzzing of every reader of untrusted bytes: the file frame, the tensor blob
// decoder, snapshot actor files and manifests (down to loading each part into its actor's
// state), replay tapes, the cluster-file loader, and a run directory's files as `diloco report`
// reads them (summary.json and the metrics it names). Valid inputs are made first (a short
// simulated run with snapshots and a tape); each iteration mutates one (bit flips, bytes set
// to edge values, 64-bit length fields, cuts, insertions, repeats, and YAML tokens for
// cluster files) and feeds it to its reader, which must return a value or an error: a crash
// ends the program (under ASan or UBSan, any memory error or undefined behaviour too), an
// escaping exception is counted as a failure. The same seed gives the same inputs.
//
// usage: fuzz_inputs TARGET|all ITERATIONS [SEED]
//   TARGET: frame, blob, actor_file, manifest, tape, config, report
// Exit status 0 when no iteration failed.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "actors/state_io.hpp"
#include "base/checksum.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "checkpoint/snapshot_files.hpp"
#include "checkpoint/tape_file.hpp"
#include "config/cluster_file.hpp"
#include "config/identity.hpp"
#include "config/printing.hpp"
#include "config/resolve.hpp"
#include "hosts/simulation.hpp"
#include "observe/monitor.hpp"
#include "observe/report.hpp"
#include "runtime/env.hpp"
#include "runtime/tape.hpp"
#include "tensor/codec.hpp"

using namespace diloco;

namespace {

using bytes = std::vector<uint8_t>;

// One mutation of `b`, drawn from `g`.
void mutate_once(bytes& b, std::mt19937_64& g) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(g() % n); };
  static const uint64_t edges[] = {0,
                                   1,
                                   0x7f,
                                   0xff,
                                   0x7fffffff,
                                   0x80000000,
                                   0xffffffff,
                                   uint64_t{1} << 32,
                                   uint64_t{1} << 40,
                                   uint64_t{1} << 62,
                                   ~uint64_t{0},
                                   0x7fc00000 /* a NaN float */,
                                   0x7f800000 /* Inf */};
  switch (g() % 9) {
    case 0:  // flip a bit
      if (!b.empty()) b[pick(b.size())] ^= static_cast<uint8_t>(1u << (g() % 8));
      break;
    case 1:  // a byte to an edge value
      if (!b.empty()) b[pick(b.size())] = static_cast<uint8_t>(edges[g() % 5]);
      break;
    case 2:  // a 4- or 8-byte field (length, count, float) to an edge value
      if (b.size() >= 8) {
        const size_t at = pick(b.size() - 7);
        const uint64_t v = edges[pick(sizeof edges / sizeof edges[0])];
        const int n = g() % 2 ? 8 : 4;
        for (int i = 0; i < n; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
      }
      break;
    case 3:  // cut
      b.resize(pick(b.size() + 1));
      break;
    case 4: {  // insert random bytes
      const size_t at = pick(b.size() + 1);
      bytes r(1 + pick(16));
      for (auto& x : r) x = static_cast<uint8_t>(g());
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), r.begin(), r.end());
      break;
    }
    case 5:  // repeat a range
      if (!b.empty()) {
        const size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(64, b.size() - at));
        bytes r(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(at + n));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pick(b.size() + 1)), r.begin(), r.end());
      }
      break;
    case 6:  // delete a range
      if (!b.empty()) {
        const size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(64, b.size() - at));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                b.begin() + static_cast<std::ptrdiff_t>(at + n));
      }
      break;
    default:  // random bytes over a range
      if (!b.empty()) {
        const size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(16, b.size() - at));
        for (size_t i = 0; i < n; ++i) b[at + i] = static_cast<uint8_t>(g());
      }
      break;
  }
}

// YAML-aware mutations of a cluster file's text, on top of the byte ones.
void mutate_yaml(std::string& t, std::mt19937_64& g) {
  static const char* tokens[] = {"---\n",
                                 ": ",
                                 "[",
                                 "]",
                                 "{",
                                 "}",
                                 "- ",
                                 "&a ",
                                 "*a",
                                 "!!str ",
                                 "\t",
                                 "\n  - ",
                                 "? ",
                                 "|\n",
                                 ">\n",
                                 "#",
                                 "\"",
                                 "'",
                                 ",",
                                 "1e300",
                                 "-1",
                                 "4294967296",
                                 "18446744073709551616",
                                 ".nan",
                                 ".inf",
                                 "0",
                                 "1e-300",
                                 "learners: ",
                                 "speeds: ",
                                 "nodes: ",
                                 "failures: [{learner: 0, at_s: 1, down_s: 1}]\n",
                                 "snapshot: {dir: /tmp/x, every_s: 1}\n",
                                 "<<: *a\n"};
  const size_t n = sizeof tokens / sizeof tokens[0];
  if (g() % 2 == 0) {
    const size_t at = t.empty() ? 0 : g() % (t.size() + 1);
    t.insert(at, tokens[g() % n]);
  } else {
    bytes b(t.begin(), t.end());
    mutate_once(b, g);
    t.assign(b.begin(), b.end());
  }
}

// Half the iterations mutate inside the checksums and seal them again (a forged input, or a
// peer's bug): the reader's checks behind the checksum get exercised too.

// A frame (checkpoint/frame.hpp) whose payload is mutated, then sealed with a fresh length and
// checksum.
bytes reseal_frame(const bytes& framed, std::mt19937_64& g, int mutations) {
  if (framed.size() < frame_header_bytes) return framed;
  std::array<char, 4> magic{};
  std::memcpy(magic.data(), framed.data(), 4);
  uint32_t version = 0;
  std::memcpy(&version, framed.data() + 4, 4);
  bytes payload(framed.begin() + frame_header_bytes, framed.end());
  for (int i = 0; i < mutations; ++i) mutate_once(payload, g);
  return make_frame(magic, version, byte_view(payload.data(), payload.size()));
}

// A tape: one of its chunks resealed with a mutated payload.
bytes reseal_tape_chunk(const bytes& tape_bytes, std::mt19937_64& g, int mutations) {
  std::vector<std::pair<size_t, size_t>> chunks;  // offset, size
  for (size_t at = 0; at + frame_header_bytes <= tape_bytes.size();) {
    uint64_t length = 0;
    std::memcpy(&length, tape_bytes.data() + at + 8, 8);
    const size_t size = frame_header_bytes + static_cast<size_t>(length);
    if (size > tape_bytes.size() - at) break;
    chunks.emplace_back(at, size);
    at += size;
  }
  if (chunks.empty()) return tape_bytes;
  const auto [at, size] = chunks[g() % chunks.size()];
  const bytes one(tape_bytes.begin() + static_cast<std::ptrdiff_t>(at),
                  tape_bytes.begin() + static_cast<std::ptrdiff_t>(at + size));
  const bytes sealed = reseal_frame(one, g, mutations);
  bytes out(tape_bytes.begin(), tape_bytes.begin() + static_cast<std::ptrdiff_t>(at));
  out.insert(out.end(), sealed.begin(), sealed.end());
  out.insert(out.end(), tape_bytes.begin() + static_cast<std::ptrdiff_t>(at + size),
             tape_bytes.end());
  return out;
}

// A tensor blob with its checksum made right again after mutation (codec.hpp header layout).
void reseal_blob(bytes& b) {
  if (b.size() < blob_header_bytes) return;
  const uint64_t sum = checksum64(b.data() + blob_header_bytes, b.size() - blob_header_bytes,
                                  checksum64(b.data(), 24));
  std::memcpy(b.data() + 24, &sum, 8);
}

struct seeds {
  bytes frame, blob_int4, blob_topk, blob_fp32;
  std::vector<std::pair<bytes, uint32_t>> actor_files;  // bytes, actor index
  bytes manifest, tape;
  std::string config;
  std::string summary, metrics;  // a run directory's summary.json and metrics.jsonl
  std::string report_dir;        // where the report target writes its mutated copies
  std::shared_ptr<const actor_env> env;
};

// Valid inputs of every kind, from a short run that takes snapshots and records a tape.
seeds make_seeds(const std::string& dir) {
  seeds s;
  run_config c = builtin_run_config();
  c.model.hidden = 32;
  c.model.embed_dim = 8;
  c.token_budget = 32000;
  derive_dependent(c);
  c.snapshot.dir = dir + "/snaps";
  c.snapshot.every_s = 40;
  s.config = config_as_yaml(c);
  sim_options o;
  o.run_id = run_identity(c);
  o.config_text = s.config;
  auto recorder =
      tape_recorder::create(dir + "/run.tape", make_tape_header(c, o.run_id, s.config, true));
  if (!recorder) {
    std::fprintf(stderr, "fuzz_inputs: %s\n", recorder.error().message().c_str());
    std::exit(2);
  }
  o.tape = *recorder;
  monitor_options mo;
  mo.run_dir = dir + "/run";
  auto monitor = run_monitor::start(mo);
  if (!monitor) std::exit(2);
  o.observer = (*monitor)->begin("decoupled", c);
  auto r = run_simulation(c, o);
  if (!r || !(*recorder)->close().ok()) {
    std::fprintf(stderr, "fuzz_inputs: the seed run failed\n");
    std::exit(2);
  }
  (*monitor)->end("decoupled", &*r);
  if (!(*monitor)->write_summary().ok()) std::exit(2);
  monitor->reset();
  auto text_of = [](const std::string& path) {
    auto b = read_file(path);
    if (!b) {
      std::fprintf(stderr, "fuzz_inputs: %s: %s\n", path.c_str(), b.error().message().c_str());
      std::exit(2);
    }
    return std::string(b->begin(), b->end());
  };
  s.summary = text_of(mo.run_dir + "/summary.json");
  s.metrics = text_of(mo.run_dir + "/metrics.jsonl");
  s.report_dir = dir + "/fuzzed-run";
  std::filesystem::create_directories(s.report_dir);
  auto tape_bytes = read_file(dir + "/run.tape");
  auto choice = choose_snapshot(dir + "/snaps");
  if (!tape_bytes || !choice) {
    std::fprintf(stderr, "fuzz_inputs: no tape or snapshot from the seed run\n");
    std::exit(2);
  }
  s.tape = *tape_bytes;
  const auto& snap = choice->snapshot;
  auto manifest = read_file(snap.path + "/MANIFEST");
  s.manifest = manifest ? *manifest : bytes();
  for (const auto& e : snap.manifest.actors) {
    auto f = read_file(snap.path + "/" + e.file);
    if (f) s.actor_files.emplace_back(*f, e.index);
  }
  auto env = actor_env::make(c, true);
  if (!env) std::exit(2);
  s.env = *env;
  const std::string text = "payload of a frame";
  s.frame = make_frame({'D', 'L', 'F', 'Z'}, 3,
                       byte_view(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  std::vector<float> v(700);
  std::mt19937_64 g(3);
  for (auto& x : v) x = static_cast<float>(static_cast<int64_t>(g() % 2001) - 1000) * 1e-3f;
  auto blob = [&](codec_kind k) {
    codec_config cc = codec_config::make(k);
    cc.error_feedback = false;
    cc.topk_fraction = 0.1;
    bytes out;
    if (!encode(cc, cfspan(v.data(), v.size()), fspan(), out).ok()) std::exit(2);
    return out;
  };
  s.blob_int4 = blob(codec_kind::int4);
  s.blob_topk = blob(codec_kind::topk);
  s.blob_fp32 = blob(codec_kind::fp32);
  return s;
}

struct tally {
  uint64_t runs = 0, accepted = 0, exceptions = 0;
};

using target_map = std::map<std::string, std::function<bool(std::mt19937_64&)>>;

// Each target: mutate a copy of a valid input, read it back; true when it was accepted.
// last_config: the config target's latest input, kept for a report.
target_map make_targets(const seeds& s, std::string& last_config) {
  target_map targets;
  // Raw (byte mutations anywhere) or sealed (inside the checksums, sealed again): a coin.
  auto mutated = [](bytes b, std::mt19937_64& g) {
    const int n = 1 + static_cast<int>(g() % 4);
    if (g() % 2 == 0) return reseal_frame(b, g, n);
    for (int i = 0; i < n; ++i) mutate_once(b, g);
    return b;
  };
  targets["frame"] = [&s, mutated](std::mt19937_64& g) {
    const bytes b = mutated(s.frame, g);
    return open_frame(byte_view(b.data(), b.size()), {'D', 'L', 'F', 'Z'}, 3, "fuzz").ok();
  };
  targets["blob"] = [&s](std::mt19937_64& g) {
    const bytes& base = g() % 3 == 0 ? s.blob_topk : (g() % 2 ? s.blob_int4 : s.blob_fp32);
    bytes b = base;
    const int n = 1 + static_cast<int>(g() % 4);
    for (int i = 0; i < n; ++i) mutate_once(b, g);
    if (g() % 2 == 0) reseal_blob(b);
    std::vector<float> out(700);
    const status st = decode(byte_view(b.data(), b.size()), fspan(out.data(), out.size()));
    if (st.ok() && first_non_finite(cfspan(out.data(), out.size())) != out.size()) {
      const size_t at = first_non_finite(cfspan(out.data(), out.size()));
      std::fprintf(stderr, "fuzz blob: decode of a codec %u blob accepted value %zu = %g\n",
                   static_cast<unsigned>(b[5]), at, static_cast<double>(out[at]));
      std::abort();
    }
    return st.ok();
  };
  targets["actor_file"] = [&s, mutated](std::mt19937_64& g) {
    const auto& [base, index] = s.actor_files[g() % s.actor_files.size()];
    const bytes b = mutated(base, g);
    auto f = decode_actor_file(byte_view(b.data(), b.size()), "fuzz");
    if (!f) return false;
    // Down to the actor's state: what resume loads.
    return check_part(s.env, index, byte_view(f->part.data(), f->part.size()), "fuzz").ok();
  };
  targets["manifest"] = [&s, mutated](std::mt19937_64& g) {
    const bytes b = mutated(s.manifest, g);
    return decode_manifest(byte_view(b.data(), b.size()), "fuzz").ok();
  };
  targets["tape"] = [&s](std::mt19937_64& g) {
    const int n = 1 + static_cast<int>(g() % 4);
    bytes b = s.tape;
    if (g() % 2 == 0) {
      b = reseal_tape_chunk(b, g, n);
    } else {
      for (int i = 0; i < n; ++i) mutate_once(b, g);
    }
    return parse_tape(byte_view(b.data(), b.size()), "fuzz", g() % 2 == 0).ok();
  };
  targets["report"] = [&s](std::mt19937_64& g) {
    // One of the two files mutated, as bytes or by JSON tokens; the report reads both.
    std::string summary = s.summary, metrics = s.metrics;
    std::string& t = g() % 2 == 0 ? summary : metrics;
    const int n = 1 + static_cast<int>(g() % 4);
    for (int i = 0; i < n; ++i) {
      if (g() % 2 == 0) {
        static const char* json_tokens[] = {"{",      "}",       "[",    "]",   ",",
                                            ":",      "\"",      "null", "-1",  "1e308",
                                            "\"..\"", "\\u0000", "\n",   "0x10"};
        const size_t at = t.empty() ? 0 : g() % t.size();
        t.insert(at, json_tokens[g() % (sizeof json_tokens / sizeof json_tokens[0])]);
      } else {
        bytes b(t.begin(), t.end());
        mutate_once(b, g);
        t.assign(b.begin(), b.end());
      }
    }
    auto put = [&s](const char* name, const std::string& text) {
      const bytes b(text.begin(), text.end());
      return write_file_atomic(s.report_dir + "/" + name, byte_view(b.data(), b.size())).ok();
    };
    if (!put("summary.json", summary) || !put("metrics.jsonl", metrics)) std::exit(2);
    return report_data({s.report_dir}).ok();
  };
  targets["config"] = [&s, &last_config](std::mt19937_64& g) {
    std::string t = s.config;
    const int n = 1 + static_cast<int>(g() % 4);
    for (int i = 0; i < n; ++i) mutate_yaml(t, g);
    last_config = t;
    auto loaded = load_cluster_text(t, "fuzz.yaml", builtin_run_config());
    if (!loaded) return false;
    return validate_with_lines(loaded->config, "fuzz.yaml", loaded->key_lines).ok();
  };

  return targets;
}

// Runs one target ITERATIONS times; returns how many iterations threw.
uint64_t run_target(const std::string& name, const std::function<bool(std::mt19937_64&)>& run,
                    uint64_t iterations, uint64_t seed, const std::string& last_config) {
  std::mt19937_64 g(seed * 1000003 + std::hash<std::string>{}(name));
  tally t;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < iterations; ++i) {
    ++t.runs;
    try {
      t.accepted += run(g) ? 1 : 0;
    } catch (const std::exception& e) {
      ++t.exceptions;
      if (t.exceptions <= 3) {
        std::fprintf(stderr, "fuzz %s: iteration %llu threw: %s\n", name.c_str(),
                     static_cast<unsigned long long>(i), e.what());
        if (name == "config")
          std::fprintf(stderr, "--- its input:\n%s\n---\n", last_config.c_str());
      }
    }
  }
  const double s_taken =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fuzz %-10s %llu iterations, 0 crashes, %llu exceptions, %.1f%% accepted (%.1f s)\n",
              name.c_str(), static_cast<unsigned long long>(t.runs),
              static_cast<unsigned long long>(t.exceptions),
              100.0 * static_cast<double>(t.accepted) / static_cast<double>(t.runs), s_taken);
  return t.exceptions;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: fuzz_inputs TARGET|all ITERATIONS [SEED]\n");
    return 2;
  }
  const std::string which = argv[1];
  const uint64_t iterations = std::strtoull(argv[2], nullptr, 10);
  const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1;
  char tmpl[] = "/tmp/diloco-fuzz-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  if (dir == nullptr) return 2;
  const seeds s = make_seeds(dir);
  std::printf("fuzz_inputs: seed %llu, %llu iterations per target\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(iterations));
  std::string last_config;
  const target_map targets = make_targets(s, last_config);
  if (which != "all" && targets.count(which) == 0) {
    std::fprintf(stderr, "fuzz_inputs: unknown target '%s'\n", which.c_str());
    return 2;
  }
  uint64_t failures = 0;
  for (const auto& [name, run] : targets) {
    if (which == "all" || which == name)
      failures += run_target(name, run, iterations, seed, last_config);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return failures == 0 ? 0 : 1;
}
