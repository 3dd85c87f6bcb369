#include "observe/report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "base/check.hpp"
#include "observe/report_assets.hpp"
#include "tensor/optim.hpp"

namespace diloco {

namespace {

using json = nlohmann::json;

constexpr int curve_bins = 150;   // points per binned curve
constexpr int delay_bins = 30;    // bars of an arrival-delay histogram
constexpr int rate_windows = 60;  // windows of a rate (tokens/s, bytes/s), at most: wide enough to
                                  // average over outer rounds and report intervals

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

double num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// 1280000 -> "1.28M", 52300 -> "52.3k": three significant digits and an SI suffix.
std::string si(double v, const char* unit = "") {
  const char* suffix[] = {"", "k", "M", "G", "T", "P"};
  int k = 0;
  double a = std::fabs(v);
  while (a >= 999.5 && k < 5) a /= 1000, v /= 1000, ++k;
  char buf[48];
  if (a == 0 || a >= 100 || (k == 0 && a == std::floor(a)))
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 10)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else
    std::snprintf(buf, sizeof buf, "%.2f", v);
  return std::string(buf) + (*unit || k ? " " : "") + suffix[k] + unit;
}

// Seconds as people read them: "950 s", "12,400 s", "5.2 h", "12.5 d".
std::string duration(double s) {
  char buf[48];
  const double a = std::fabs(s);
  if (a >= 2 * 86400) {
    std::snprintf(buf, sizeof buf, "%.1f d", s / 86400);
  } else if (a >= 2 * 3600) {
    std::snprintf(buf, sizeof buf, "%.1f h", s / 3600);
  } else if (a >= 1000) {
    const long long n = std::llround(s);
    std::snprintf(buf, sizeof buf, "%lld,%03lld s", n / 1000, std::llabs(n % 1000));
  } else {
    std::snprintf(buf, sizeof buf, a >= 10 ? "%.0f s" : "%.2f s", s);
  }
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

struct system_data {
  std::string run, name, label;
  std::string metrics;  // its metrics file's name in the run directory
  json summary, start;
  std::vector<json> progress, merges, samples, alerts, evals;
};

// A string field of a summary entry, or `fallback` when absent; an error naming the field when
// it is there with another type.
result<std::string> text_field(const json& entry, const char* key, const std::string& fallback,
                               const std::string& where) {
  if (!entry.contains(key)) return fallback;
  if (!entry[key].is_string())
    return status(errc::corrupt_data, where + ": \"" + key + "\" is not a string");
  return entry[key].get<std::string>();
}

result<system_data> load_system(const std::string& dir, const json& entry,
                                const std::string& where) {
  system_data s;
  s.summary = entry;
  auto name = text_field(entry, "system", "run", where);
  if (!name) return name.error();
  s.name = *name;
  auto metrics = text_field(entry, "metrics", "metrics.jsonl", where);
  if (!metrics) return metrics.error();
  // A file of the run directory itself: a plain name, never a path out of it.
  if (metrics->empty() || *metrics == "." || *metrics == ".." ||
      metrics->find('/') != std::string::npos || metrics->find('\0') != std::string::npos) {
    return status(errc::corrupt_data, where + ": \"metrics\": '" + *metrics +
                                          "' is not a file name in the run directory");
  }
  s.metrics = *metrics;
  const std::string file = dir + "/" + *metrics;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    return status(errc::not_found, file + ": cannot be read (not a file)");
  std::ifstream in(file);
  if (!in) return status(errc::not_found, file + ": cannot be read");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      return status(errc::corrupt_data,
                    file + ":" + std::to_string(n) + ": not a JSON object with a \"type\"");
    }
    const std::string type = j["type"].get<std::string>();
    if (type == "start")
      s.start = std::move(j);
    else if (type == "progress")
      s.progress.push_back(std::move(j));
    else if (type == "merge") {
      // Its learners are read one by one (merge_curves, delay_histograms): a list of objects.
      const auto c = j.find("contributors");
      if (c == j.end() || !c->is_array() ||
          !std::all_of(c->begin(), c->end(), [](const json& x) { return x.is_object(); }))
        return status(errc::corrupt_data,
                      file + ":" + std::to_string(n) + ": a merge without a list of contributors");
      s.merges.push_back(std::move(j));
    } else if (type == "sample")
      s.samples.push_back(std::move(j));
    else if (type == "alert")
      s.alerts.push_back(std::move(j));
    else if (type == "eval")
      s.evals.push_back(std::move(j));
  }
  if (!s.start.is_object()) {
    return status(errc::corrupt_data,
                  file + ": no \"start\" record (an empty file, or not a run's metrics)");
  }
  return s;
}

// Averages of (x, values...) rows in `bins` equal bins of x over [0, x_max]; empty bins are
// left out. Each output row: the mean x of its bin, then the mean of each value.
std::vector<std::vector<double>> bin_rows(const std::vector<std::vector<double>>& rows,
                                          double x_max, int bins) {
  std::vector<std::vector<double>> out;
  if (rows.empty() || !(x_max > 0)) return out;
  const size_t width = rows.front().size();
  std::vector<std::vector<double>> sum(static_cast<size_t>(bins), std::vector<double>(width, 0));
  std::vector<int> n(static_cast<size_t>(bins), 0);
  for (const auto& r : rows) {
    DILOCO_CHECK(r.size() == width, "report: rows of one width");
    const int b = std::clamp(static_cast<int>(r[0] / x_max * bins), 0, bins - 1);
    for (size_t k = 0; k < width; ++k) sum[static_cast<size_t>(b)][k] += r[k];
    n[static_cast<size_t>(b)] += 1;
  }
  for (size_t b = 0; b < sum.size(); ++b) {
    if (n[b] == 0) continue;
    for (auto& v : sum[b]) v /= n[b];
    out.push_back(std::move(sum[b]));
  }
  return out;
}

// The rate of a cumulative count (t ascending) in `windows` equal windows of [0, t_end]:
// rows (window middle, increase over the window / its width). The count at a time is that of
// the last point before it: what a report brings counts in the window it arrived in, so a
// learner that is down has no rate, rather than one spread over its outage.
std::vector<std::vector<double>> rates(const std::vector<double>& t,
                                       const std::vector<double>& total, double t_end,
                                       int windows) {
  DILOCO_CHECK(t.size() == total.size(), "report: a count per time");
  std::vector<std::vector<double>> out;
  if (t.empty() || !(t_end > 0)) return out;
  auto at = [&](double x) {
    const auto it = std::upper_bound(t.begin(), t.end(), x);
    return it == t.begin() ? 0.0 : total[static_cast<size_t>(it - t.begin()) - 1];
  };
  const double last = std::min(t_end, t.back()), w = t_end / windows;
  for (int i = 0; i < windows && (i + 1) * w <= last + 1e-9 * t_end; ++i)
    out.push_back({(i + 0.5) * w, (at((i + 1) * w) - at(i * w)) / w});
  return out;
}

// Windows for a rate over the run: rate_windows, or fewer so that each spans at least two of
// the learners' usual intervals between progress reports (what a report brings lands in one
// window: narrower windows would alternate between nothing and a burst).
int rate_windows_of(const system_data& s, double t_end) {
  std::map<int, std::pair<double, double>> span;  // learner -> first, last report
  std::map<int, int> reports;
  for (const auto& p : s.progress) {
    const int id = p.value("learner", 0);
    const double t = num(p, "t");
    auto [it, fresh] = span.emplace(id, std::make_pair(t, t));
    if (!fresh) it->second.second = t;
    reports[id] += 1;
  }
  double every = 0;
  int n = 0;
  for (const auto& [id, fl] : span) {
    if (reports[id] < 2) continue;
    every += (fl.second - fl.first) / (reports[id] - 1);
    ++n;
  }
  if (n == 0 || !(every > 0)) return rate_windows;
  every /= n;
  return std::clamp(static_cast<int>(t_end / (2 * every)), 1, rate_windows);
}

// Columns of rows: {"k0": [...], "k1": [...]} in the order of `keys`.
json columns(const std::vector<std::vector<double>>& rows, const std::vector<std::string>& keys) {
  json o = json::object();
  for (size_t k = 0; k < keys.size(); ++k) {
    json col = json::array();
    for (const auto& r : rows) col.push_back(r[k]);
    o[keys[k]] = std::move(col);
  }
  return o;
}

double end_time(const system_data& s) {
  double t = num(s.summary, "run_s");
  for (const auto& p : s.progress) t = std::max(t, num(p, "t"));
  for (const auto& m : s.merges) t = std::max(t, num(m, "t"));
  for (const auto& p : s.samples) t = std::max(t, num(p, "t"));
  return t > 0 ? t : 1;
}

// Train loss of all learners against the run's tokens (and the time of those tokens).
json loss_curve(const system_data& s) {
  std::vector<std::vector<double>> rows;
  double tokens = 0;
  for (const auto& p : s.progress) {
    tokens += num(p, "tokens");
    if (num(p, "steps") > 0 && std::isfinite(num(p, "loss")))
      rows.push_back({tokens, num(p, "t"), num(p, "loss")});
  }
  return columns(bin_rows(rows, tokens, curve_bins), {"tokens", "t", "loss"});
}

// Binned rows of one learner (t first) with a row of NaN (null in the JSON: a gap in the
// chart) in each stretch where it was down: a gap between its reports longer than four of its
// usual intervals (as the timeline reads them) that lies between two bins.
std::vector<std::vector<double>> with_gaps(const std::vector<std::vector<double>>& raw,
                                           std::vector<std::vector<double>> binned) {
  if (raw.size() < 3 || binned.size() < 2) return binned;
  const double typical = (raw.back()[0] - raw.front()[0]) / static_cast<double>(raw.size() - 1);
  std::vector<std::pair<double, double>> down;
  for (size_t k = 1; k < raw.size(); ++k)
    if (raw[k][0] - raw[k - 1][0] > 4 * typical) down.emplace_back(raw[k - 1][0], raw[k][0]);
  std::vector<std::vector<double>> out;
  size_t d = 0;
  for (auto& row : binned) {
    while (d < down.size() && down[d].second <= row[0]) {
      if (!out.empty() && out.back()[0] <= down[d].first) {
        std::vector<double> gap(row.size(), std::nan(""));
        gap[0] = (down[d].first + down[d].second) / 2;
        out.push_back(std::move(gap));
      }
      ++d;
    }
    out.push_back(std::move(row));
  }
  return out;
}

// Per learner: its train loss, its tokens and bytes so far, its inner steps, over time.
json learner_curves(const system_data& s, double t_end) {
  std::map<int, std::vector<std::vector<double>>> rows;
  std::map<int, std::vector<double>> total;                 // tokens, sent, received, steps
  std::map<int, std::vector<std::vector<double>>> periods;  // adaptive inner steps: t, H, tau
  for (const auto& p : s.progress) {
    const int id = p.value("learner", 0);
    if (const double h = num(p, "period_steps"); h > 0) {
      auto& ph = periods[id];
      const double tau = num(p, "overlap_steps");
      // The changes only (and the latest report, so the line reaches it).
      auto same = [&](const std::vector<double>& r) { return r[1] == h && r[2] == tau; };
      if (ph.size() >= 2 && same(ph.back()) && same(ph[ph.size() - 2])) ph.pop_back();
      ph.push_back({num(p, "t"), h, tau});
    }
    auto& tot = total[id];
    tot.resize(4, 0);
    tot[0] += num(p, "tokens"), tot[1] += num(p, "bytes_sent");
    tot[2] += num(p, "bytes_received"), tot[3] += num(p, "steps");
    if (num(p, "steps") > 0)
      rows[id].push_back({num(p, "t"), num(p, "loss"), tot[0], tot[1], tot[2], tot[3]});
  }
  json out = json::array();
  for (const auto& [id, r] : rows) {
    json c = columns(with_gaps(r, bin_rows(r, t_end, curve_bins)),
                     {"t", "loss", "tokens", "sent", "received", "steps"});
    c["id"] = id;
    // Bandwidth: bytes moved (sent + received) per second, over windows of the run.
    std::vector<double> t, moved;
    for (const auto& row : r) t.push_back(row[0]), moved.push_back(row[3] + row[4]);
    c["bandwidth"] =
        columns(rates(t, moved, t_end, rate_windows_of(s, t_end)), {"t", "bytes_per_s"});
    if (auto ph = periods.find(id); ph != periods.end())
      c["period"] = columns(ph->second, {"t", "H", "tau"});
    out.push_back(std::move(c));
  }
  return out;
}

// Goodput, uptime, tokens and throughput over time, from the monitor's samples.
json sample_curves(const system_data& s, double t_end) {
  std::vector<std::vector<double>> rows;
  std::vector<double> t, tokens;
  for (const auto& p : s.samples) {
    // The final sample repeats the last time with the run's own accounting: it replaces it.
    if (!rows.empty() && num(p, "t") <= rows.back()[0])
      rows.pop_back(), t.pop_back(), tokens.pop_back();
    rows.push_back({num(p, "t"), num(p, "tokens"), std::clamp(num(p, "goodput"), 0.0, 1.0),
                    std::clamp(num(p, "uptime"), 0.0, 1.0)});
    t.push_back(num(p, "t")), tokens.push_back(num(p, "tokens"));
  }
  json out = columns(rows, {"t", "tokens", "goodput", "uptime"});
  out["throughput"] =
      columns(rates(t, tokens, t_end, rate_windows_of(s, t_end)), {"t", "tokens_per_s"});
  return out;
}

// Per bin of time over the merges: how stale the merged deltas were (mean and most versions
// behind), how they compressed (fp32 over encoded bytes), how many learners each merge had and
// how many its shard counted live, each learner's share of the merged tokens, and the learners'
// agreement per tensor (mean cosine; null in a bin without it).
json merge_curves(const system_data& s, double t_end) {
  std::set<int> ids;
  for (const auto& m : s.merges)
    for (const auto& c : m["contributors"]) ids.insert(c.value("learner", 0));
  const int bins = curve_bins;
  struct bin {
    double t = 0, gap_sum = 0, gap_max = 0, deltas = 0, merges = 0, fp32 = 0, encoded = 0,
           tokens = 0, live = 0;
    std::map<int, double> tokens_of;
    std::map<std::string, std::pair<double, int>> cosine;  // tensor -> sum, count
  };
  std::set<std::string> tensors;
  std::vector<bin> b(static_cast<size_t>(bins));
  for (const auto& m : s.merges) {
    const double t = num(m, "t");
    auto& x = b[static_cast<size_t>(std::clamp(static_cast<int>(t / t_end * bins), 0, bins - 1))];
    x.t += t, x.merges += 1, x.fp32 += num(m, "fp32_bytes"), x.encoded += num(m, "delta_bytes");
    x.live += num(m, "live");
    // The learners' agreement per tensor (mean cosine between their outer gradients).
    if (const auto c = m.find("cosine"); c != m.end() && c->is_object()) {
      for (const auto& [tensor, v] : c->items()) {
        if (!v.is_number() || !std::isfinite(v.get<double>())) continue;
        auto& [sum, n] = x.cosine[tensor];
        sum += v.get<double>(), n += 1;
        tensors.insert(tensor);
      }
    }
    for (const auto& c : m["contributors"]) {
      const double gap = num(c, "gap");
      x.gap_sum += gap, x.gap_max = std::max(x.gap_max, gap), x.deltas += 1;
      x.tokens += num(c, "tokens");
      x.tokens_of[c.value("learner", 0)] += num(c, "tokens");
    }
  }
  json out = {{"t", json::array()},
              {"gap_mean", json::array()},
              {"gap_max", json::array()},
              {"compression", json::array()},
              {"contributors", json::array()},
              {"merges_per_s", json::array()},
              {"live", json::array()},
              {"share", json::object()},
              {"cosine", json::object()}};
  for (int id : ids) out["share"][std::to_string(id)] = json::array();
  for (const auto& t : tensors) out["cosine"][t] = json::array();
  const double width = t_end / bins;
  for (const auto& x : b) {
    if (x.merges == 0) continue;
    out["t"].push_back(x.t / x.merges);
    out["gap_mean"].push_back(x.deltas > 0 ? x.gap_sum / x.deltas : 0.0);
    out["gap_max"].push_back(x.gap_max);
    if (x.encoded > 0)
      out["compression"].push_back(x.fp32 / x.encoded);
    else
      out["compression"].push_back(nullptr);
    out["contributors"].push_back(x.deltas / x.merges);
    out["merges_per_s"].push_back(x.merges / width);
    out["live"].push_back(x.live / x.merges);
    for (const auto& t : tensors) {
      const auto it = x.cosine.find(t);
      if (it == x.cosine.end())
        out["cosine"][t].push_back(nullptr);
      else
        out["cosine"][t].push_back(it->second.first / it->second.second);
    }
    for (int id : ids) {
      const auto it = x.tokens_of.find(id);
      out["share"][std::to_string(id)].push_back(
          x.tokens > 0 ? (it == x.tokens_of.end() ? 0.0 : it->second / x.tokens) : 0.0);
    }
  }
  return out;
}

// Each learner's arrival delays (after its round opened) as a histogram over shared bins.
json delay_histograms(const system_data& s) {
  std::map<int, std::vector<double>> d;
  double top = 0;
  for (const auto& m : s.merges) {
    for (const auto& c : m["contributors"]) {
      d[c.value("learner", 0)].push_back(num(c, "delay_s"));
      top = std::max(top, num(c, "delay_s"));
    }
  }
  json out = {{"edges", json::array()}, {"learners", json::array()}};
  if (d.empty()) return out;
  if (!(top > 0)) top = 1e-3;
  const double w = top / delay_bins;
  for (int k = 0; k <= delay_bins; ++k) out["edges"].push_back(w * k);
  for (const auto& [id, v] : d) {
    std::vector<int> count(delay_bins, 0);
    for (double x : v)
      count[static_cast<size_t>(std::clamp(static_cast<int>(x / w), 0, delay_bins - 1))]++;
    double mean = 0;
    for (double x : v) mean += x;
    out["learners"].push_back(
        {{"id", id}, {"counts", count}, {"n", v.size()}, {"mean_s", mean / v.size()}});
  }
  return out;
}

// Per learner: intervals computing (0), idle (1) and down (2), from its progress reports (a
// report covers its busy and idle time before it; a gap longer than four of its usual
// intervals is down time). Adjacent intervals of one state are joined.
json timeline(const system_data& s) {
  std::map<int, std::vector<const json*>> by;
  for (const auto& p : s.progress) by[p.value("learner", 0)].push_back(&p);
  json out = json::array();
  for (const auto& [id, ps] : by) {
    double typical = 0;
    for (size_t k = 1; k < ps.size(); ++k) typical += num(*ps[k], "t") - num(*ps[k - 1], "t");
    typical = ps.size() > 1 ? typical / static_cast<double>(ps.size() - 1) : 0;
    std::vector<std::array<double, 3>> seg;
    auto add = [&](double a, double b, int state) {
      if (b <= a) return;
      if (!seg.empty() && seg.back()[2] == state && a - seg.back()[1] <= 1e-9 * (1 + a))
        seg.back()[1] = b;
      else
        seg.push_back({a, b, static_cast<double>(state)});
    };
    double prev = 0;
    for (const auto* p : ps) {
      const double t = num(*p, "t"), busy = num(*p, "busy_s"), idle = num(*p, "idle_s");
      const double start = std::max(prev, t - busy - idle);
      if (typical > 0 && start - prev > 4 * typical) add(prev, start, 2);
      const double split = start + (t - start) * (busy / std::max(1e-12, busy + idle));
      add(start, split, 0);
      add(split, t, 1);
      prev = t;
    }
    json segments = json::array();
    for (const auto& g : seg) segments.push_back({g[0], g[1], static_cast<int>(g[2])});
    out.push_back({{"id", id}, {"segments", std::move(segments)}});
  }
  return out;
}

// The inner learning rate the learners' schedule gives, over the steps the run took.
json lr_curve(const system_data& s) {
  json out = {{"step", json::array()}, {"lr", json::array()}};
  const auto it = s.start.find("inner_lr");
  if (it == s.start.end() || !it->is_object()) return out;
  adamw_config c;
  c.lr = num(*it, "lr");
  c.warmup_steps = static_cast<int64_t>(num(*it, "warmup_steps"));
  c.total_steps = static_cast<int64_t>(num(*it, "total_steps"));
  c.min_lr_ratio = num(*it, "min_lr_ratio");
  if (!c.validate().ok() || c.warmup_steps < 1) return out;
  std::map<int, double> steps;
  for (const auto& p : s.progress) steps[p.value("learner", 0)] += num(p, "steps");
  double most = static_cast<double>(c.total_steps);
  for (const auto& [id, n] : steps) most = std::max(most, n);
  const int64_t last = static_cast<int64_t>(most);
  const int64_t every = std::max<int64_t>(1, last / 400);
  for (int64_t k = 0; k <= last; k += every) {
    out["step"].push_back(k);
    out["lr"].push_back(c.lr_at(k));
  }
  return out;
}

json system_json(const system_data& s) {
  const double t_end = end_time(s);
  json evals = {{"t", json::array()}, {"tokens", json::array()}, {"loss", json::array()}};
  for (const auto& e : s.evals) {
    evals["t"].push_back(num(e, "t"));
    evals["tokens"].push_back(num(e, "tokens"));
    evals["loss"].push_back(num(e, "loss"));
  }
  if (num(s.summary, "eval_loss") > 0) {  // the evaluation at the end
    evals["t"].push_back(t_end);
    evals["tokens"].push_back(num(s.summary, "tokens"));
    evals["loss"].push_back(num(s.summary, "eval_loss"));
  }
  json alerts = json::array();
  for (const auto& a : s.alerts) {
    alerts.push_back({{"t", num(a, "t")},
                      {"kind", a.value("kind", std::string())},
                      {"severity", a.value("severity", std::string("warning"))},
                      {"what", a.value("what", std::string())}});
  }
  return {{"run", s.run},
          {"name", s.name},
          {"label", s.label},
          {"t_end", t_end},
          {"summary", s.summary},
          {"start", s.start},
          {"entropy_rate", num(s.summary, "entropy_rate")},
          {"eval_floor", num(s.summary, "eval_floor")},
          {"expected_compression", num(s.start, "expected_compression")},
          {"loss", loss_curve(s)},
          {"learners", learner_curves(s, t_end)},
          {"eval", std::move(evals)},
          {"samples", sample_curves(s, t_end)},
          {"merges", merge_curves(s, t_end)},
          {"delays", delay_histograms(s)},
          {"timeline", timeline(s)},
          {"lr", lr_curve(s)},
          {"alerts", std::move(alerts)}};
}

result<std::vector<system_data>> load_run(const std::string& dir, const std::string& label) {
  const std::string summary_path = dir + "/summary.json";
  std::ifstream in(summary_path);
  if (!in) {
    return status(errc::not_found, summary_path +
                                       ": cannot be read (is this a run directory? `diloco "
                                       "simulate --run-dir DIR` writes one)");
  }
  json summary = json::parse(in, nullptr, false);
  if (summary.is_discarded() || !summary.contains("systems") || !summary["systems"].is_array()) {
    return status(errc::corrupt_data, summary_path + ": not a run summary (no \"systems\" list)");
  }
  // A summary lists each system of the run once, a handful at most (a run and its
  // baselines); each system's metrics file is its own.
  constexpr size_t systems_max = 64;
  if (summary["systems"].size() > systems_max) {
    return status(errc::corrupt_data,
                  summary_path + ": " + std::to_string(summary["systems"].size()) +
                      " systems (a run has at most " + std::to_string(systems_max) + ")");
  }
  std::vector<system_data> systems;
  std::set<std::string> files;
  for (const auto& e : summary["systems"]) {
    if (!e.is_object())
      return status(errc::corrupt_data, summary_path + ": a system is not an object");
    if (e.contains("failed") && !e["failed"].is_boolean())
      return status(errc::corrupt_data, summary_path + ": \"failed\" is not true or false");
    if (e.value("failed", false)) continue;
    auto s = load_system(dir, e, summary_path);
    if (!s) return s.error();
    if (!files.insert(s->metrics).second) {
      return status(errc::corrupt_data,
                    summary_path + ": two systems name the same metrics file '" + s->metrics + "'");
    }
    s->run = label;
    systems.push_back(std::move(*s));
  }
  if (systems.empty()) return status(errc::invalid_argument, summary_path + ": no finished run");
  return systems;
}

// Run labels: the directories' last names, made unique.
std::vector<std::string> run_labels(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (size_t i = 0; i < dirs.size(); ++i) {
    std::string name = std::filesystem::path(dirs[i]).lexically_normal().filename().string();
    if (name.empty() || name == ".")
      name = std::filesystem::path(dirs[i]).lexically_normal().parent_path().filename().string();
    if (name.empty()) name = "run";
    if (std::count(out.begin(), out.end(), name) > 0) name += "#" + std::to_string(i + 1);
    out.push_back(name);
  }
  return out;
}

std::string summary_table(const std::vector<system_data>& systems, bool several_runs) {
  std::ostringstream h;
  h << "<table id=\"summary\"><tr>" << (several_runs ? "<th>run</th>" : "")
    << "<th>system</th><th>seed</th><th>eval loss</th><th>above the floor</th>"
       "<th>tokens</th><th>bytes between learners and shards</th><th>goodput</th>"
       "<th>uptime</th><th>run time</th><th>alerts</th></tr>\n";
  for (const auto& s : systems) {
    // The true model's loss on the evaluation set; runs recorded before it was kept: the
    // data's entropy rate.
    const double floor = num(s.summary, "eval_floor");
    const double h_rate = floor > 0 ? floor : num(s.summary, "entropy_rate");
    const double eval = num(s.summary, "eval_loss");
    int critical = 0;
    for (const auto& a : s.alerts) critical += a.value("severity", std::string()) == "critical";
    h << "<tr>" << (several_runs ? "<td>" + esc(s.run) + "</td>" : "") << "<td>" << esc(s.name)
      << "</td><td>" << s.summary.value("seed", 0) << "</td><td>" << fixed(eval, 4) << "</td><td>"
      << (h_rate > 0 ? fixed(eval - h_rate, 4) : std::string("n/a")) << "</td><td>"
      << si(num(s.summary, "tokens")) << "</td><td>" << si(num(s.summary, "learner_bytes"), "B")
      << "</td><td>" << fixed(100 * num(s.summary, "goodput"), 1) << "%</td><td>"
      << fixed(100 * num(s.summary, "uptime"), 1) << "%</td><td>"
      << duration(num(s.summary, "run_s")) << "</td><td>" << s.alerts.size()
      << (critical > 0 ? " (" + std::to_string(critical) + " critical)" : std::string())
      << "</td></tr>\n";
  }
  h << "</table>\n";
  return h.str();
}

// The runs' settings (recorded in each run's start record): with several runs, a table of
// those that differ, one column per run; every setting behind a fold. Nothing for runs
// recorded before settings were kept.
std::string settings_section(const std::vector<system_data>& systems, bool several_runs) {
  std::vector<const system_data*> runs;  // the first system of each run
  for (const auto& s : systems)
    if (runs.empty() || runs.back()->run != s.run) runs.push_back(&s);
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (const auto* r : runs) {
    const auto it = r->start.find("settings");
    if (it == r->start.end() || !it->is_object()) continue;
    for (const auto& kv : it->items())
      if (seen.insert(kv.key()).second) keys.push_back(kv.key());
  }
  if (keys.empty()) return "";
  std::sort(keys.begin(), keys.end());
  auto value = [](const system_data* r, const std::string& k) -> std::string {
    const auto it = r->start.find("settings");
    if (it == r->start.end() || !it->is_object()) return "?";
    const auto v = it->find(k);
    if (v == it->end()) return "(not set)";
    return v->is_string() ? v->get<std::string>() : v->dump();
  };
  auto table = [&](const std::vector<std::string>& rows, const char* id) {
    std::ostringstream t;
    t << "<table class=\"settings\" id=\"" << id << "\"><tr><th>setting</th>";
    for (const auto* r : runs) t << "<th>" << esc(several_runs ? r->run : "value") << "</th>";
    t << "</tr>\n";
    for (const auto& k : rows) {
      t << "<tr><td>" << esc(k) << "</td>";
      for (const auto* r : runs) t << "<td>" << esc(value(r, k)) << "</td>";
      t << "</tr>\n";
    }
    t << "</table>\n";
    return t.str();
  };
  std::ostringstream h;
  h << "<section id=\"settings\">";
  if (several_runs) {
    std::vector<std::string> differ;
    for (const auto& k : keys) {
      const std::string first = value(runs.front(), k);
      if (std::any_of(runs.begin(), runs.end(),
                      [&](const system_data* r) { return value(r, k) != first; }))
        differ.push_back(k);
    }
    if (differ.empty()) {
      h << "<p class=\"what\">The runs have the same " << keys.size() << " settings.</p>\n";
    } else {
      h << "<h2>Settings that differ (" << differ.size() << " of " << keys.size() << ")</h2>\n"
        << table(differ, "settings-differ");
    }
  }
  h << "<details><summary>All " << keys.size() << " settings"
    << (several_runs ? " of each run" : "") << "</summary>\n"
    << table(keys, "settings-all") << "</details></section>\n";
  return h.str();
}

// JSON inside <script>: "</" must not close the element.
std::string script_safe(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/')
      o += "<\\/", ++i;
    else
      o += s[i];
  }
  return o;
}

}  // namespace

const std::vector<std::string>& report_views() {
  static const std::vector<std::string> views = {
      "loss",         "learner-loss", "eval",  "goodput",   "throughput",  "lr",       "staleness",
      "participants", "delays",       "bytes", "bandwidth", "compression", "timeline", "shares"};
  return views;
}

namespace {

// Every finished system of every run directory, each labelled (RUN/system with several runs).
result<std::vector<system_data>> load_runs(const std::vector<std::string>& run_dirs,
                                           const std::vector<std::string>& labels) {
  if (run_dirs.empty()) return status(errc::invalid_argument, "no run directory given");
  std::vector<system_data> all;
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    auto r = load_run(run_dirs[i], labels[i]);
    if (!r) return r.error();
    for (auto& s : *r) {
      s.label = run_dirs.size() > 1 ? labels[i] + "/" + s.name : s.name;
      all.push_back(std::move(s));
    }
  }
  return all;
}

std::string data_json(const std::vector<std::string>& run_dirs,
                      const std::vector<std::string>& labels, const std::vector<system_data>& all) {
  json runs = json::array(), systems = json::array();
  for (size_t i = 0; i < run_dirs.size(); ++i)
    runs.push_back({{"label", labels[i]}, {"dir", run_dirs[i]}});
  for (const auto& s : all) systems.push_back(system_json(s));
  return json{{"runs", std::move(runs)}, {"systems", std::move(systems)}}.dump();
}

}  // namespace

namespace {
result<report_result> write_report_unchecked(const std::vector<std::string>& run_dirs,
                                             const std::string& out);
// A record of the right kind with a field of the wrong type (a damaged or hand-made run
// directory) is an error naming the runs, not an abort.
template <class F>
auto reading_runs(const std::vector<std::string>& run_dirs, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const json::exception& e) {
    std::string dirs;
    for (const auto& d : run_dirs) dirs += (dirs.empty() ? "" : ", ") + d;
    return status(errc::corrupt_data, dirs + ": a record has a field of the wrong type (" +
                                          std::string(e.what()) + ")");
  }
}
}  // namespace

result<std::string> report_data(const std::vector<std::string>& run_dirs) {
  return reading_runs(run_dirs, [&]() -> result<std::string> {
    const auto labels = run_labels(run_dirs);
    auto all = load_runs(run_dirs, labels);
    if (!all) return all.error();
    return data_json(run_dirs, labels, *all);
  });
}

result<report_result> write_report(const std::vector<std::string>& run_dirs,
                                   const std::string& out) {
  return reading_runs(run_dirs, [&] { return write_report_unchecked(run_dirs, out); });
}

namespace {
result<report_result> write_report_unchecked(const std::vector<std::string>& run_dirs,
                                             const std::string& out) {
  const auto labels = run_labels(run_dirs);
  auto loaded = load_runs(run_dirs, labels);
  if (!loaded) return loaded.error();
  const std::vector<system_data>& all = *loaded;
  const std::string data = data_json(run_dirs, labels, all);

  report_result res;
  res.systems = static_cast<int>(all.size());
  res.runs = static_cast<int>(run_dirs.size());
  res.views = static_cast<int>(report_views().size());
  // Runs with adaptive inner steps get one more: the H the learners followed.
  if (std::any_of(all.begin(), all.end(),
                  [](const system_data& s) { return s.start.value("period_auto", false); }))
    res.views += 1;
  // Runs whose merges measured the learners' agreement per tensor get it drawn.
  if (std::any_of(all.begin(), all.end(), [](const system_data& s) {
        return std::any_of(s.merges.begin(), s.merges.end(), [](const json& m) {
          const auto c = m.find("cosine");
          return c != m.end() && c->is_object() && !c->empty();
        });
      }))
    res.views += 1;
  // Runs with regions get the picture of who syncs with whom.
  if (std::any_of(all.begin(), all.end(),
                  [](const system_data& s) { return s.start.contains("topology"); }))
    res.views += 1;
  const bool several = run_dirs.size() > 1;
  const auto& main = all.front();
  std::ostringstream h;
  h << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>diloco report: "
    << esc(several ? std::to_string(run_dirs.size()) + " runs" : labels[0]) << "</title>\n<style>"
    << report_assets::uplot_css << "</style>\n<style>" << report_assets::page_css
    << "</style>\n</head><body>\n<h1>diloco run report</h1>\n<p class=\"what\">";
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    h << (i ? "; " : "") << "<code>" << esc(run_dirs[i]) << "</code>";
  }
  // Each run in a few words (its first system: the one the run was about).
  auto about = [](const system_data& s) {
    std::ostringstream o;
    o << esc(s.start.value("mode", std::string("?"))) << ", " << s.start.value("learners", 0)
      << " learners, quorum " << s.start.value("quorum", 0) << ", " << s.start.value("fragments", 0)
      << " fragments, H " << s.start.value("period_steps", 0)
      << (s.start.value("period_auto", false) ? " (auto: chosen from the links, from there up)"
                                              : "");
    if (!s.start.value("version", std::string()).empty())
      o << ", diloco " << esc(s.start.value("version", std::string()));
    return o.str();
  };
  if (several) {
    h << ".</p>\n<ul class=\"runs\">";
    for (size_t i = 0; i < all.size(); ++i)
      if (i == 0 || all[i].run != all[i - 1].run)
        h << "<li><code>" << esc(all[i].run) << "</code>: " << about(all[i]) << "</li>";
    h << "</ul>\n";
  } else {
    h << ". " << about(main) << ".</p>\n";
  }
  h << summary_table(all, several) << settings_section(all, several)
    << "<p class=\"hint\">Drag across a chart to zoom in, double-click to zoom out; hover for "
       "values; click a legend entry to hide or show its series. Red and orange ticks at the "
       "top of a chart are critical and warning alerts.</p>\n"
    << "<nav id=\"views\"></nav>\n<main id=\"charts\"></main>\n"
    << "<section id=\"alerts\"></section>\n"
    << "<footer>Charts drawn by uPlot " << report_assets::uplot_version
    << " (MIT licence, below), inlined in this file.<details><summary>uPlot licence</summary><pre>"
    << esc(report_assets::uplot_license) << "</pre></details></footer>\n"
    << "<script>" << report_assets::uplot_js << "</script>\n"
    << "<script id=\"report-data\" type=\"application/json\">" << script_safe(data)
    << "</script>\n<script>" << report_assets::page_js << "</script>\n</body></html>\n";

  res.path = !out.empty() ? out
             : several    ? run_dirs.front() + "/report-compare.html"
                          : run_dirs.front() + "/report.html";
  std::ofstream f(res.path);
  if (!f) return status(errc::io_error, res.path + ": cannot write");
  f << h.str();
  if (!f) return status(errc::io_error, res.path + ": write failed");
  return res;
}
}  // namespace

}  // namespace diloco
