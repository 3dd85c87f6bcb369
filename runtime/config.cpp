#include "runtime/config.hpp"
#include "base/check.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace diloco {

namespace {
status bad(const std::string& key, const std::string& what) {
  return status(errc::invalid_argument, key + ": " + what);
}
}  // namespace

const char* to_string(run_mode m) {
  switch (m) {
    case run_mode::decoupled:
      return "decoupled";
    case run_mode::sync_diloco:
      return "diloco";
    case run_mode::data_parallel:
      return "dp";
  }
  return "?";
}

result<run_mode> parse_run_mode(const std::string& text) {
  if (text == "decoupled") return run_mode::decoupled;
  if (text == "diloco" || text == "sync") return run_mode::sync_diloco;
  if (text == "dp" || text == "data_parallel") return run_mode::data_parallel;
  return bad("mode", "'" + text + "': expected decoupled, diloco or dp");
}

const char* to_string(schedule_pattern p) {
  return p == schedule_pattern::strided ? "strided" : "sequential";
}

result<schedule_pattern> parse_schedule_pattern(const std::string& text) {
  if (text == "strided") return schedule_pattern::strided;
  if (text == "sequential") return schedule_pattern::sequential;
  return bad("schedule", "'" + text + "': expected strided or sequential");
}

const char* to_string(schedule_clock c) {
  return c == schedule_clock::global ? "global" : "local";
}

result<schedule_clock> parse_schedule_clock(const std::string& text) {
  if (text == "global") return schedule_clock::global;
  if (text == "local") return schedule_clock::local;
  return bad("schedule_clock", "'" + text + "': expected global or local");
}

const char* to_string(final_merge_rule r) {
  return r == final_merge_rule::average ? "average" : "outer";
}

result<final_merge_rule> parse_final_merge_rule(const std::string& text) {
  if (text == "average") return final_merge_rule::average;
  if (text == "outer") return final_merge_rule::outer;
  return bad("final_merge", "'" + text + "': expected average or outer");
}

const char* to_string(compute_mode m) {
  return m == compute_mode::real ? "real" : "cost";
}

result<compute_mode> parse_compute_mode(const std::string& text) {
  if (text == "real") return compute_mode::real;
  if (text == "cost") return compute_mode::cost;
  return bad("compute", "'" + text + "': expected real or cost");
}

const speed_config& run_config::speed_of(uint32_t learner) const {
  if (speeds.empty()) return speed;
  DILOCO_CHECK(learner < speeds.size(), "run_config: validate() gives every learner slot a speed");
  return speeds[learner];
}

uint64_t run_config::chips_of(uint32_t learner) const {
  if (learner >= speeds.size()) return chips_per_learner;
  const speed_config& s = speeds[learner];
  return (s.chips > 0 ? s.chips : chips_per_learner) * static_cast<uint64_t>(s.ranks);
}

double run_config::starting_chips() const {
  double chips = 0;
  for (uint32_t l = 0; l < static_cast<uint32_t>(std::max(learners, 0)); ++l)
    chips += static_cast<double>(chips_of(l));
  return chips;
}

int run_config::batch_of(uint32_t learner) const {
  if (learner >= speeds.size()) return batch;
  const speed_config& s = speeds[learner];
  return (s.batch > 0 ? s.batch : batch) * s.ranks;
}

link_config run_config::link_in_region_at(const link_config& base, const std::string& region,
                                          int64_t t_ns) const {
  link_config l = base;
  const double t = static_cast<double>(t_ns) * 1e-9;
  for (const auto& ch : link_changes) {
    if (t < ch.at_s || t >= ch.at_s + ch.for_s) continue;
    if (!ch.region.empty() && ch.region != region) continue;
    l.bandwidth_gbps *= ch.bandwidth_factor;
    l.latency_s *= ch.latency_factor;
  }
  return l;
}

link_config run_config::link_of(uint32_t learner) const {
  link_config l = link;
  if (learner >= speeds.size()) return l;
  const speed_config& s = speeds[learner];
  for (const auto& r : regions) {
    if (r.name == s.region) {
      l.latency_s = r.latency_s;
      l.bandwidth_gbps = r.bandwidth_gbps;
    }
  }
  if (s.link_latency_s >= 0) l.latency_s = s.link_latency_s;
  return l;
}

link_config run_config::link_at(uint32_t learner, const link_config& base, int64_t t_ns) const {
  static const std::string none;
  return link_in_region_at(base, learner < speeds.size() ? speeds[learner].region : none, t_ns);
}

std::vector<uint32_t> run_config::regional_regions() const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < regions.size(); ++i) {
    if (regions[i].syncer) out.push_back(i);
  }
  return out;
}

int run_config::regional_of(uint32_t learner) const {
  if (mode != run_mode::decoupled || learner >= speeds.size() || speeds[learner].region.empty())
    return -1;
  int r = 0;
  for (const auto& reg : regions) {
    if (!reg.syncer) continue;
    if (reg.name == speeds[learner].region) return r;
    ++r;
  }
  return -1;
}

namespace {
// Regional syncer r's region.
const region_config& regional_region(const run_config& c, uint32_t regional) {
  const auto which = c.regional_regions();
  DILOCO_CHECK(regional < which.size(), "config: a regional syncer of the run");
  return c.regions[which[regional]];
}
}  // namespace

link_config run_config::regional_wan_at(uint32_t regional, int64_t t_ns) const {
  const region_config& reg = regional_region(*this, regional);
  link_config l = link;
  l.latency_s = reg.latency_s;
  l.bandwidth_gbps = reg.bandwidth_gbps;
  return link_in_region_at(l, reg.name, t_ns);
}

link_config run_config::regional_local(uint32_t regional) const {
  const region_config& reg = regional_region(*this, regional);
  link_config l = link;
  l.latency_s = reg.local_latency_s;
  l.bandwidth_gbps = reg.local_bandwidth_gbps;
  return l;
}

int run_config::period_min() const {
  return period_auto.min_steps > 0 ? period_auto.min_steps : period_steps;
}

int64_t run_config::steps_per_learner() const {
  if (learners < 1 || batch < 1) return 1;  // invalid; validate() says why
  const auto per_learner = token_budget / static_cast<uint64_t>(learners);
  return std::max<int64_t>(1, static_cast<int64_t>(per_learner / static_cast<uint64_t>(batch)));
}

int run_config::effective_quorum() const {
  return mode == run_mode::decoupled ? std::min(quorum, learners) : learners;
}

namespace {

bool plain_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
  }
  return true;
}

// Nodes, placement and TLS: names unique and plain, addresses unique, every placed actor on a
// node that exists, one entry per learner slot and per shard.
status validate_deployment(const run_config& c) {
  const deployment_config& d = c.deploy;
  auto bad = [](const std::string& key, const std::string& why) {
    return status(errc::invalid_argument, key + ": " + why);
  };
  const bool placed = !d.placement.learners.empty() || !d.placement.shards.empty() ||
                      !d.placement.regionals.empty() || !d.placement.scheduler.empty() ||
                      !d.placement.metrics.empty() || !d.placement.chaos.empty() ||
                      !d.placement.coordinator.empty();
  if (!d.enabled()) {
    if (placed) return bad("placement", "places actors, but the file names no nodes");
    if (d.tls.enabled()) return bad("tls", "is set, but the file names no nodes");
    if (!d.secret_file.empty()) return bad("secret_file", "is set, but the file names no nodes");
    return ok_status();
  }
  std::string names;
  for (size_t i = 0; i < d.nodes.size(); ++i) {
    const auto& n = d.nodes[i];
    const std::string key = "nodes[" + std::to_string(i) + "]";
    if (!plain_name(n.name))
      return bad(key + ".name", "'" + n.name + "' is not a plain name (letters, digits, - and _)");
    if (n.host.empty()) return bad(key + ".host", "missing");
    // A host name (letters, digits, '-', '.', and '_' as container names have) or an IP address
    // (IPv6 with ':'), as a resolver takes it: anything else would fail later, as a connection
    // error far from its cause.
    if (n.host.size() > 253 ||
        n.host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                 "-.:_") != std::string::npos ||
        n.host.front() == '-' || n.host.front() == '.')
      return bad(key + ".host", "'" + n.host + "' is not a host name or an IP address");
    // The bulk channel listens on port + 1 (hosts/deploy.cpp).
    if (n.port < 1 || n.port > 65534)
      return bad(key + ".port", "must be in [1, 65534] (the node also listens on port + 1)");
    for (size_t j = 0; j < i; ++j) {
      if (d.nodes[j].name == n.name)
        return bad(key + ".name",
                   "'" + n.name + "' is used twice (also nodes[" + std::to_string(j) + "])");
      if (d.nodes[j].host == n.host && d.nodes[j].port == n.port)
        return bad(key + ".port", n.host + ":" + std::to_string(n.port) +
                                      " is also the address of nodes[" + std::to_string(j) + "] (" +
                                      d.nodes[j].name + ")");
      if (d.nodes[j].host == n.host &&
          (d.nodes[j].port + 1 == n.port || n.port + 1 == d.nodes[j].port))
        return bad(key + ".port", n.host + ":" + std::to_string(n.port) + " and nodes[" +
                                      std::to_string(j) + "] (" + d.nodes[j].name + ") at port " +
                                      std::to_string(d.nodes[j].port) +
                                      " overlap: a node listens on its port and port + 1");
    }
    names += (i ? ", " : "") + n.name;
  }
  auto known = [&](const std::string& key, const std::string& node) -> status {
    if (node.empty()) return ok_status();
    for (const auto& n : d.nodes) {
      if (n.name == node) return ok_status();
    }
    return bad(key, "unknown node '" + node + "' (the nodes are " + names + ")");
  };
  const auto& p = d.placement;
  if (!p.learners.empty() && p.learners.size() != static_cast<size_t>(c.learner_capacity())) {
    return bad("placement.learners",
               std::to_string(p.learners.size()) + " nodes for " +
                   std::to_string(c.learner_capacity()) +
                   " learner slots (learners, or max_learners when larger): one per slot");
  }
  if (!p.shards.empty() && p.shards.size() != static_cast<size_t>(c.shards)) {
    return bad("placement.shards", std::to_string(p.shards.size()) + " nodes for " +
                                       std::to_string(c.shards) + " shards: one per shard");
  }
  for (size_t i = 0; i < p.learners.size(); ++i) {
    if (auto st = known("placement.learners[" + std::to_string(i) + "]", p.learners[i]); !st.ok())
      return st;
  }
  for (size_t i = 0; i < p.shards.size(); ++i) {
    if (auto st = known("placement.shards[" + std::to_string(i) + "]", p.shards[i]); !st.ok())
      return st;
  }
  const size_t regionals = c.regional_regions().size();
  if (!p.regionals.empty() && p.regionals.size() != regionals) {
    return bad("placement.regionals", std::to_string(p.regionals.size()) + " nodes for " +
                                          std::to_string(regionals) +
                                          " regional syncers (regions with syncer: true): one "
                                          "per regional syncer");
  }
  for (size_t i = 0; i < p.regionals.size(); ++i) {
    if (auto st = known("placement.regionals[" + std::to_string(i) + "]", p.regionals[i]); !st.ok())
      return st;
  }
  // Named arrays, not braced lists in the for statement: g++ 14 takes the list's pairs for
  // temporaries that dangle (-Wdangling-reference).
  using named_node = std::pair<const char*, const std::string*>;
  const named_node services[] = {{"placement.scheduler", &p.scheduler},
                                 {"placement.metrics", &p.metrics},
                                 {"placement.chaos", &p.chaos},
                                 {"placement.coordinator", &p.coordinator}};
  for (const auto& [key, node] : services) {
    if (auto st = known(key, *node); !st.ok()) return st;
  }
  // The service actors share a node (the leader's, with the metrics actor): learners and
  // shards may start in any order across nodes, the services start first.
  const std::string leader = p.metrics.empty() ? d.nodes.front().name : p.metrics;
  for (const auto& [key, node] : services) {
    if (node == &p.metrics) continue;
    const std::string& n = node->empty() ? d.nodes.front().name : *node;
    if (n != leader) {
      return bad(key,
                 "'" + n +
                     "': the scheduler, metrics, chaos and coordinator run on one node (here '" +
                     leader + "', the metrics actor's)");
    }
  }
  if (d.tls.enabled()) {
    const named_node tls[] = {
        {"tls.ca", &d.tls.ca}, {"tls.certificate", &d.tls.certificate}, {"tls.key", &d.tls.key}};
    for (const auto& [key, value] : tls) {
      if (value->empty())
        return bad(key, "missing (mutual TLS needs all of tls.ca, tls.certificate and tls.key)");
    }
  }
  return ok_status();
}

}  // namespace

std::string deployment_config::node_of(const actor_indices& ids, uint32_t index) const {
  if (nodes.empty()) return "";
  auto or_first = [&](const std::string& n) { return n.empty() ? nodes.front().name : n; };
  if (index < ids.learners)
    return or_first(index < placement.learners.size() ? placement.learners[index] : "");
  if (index < ids.scheduler()) {
    const uint32_t s = index - ids.learners;
    return or_first(s < placement.shards.size() ? placement.shards[s] : "");
  }
  if (index == ids.scheduler()) return or_first(placement.scheduler);
  if (index == ids.metrics()) return or_first(placement.metrics);
  if (index == ids.chaos()) return or_first(placement.chaos);
  if (index == ids.coordinator()) return or_first(placement.coordinator);
  const uint32_t r = index - ids.regional(0);
  return or_first(r < placement.regionals.size() ? placement.regionals[r] : "");
}

namespace {

// A time in seconds: finite, within [0, time_max_s] (or (0, ...] when `positive`), and when
// positive at least a nanosecond, so that it does not round to zero on the way to integers.
status check_time(double t, const std::string& key, bool positive) {
  if (!std::isfinite(t) || t < 0 || (positive && t <= 0) || t > time_max_s) {
    return bad(key, std::string("must be in ") + (positive ? "(0, " : "[0, ") + "1e9] seconds");
  }
  if (t > 0 && t < 1e-9) return bad(key, "must be 0 or at least 1e-9 seconds (a nanosecond)");
  return ok_status();
}

// The data the learners read: a text file must exist and be a non-empty regular file; the
// tokens the data can produce must be below model.vocab (token ids index the embedding).
status check_data(const run_config& c) {
  if (c.data.text_file.empty()) {
    const int alphabet = c.data.markov.alphabet;
    const int top_byte = alphabet <= 95 ? 31 + alphabet : alphabet - 1;  // markov_chain::byte_of
    if (top_byte >= c.model.vocab) {
      return bad("model.vocab", std::to_string(c.model.vocab) +
                                    " is too small for the built-in data, whose bytes go up "
                                    "to " +
                                    std::to_string(top_byte) + " (need at least " +
                                    std::to_string(top_byte + 1) + ")");
    }
    return ok_status();
  }
  struct stat sb {};
  if (::stat(c.data.text_file.c_str(), &sb) != 0) {
    return bad("data.text_file", "'" + c.data.text_file + "': " + std::strerror(errno));
  }
  if (!S_ISREG(sb.st_mode))
    return bad("data.text_file", "'" + c.data.text_file + "' is not a regular file");
  if (sb.st_size == 0) return bad("data.text_file", "'" + c.data.text_file + "' is empty");
  return ok_status();
}

// The model's size, and fragments that each hold at least one value.
status check_model_and_fragments(const run_config& c) {
  // A model that is not valid has no size to check (check_model_and_data says what is wrong).
  if (!c.model.validate().ok()) return ok_status();
  const mlp_lm m(c.model);
  const uint64_t params = m.layout().param_count();
  if (params > model_params_max) {
    return bad("model", "has " + std::to_string(params) + " parameters, more than the " +
                            std::to_string(model_params_max) +
                            " a simulated run holds (every learner keeps several fp32 copies)");
  }
  if (static_cast<uint64_t>(c.fragments) > params) {
    return bad("fragments", std::to_string(c.fragments) + " fragments for a model of " +
                                std::to_string(params) + " parameters");
  }
  return ok_status();
}

// Every problem of a pass, in order: a user fixes them all in one go.
class problem_list {
 public:
  explicit problem_list(std::vector<status>& out) : out_(out) {}
  // Records `st` when it is a problem; true when it was.
  bool operator()(status st) {
    if (st.ok()) return false;
    out_.push_back(std::move(st));
    return true;
  }
  size_t count() const { return out_.size(); }

 private:
  std::vector<status>& out_;
};

// The parts of the model and the data, each on its own.
void check_model_and_data(const run_config& c, problem_list& p) {
  const bool model_ok = !p(c.model.validate());
  const bool data_ok = !p(c.data.validate());
  if (model_ok && data_ok) p(check_data(c));
}

void check_optimizers(const run_config& c, problem_list& p) {
  p(c.inner.validate());
  p(c.outer.validate());
  p(c.uplink.validate().with_context("uplink"));
}

// Adaptive inner steps: the range H may take holds the first H, and every H in it keeps tau
// below H and a sequential schedule's fragments within it.
// Regional syncers (regions[].syncer): each needs learners of its own; restarts name one.
// The baselines have none (they sync every learner at once).
status check_regional_syncers(const run_config& c) {
  const auto which = c.regional_regions();
  for (uint32_t r : which) {
    const std::string& name = c.regions[r].name;
    const bool used = std::any_of(c.speeds.begin(), c.speeds.end(),
                                  [&](const speed_config& s) { return s.region == name; });
    if (!used)
      return bad("regions[" + std::to_string(r) + "].syncer",
                 "region '" + name + "' has a regional syncer but no learner (speeds[].region)");
  }
  for (size_t i = 0; i < c.regional_restarts.size(); ++i) {
    const auto& e = c.regional_restarts[i];
    const std::string key = "regional_restarts[" + std::to_string(i) + "]";
    const bool named = std::any_of(which.begin(), which.end(),
                                   [&](uint32_t r) { return c.regions[r].name == e.region; });
    if (!named)
      return bad(key + ".region", "'" + e.region + "' is not a region with a regional syncer");
    if (auto st = check_time(e.at_s, key + ".at_s", false); !st.ok()) return st;
    if (auto st = check_time(e.down_s, key + ".down_s", false); !st.ok()) return st;
  }
  if (!c.regional_restarts.empty() && c.mode != run_mode::decoupled)
    return bad("regional_restarts", "regional syncers exist in Decoupled DiLoCo only");
  return ok_status();
}

status check_adaptive_period(const run_config& c) {
  const adaptive_period& a = c.period_auto;
  if (a.min_steps < 0 || a.min_steps > 1000000)
    return bad("period_auto.min_steps", "must be in [0, 1000000] (0: period_steps)");
  if (a.max_steps < 1 || a.max_steps > 1000000)
    return bad("period_auto.max_steps", "must be in [1, 1000000]");
  if (!(a.target_load > 0 && a.target_load <= 1))
    return bad("period_auto.target_load", "must be in (0, 1]");
  const int lo = c.period_min();
  if (lo <= c.overlap_steps)
    return bad("period_auto.min_steps", std::to_string(lo) + " is not above overlap_steps " +
                                            std::to_string(c.overlap_steps));
  if (a.max_steps < lo)
    return bad("period_auto.max_steps",
               std::to_string(a.max_steps) + " is below min_steps " + std::to_string(lo));
  if (c.period_steps < lo || c.period_steps > a.max_steps)
    return bad("period_steps", "the first H, " + std::to_string(c.period_steps) +
                                   ", is outside period_auto's [" + std::to_string(lo) + ", " +
                                   std::to_string(a.max_steps) + "]");
  if (c.schedule == schedule_pattern::sequential && c.fragments > lo)
    return bad("period_auto.min_steps", "a sequential schedule needs fragments <= every H");
  if (c.mode != run_mode::decoupled)
    return bad("period_steps",
               "auto needs Decoupled DiLoCo (the baselines sync every H steps "
               "of their own)");
  if (c.compute != compute_mode::real)
    return bad("period_steps",
               "auto needs compute: real (the cost model sends no payloads to "
               "measure the links by)");
  return {};
}

// The cluster's shape. A check whose bound is another key's value runs only when that key is
// in range, so that one mistake gives one message.
void check_basics(const run_config& c, problem_list& p) {
  const bool learners_ok = !(c.learners < 1 || c.learners > 4096);
  if (!learners_ok) p(bad("learners", "must be in [1, 4096]"));
  if (c.shards < 1 || c.shards > 1024) p(bad("shards", "must be in [1, 1024]"));
  const bool batch_ok = !(c.batch < 1 || c.batch > 65536);
  if (!batch_ok) p(bad("batch", "must be in [1, 65536]"));
  if (c.token_budget > (uint64_t{1} << 50)) {
    p(bad("token_budget", "must be at most 2^50 (1.1e15) tokens"));
  } else if (learners_ok && batch_ok &&
             c.token_budget < static_cast<uint64_t>(c.learners) * static_cast<uint64_t>(c.batch)) {
    p(bad("token_budget", "must allow at least one step per learner (learners x batch = " +
                              std::to_string(c.learners * c.batch) + ")"));
  }
  const bool fragments_ok = !(c.fragments < 1 || c.fragments > 4096);
  if (!fragments_ok) p(bad("fragments", "must be in [1, 4096]"));
  if (fragments_ok && !p(check_model_and_fragments(c)) && c.shards > c.fragments &&
      c.shards <= 1024) {
    p(bad("shards", std::to_string(c.shards) + " shards for " + std::to_string(c.fragments) +
                        " fragments: a shard would own nothing"));
  }
  const bool period_ok = !(c.period_steps < 1 || c.period_steps > 1000000);
  if (!period_ok) p(bad("period_steps", "must be in [1, 1000000]"));
  if (period_ok && (c.overlap_steps < 0 || c.overlap_steps >= c.period_steps)) {
    p(bad("overlap_steps", "must be in [0, period_steps)"));
  }
  if (period_ok && fragments_ok && c.schedule == schedule_pattern::sequential &&
      c.fragments > c.period_steps) {
    p(bad("schedule", "sequential needs fragments <= period_steps"));
  }
  if (c.period_auto.enabled) p(check_adaptive_period(c));
  if (!(c.alpha >= 0 && c.alpha <= 1)) p(bad("alpha", "must be in [0, 1]"));
  if (learners_ok && (c.quorum < 1 || c.quorum > c.learners)) {
    p(bad("quorum", "must be in [1, learners = " + std::to_string(c.learners) + "]"));
  }
  if (!(c.grace_gamma >= 0 && c.grace_gamma < 1)) p(bad("grace_gamma", "must be in [0, 1)"));
  p(check_time(c.grace_cap_s, "grace_cap_s", false));
  if (c.staleness_max < 1 || c.staleness_max > 1000000)
    p(bad("staleness_max", "must be in [1, 1000000]"));
  if (!(c.staleness_decay >= 0 && c.staleness_decay <= 8))
    p(bad("staleness_decay", "must be in [0, 8]"));
  if (c.downlink != codec_kind::fp32 && c.downlink != codec_kind::bf16 &&
      c.downlink != codec_kind::int8 && c.downlink != codec_kind::int4 &&
      c.downlink != codec_kind::fp4) {
    p(bad("downlink", "must be fp32, bf16, int8, int4 or fp4"));
  }
}

// Learners' speeds and the links between them.
status check_speeds_and_links(const run_config& c) {
  auto check_speed = [](const speed_config& s, const std::string& key) -> status {
    // At most a day per step: a run's length is steps x step time, and both must fit.
    if (!(s.step_time_s >= 1e-6 && s.step_time_s <= 86400))
      return bad(key + ".step_time_s", "must be in [1e-6, 86400] seconds");
    if (!(s.slowdown >= 0.01 && s.slowdown <= 100))
      return bad(key + ".slowdown", "must be in [0.01, 100]");
    if (!(s.jitter >= 0 && s.jitter <= 2)) return bad(key + ".jitter", "must be in [0, 2]");
    if (!std::isfinite(s.link_latency_s) || s.link_latency_s > 86400)
      return bad(key + ".link_latency_s", "must be at most 86400 seconds (< 0: link.latency_s)");
    return {};
  };
  if (auto st = check_speed(c.speed, "speed"); !st.ok()) return st;
  if (!c.speeds.empty() && c.speeds.size() != static_cast<size_t>(c.learners)) {
    return bad("speeds", std::to_string(c.speeds.size()) + " entries for " +
                             std::to_string(c.learners) +
                             " learners (give one per learner, or none)");
  }
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const auto& r = c.regions[i];
    const std::string key = "regions[" + std::to_string(i) + "]";
    if (r.name.empty()) return bad(key + ".name", "missing");
    for (size_t j = 0; j < i; ++j) {
      if (c.regions[j].name == r.name)
        return bad(key + ".name", "'" + r.name + "' is also regions[" + std::to_string(j) + "]");
    }
    if (!(r.latency_s >= 0 && r.latency_s <= 86400))
      return bad(key + ".latency_s", "must be in [0, 86400] seconds");
    if (!(r.bandwidth_gbps >= 1e-6 && r.bandwidth_gbps <= 1e6))
      return bad(key + ".bandwidth_gbps", "must be in [1e-6, 1e6]");
    if (!(r.local_latency_s >= 0 && r.local_latency_s <= 86400))
      return bad(key + ".local_latency_s", "must be in [0, 86400] seconds");
    if (!(r.local_bandwidth_gbps >= 1e-6 && r.local_bandwidth_gbps <= 1e6))
      return bad(key + ".local_bandwidth_gbps", "must be in [1e-6, 1e6]");
  }
  bool batch_differs = false;
  for (size_t i = 0; i < c.speeds.size(); ++i) {
    const auto& s = c.speeds[i];
    const std::string key = "speeds[" + std::to_string(i) + "]";
    if (auto st = check_speed(s, key); !st.ok()) return st;
    if (!s.region.empty() &&
        std::none_of(c.regions.begin(), c.regions.end(),
                     [&](const region_config& r) { return r.name == s.region; })) {
      std::string names;
      for (const auto& r : c.regions) names += (names.empty() ? "" : ", ") + r.name;
      return bad(key + ".region", "no region '" + s.region + "' (regions: " +
                                      (names.empty() ? "none defined" : names) + ")");
    }
    if (s.chips > (uint64_t{1} << 32)) return bad(key + ".chips", "must be at most 4294967296");
    if (s.batch < 0 || s.batch > 65536) return bad(key + ".batch", "must be in [1, 65536]");
    if (s.ranks < 1 || s.ranks > 65536) return bad(key + ".ranks", "must be in [1, 65536]");
    if (c.batch_of(static_cast<uint32_t>(i)) > 1 << 20)
      return bad(key + ".ranks", "batch x ranks must be at most 1048576 tokens per step");
    batch_differs = batch_differs || c.batch_of(static_cast<uint32_t>(i)) != c.batch;
  }
  if (batch_differs && c.mode == run_mode::data_parallel) {
    return bad("speeds",
               "learners with batches of their own: data parallel averages every "
               "replica's gradient equally and needs one batch for all");
  }
  if (!(c.link.latency_s >= 0 && c.link.latency_s <= 86400))
    return bad("link.latency_s", "must be in [0, 86400] seconds");
  if (!(c.link.drop_rate >= 0 && c.link.drop_rate < 1))
    return bad("link.drop_rate", "must be in [0, 1)");
  if (!(c.link.dup_rate >= 0 && c.link.dup_rate < 1))
    return bad("link.dup_rate", "must be in [0, 1)");
  for (size_t i = 0; i < c.link_changes.size(); ++i) {
    const auto& ch = c.link_changes[i];
    const std::string key = "link_changes[" + std::to_string(i) + "]";
    if (!ch.region.empty() &&
        std::none_of(c.regions.begin(), c.regions.end(),
                     [&](const region_config& r) { return r.name == ch.region; }))
      return bad(key + ".region", "no region '" + ch.region + "'");
    if (!(ch.at_s >= 0 && ch.at_s <= 1e9)) return bad(key + ".at_s", "must be in [0, 1e9] s");
    if (!(ch.for_s > 0 && ch.for_s <= 1e9)) return bad(key + ".for_s", "must be in (0, 1e9] s");
    if (!(ch.bandwidth_factor >= 1e-6 && ch.bandwidth_factor <= 1e6))
      return bad(key + ".bandwidth_factor", "must be in [1e-6, 1e6]");
    if (!(ch.latency_factor >= 0 && ch.latency_factor <= 1e6))
      return bad(key + ".latency_factor", "must be in [0, 1e6]");
  }
  if ((c.link.drop_rate > 0 || !c.partitions.empty()) && c.mode != run_mode::decoupled) {
    return bad(c.link.drop_rate > 0 ? "link.drop_rate" : "partitions",
               "lossy links need Decoupled DiLoCo (the baselines wait for every message)");
  }
  // Synchronous DiLoCo's shards and learners drop repeats as Decoupled DiLoCo's do; the
  // data-parallel all-reduce counts each fragment's gradient once per step, as over TCP.
  if (c.link.dup_rate > 0 && c.mode == run_mode::data_parallel) {
    return bad("link.dup_rate",
               "repeated messages need DiLoCo (the data-parallel all-reduce runs on reliable "
               "links)");
  }
  return {};
}

// Scripted events: membership changes, shard restarts, partitions, kills.
status check_events(const run_config& c) {
  if (c.max_learners != 0 && (c.max_learners < c.learners || c.max_learners > 4096)) {
    return bad("max_learners", "must be 0 or in [learners, 4096]");
  }
  for (size_t i = 0; i < c.membership.size(); ++i) {
    const auto& m = c.membership[i];
    const std::string key = "membership[" + std::to_string(i) + "]";
    if (m.learner >= static_cast<uint32_t>(c.learner_capacity())) {
      return bad(key + ".learner",
                 "no learner id " + std::to_string(m.learner) + " (set max_learners)");
    }
    if (m.join && m.learner < static_cast<uint32_t>(c.learners)) {
      return bad(key + ".learner", "learner " + std::to_string(m.learner) +
                                       " is there from the start; joins use ids >= learners");
    }
    if (auto st = check_time(m.at_s, key + ".at_s", false); !st.ok()) return st;
  }
  if (!c.membership.empty() && c.mode != run_mode::decoupled) {
    return bad("membership",
               "learners join and leave in Decoupled DiLoCo only (the baselines need them all)");
  }
  for (size_t i = 0; i < c.shard_restarts.size(); ++i) {
    const auto& r = c.shard_restarts[i];
    const std::string key = "shard_restarts[" + std::to_string(i) + "]";
    if (r.shard >= static_cast<uint32_t>(c.shards))
      return bad(key + ".shard", "no shard " + std::to_string(r.shard));
    if (auto st = check_time(r.at_s, key + ".at_s", false); !st.ok()) return st;
    if (auto st = check_time(r.down_s, key + ".down_s", false); !st.ok()) return st;
  }
  if (!c.shard_restarts.empty() && c.mode != run_mode::decoupled) {
    return bad("shard_restarts", "shard restarts are simulated for Decoupled DiLoCo");
  }
  if (auto st = check_regional_syncers(c); !st.ok()) return st;
  for (size_t i = 0; i < c.partitions.size(); ++i) {
    const auto& pe = c.partitions[i];
    const std::string key = "partitions[" + std::to_string(i) + "]";
    if (pe.learners.empty()) return bad(key + ".learners", "names no learner");
    for (uint32_t l : pe.learners) {
      if (l >= static_cast<uint32_t>(c.learners))
        return bad(key + ".learners", "no learner " + std::to_string(l));
    }
    if (auto st = check_time(pe.at_s, key + ".at_s", false); !st.ok()) return st;
    if (auto st = check_time(pe.heal_s, key + ".heal_s", true); !st.ok()) return st;
  }
  if (!(c.link.bandwidth_gbps >= 1e-6 && c.link.bandwidth_gbps <= 1e6))
    return bad("link.bandwidth_gbps", "must be in [1e-6, 1e6]");
  if (!(c.link.model_params >= 0 && c.link.model_params <= 1e15))
    return bad("link.model_params", "must be in [0, 1e15] parameters (0: the model's own)");
  for (size_t i = 0; i < c.failures.size(); ++i) {
    const auto& f = c.failures[i];
    const std::string key = "failures[" + std::to_string(i) + "]";
    if (f.learner >= static_cast<uint32_t>(c.learners))
      return bad(key + ".learner", "no such learner");
    if (auto st = check_time(f.at_s, key + ".at_s", false); !st.ok()) return st;
    if (auto st = check_time(f.down_s, key + ".down_s", false); !st.ok()) return st;
  }
  return {};
}

// Progress reports, alerts and the unanswered-delta limit.
status check_reporting(const run_config& c) {
  if (c.progress_every_steps < 1 || c.progress_every_steps > 1000000000)
    return bad("progress_every_steps", "must be in [1, 1e9]");
  if (c.alerts.dropped_learners < -1) return bad("alerts.dropped_learners", "must be >= -1");
  if (!(c.alerts.token_share > 0) || c.alerts.token_share > 1)
    return bad("alerts.token_share", "must be in (0, 1]");
  // Upper bounds far beyond any use: a value like 1e300 is a typo, not a threshold.
  if (!(c.alerts.staleness_versions >= 0 && c.alerts.staleness_versions <= 1e9))
    return bad("alerts.staleness_versions", "must be in [0, 1e9]");
  if (!(c.alerts.loss_gap > 0 && c.alerts.loss_gap <= 1e6))
    return bad("alerts.loss_gap", "must be in (0, 1e6]");
  if (!(c.alerts.loss_rise > 1 && c.alerts.loss_rise <= 1e6))
    return bad("alerts.loss_rise", "must be in (1, 1e6]");
  if (!(c.alerts.compression_tolerance > 0 && c.alerts.compression_tolerance <= 1e6))
    return bad("alerts.compression_tolerance", "must be in (0, 1e6]");
  if (c.max_unanswered_deltas < 0 || c.max_unanswered_deltas > 1000000)
    return bad("max_unanswered_deltas", "must be in [0, 1000000] (0: no limit)");
  if (!(c.step_timeout_s >= 0 && c.step_timeout_s <= 1e7))
    return bad("step_timeout_s", "must be in [0, 1e7] seconds (0: never)");
  return {};
}

// The failure model (random interruptions and elastic learners).
status check_interruptions(const run_config& c) {
  if (!(c.interruptions.mtbi_hours >= 0 && c.interruptions.mtbi_hours <= 1e9)) {
    return bad("interruptions.mtbi_hours", "must be in [0, 1e9] (0: no random failures)");
  }
  if (auto st = check_time(c.interruptions.recovery_s, "interruptions.recovery_s", false); !st.ok())
    return st;
  if (auto st = check_time(c.interruptions.rescale_s, "interruptions.rescale_s", false); !st.ok())
    return st;
  if (c.interruptions.unit_chips < 1) return bad("interruptions.unit_chips", "must be >= 1");
  if (c.chips_per_learner < 1 || c.chips_per_learner > (uint64_t{1} << 32))
    return bad("chips_per_learner", "must be in [1, 4294967296]");
  if (c.interruptions.enabled()) {
    // A learner of c chips fails every mtbi / c on average; more often than once per c.inner step
    // is no training at all (and events without end for the simulator).
    const double learner_mtbf_s =
        c.interruptions.mtbi_hours * 3600 / static_cast<double>(c.chips_per_learner);
    if (learner_mtbf_s < c.speed.step_time_s) {
      return bad("interruptions.mtbi_hours",
                 "a learner of " + std::to_string(c.chips_per_learner) +
                     " chips would fail every " + std::to_string(learner_mtbf_s) +
                     " s on average, more often than one inner step (speed.step_time_s = " +
                     std::to_string(c.speed.step_time_s) + " s)");
    }
  }
  if (c.interruptions.elastic && c.interruptions.unit_chips >= c.chips_per_learner) {
    return bad("interruptions.unit_chips",
               "an elastic learner needs more chips than one unit (chips_per_learner = " +
                   std::to_string(c.chips_per_learner) + ")");
  }
  return {};
}

// The compute mode, the run's length and the snapshots.
status check_compute_and_snapshots(const run_config& c) {
  if (auto st = check_time(c.duration_s, "duration_s", false); !st.ok()) return st;
  if (c.compute == compute_mode::cost && c.duration_s <= 0) {
    return bad("compute", "cost needs duration_s > 0 (a cost-model run processes no tokens)");
  }
  if (c.compute == compute_mode::cost && c.mode != run_mode::decoupled) {
    return bad("compute",
               "the cost model runs Decoupled DiLoCo learners (data parallel is one learner "
               "owning every chip: learners = 1)");
  }
  if (c.mode == run_mode::data_parallel && c.interruptions.enabled()) {
    return bad("interruptions",
               "the data-parallel baseline has no elasticity in real-compute runs");
  }
  if (auto st = check_time(c.snapshot.every_s, "snapshot.every_s", false); !st.ok()) return st;
  // At most one c.snapshot per c.inner step: each writes a file per actor.
  if (c.snapshot.every_s > 0 && c.snapshot.every_s < c.speed.step_time_s) {
    return bad("snapshot.every_s",
               "must be 0 (none) or at least one inner step (speed.step_time_s = " +
                   std::to_string(c.speed.step_time_s) + " s)");
  }
  if (c.snapshot.at_s.size() > 100000) return bad("snapshot.at_s", "more than 100000 times");
  for (size_t i = 0; i < c.snapshot.at_s.size(); ++i) {
    if (auto st = check_time(c.snapshot.at_s[i], "snapshot.at_s[" + std::to_string(i) + "]", false);
        !st.ok())
      return st;
  }
  if (c.snapshot.keep < 1 || c.snapshot.keep > 100000)
    return bad("snapshot.keep", "must be in [1, 100000]");
  return {};
}

// Deployment, the debugging switches and what the baselines cannot do.
status check_debug(const run_config& c) {
  if (auto st = validate_deployment(c); !st.ok()) return st;
  if (c.debug.nondeterministic_learner < -1 ||
      c.debug.nondeterministic_learner >= static_cast<int64_t>(c.learner_capacity()))
    return bad("debug.nondeterministic_learner", "must be -1 (none) or a learner index");
  if (c.debug.nondeterministic_step < 0) return bad("debug.nondeterministic_step", "must be >= 0");
  if (c.debug.nonfinite_learner < -1 ||
      c.debug.nonfinite_learner >= static_cast<int64_t>(c.learner_capacity()))
    return bad("debug.nonfinite_learner", "must be -1 (none) or a learner index");
  if (c.debug.nonfinite_step < 0) return bad("debug.nonfinite_step", "must be >= 0");
  if (!(c.debug.slow_shard_s >= 0) || c.debug.slow_shard_s > 10)
    return bad("debug.slow_shard_s", "must be in [0, 10] seconds");
  if (c.mode == run_mode::data_parallel && !c.failures.empty()) {
    return bad("failures",
               "the data-parallel baseline has no elasticity in real-compute runs (its "
               "replicas hold the only copy of the model); study DP under failures with "
               "the goodput simulation");
  }
  return {};
}

}  // namespace

std::vector<status> run_config::problems() const {
  std::vector<status> out;
  problem_list p(out);
  // Each reports every problem it finds, each of its own.
  check_model_and_data(*this, p);
  check_optimizers(*this, p);
  const size_t before_basics = p.count();
  check_basics(*this, p);
  // The counts and sizes the later checks loop over: past a problem there they would only
  // repeat it, or could not run.
  if (p.count() != before_basics || p(check_speeds_and_links(*this))) return out;
  for (auto check : {check_events, check_reporting, check_interruptions,
                     check_compute_and_snapshots, check_debug}) {
    p(check(*this));
  }
  return out;
}

status run_config::validate() const {
  auto all = problems();
  return all.empty() ? status{} : all.front();
}

namespace {
// The baselines sync every learner with the shards directly, over its region's wide-area link.
void without_regional_syncers(run_config& s) {
  for (auto& r : s.regions) r.syncer = false;
  s.regional_restarts.clear();
}
}  // namespace

run_config as_sync_diloco(const run_config& c) {
  run_config s = c;
  s.mode = run_mode::sync_diloco;
  s.quorum = c.learners;
  s.grace = false;
  s.fragments = 1;
  s.shards = 1;
  s.overlap_steps = 0;
  s.clock = schedule_clock::local;
  s.period_auto = adaptive_period{};  // the baselines keep the first H
  without_regional_syncers(s);
  return s;
}

run_config as_vanilla_diloco(const run_config& c) {
  run_config s = as_sync_diloco(c);
  s.alpha = 0.0;  // the replicas take the global model as it is
  s.merge = merge_rule::plain_average;
  s.final_merge = final_merge_rule::outer;  // the last round is an outer step like the others
  s.uplink = codec_config::make(codec_kind::fp32);
  s.downlink = codec_kind::fp32;
  return s;
}

run_config as_data_parallel(const run_config& c) {
  run_config s = c;
  s.mode = run_mode::data_parallel;
  s.period_auto = adaptive_period{};
  without_regional_syncers(s);
  s.quorum = c.learners;
  s.grace = false;
  s.overlap_steps = 0;
  s.uplink = codec_config::make(codec_kind::fp32);
  s.downlink = codec_kind::fp32;
  return s;
}

run_config builtin_run_config() {
  run_config c;
  // Tuned for the built-in 205k-parameter MLP; the generic 4e-4 is a transformer default
  // (docs/config.md has the measurement).
  c.inner.lr = 2e-3;
  // No weight decay: at 0 both data parallel and Decoupled DiLoCo end lower than at the
  // generic 0.1, Decoupled DiLoCo more so (docs/benchmarks.md, "The default run").
  c.inner.weight_decay = 0.0;
  // 65,536 held-out tokens: at 16,384 the ratio of two systems' distances to the floor moved
  // by up to 8% from one seed to the next with the set alone (same docs section).
  c.data.eval_tokens = 1 << 16;
  // Streaming DiLoCo's choice when tau > 0: keep half of the local progress made while the
  // fragment was in flight (measured: 1.0% from data parallel at alpha 0.5, 2.7% at 0).
  c.alpha = 0.5;
  c.uplink = codec_config::make(codec_kind::int4);
  // Outer updates go back int4 with error feedback at the shard: 4.3x fewer bytes/token than
  // fp32 at the same loss (docs/benchmarks.md).
  c.downlink = codec_kind::int4;
  return c;
}

actor_indices actor_ids_of(const run_config& config) {
  actor_indices ids;
  ids.learners = static_cast<uint32_t>(config.learner_capacity());
  ids.shards = static_cast<uint32_t>(config.shards);
  ids.regionals = config.mode == run_mode::decoupled
                      ? static_cast<uint32_t>(config.regional_regions().size())
                      : 0;
  ids.paced_regionals = ids.regionals > 0 && config.period_auto.enabled;
  return ids;
}

}  // namespace diloco
