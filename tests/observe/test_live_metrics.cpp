// The live monitor: what it exposes agrees with the run's own reports, its Prometheus text is
// well formed (names, labels, cumulative histograms), its JSON lines parse, and each alert
// fires on the run made to trigger it and stays quiet on a healthy one.
#include <nlohmann/json.hpp>
#include "tests/catch.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "hosts/simulation.hpp"
#include "observe/live_metrics.hpp"
#include "tests/hosts/small_runs.hpp"
#include "tests/temp_dir.hpp"

using namespace diloco;
using diloco::testing::fast_config;

namespace {

// Prometheus text -> {"name{labels}" -> value}; every sample line must parse, every name must
// have a TYPE line before it.
std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::map<std::string, std::string> types;
  const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? (-?[0-9.eE+-]+|\+Inf)$)");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream w(line.substr(7));
      std::string name, type;
      w >> name >> type;
      types[name] = type;
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    std::smatch m;
    INFO(line);
    REQUIRE(std::regex_match(line, m, sample));
    std::string base = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (base.size() > s.size() && base.compare(base.size() - s.size(), s.size(), s) == 0 &&
          types.count(base.substr(0, base.size() - s.size())))
        base = base.substr(0, base.size() - s.size());
    }
    CHECK(types.count(base) == 1);
    out[std::string(m[1]) + std::string(m[2])] = std::stod(m[3]);
  }
  return out;
}

live_options jsonl_options(const std::string& path) {
  live_options o;
  o.jsonl_path = path;
  return o;
}

std::pair<sim_result, std::shared_ptr<live_metrics>> observed(const run_config& c,
                                                              const std::string& jsonl = "") {
  auto live = std::make_shared<live_metrics>(c, jsonl_options(jsonl));
  sim_options o;
  o.observer = live;
  auto r = run_simulation(c, o);
  REQUIRE(r.ok());
  return {std::move(*r), live};
}

}  // namespace

TEST_CASE("live metrics: the exposition agrees with the run's reports and is well formed") {
  testing::temp_dir dir;
  const std::string jsonl = (dir.path() / "metrics.jsonl").string();
  auto [r, live] = observed(fast_config(), jsonl);
  live->finish(nlohmann::ordered_json{{"eval_loss", r.eval_loss}});
  const auto m = parse_prometheus(live->prometheus());
  CHECK(m.at("diloco_tokens_total") == static_cast<double>(r.tokens()));
  uint64_t merges = 0, merged = 0;
  for (const auto& s : r.shards) merges += s.merges, merged += s.deltas_merged;
  double prom_merges = 0, shares = 0;
  for (const auto& [k, v] : m) {
    if (k.rfind("diloco_merges_total{", 0) == 0) prom_merges += v;
    if (k.rfind("diloco_learner_token_share_ratio{", 0) == 0) shares += v;
  }
  CHECK(prom_merges == static_cast<double>(merges));
  CHECK(m.at("diloco_deltas_merged_total") == static_cast<double>(merged));
  CHECK(shares == Approx(1.0));
  for (size_t i = 0; i < r.learners.size(); ++i) {
    const std::string l = "{learner=\"" + std::to_string(i) + "\"}";
    CHECK(m.at("diloco_learner_tokens_total" + l) == static_cast<double>(r.learners[i].tokens));
    CHECK(m.at("diloco_learner_steps_total" + l) == static_cast<double>(r.learners[i].steps));
  }
  // Histograms: cumulative buckets, +Inf equals the count, one observation per merged delta
  // (the arrival delays per learner: their counts add up to the merged deltas).
  CHECK(m.at("diloco_version_gap_bucket{le=\"+Inf\"}") == m.at("diloco_version_gap_count"));
  CHECK(m.at("diloco_version_gap_count") == static_cast<double>(merged));
  double delays = 0;
  for (size_t i = 0; i < r.learners.size(); ++i) {
    const std::string l = "learner=\"" + std::to_string(i) + "\"";
    const double count = m.at("diloco_arrival_delay_seconds_count{" + l + "}");
    CHECK(m.at("diloco_arrival_delay_seconds_bucket{" + l + ",le=\"+Inf\"}") == count);
    delays += count;
    // Buckets are cumulative in le order (the map orders labels as text; check numerically).
    std::vector<std::pair<double, double>> buckets;
    const std::string p = "diloco_arrival_delay_seconds_bucket{" + l + ",le=\"";
    for (const auto& [k, v] : m) {
      if (k.rfind(p, 0) == 0 && k.find("+Inf") == std::string::npos)
        buckets.emplace_back(std::stod(k.substr(p.size())), v);
    }
    CHECK(buckets.size() == 11);
    std::sort(buckets.begin(), buckets.end());
    for (size_t b = 1; b < buckets.size(); ++b) CHECK(buckets[b].second >= buckets[b - 1].second);
    CHECK(buckets.back().second <= count);
    // Every learner reported to the end: up.
    CHECK(m.at("diloco_learner_up{" + l.substr(0, l.size()) + "}") == 1);
  }
  CHECK(delays == static_cast<double>(merged));
  // The compressed size over fp32 is a ratio in (0, 1), near what the codec (int4) gives.
  const double size_ratio = m.at("diloco_compressed_size_ratio");
  CHECK(size_ratio > 0);
  CHECK(size_ratio < 1);
  CHECK(size_ratio == Approx(m.at("diloco_compressed_size_ratio_expected")).epsilon(0.2));
  CHECK(m.at("diloco_merged_delta_bytes_total") / m.at("diloco_merged_delta_fp32_bytes_total") ==
        Approx(size_ratio));
  // The run's identity as an info metric.
  bool info = false;
  for (const auto& [k, v] : m) {
    if (k.rfind("diloco_run_info{seed=\"" + std::to_string(r.config.seed) + "\",", 0) == 0) {
      info = v == 1 && k.find("mode=\"") != std::string::npos;
    }
  }
  CHECK(info);
  CHECK(m.at("diloco_learners_diverged") == 0);
  CHECK(m.at("diloco_merge_missing_learners") <= m.at("diloco_merge_missing_learners_allowed"));
  // A healthy run raises no alert.
  for (const auto& [kind, n] : live->alert_counts()) CHECK(n == 0);
  // /status is JSON with every learner.
  auto status = nlohmann::json::parse(live->status_json());
  CHECK(status["learners"].size() == r.learners.size());
  CHECK(status["tokens"].get<uint64_t>() == r.tokens());
  // The JSON lines: every line parses; one merge line per merge; the end line last.
  std::ifstream in(jsonl);
  std::string line, last_type;
  uint64_t merge_lines = 0, progress_lines = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    last_type = j.at("type").get<std::string>();
    merge_lines += last_type == "merge";
    progress_lines += last_type == "progress";
  }
  CHECK(merge_lines == merges);
  CHECK(progress_lines > 0);
  CHECK(last_type == "end");
}

TEST_CASE("live metrics: missing learners and a skewed learner raise their alerts") {
  // Quorum 3 of 4 while learners 2 and 3 are down: the shards merge what the two others send
  // (the quorum never exceeds the live learners), more than M - K = 1 learners missing.
  run_config c = fast_config();
  c.quorum = 3;
  c.failures = {failure_event{2, 120.0, 150.0}, failure_event{3, 120.0, 150.0}};
  auto [r, live] = observed(c);
  CHECK(live->alert_counts().at("partition") > 0);
  // Gone for good: the latest merges lack both, a state a Prometheus rule can see, and their
  // up gauges read 0 while the two others' read 1.
  run_config gone = c;
  gone.failures = {failure_event{2, 120.0, 1e6}, failure_event{3, 120.0, 1e6}};
  testing::temp_dir dir;
  auto [r3, live3] = observed(gone, dir.file("gone.jsonl"));
  const auto m3 = parse_prometheus(live3->prometheus());
  CHECK(m3.at("diloco_merge_missing_learners") == 2);
  CHECK(m3.at("diloco_merge_missing_learners_allowed") == 1);
  CHECK(m3.at("diloco_learner_up{learner=\"0\"}") == 1);
  CHECK(m3.at("diloco_learner_up{learner=\"2\"}") == 0);
  CHECK(m3.at("diloco_learner_up{learner=\"3\"}") == 0);
  // The samples in metrics.jsonl say the same from the failure on, and all up before it.
  live3->finish(nlohmann::ordered_json::object());
  std::ifstream in(dir.file("gone.jsonl"));
  std::string line;
  int before = 0, after = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] != "sample" || j["learners"].size() != 4) continue;
    const double t = j["t"];
    std::vector<bool> up;
    for (const auto& l : j["learners"]) up.push_back(l["up"].get<bool>());
    if (t < 110) {
      CHECK(up == std::vector<bool>{true, true, true, true});
      ++before;
    } else if (t > 200) {
      CHECK(up == std::vector<bool>{true, true, false, false});
      ++after;
    }
  }
  CHECK(before > 0);
  CHECK(after > 0);
  // One learner four times as fast as the other holds most of the merged tokens.
  run_config skew = fast_config();
  skew.learners = 2;
  skew.speeds = {speed_config{}, speed_config{}};
  skew.speeds[0].step_time_s = 0.25;
  auto [r2, live2] = observed(skew);
  CHECK(live2->alert_counts().at("data_skew") > 0);
  CHECK(live2->alert_counts().at("partition") == 0);
}

TEST_CASE("live metrics: the loss gap at merges is measured and alerts above its limit") {
  // Learners measure it: a real run reports a finite gap for every learner.
  auto [r, live] = observed(fast_config());
  auto status = nlohmann::json::parse(live->status_json());
  double total = 0;
  for (const auto& l : status["learners"]) {
    REQUIRE(l.contains("loss_gap"));
    CHECK(std::isfinite(l["loss_gap"].get<double>()));
    total += std::fabs(l["loss_gap"].get<double>());
  }
  CHECK(total > 0);
  // The alert: reports whose merges raise the loss by 20% fire it once 8 merges are in and it
  // has stayed above the limit for 8 reports; 5% (under the 10% limit) and falling losses do
  // not.
  run_config c = fast_config();
  auto report = [](live_metrics& m, int i, double gap) {
    progress_msg p;
    p.learner = 0;
    p.steps = 8;
    p.tokens = 128;
    p.train_loss = 3.0;
    p.merge_gap_sum = gap;
    p.merge_gaps = 1;
    m.on_progress(i * 1'000'000'000LL, p);
  };
  for (double gap : {0.2, 0.05, -0.3}) {
    live_metrics m(c, live_options{});
    m.on_start(0);
    for (int i = 1; i <= 20; ++i) report(m, i, gap);
    INFO(gap);
    CHECK(m.alert_counts().at("loss_gap") == (gap > 0.1 ? 1 : 0));  // once, not per report
  }
  // Hysteresis: a few noisy reports do not raise it; a lasting rise raises it once; it
  // resolves only after the mean has stayed under half the limit, and may then rise again.
  testing::temp_dir dir;
  live_options o;
  o.jsonl_path = dir.file("gap.jsonl");
  live_metrics m(c, o);
  m.on_start(0);
  int i = 0;
  for (int k = 0; k < 10; ++k) report(m, ++i, 0.0);
  for (int k = 0; k < 3; ++k) report(m, ++i, 0.5);   // a spike: the mean rises above 10% ...
  for (int k = 0; k < 10; ++k) report(m, ++i, 0.0);  // ... and falls back within 8 reports
  CHECK(m.alert_counts().at("loss_gap") == 0);
  for (int k = 0; k < 30; ++k) report(m, ++i, 0.3);
  CHECK(m.alert_counts().at("loss_gap") == 1);
  CHECK(m.prometheus().find("diloco_alert_firing{kind=\"loss_gap\"} 1\n") != std::string::npos);
  for (int k = 0; k < 30; ++k) report(m, ++i, 0.0);
  CHECK(m.prometheus().find("diloco_alert_firing{kind=\"loss_gap\"} 0\n") != std::string::npos);
  for (int k = 0; k < 30; ++k) report(m, ++i, 0.3);
  CHECK(m.alert_counts().at("loss_gap") == 2);
  m.finish(nlohmann::ordered_json::object());
  std::ifstream in(dir.file("gap.jsonl"));
  std::string line;
  std::vector<std::string> kinds;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "alert" || j["type"] == "resolved")
      kinds.push_back(j["type"].get<std::string>() + " " + j["kind"].get<std::string>());
  }
  CHECK(kinds == std::vector<std::string>{"alert loss_gap", "resolved loss_gap", "alert loss_gap"});
}

TEST_CASE("live metrics: a loss far above its start and a diverged learner raise alerts") {
  run_config c = fast_config();
  // Losses as reported: rising to 1.6 x the first (limit 1.5) raises loss_rise once; it is
  // raised again only after the loss came back under; 1.4 x never does.
  for (const auto& [losses, expected] :
       {std::make_pair(std::vector<double>{4.0, 3.0, 5.0, 6.4, 7.0, 3.0, 6.5}, uint64_t{2}),
        std::make_pair(std::vector<double>{4.0, 5.0, 5.6, 5.0}, uint64_t{0}),
        std::make_pair(std::vector<double>{4.0, std::nan(""), 3.0}, uint64_t{1})}) {
    live_metrics m(c, live_options{});
    m.on_start(0);
    int64_t t = 0;
    for (double loss : losses) {
      progress_msg p;
      p.learner = 1;
      p.steps = 8;
      p.tokens = 128;
      p.train_loss = loss;
      m.on_progress(t += 1'000'000'000LL, p);
    }
    INFO(losses.size());
    CHECK(m.alert_counts().at("loss_rise") == expected);
    CHECK(m.alert_counts().at("diverged") == 0);
  }
  live_metrics m(c, live_options{});
  m.on_start(0);
  m.on_diverged(5'000'000'000LL, diverged_msg{stamp{}, 2, 77, "the training loss is NaN"});
  CHECK(m.alert_counts().at("diverged") == 1);
  const std::string prom = m.prometheus();
  CHECK(prom.find("diloco_alerts_total{kind=\"diverged\"} 1\n") != std::string::npos);
  const auto status = nlohmann::json::parse(m.status_json());
  bool shown = false;
  for (const auto& a : status["recent_alerts"])
    shown = shown || a.get<std::string>().find("learner 2 at step 77") != std::string::npos;
  CHECK(shown);
}

TEST_CASE("live metrics: a deployed run's nodes going away and coming back are shown") {
  run_config c = fast_config();
  testing::temp_dir dir;
  live_metrics m(c, jsonl_options(dir.file("m.jsonl")));
  m.on_start(0);
  for (const char* n : {"a", "b", "c"}) m.on_node(0, n, true, 0);
  m.on_node(2'000'000'000LL, "c", false, 0);
  {
    const auto status = nlohmann::json::parse(m.status_json());
    REQUIRE(status["nodes"].size() == 3);
    CHECK(status["nodes"][2]["name"] == "c");
    CHECK(status["nodes"][2]["up"] == false);
    CHECK(status["nodes"][2]["losses"] == 1);
    const std::string prom = m.prometheus();
    CHECK(prom.find("diloco_node_up{node=\"c\"} 0\n") != std::string::npos);
    CHECK(prom.find("diloco_node_up{node=\"a\"} 1\n") != std::string::npos);
    CHECK(prom.find("diloco_node_losses_total{node=\"c\"} 1\n") != std::string::npos);
  }
  m.on_node(3'000'000'000LL, "c", true, 1);
  const auto status = nlohmann::json::parse(m.status_json());
  CHECK(status["nodes"][2]["up"] == true);
  CHECK(status["nodes"][2]["process"] == 1);
  CHECK(status["nodes"][2]["losses"] == 1);  // coming back is not another loss
  m.finish(nlohmann::ordered_json::object());
  // One JSON line per change, in order.
  std::ifstream in(dir.file("m.jsonl"));
  std::vector<nlohmann::json> nodes;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "node") nodes.push_back(j);
  }
  REQUIRE(nodes.size() == 5);
  CHECK(nodes[3]["node"] == "c");
  CHECK(nodes[3]["up"] == false);
  CHECK(nodes[3]["t"].get<double>() == Approx(2.0));
  CHECK(nodes[4]["process"] == 1);
}

TEST_CASE("live metrics: goodput is one ratio, within [0, 1], the same in every place") {
  // Synchronous DiLoCo behind a learner 1.5x slower: the others wait at every sync, which is
  // not goodput.
  testing::temp_dir dir;
  const std::string jsonl = (dir.path() / "metrics.jsonl").string();
  run_config c = as_sync_diloco(fast_config());
  c.speeds = {testing::timing(1, 0), testing::timing(1, 0), testing::timing(1, 0),
              testing::timing(1.5, 0)};
  auto [r, live] = observed(c, jsonl);
  const double summary = r.goodput();
  // Before the end: the running estimate, close to the run's own accounting.
  CHECK(parse_prometheus(live->prometheus()).at("diloco_goodput_ratio") ==
        Approx(summary).epsilon(1e-3));
  // At the end, as the run monitor does: the summary's figure becomes the last sample's.
  live->finish(nlohmann::ordered_json{{"eval_loss", r.eval_loss}, {"goodput", summary}});
  CHECK(summary > 0.6);
  CHECK(summary < 0.95);
  std::ifstream in(jsonl);
  std::string line;
  double last = -1;
  int samples = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.at("type") != "sample") continue;
    const double g = j.at("goodput").get<double>();
    INFO("t " << j.at("t").get<double>());
    CHECK(g >= 0);
    CHECK(g <= 1);
    last = g;
    ++samples;
  }
  CHECK(samples > 10);
  CHECK(last == summary);
  CHECK(parse_prometheus(live->prometheus()).at("diloco_goodput_ratio") ==
        Approx(summary).epsilon(1e-9));
}

TEST_CASE("live metrics: an evaluation reported later carries the tokens of when it was taken") {
  run_config c = fast_config();
  testing::temp_dir dir;
  const std::string path = dir.file("metrics.jsonl");
  {
    live_metrics m(c, jsonl_options(path));
    m.on_start(0);
    progress_msg p;
    p.learner = 0;
    p.steps = 8;
    p.tokens = 128;
    p.train_loss = 3.0;
    m.on_progress(1'000'000'000LL, p);
    m.eval_taken(1.5);  // the model read at 1.5 s, after 128 tokens
    m.on_progress(2'000'000'000LL, p);
    m.on_progress(3'000'000'000LL, p);
    m.on_eval(1.5, 2.75);  // its loss known at 3 s, after 384 tokens
    m.on_eval(4.0, 2.5);   // never taken (a caller without eval_taken): the tokens so far
    m.on_stop(4'000'000'000LL);
  }
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> evals;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "eval") evals.push_back(j);
  }
  REQUIRE(evals.size() == 2);
  CHECK(evals[0]["t"] == 1.5);
  CHECK(evals[0]["tokens"] == 128);
  CHECK(evals[0]["loss"] == 2.75);
  CHECK(evals[1]["tokens"] == 384);
}

TEST_CASE("live metrics: adaptive inner steps show each learner's H and tau, each family once") {
  testing::temp_dir dir;
  const run_config c = testing::adaptive_config();
  auto [r, live] = observed(c, (dir.path() / "metrics.jsonl").string());
  live->finish(nlohmann::ordered_json{{"eval_loss", r.eval_loss}});
  const std::string text = live->prometheus();
  // Every family's TYPE line comes once (a second one is an invalid exposition).
  std::set<std::string> families;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) != 0) continue;
    INFO(line);
    CHECK(families.insert(line).second);
  }
  const auto m = parse_prometheus(text);
  for (size_t i = 0; i < r.learners.size(); ++i) {
    const std::string l = "{learner=\"" + std::to_string(i) + "\"}";
    // The run ends with the link back at its speed: the configured H and tau or above.
    CHECK(m.at("diloco_learner_period_steps" + l) >= c.period_steps);
    CHECK(m.at("diloco_learner_overlap_steps" + l) >= c.overlap_steps);
    CHECK(m.at("diloco_learner_period_steps" + l) > m.at("diloco_learner_overlap_steps" + l));
  }
  // A run with a fixed H has neither.
  auto [f, fixed] = observed(fast_config(), (dir.path() / "fixed.jsonl").string());
  CHECK(fixed->prometheus().find("diloco_learner_period_steps") == std::string::npos);
}

TEST_CASE(
    "live metrics: regional syncers are members of merges, not learners; the start record "
    "has the topology") {
  testing::temp_dir dir;
  run_config c = testing::regional_config();
  c.quorum = 6;  // every learner expected: a regional syncer stands for its region's learners
  const std::string path = (dir.path() / "metrics.jsonl").string();
  auto [r, live] = observed(c, path);
  live->finish(nlohmann::ordered_json{{"eval_loss", r.eval_loss}});
  const auto m = parse_prometheus(live->prometheus());
  // Only the six learners have per-learner series, and all of them are up.
  for (const auto& [name, value] : m) {
    if (name.rfind("diloco_learner_up{", 0) != 0) continue;
    INFO(name);
    CHECK(value == 1);
    CHECK(name < "diloco_learner_up{learner=\"6\"}");
  }
  CHECK(m.count("diloco_learner_up{learner=\"5\"}") == 1);
  // No partition alert: the merges' members (two regional syncers and learner 5) stand for
  // every learner.
  CHECK(live->alert_counts().at("partition") == 0);
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  const auto start = nlohmann::json::parse(first);
  REQUIRE(start.contains("topology"));
  const auto& topo = start["topology"];
  CHECK(topo["shards"] == 2);
  REQUIRE(topo["regions"].size() == 2);
  CHECK(topo["regions"][0]["syncer"] == true);
  CHECK(topo["regions"][0]["learners"] == nlohmann::json::array({0, 1, 2}));
  CHECK(topo["regions"][1]["learners"] == nlohmann::json::array({3, 4}));
  CHECK(topo["direct"] == nlohmann::json::array({5}));
  // Merge records name a regional syncer by its member number past the learner slots.
  bool regional_member = false;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] != "merge") continue;
    for (const auto& who : j["contributors"]) regional_member |= who["learner"] >= 6;
  }
  CHECK(regional_member);
}

TEST_CASE("live metrics: merges without every learner are counted alike in every place") {
  // Learners 2 and 3 down from 120 s for 150 s: the merges meanwhile lack them.
  run_config c = fast_config();
  c.failures = {failure_event{2, 120.0, 150.0}, failure_event{3, 120.0, 150.0}};
  testing::temp_dir dir;
  auto [r, live] = observed(c, dir.file("m.jsonl"));
  const auto counts = live->quorum_merge_counts();
  const auto prom = parse_prometheus(live->prometheus());
  double quorum = 0, partial = 0;
  for (const auto& [key, v] : prom) {
    if (key.rfind("diloco_quorum_merges_total{", 0) == 0) quorum += v;
    if (key.rfind("diloco_partial_merges_total{", 0) == 0) partial += v;
  }
  live->finish(nlohmann::ordered_json::object());
  // The merge records: a quorum merge is partial when fewer than the 4 learners are in it.
  uint64_t seen = 0, short_of = 0;
  nlohmann::json end;
  std::ifstream in(dir.file("m.jsonl"));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "end") end = j;
    if (j["type"] != "merge" || !j["quorum"].get<bool>()) continue;
    ++seen;
    if (j["contributors"].size() < 4) ++short_of;
  }
  CHECK(counts.quorum == seen);
  CHECK(counts.partial == short_of);
  CHECK(short_of > 0);
  CHECK(short_of < seen);
  CHECK(quorum == static_cast<double>(seen));
  CHECK(partial == static_cast<double>(short_of));
  CHECK(end["quorum_merges"] == seen);
  CHECK(end["partial_merges"] == short_of);
  // Nobody down: none.
  auto [r2, healthy] = observed(fast_config());
  CHECK(healthy->quorum_merge_counts().partial == 0);
  CHECK(healthy->quorum_merge_counts().quorum > 0);
}
