#include "observe/live_metrics.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tensor/codec.hpp"

namespace diloco {

namespace {

// Numbers as JSON and Prometheus accept them (no NaN or Inf in JSON).
std::string num(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);  // counts exactly
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

using json = nlohmann::ordered_json;

// A number for a JSON line: counts stay integers, and JSON has no NaN or Inf (0 instead).
json jnum(double v) {
  if (!std::isfinite(v)) return 0;
  if (v == std::floor(v) && std::fabs(v) < 1e15) return static_cast<int64_t>(v);
  return v;
}

const std::vector<double> delay_bounds = {0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300};
const std::vector<double> gap_bounds = {0, 1, 2, 4, 8, 16, 32};

}  // namespace

void histogram::add(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  counts[i] += 1;
  sum += v;
  count += 1;
}

const std::vector<std::string>& live_metrics::alert_kinds() {
  static const std::vector<std::string> kinds = {
      "partition", "data_skew", "staleness", "loss_gap", "compression", "loss_rise", "diverged"};
  return kinds;
}

namespace {

// Who syncs with whom, for the report's picture: the shards, each region with its links, its
// learners and whether a regional syncer stands between them and the shards.
json topology_of(const run_config& c) {
  json regions = json::array();
  json direct = json::array();
  std::vector<json> members(c.regions.size(), json::array());
  for (uint32_t l = 0; l < static_cast<uint32_t>(c.learners); ++l) {
    const std::string region = l < c.speeds.size() ? c.speeds[l].region : std::string();
    size_t r = 0;
    while (r < c.regions.size() && c.regions[r].name != region) ++r;
    if (r < c.regions.size())
      members[r].push_back(l);
    else
      direct.push_back(l);
  }
  const bool decoupled = c.mode == run_mode::decoupled;
  for (size_t r = 0; r < c.regions.size(); ++r) {
    const region_config& g = c.regions[r];
    regions.push_back({{"name", g.name},
                       {"syncer", g.syncer && decoupled},
                       {"wan_gbps", jnum(g.bandwidth_gbps)},
                       {"wan_ms", jnum(g.latency_s * 1e3)},
                       {"local_gbps", jnum(g.local_bandwidth_gbps)},
                       {"local_ms", jnum(g.local_latency_s * 1e3)},
                       {"learners", members[r]}});
  }
  return json{{"shards", c.shards},
              {"regions", regions},
              {"direct", direct},
              {"link_gbps", jnum(c.link.bandwidth_gbps)},
              {"link_ms", jnum(c.link.latency_s * 1e3)}};
}

}  // namespace

live_metrics::live_metrics(const run_config& config, live_options options)
    : config_(config), options_(std::move(options)), version_gap_(gap_bounds) {
  for (const auto& k : alert_kinds()) alerts_[k] = 0;
  for (uint32_t l = 0; l < static_cast<uint32_t>(config.learner_capacity()); ++l) {
    const int r = config.regional_of(l);
    if (r < 0) continue;
    if (regional_learners_.size() <= static_cast<size_t>(r)) regional_learners_.resize(r + 1);
    regional_learners_[static_cast<size_t>(r)].push_back(l);
  }
  // About 400 samples over the run's expected length (its budget at the nominal step time).
  double every = options_.sample_every_s;
  if (!(every > 0)) {
    const double steps = static_cast<double>(config.token_budget) /
                         std::max(1.0, static_cast<double>(config.batch * config.learners));
    const double expected_s =
        config.duration_s > 0 ? config.duration_s : steps * config.speed.step_time_s;
    every = std::max(1e-3, expected_s / 400.0);
  }
  sample_every_ns_ = static_cast<int64_t>(every * 1e9);
  next_sample_ns_ = sample_every_ns_;
  // The codec's ratio on a fragment of average size.
  const size_t per_fragment =
      std::max<size_t>(1, mlp_lm(config.model).layout().param_count() /
                              static_cast<size_t>(std::max(1, config.fragments)));
  expected_ratio_ = expected_compression_ratio(config.uplink, per_fragment);
  if (!options_.jsonl_path.empty()) {
    jsonl_ = std::fopen(options_.jsonl_path.c_str(), "w");
    if (jsonl_ == nullptr) {
      spdlog::warn("metrics: cannot write {}: the JSON lines are off", options_.jsonl_path);
    } else {
      json start{{"type", "start"},
                 {"seed", config.seed},
                 {"learners", config.learners},
                 {"quorum", config.effective_quorum()},
                 {"fragments", config.fragments},
                 {"token_budget", config.token_budget},
                 {"chips_per_learner", config.chips_per_learner},
                 {"expected_compression", jnum(expected_ratio_)},
                 {"mode", to_string(config.mode)},
                 {"system", options_.system},
                 {"run_id", options_.run_id},
                 {"version", options_.version},
                 {"period_steps", config.period_steps},
                 {"period_auto", config.period_auto.enabled},
                 // The inner schedule the learners follow (tensor/optim.hpp, lr_at).
                 {"inner_lr",
                  {{"lr", jnum(config.inner.lr)},
                   {"warmup_steps", config.inner.warmup_steps},
                   {"total_steps", config.inner.total_steps},
                   {"min_lr_ratio", jnum(config.inner.min_lr_ratio)}}},
                 {"outer_lr", jnum(config.outer.lr)}};
      if (!config.regions.empty()) start["topology"] = topology_of(config);
      if (!options_.settings.empty()) {
        json settings = json::object();
        for (const auto& [k, v] : options_.settings) settings[k] = v;
        start["settings"] = std::move(settings);
      }
      write_line(start.dump());
    }
  }
}

live_metrics::~live_metrics() {
  if (jsonl_ != nullptr) std::fclose(jsonl_);
}

void live_metrics::write_line(const std::string& line) {
  if (jsonl_ == nullptr) return;
  std::fputs(line.c_str(), jsonl_);
  std::fputc('\n', jsonl_);
}

const char* live_metrics::severity(const std::string& kind) {
  return kind == "partition" || kind == "diverged" ? "critical" : "warning";
}

void live_metrics::alert(int64_t now_ns, const std::string& kind, const std::string& what) {
  const uint64_t n = ++alerts_[kind];
  const char* level = severity(kind);
  // Every alert is counted and written; the log shows the first five of a kind, then every
  // hundredth, critical ones as errors.
  if (n <= 5 || n % 100 == 0) {
    spdlog::log(level[0] == 'c' ? spdlog::level::err : spdlog::level::warn,
                "alert {} ({}) #{} at {:.1f} s: {}{}", kind, level, n, seconds(now_ns), what,
                n == 5 ? " (further ones of this kind: every 100th is logged)" : "");
  }
  recent_alerts_.push_back(kind + " at " + num(seconds(now_ns)) + " s: " + what);
  if (recent_alerts_.size() > 20) recent_alerts_.erase(recent_alerts_.begin());
  write_line(json{
      {"type", "alert"},
      {"t", jnum(seconds(now_ns))},
      {"kind", kind},
      {"severity", level},
      {"what",
       what}}.dump());
}

bool live_metrics::latch(int64_t now_ns, const std::string& kind, const std::string& subject,
                         bool above, bool cleared, int hold_raise, int hold_clear) {
  latch_state& l = latches_[{kind, subject}];
  if (!l.firing) {
    l.above = above ? l.above + 1 : 0;
    if (l.above < hold_raise) return false;
    l.firing = true;
    l.cleared = 0;
    return true;
  }
  l.cleared = cleared ? l.cleared + 1 : 0;
  if (l.cleared >= hold_clear) {
    l.firing = false;
    l.above = 0;
    spdlog::info("alert {} resolved at {:.1f} s{}", kind, seconds(now_ns),
                 subject.empty() ? std::string() : ": " + subject);
    write_line(
        json{{"type", "resolved"}, {"t", jnum(seconds(now_ns))}, {"kind", kind}, {"what", subject}}
            .dump());
  }
  return false;
}

void live_metrics::cover(int64_t start, int64_t end) {
  if (end <= start) return;
  // Merge with every interval it touches.
  auto it = up_.upper_bound(start);
  if (it != up_.begin() && std::prev(it)->second >= start) --it;
  while (it != up_.end() && it->first <= end) {
    start = std::min(start, it->first);
    end = std::max(end, it->second);
    up_ns_ -= it->second - it->first;
    it = up_.erase(it);
  }
  up_.emplace(start, end);
  up_ns_ += end - start;
}

// Goodput so far (docs/observability.md): the learners' reported chip-time of completed steps
// over the starting learners' chips times the time since the start.
double live_metrics::goodput_at(int64_t now_ns) const {
  if (final_goodput_ >= 0) return final_goodput_;
  const double provisioned = seconds(now_ns) * config_.starting_chips();
  return provisioned > 0 ? chip_s_ / provisioned : 0.0;
}

int live_metrics::missing_allowed() const {
  return config_.alerts.dropped_learners >= 0 ? config_.alerts.dropped_learners
                                              : config_.learners - config_.effective_quorum();
}

bool live_metrics::learner_up(const learner_stats& l, int64_t at_ns) const {
  if (l.diverged) return false;
  if (l.report_every_ns <= 0) return true;  // fewer than two reports: nothing to judge by yet
  return static_cast<double>(at_ns - l.last_report_ns) <= 4 * l.report_every_ns;
}

// Samples for the report: totals, goodput and uptime so far.
void live_metrics::sample(int64_t now_ns) {
  last_sample_ns_ = now_ns;
  const double t = seconds(now_ns);
  json learners = json::array();
  for (const auto& [id, l] : learners_) {
    learners.push_back({{"id", id},
                        {"tokens", l.tokens},
                        {"loss", jnum(l.train_loss)},
                        {"busy_s", jnum(l.busy_s)},
                        {"idle_s", jnum(l.idle_s)},
                        {"bytes_sent", l.bytes_sent},
                        {"bytes_received", l.bytes_received},
                        {"up", learner_up(l, now_ns)}});
    if (l.period_steps > 0) learners.back()["period_steps"] = l.period_steps;
  }
  write_line(json{{"type", "sample"},
                  {"t", jnum(t)},
                  {"tokens", tokens_},
                  {"goodput", jnum(goodput_at(now_ns))},
                  {"uptime", jnum(t > 0 ? std::min(1.0, seconds(up_ns_) / t) : 0)},
                  {"learners", std::move(learners)}}
                 .dump());
}

int64_t live_metrics::since_start(int64_t clock_ns) {
  if (!started_) {  // no start seen (a resumed run): count from the first event
    started_ = true;
    origin_ns_ = clock_ns;
  }
  return clock_ns - origin_ns_;
}

void live_metrics::on_start(int64_t now_ns) {
  std::lock_guard<std::mutex> g(mu_);
  if (started_) return;
  started_ = true;
  origin_ns_ = now_ns;
}

void live_metrics::on_diverged(int64_t clock_ns, const diverged_msg& m) {
  std::lock_guard<std::mutex> g(mu_);
  const int64_t now_ns = since_start(clock_ns);
  now_ns_ = std::max(now_ns_, now_ns);
  learners_[m.learner].diverged = true;
  alert(now_ns, "diverged",
        "learner " + std::to_string(m.learner) + " at step " + std::to_string(m.step) + ": " +
            m.what);
}

void live_metrics::on_progress(int64_t clock_ns, const progress_msg& m) {
  std::lock_guard<std::mutex> g(mu_);
  const int64_t now_ns = since_start(clock_ns);
  now_ns_ = std::max(now_ns_, now_ns);
  // The samples due before this report show the run as it was then, without it.
  samples_before(now_ns);
  auto& l = learners_[m.learner];
  if (l.last_report_ns >= 0) {
    const double every = static_cast<double>(now_ns - l.last_report_ns);
    l.report_every_ns = l.report_every_ns == 0 ? every : 0.9 * l.report_every_ns + 0.1 * every;
  }
  l.last_report_ns = now_ns;
  l.tokens += m.tokens;
  l.steps += m.steps;
  l.bytes_sent += m.bytes_sent;
  l.bytes_received += m.bytes_received;
  l.busy_s += seconds(m.busy_ns);
  cover(now_ns - m.busy_ns - m.idle_ns, now_ns - m.idle_ns);
  l.idle_s += seconds(m.idle_ns);
  l.chip_s += m.chip_s;
  if (m.period_steps > 0) l.period_steps = m.period_steps, l.overlap_steps = m.overlap_steps;
  if (m.steps > 0) {
    l.train_loss = m.train_loss;
    l.step_time_s = seconds(m.busy_ns) / static_cast<double>(m.steps);
    if (l.start_loss == 0 && std::isfinite(m.train_loss)) l.start_loss = m.train_loss;
    // Far above where it started: the run is diverging (a learning rate too high, a bad
    // merge). Raised once on the way up, again only after the loss came back under.
    const bool high =
        l.start_loss > 0 && !(m.train_loss <= config_.alerts.loss_rise * l.start_loss);
    if (high && !l.loss_high) {
      alert(now_ns, "loss_rise",
            "learner " + std::to_string(m.learner) + "'s loss is " + num(m.train_loss) +
                ", more than " + num(config_.alerts.loss_rise) + " x its first (" +
                num(l.start_loss) + "): diverging?");
    }
    l.loss_high = high;
  }
  if (m.merge_gaps > 0) {
    const double gap = m.merge_gap_sum / static_cast<double>(m.merge_gaps);
    l.loss_gap = l.gaps == 0 ? gap : 0.8 * l.loss_gap + 0.2 * gap;
    l.gaps += m.merge_gaps;
    // The global fragments make the learner's loss jump: its local model has drifted from the
    // global one (too many inner steps, or a stale copy). Judged once 8 merges are in, raised
    // when the running mean has stayed above the limit for 8 reports in a row (one batch's
    // noise lifts it for a few: healthy runs stay above 10% for at most 5), resolved when it
    // has stayed under half the limit as long.
    const double limit = config_.alerts.loss_gap;
    if (latch(now_ns, "loss_gap", "learner " + std::to_string(m.learner),
              l.gaps >= 8 && l.loss_gap > limit, l.loss_gap < limit / 2, 8, 8)) {
      alert(now_ns, "loss_gap",
            "learner " + std::to_string(m.learner) + "'s loss rises by " + num(100 * l.loss_gap) +
                "% at merges (limit " + num(100 * config_.alerts.loss_gap) +
                "%): too many inner steps?");
    }
  }
  tokens_ += m.tokens;
  steps_ += m.steps;
  chip_s_ += m.chip_s;
  json line{{"type", "progress"},
            {"t", jnum(seconds(now_ns))},
            {"learner", m.learner},
            {"tokens", m.tokens},
            {"steps", m.steps},
            {"loss", jnum(m.train_loss)},
            {"busy_s", jnum(seconds(m.busy_ns))},
            {"idle_s", jnum(seconds(m.idle_ns))},
            {"bytes_sent", m.bytes_sent},
            {"bytes_received", m.bytes_received}};
  if (m.period_steps > 0) {
    line["period_steps"] = m.period_steps;
    line["overlap_steps"] = m.overlap_steps;
  }
  // The loss's rise at the merges this report saw, and its running mean the alert judges.
  if (m.merge_gaps > 0) {
    line["merge_gap"] = jnum(m.merge_gap_sum / static_cast<double>(m.merge_gaps));
    line["loss_gap"] = jnum(learners_[m.learner].loss_gap);
  }
  write_line(line.dump());
}

void live_metrics::eval_taken(double t_s) {
  std::lock_guard<std::mutex> g(mu_);
  eval_tokens_[t_s] = tokens_;
}

void live_metrics::on_eval(double t_s, double loss) {
  std::lock_guard<std::mutex> g(mu_);
  eval_loss_ = loss;
  const auto taken = eval_tokens_.find(t_s);
  const uint64_t tokens = taken != eval_tokens_.end() ? taken->second : tokens_;
  eval_tokens_.erase(eval_tokens_.begin(), eval_tokens_.upper_bound(t_s));
  write_line(
      json{{"type", "eval"}, {"t", jnum(t_s)}, {"tokens", tokens}, {"loss", jnum(loss)}}.dump());
}

void live_metrics::samples_before(int64_t now_ns) {
  // A jump of the clock (a resumed run) skips the samples in between.
  if (now_ns - next_sample_ns_ > 64 * sample_every_ns_)
    next_sample_ns_ = now_ns - now_ns % sample_every_ns_;
  while (now_ns > next_sample_ns_) {
    sample(next_sample_ns_);
    next_sample_ns_ += sample_every_ns_;
  }
}

void live_metrics::on_layout(const std::vector<std::string>& tensor_names) {
  std::lock_guard<std::mutex> g(mu_);
  tensor_names_ = tensor_names;
}

void live_metrics::on_merge(int64_t clock_ns, const merge_msg& m) {
  std::lock_guard<std::mutex> g(mu_);
  const int64_t now_ns = since_start(clock_ns);
  now_ns_ = std::max(now_ns_, now_ns);
  merges_[m.fragment] += 1;
  if (m.quorum) quorum_merges_[m.fragment] += 1;
  versions_[m.fragment] = m.version;
  deltas_merged_ += m.learners.size();
  uint64_t round_tokens = 0;
  for (auto t : m.tokens) round_tokens += t;
  double gap_sum = 0;
  json who = json::array();
  for (size_t i = 0; i < m.learners.size(); ++i) {
    const double delay = i < m.delays_ns.size() ? seconds(m.delays_ns[i]) : 0;
    const double gap = i < m.version_gaps.size() ? static_cast<double>(m.version_gaps[i]) : 0;
    // Past the learner slots a member is a regional syncer (its learners report for
    // themselves): in the merge's record, not among the learners' series.
    if (m.learners[i] < static_cast<uint32_t>(config_.learner_capacity())) {
      auto& l = learners_[m.learners[i]];
      l.merged_tokens += i < m.tokens.size() ? m.tokens[i] : 0;
      l.merges += 1;
      arrival_delay_s_.try_emplace(m.learners[i], delay_bounds).first->second.add(delay);
    } else {
      regional_merged_tokens_ += i < m.tokens.size() ? m.tokens[i] : 0;
    }
    version_gap_.add(gap);
    gap_sum += gap;
    who.push_back({{"learner", m.learners[i]},
                   {"tokens", i < m.tokens.size() ? m.tokens[i] : 0},
                   {"delay_s", jnum(delay)},
                   {"gap", jnum(gap)}});
  }
  delta_bytes_ += m.delta_bytes;
  fp32_bytes_ += m.fp32_bytes;
  shard_drops_[m.shard] = {m.dropped_stale, m.dropped_duplicate, m.rejected};
  // Whether the learners' outer gradients agree, per tensor: the premise of RDA.
  json agreement = json::object();
  for (size_t i = 0; i < m.tensors.size() && i < m.cosines.size(); ++i) {
    const uint32_t t = m.tensors[i];
    tensor_cosine_[t] = m.cosines[i];
    agreement[t < tensor_names_.size() ? tensor_names_[t] : "tensor " + std::to_string(t)] =
        jnum(m.cosines[i]);
  }
  json line{{"type", "merge"},
            {"t", jnum(seconds(now_ns))},
            {"shard", m.shard},
            {"fragment", m.fragment},
            {"version", m.version},
            {"quorum", m.quorum},
            {"live", m.live},
            {"tokens", round_tokens},
            {"delta_bytes", m.delta_bytes},
            {"fp32_bytes", m.fp32_bytes},
            {"contributors", std::move(who)}};
  if (!agreement.empty()) line["cosine"] = std::move(agreement);
  write_line(line.dump());
  if (!m.quorum) return;  // the final flush takes whoever is left
  // Alerts.
  const int threshold = missing_allowed();
  // A regional syncer in a merge stands for its region's learners, but those known to be down.
  int present = 0;
  const auto slots = static_cast<uint32_t>(config_.learner_capacity());
  for (uint32_t id : m.learners) {
    if (id < slots) {
      present += 1;
      continue;
    }
    if (id - slots >= regional_learners_.size()) continue;
    for (uint32_t l : regional_learners_[id - slots]) {
      const auto it = learners_.find(l);
      present += it == learners_.end() || learner_up(it->second, now_ns) ? 1 : 0;
    }
  }
  const int missing = config_.learners - present;
  last_missing_ = std::max(0, missing);
  if (missing > 0) partial_merges_[m.fragment] += 1;
  // At once (critical), and once until two merges in a row have the learners back.
  if (latch(now_ns, "partition", "", missing > threshold, missing <= threshold, 1, 2)) {
    alert(now_ns, "partition",
          std::to_string(missing) + " of " + std::to_string(config_.learners) +
              " learners missing from merge " + std::to_string(m.version) + " of fragment " +
              std::to_string(m.fragment) + " (more than M - K = " + std::to_string(threshold) +
              "): a partition?");
  }
  const double stale_limit = config_.alerts.staleness_versions > 0
                                 ? config_.alerts.staleness_versions
                                 : config_.staleness_max / 2.0;
  // Four stale merges in a row raise it, four under three quarters of the limit resolve it.
  const double stale = m.learners.empty() ? 0 : gap_sum / static_cast<double>(m.learners.size());
  if (latch(now_ns, "staleness", "", !m.learners.empty() && stale > stale_limit,
            stale <= 0.75 * stale_limit, 4, 4)) {
    alert(now_ns, "staleness",
          "merge " + std::to_string(m.version) + " of fragment " + std::to_string(m.fragment) +
              ": deltas " + num(gap_sum / static_cast<double>(m.learners.size())) +
              " versions behind on average (limit " + num(stale_limit) +
              "): too many inner steps or a slow learner?");
  }
  // Skew and compression once there is a history to judge (two merges per learner).
  uint64_t total_merges = 0;
  for (const auto& [f, n] : merges_) total_merges += n;
  if (total_merges < 2 * static_cast<uint64_t>(config_.learners)) return;
  uint64_t merged = regional_merged_tokens_;  // a learner's share is of every merged token
  for (const auto& [id, l] : learners_) merged += l.merged_tokens;
  for (const auto& [id, l] : learners_) {
    const double share = merged > 0 ? static_cast<double>(l.merged_tokens) / merged : 0;
    if (total_merges % 64 == 0 && latch(now_ns, "data_skew", "learner " + std::to_string(id),
                                        share > config_.alerts.token_share,
                                        share <= 0.9 * config_.alerts.token_share, 1, 1)) {
      alert(now_ns, "data_skew",
            "learner " + std::to_string(id) + " holds " + num(share) +
                " of the merged tokens (limit " + num(config_.alerts.token_share) + ")");
    }
  }
  if (delta_bytes_ > 0 && expected_ratio_ > 0 && total_merges % 64 == 0) {
    const double ratio = static_cast<double>(fp32_bytes_) / static_cast<double>(delta_bytes_);
    const double off = std::fabs(ratio / expected_ratio_ - 1.0);
    if (latch(now_ns, "compression", "", off > config_.alerts.compression_tolerance,
              off <= 0.8 * config_.alerts.compression_tolerance, 1, 1)) {
      alert(now_ns, "compression",
            "deltas compress " + num(ratio) + "x, the codec should give " + num(expected_ratio_) +
                "x");
    }
  }
}

void live_metrics::on_stop(int64_t clock_ns) {
  std::lock_guard<std::mutex> g(mu_);
  const int64_t now_ns = since_start(clock_ns);
  now_ns_ = std::max(now_ns_, now_ns);
  stopped_ = true;
  write_line(json{{"type", "stop"}, {"t", jnum(seconds(now_ns))}}.dump());
}

void live_metrics::on_node(int64_t clock_ns, const std::string& name, bool up, uint32_t process) {
  std::lock_guard<std::mutex> g(mu_);
  const int64_t now_ns = since_start(clock_ns);
  now_ns_ = std::max(now_ns_, now_ns);
  auto& n = nodes_[name];
  if (n.up && !up) ++n.losses;
  n.up = up;
  n.process = process;
  write_line(json{
      {"type", "node"},
      {"t", jnum(seconds(now_ns))},
      {"node", name},
      {"up", up},
      {"process",
       process}}.dump());
}

void live_metrics::finish(const nlohmann::ordered_json& extra) {
  std::lock_guard<std::mutex> g(mu_);
  // The run's complete accounting (every learner's last steps, the supervisor's integral of
  // the members' chips) replaces the running estimate in the last sample and the gauge.
  if (extra.contains("goodput") && extra["goodput"].is_number())
    final_goodput_ = extra["goodput"].get<double>();
  sample(std::max(now_ns_, last_sample_ns_));
  json line = {{"type", "end"}, {"t", jnum(seconds(now_ns_))}, {"tokens", tokens_}};
  const merge_counts merged = merge_counts_locked();
  line["quorum_merges"] = merged.quorum;
  line["partial_merges"] = merged.partial;
  for (const auto& [kind, n] : alerts_) line["alerts_" + kind] = n;
  for (const auto& item : extra.items()) line[item.key()] = item.value();
  write_line(line.dump());
  if (jsonl_ != nullptr) {
    std::fclose(jsonl_);
    jsonl_ = nullptr;
  }
}

live_metrics::merge_counts live_metrics::quorum_merge_counts() const {
  std::lock_guard<std::mutex> g(mu_);
  return merge_counts_locked();
}

live_metrics::merge_counts live_metrics::merge_counts_locked() const {
  merge_counts c;
  for (const auto& [f, n] : quorum_merges_) c.quorum += n;
  for (const auto& [f, n] : partial_merges_) c.partial += n;
  return c;
}

std::map<std::string, uint64_t> live_metrics::alert_counts() const {
  std::lock_guard<std::mutex> g(mu_);
  return alerts_;
}

namespace {
void prometheus_head(std::ostream& o, const char* name, const char* type, const char* help) {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}
}  // namespace

std::string live_metrics::prometheus() const {
  std::lock_guard<std::mutex> g(mu_);
  std::ostringstream o;
  write_run_metrics(o);
  write_learner_metrics(o);
  write_merge_metrics(o);
  write_node_metrics(o);
  return o.str();
}

// The caller holds mu_.
void live_metrics::write_run_metrics(std::ostream& o) const {
  prometheus_head(o, "diloco_run_info", "gauge",
                  "The run: seed, mode, system, identity (hex) and program version; always 1.");
  o << "diloco_run_info{seed=\"" << config_.seed << "\",mode=\"" << to_string(config_.mode)
    << "\",system=\"" << options_.system << "\",run_id=\"" << options_.run_id << "\",version=\""
    << options_.version << "\",learners=\"" << config_.learners << "\",quorum=\""
    << config_.effective_quorum() << "\"} 1\n";
  prometheus_head(o, "diloco_run_seconds", "gauge",
                  "Run time on the metrics actor's clock (simulated in simulation).");
  o << "diloco_run_seconds " << num(seconds(now_ns_)) << '\n';
  prometheus_head(o, "diloco_tokens_total", "counter", "Tokens processed by all learners.");
  o << "diloco_tokens_total " << tokens_ << '\n';
  prometheus_head(o, "diloco_token_budget", "gauge", "Tokens the run is to process.");
  o << "diloco_token_budget " << config_.token_budget << '\n';
  prometheus_head(o, "diloco_goodput_ratio", "gauge",
                  "Chip-time of completed inner steps over provisioned chip-time so far.");
  o << "diloco_goodput_ratio " << num(goodput_at(now_ns_)) << '\n';
  if (std::isfinite(eval_loss_)) {
    prometheus_head(o, "diloco_eval_loss", "gauge",
                    "Loss of the global model on the held-out set, at its latest evaluation.");
    o << "diloco_eval_loss " << num(eval_loss_) << '\n';
  }
  const double t = seconds(now_ns_);
  prometheus_head(o, "diloco_uptime_ratio", "gauge",
                  "Share of the run in which some learner computed.");
  o << "diloco_uptime_ratio " << num(t > 0 ? std::min(1.0, seconds(up_ns_) / t) : 0) << '\n';
  prometheus_head(o, "diloco_stopped", "gauge", "1 once the run has stopped.");
  o << "diloco_stopped " << (stopped_ ? 1 : 0) << '\n';
}

void live_metrics::write_learner_metrics(std::ostream& o) const {
  struct per_learner {
    const char* name;
    const char* type;
    const char* help;
    double (*get)(const learner_stats&);
  };
  const per_learner fields[] = {
      {"diloco_learner_tokens_total", "counter", "Tokens a learner processed.",
       [](const learner_stats& l) { return static_cast<double>(l.tokens); }},
      {"diloco_learner_steps_total", "counter", "Inner steps a learner took.",
       [](const learner_stats& l) { return static_cast<double>(l.steps); }},
      {"diloco_learner_busy_seconds_total", "counter", "Time a learner computed.",
       [](const learner_stats& l) { return l.busy_s; }},
      {"diloco_learner_idle_seconds_total", "counter", "Time a learner waited.",
       [](const learner_stats& l) { return l.idle_s; }},
      {"diloco_learner_step_seconds", "gauge", "A learner's recent mean step time.",
       [](const learner_stats& l) { return l.step_time_s; }},
      {"diloco_learner_train_loss", "gauge", "A learner's recent mean batch loss.",
       [](const learner_stats& l) { return l.train_loss; }},
      {"diloco_learner_sent_bytes_total", "counter", "Bytes a learner sent.",
       [](const learner_stats& l) { return static_cast<double>(l.bytes_sent); }},
      {"diloco_learner_received_bytes_total", "counter", "Bytes a learner received.",
       [](const learner_stats& l) { return static_cast<double>(l.bytes_received); }},
      {"diloco_learner_merges_total", "counter", "Merges a learner's deltas were in.",
       [](const learner_stats& l) { return static_cast<double>(l.merges); }},
      {"diloco_learner_loss_gap_ratio", "gauge",
       "Relative change of a learner's loss at merges (recent moving average).",
       [](const learner_stats& l) { return l.loss_gap; }},
  };
  auto write = [&](const per_learner& f) {
    prometheus_head(o, f.name, f.type, f.help);
    for (const auto& [id, l] : learners_)
      o << f.name << "{learner=\"" << id << "\"} " << num(f.get(l)) << '\n';
  };
  for (const auto& f : fields) write(f);
  // Adaptive inner steps only: the H and tau each learner follows now.
  const per_learner schedule[] = {
      {"diloco_learner_period_steps", "gauge", "Adaptive inner steps: the H a learner follows now.",
       [](const learner_stats& l) { return static_cast<double>(l.period_steps); }},
      {"diloco_learner_overlap_steps", "gauge",
       "Adaptive inner steps: the tau a learner follows now.",
       [](const learner_stats& l) { return static_cast<double>(l.overlap_steps); }},
  };
  if (config_.period_auto.enabled)
    for (const auto& f : schedule) write(f);
  uint64_t merged = regional_merged_tokens_;  // a learner's share is of every merged token
  for (const auto& [id, l] : learners_) merged += l.merged_tokens;
  prometheus_head(o, "diloco_learner_token_share_ratio", "gauge",
                  "A learner's share of the tokens merged so far.");
  for (const auto& [id, l] : learners_) {
    o << "diloco_learner_token_share_ratio{learner=\"" << id << "\"} "
      << num(merged > 0 ? static_cast<double>(l.merged_tokens) / merged : 0) << '\n';
  }
  prometheus_head(o, "diloco_learner_up", "gauge",
                  "1 while a learner reports (within four of its usual intervals) and its "
                  "numerics are finite, else 0.");
  int diverged = 0;
  for (const auto& [id, l] : learners_) {
    o << "diloco_learner_up{learner=\"" << id << "\"} " << (learner_up(l, now_ns_) ? 1 : 0) << '\n';
    diverged += l.diverged ? 1 : 0;
  }
  prometheus_head(o, "diloco_learners_diverged", "gauge",
                  "Learners whose loss or outer gradient went non-finite (they stopped).");
  o << "diloco_learners_diverged " << diverged << '\n';
}

void live_metrics::write_merge_metrics(std::ostream& o) const {
  prometheus_head(o, "diloco_merges_total", "counter", "Merges of a fragment.");
  for (const auto& [f, n] : merges_)
    o << "diloco_merges_total{fragment=\"" << f << "\"} " << n << '\n';
  prometheus_head(o, "diloco_quorum_merges_total", "counter",
                  "Merges of a fragment that reached the quorum.");
  for (const auto& [f, n] : merges_) {
    const auto q = quorum_merges_.find(f);
    o << "diloco_quorum_merges_total{fragment=\"" << f << "\"} "
      << (q == quorum_merges_.end() ? 0 : q->second) << '\n';
  }
  prometheus_head(o, "diloco_partial_merges_total", "counter",
                  "Merges of a fragment that reached the quorum without every one of the M "
                  "learners.");
  for (const auto& [f, n] : merges_) {
    const auto q = partial_merges_.find(f);
    o << "diloco_partial_merges_total{fragment=\"" << f << "\"} "
      << (q == partial_merges_.end() ? 0 : q->second) << '\n';
  }
  prometheus_head(o, "diloco_global_version", "gauge", "A fragment's global version.");
  for (const auto& [f, v] : versions_)
    o << "diloco_global_version{fragment=\"" << f << "\"} " << v << '\n';
  prometheus_head(o, "diloco_deltas_merged_total", "counter", "Deltas merged within their round.");
  o << "diloco_deltas_merged_total " << deltas_merged_ << '\n';
  prometheus_head(o, "diloco_deltas_dropped_total", "counter", "Deltas not merged, by reason.");
  const char* reasons[] = {"stale", "duplicate", "rejected"};
  for (size_t r = 0; r < 3; ++r) {
    uint64_t n = 0;
    for (const auto& [s, d] : shard_drops_) n += d[r];
    o << "diloco_deltas_dropped_total{reason=\"" << reasons[r] << "\"} " << n << '\n';
  }
  auto hist = [&](const char* name, const char* help, const histogram& h) {
    prometheus_head(o, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      o << name << "_bucket{le=\"" << num(h.bounds[i]) << "\"} " << cum << '\n';
    }
    o << name << "_bucket{le=\"+Inf\"} " << h.count << '\n';
    o << name << "_sum " << num(h.sum) << '\n' << name << "_count " << h.count << '\n';
  };
  prometheus_head(o, "diloco_arrival_delay_seconds", "histogram",
                  "A merged delta's arrival after its round opened, by learner.");
  for (const auto& [id, h] : arrival_delay_s_) {
    const std::string l = "learner=\"" + std::to_string(id) + "\"";
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      o << "diloco_arrival_delay_seconds_bucket{" << l << ",le=\"" << num(h.bounds[i]) << "\"} "
        << cum << '\n';
    }
    o << "diloco_arrival_delay_seconds_bucket{" << l << ",le=\"+Inf\"} " << h.count << '\n';
    o << "diloco_arrival_delay_seconds_sum{" << l << "} " << num(h.sum) << '\n';
    o << "diloco_arrival_delay_seconds_count{" << l << "} " << h.count << '\n';
  }
  hist("diloco_version_gap", "Versions between a merged delta's base and the global.",
       version_gap_);
  prometheus_head(o, "diloco_tensor_cosine", "gauge",
                  "Mean cosine between the learners' outer gradients for a tensor, at its "
                  "latest merge (near 1: they agree; near 0: RDA keeps the size an average "
                  "would shrink).");
  for (const auto& [t, c] : tensor_cosine_) {
    // A user's tensor name in a label value: backslash, quote and newline escaped.
    std::string label;
    for (char ch : t < tensor_names_.size() ? tensor_names_[t] : std::to_string(t)) {
      if (ch == '\\' || ch == '"') label += '\\';
      label += ch == '\n' ? std::string("\\n") : std::string(1, ch);
    }
    o << "diloco_tensor_cosine{tensor=\"" << label << "\"} " << num(c) << '\n';
  }
  prometheus_head(o, "diloco_merge_missing_learners", "gauge",
                  "Learners missing from the latest merge that reached the quorum.");
  o << "diloco_merge_missing_learners " << last_missing_ << '\n';
  prometheus_head(o, "diloco_merge_missing_learners_allowed", "gauge",
                  "Missing learners a merge may lack before it is a partition (M - K unless "
                  "alerts.dropped_learners says otherwise).");
  o << "diloco_merge_missing_learners_allowed " << missing_allowed() << '\n';
  prometheus_head(o, "diloco_merged_delta_bytes_total", "counter",
                  "Encoded bytes of the deltas merged so far.");
  o << "diloco_merged_delta_bytes_total " << delta_bytes_ << '\n';
  prometheus_head(o, "diloco_merged_delta_fp32_bytes_total", "counter",
                  "The same deltas' size as fp32.");
  o << "diloco_merged_delta_fp32_bytes_total " << fp32_bytes_ << '\n';
  prometheus_head(o, "diloco_compressed_size_ratio", "gauge",
                  "Encoded size over fp32 size of the deltas merged so far (0 to 1; 0 before "
                  "the first merge).");
  o << "diloco_compressed_size_ratio "
    << num(fp32_bytes_ > 0 ? static_cast<double>(delta_bytes_) / fp32_bytes_ : 0) << '\n';
  prometheus_head(o, "diloco_compressed_size_ratio_expected", "gauge",
                  "The encoded size over fp32 size the uplink codec should give.");
  o << "diloco_compressed_size_ratio_expected "
    << num(expected_ratio_ > 0 ? 1.0 / expected_ratio_ : 0) << '\n';
}

void live_metrics::write_node_metrics(std::ostream& o) const {
  if (!nodes_.empty()) {
    prometheus_head(o, "diloco_node_up", "gauge",
                    "Deployed run: 1 while the node's process runs, by node.");
    for (const auto& [name, n] : nodes_)
      o << "diloco_node_up{node=\"" << name << "\"} " << (n.up ? 1 : 0) << '\n';
    // Nodes hosting a shard or a service actor: the run stops if one stays away longer than
    // --restart-wait.
    const actor_indices ids = actor_ids_of(config_);
    prometheus_head(o, "diloco_node_essential", "gauge",
                    "Deployed run: 1 for a node hosting a shard or a service actor (the run "
                    "cannot finish without it), 0 for a node of learners only, by node.");
    for (const auto& [name, n] : nodes_) {
      bool essential = false;
      for (uint32_t i = ids.learners; i < ids.count(); ++i)
        essential = essential || config_.deploy.node_of(ids, i) == name;
      o << "diloco_node_essential{node=\"" << name << "\"} " << (essential ? 1 : 0) << '\n';
    }
    prometheus_head(o, "diloco_node_losses_total", "counter",
                    "Deployed run: times the node's process went away, by node.");
    for (const auto& [name, n] : nodes_)
      o << "diloco_node_losses_total{node=\"" << name << "\"} " << n.losses << '\n';
  }
  prometheus_head(o, "diloco_alerts_total", "counter", "Alerts raised, by kind.");
  for (const auto& [kind, n] : alerts_)
    o << "diloco_alerts_total{kind=\"" << kind << "\"} " << n << '\n';
  prometheus_head(o, "diloco_alert_firing", "gauge",
                  "Conditions of a kind raised and not yet resolved (an alert with hysteresis).");
  std::map<std::string, int> firing;
  for (const auto& [kind, n] : alerts_) firing[kind] = 0;
  for (const auto& [key, l] : latches_) firing[key.first] += l.firing ? 1 : 0;
  for (const auto& [kind, n] : firing)
    o << "diloco_alert_firing{kind=\"" << kind << "\"} " << n << '\n';
}

std::string live_metrics::status_json() const {
  std::lock_guard<std::mutex> g(mu_);
  json learners = json::array();
  for (const auto& [id, l] : learners_) {
    learners.push_back({{"id", id},
                        {"tokens", l.tokens},
                        {"steps", l.steps},
                        {"train_loss", jnum(l.train_loss)},
                        {"loss_gap", jnum(l.loss_gap)},
                        {"step_s", jnum(l.step_time_s)},
                        {"busy_s", jnum(l.busy_s)},
                        {"idle_s", jnum(l.idle_s)},
                        {"merges", l.merges},
                        {"up", learner_up(l, now_ns_)}});
    if (l.period_steps > 0) learners.back()["period_steps"] = l.period_steps;
  }
  json fragments = json::array();
  for (const auto& [f, n] : merges_) {
    const auto q = quorum_merges_.find(f);
    fragments.push_back({{"id", f},
                         {"version", versions_.at(f)},
                         {"merges", n},
                         {"quorum_merges", q == quorum_merges_.end() ? 0 : q->second}});
  }
  json nodes = json::array();
  for (const auto& [name, n] : nodes_) {
    nodes.push_back({{"name", name}, {"up", n.up}, {"process", n.process}, {"losses", n.losses}});
  }
  return json{{"seed", config_.seed},
              {"mode", to_string(config_.mode)},
              {"time_s", jnum(seconds(now_ns_))},
              {"tokens", tokens_},
              {"token_budget", config_.token_budget},
              {"stopped", stopped_},
              {"learners", std::move(learners)},
              {"fragments", std::move(fragments)},
              {"nodes", std::move(nodes)},
              {"alerts", alerts_},
              {"recent_alerts", recent_alerts_}}
      .dump();
}

}  // namespace diloco
