#include "apps/report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

namespace diloco {

namespace {

using json = nlohmann::json;

const char* const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
const char* color(size_t i) {
  return palette[i % (sizeof palette / sizeof palette[0])];
}

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

std::string fmt(double v) {
  char buf[32];
  if (std::fabs(v) >= 1e6 || (std::fabs(v) < 1e-3 && v != 0)) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

struct series {
  std::string name;
  std::vector<std::pair<double, double>> points;
  bool dashed = false;
  bool markers = false;
};

// The plot frame: 640 x 300 px, margins for axes and a legend on the right.
struct frame {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  static constexpr double W = 640, H = 300, L = 60, R = 150, T = 30, B = 40;
  double px(double x) const { return L + (x - x0) / (x1 - x0) * (W - L - R); }
  double py(double y) const { return H - B - (y - y0) / (y1 - y0) * (H - T - B); }
};

std::string svg_open(const std::string& id, const std::string& title, const std::string& xl,
                     const std::string& yl, const frame& f) {
  std::ostringstream o;
  o << "<svg class=\"plot\" id=\"" << id << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
    << frame::W << "\" height=\"" << frame::H << "\" viewBox=\"0 0 " << frame::W << ' ' << frame::H
    << "\">\n<text x=\"" << frame::L << "\" y=\"18\" class=\"title\">" << esc(title) << "</text>\n";
  // Axes with 5 ticks each.
  o << "<g class=\"axes\" stroke=\"#888\" fill=\"none\"><rect x=\"" << frame::L << "\" y=\""
    << frame::T << "\" width=\"" << frame::W - frame::L - frame::R << "\" height=\""
    << frame::H - frame::T - frame::B << "\"/></g>\n<g class=\"ticks\" font-size=\"10\">";
  for (int i = 0; i <= 4; ++i) {
    const double x = f.x0 + (f.x1 - f.x0) * i / 4, y = f.y0 + (f.y1 - f.y0) * i / 4;
    o << "<text x=\"" << f.px(x) << "\" y=\"" << frame::H - frame::B + 14
      << "\" text-anchor=\"middle\">" << fmt(x) << "</text><text x=\"" << frame::L - 4 << "\" y=\""
      << f.py(y) + 3 << "\" text-anchor=\"end\">" << fmt(y) << "</text>";
  }
  o << "</g>\n<text x=\"" << (frame::L + frame::W - frame::R) / 2 << "\" y=\"" << frame::H - 6
    << "\" text-anchor=\"middle\" font-size=\"11\">" << esc(xl) << "</text><text x=\"12\" y=\""
    << (frame::T + frame::H - frame::B) / 2 << "\" font-size=\"11\" transform=\"rotate(-90 12 "
    << (frame::T + frame::H - frame::B) / 2 << ")\" text-anchor=\"middle\">" << esc(yl)
    << "</text>\n";
  return o.str();
}

std::string legend(const std::vector<std::string>& names) {
  std::ostringstream o;
  for (size_t i = 0; i < names.size(); ++i) {
    const double y = frame::T + 10 + 16 * static_cast<double>(i);
    o << "<rect x=\"" << frame::W - frame::R + 10 << "\" y=\"" << y - 8
      << "\" width=\"10\" height=\"10\" fill=\"" << color(i) << "\"/><text x=\""
      << frame::W - frame::R + 24 << "\" y=\"" << y + 1 << "\" font-size=\"11\">" << esc(names[i])
      << "</text>\n";
  }
  return o.str();
}

// A line plot; hlines are labelled horizontal reference lines.
std::string line_plot(const std::string& id, const std::string& title, const std::string& xl,
                      const std::string& yl, const std::vector<series>& ss,
                      const std::vector<std::pair<std::string, double>>& hlines = {}) {
  frame f;
  f.x0 = f.y0 = INFINITY;
  f.x1 = f.y1 = -INFINITY;
  for (const auto& s : ss) {
    for (const auto& [x, y] : s.points) {
      f.x0 = std::min(f.x0, x), f.x1 = std::max(f.x1, x);
      f.y0 = std::min(f.y0, y), f.y1 = std::max(f.y1, y);
    }
  }
  for (const auto& [n, y] : hlines) f.y0 = std::min(f.y0, y), f.y1 = std::max(f.y1, y);
  if (!std::isfinite(f.x0)) f.x0 = 0, f.x1 = 1, f.y0 = 0, f.y1 = 1;
  if (f.x1 <= f.x0) f.x1 = f.x0 + 1;
  if (f.y1 <= f.y0) f.y1 = f.y0 + 1;
  const double pad = (f.y1 - f.y0) * 0.05;
  f.y0 -= pad, f.y1 += pad;
  std::ostringstream o;
  o << svg_open(id, title, xl, yl, f);
  std::vector<std::string> names;
  for (size_t i = 0; i < ss.size(); ++i) {
    const auto& s = ss[i];
    names.push_back(s.name);
    if (s.points.empty()) continue;
    if (s.markers) {
      for (const auto& [x, y] : s.points)
        o << "<circle class=\"series\" data-name=\"" << esc(s.name) << "\" cx=\"" << f.px(x)
          << "\" cy=\"" << f.py(y) << "\" r=\"4\" fill=\"" << color(i) << "\"/>\n";
      continue;
    }
    o << "<path class=\"series\" data-name=\"" << esc(s.name) << "\" data-points=\""
      << s.points.size() << "\" fill=\"none\" stroke=\"" << color(i) << "\" stroke-width=\"1.5\""
      << (s.dashed ? " stroke-dasharray=\"5 3\"" : "") << " d=\"";
    for (size_t k = 0; k < s.points.size(); ++k)
      o << (k ? " L" : "M") << fmt(f.px(s.points[k].first)) << ' ' << fmt(f.py(s.points[k].second));
    o << "\"/>\n";
  }
  for (const auto& [n, y] : hlines) {
    names.push_back(n);
    o << "<path class=\"series\" data-name=\"" << esc(n) << "\" data-points=\"2\" stroke=\""
      << color(names.size() - 1) << "\" stroke-dasharray=\"2 2\" d=\"M" << f.px(f.x0) << ' '
      << f.py(y) << " L" << f.px(f.x1) << ' ' << f.py(y) << "\"/>\n";
  }
  o << legend(names) << "</svg>\n";
  return o.str();
}

struct system_data {
  std::string name;
  json summary;
  json start;
  std::vector<json> progress, merges, samples, alerts;
};

result<system_data> load_system(const std::string& dir, const json& entry) {
  system_data s;
  s.summary = entry;
  s.name = entry.value("system", "run");
  const std::string file = dir + "/" + entry.value("metrics", "metrics.jsonl");
  std::ifstream in(file);
  if (!in) return status(errc::not_found, file + ": cannot be read");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("type")) {
      return status(errc::corrupt_data,
                    file + ":" + std::to_string(n) + ": not a JSON object with a \"type\"");
    }
    const std::string type = j["type"].get<std::string>();
    if (type == "start")
      s.start = j;
    else if (type == "progress")
      s.progress.push_back(std::move(j));
    else if (type == "merge")
      s.merges.push_back(std::move(j));
    else if (type == "sample")
      s.samples.push_back(std::move(j));
    else if (type == "alert")
      s.alerts.push_back(std::move(j));
  }
  return s;
}

double num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// Mean train loss in 60 bins of cumulative tokens.
series loss_curve(const system_data& s) {
  series out{s.name, {}};
  double tokens = 0;
  std::vector<std::pair<double, double>> raw;
  for (const auto& p : s.progress) {
    tokens += num(p, "tokens");
    if (num(p, "steps") > 0) raw.emplace_back(tokens, num(p, "loss"));
  }
  if (raw.empty()) return out;
  const double span = raw.back().first / 60.0;
  double sum = 0, n = 0, edge = span;
  for (const auto& [x, y] : raw) {
    if (x > edge && n > 0) {
      out.points.emplace_back(edge - span / 2, sum / n);
      sum = n = 0;
      while (x > edge) edge += span;
    }
    sum += y, n += 1;
  }
  if (n > 0) out.points.emplace_back(edge - span / 2, sum / n);
  return out;
}

std::string timeline(const system_data& s) {
  // Per learner: intervals of computing and idling from its progress reports; a gap in the
  // reports longer than four typical intervals is down time (a failure, marked).
  std::map<int, std::vector<const json*>> by;
  double t_end = 0;
  for (const auto& p : s.progress) {
    by[p.value("learner", 0)].push_back(&p);
    t_end = std::max(t_end, num(p, "t"));
  }
  for (const auto& m : s.merges) t_end = std::max(t_end, num(m, "t"));
  if (t_end <= 0) t_end = 1;
  const double W = 640, L = 90, R = 20, row = 22;
  const double H = 50 + row * static_cast<double>(by.size());
  auto px = [&](double t) { return L + t / t_end * (W - L - R); };
  std::ostringstream o;
  o << "<svg class=\"plot\" id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << ' ' << H << "\">\n<text x=\"" << L
    << "\" y=\"18\" class=\"title\">" << esc(s.name)
    << ": learners over time (green computing, yellow idle, red down; ticks: sends merged)"
    << "</text>\n";
  int r = 0;
  for (const auto& [id, ps] : by) {
    const double y = 30 + row * r++;
    o << "<text x=\"4\" y=\"" << y + 13 << "\" font-size=\"11\">learner " << id << "</text>\n";
    double typical = 0;
    for (size_t k = 1; k < ps.size(); ++k) typical += num(*ps[k], "t") - num(*ps[k - 1], "t");
    typical = ps.size() > 1 ? typical / static_cast<double>(ps.size() - 1) : t_end;
    double prev = 0;
    for (const auto* p : ps) {
      const double t = num(*p, "t"), busy = num(*p, "busy_s"), idle = num(*p, "idle_s");
      const double start = std::max(prev, t - busy - idle);
      if (start - prev > 4 * typical) {
        o << "<rect class=\"series down\" data-name=\"down " << id << "\" x=\"" << px(prev)
          << "\" y=\"" << y << "\" width=\"" << std::max(1.0, px(start) - px(prev))
          << "\" height=\"16\" fill=\"#d62728\"/>\n";
      }
      const double split = start + (t - start) * (busy / std::max(1e-12, busy + idle));
      o << "<rect class=\"series busy\" data-name=\"computing " << id << "\" x=\"" << px(start)
        << "\" y=\"" << y << "\" width=\"" << std::max(0.5, px(split) - px(start))
        << "\" height=\"16\" fill=\"#2ca02c\"/>";
      if (idle > 0) {
        o << "<rect class=\"series idle\" data-name=\"idle " << id << "\" x=\"" << px(split)
          << "\" y=\"" << y << "\" width=\"" << std::max(0.5, px(t) - px(split))
          << "\" height=\"16\" fill=\"#f2c12e\"/>";
      }
      o << '\n';
      prev = t;
    }
    for (const auto& m : s.merges) {
      for (const auto& c : m["contributors"]) {
        if (c.value("learner", -1) != id) continue;
        o << "<path class=\"send\" d=\"M" << px(num(m, "t")) << ' ' << y - 2
          << " v4\" stroke=\"#333\"/>";
      }
    }
    o << '\n';
  }
  o << "<text x=\"" << L << "\" y=\"" << H - 6 << "\" font-size=\"10\">0 s</text><text x=\""
    << W - R << "\" y=\"" << H - 6 << "\" font-size=\"10\" text-anchor=\"end\">" << fmt(t_end)
    << " s</text>\n</svg>\n";
  return o.str();
}

std::string bytes_bars(const system_data& s) {
  std::map<int, std::pair<double, double>> bytes;  // learner -> sent, received
  for (const auto& p : s.progress) {
    auto& b = bytes[p.value("learner", 0)];
    b.first += num(p, "bytes_sent");
    b.second += num(p, "bytes_received");
  }
  double top = 1;
  for (const auto& [id, b] : bytes) top = std::max({top, b.first, b.second});
  frame f;
  f.x0 = 0, f.x1 = static_cast<double>(std::max<size_t>(1, bytes.size()));
  f.y0 = 0, f.y1 = top * 1.05;
  std::ostringstream o;
  o << svg_open("bytes", s.name + ": bytes on the wire per learner", "learner", "bytes", f);
  size_t i = 0;
  for (const auto& [id, b] : bytes) {
    const double w = (f.px(1) - f.px(0)) * 0.35;
    const double x = f.px(static_cast<double>(i)) + w * 0.2;
    o << "<rect class=\"series\" data-name=\"sent " << id << "\" x=\"" << x << "\" y=\""
      << f.py(b.first) << "\" width=\"" << w << "\" height=\"" << f.py(0) - f.py(b.first)
      << "\" fill=\"" << color(0) << "\"/><rect class=\"series\" data-name=\"received " << id
      << "\" x=\"" << x + w << "\" y=\"" << f.py(b.second) << "\" width=\"" << w << "\" height=\""
      << f.py(0) - f.py(b.second) << "\" fill=\"" << color(1) << "\"/><text x=\"" << x + w
      << "\" y=\"" << frame::H - frame::B + 26 << "\" font-size=\"10\" text-anchor=\"middle\">"
      << id << "</text>\n";
    ++i;
  }
  o << legend({"sent", "received"}) << "</svg>\n";
  return o.str();
}

// Token shares per merge, averaged over 40 bins of merges, one line per learner.
std::string shares(const system_data& s) {
  std::map<int, series> per;
  const size_t n = s.merges.size(), bins = std::min<size_t>(40, std::max<size_t>(1, n));
  std::map<int, double> acc;
  double total = 0;
  size_t in_bin = 0, bin = 0;
  auto flush = [&] {
    for (auto& [id, v] : acc) {
      per[id].name = "learner " + std::to_string(id);
      per[id].points.emplace_back(static_cast<double>(bin) * n / bins, total > 0 ? v / total : 0);
    }
    for (auto& [id, v] : acc) v = 0;
    total = 0;
    in_bin = 0;
    ++bin;
  };
  for (const auto& m : s.merges) {
    for (const auto& c : m["contributors"]) {
      acc[c.value("learner", 0)] += num(c, "tokens");
      total += num(c, "tokens");
    }
    if (++in_bin >= std::max<size_t>(1, n / bins)) flush();
  }
  if (in_bin > 0) flush();
  std::vector<series> ss;
  for (auto& [id, sr] : per) ss.push_back(std::move(sr));
  return line_plot("shares", s.name + ": token-weight share per merge", "merge",
                   "share of merged tokens", ss);
}

}  // namespace

result<report_result> write_report(const std::string& run_dir, const std::string& out) {
  const std::string summary_path = run_dir + "/summary.json";
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
  std::vector<system_data> systems;
  for (const auto& e : summary["systems"]) {
    if (e.value("failed", false)) continue;
    auto s = load_system(run_dir, e);
    if (!s) return s.error();
    systems.push_back(std::move(*s));
  }
  if (systems.empty()) return status(errc::invalid_argument, summary_path + ": no finished run");

  report_result res;
  res.systems = static_cast<int>(systems.size());
  std::ostringstream h;
  const auto& main = systems.front();
  h << "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>diloco run report</title>\n"
    << "<style>body{font-family:sans-serif;max-width:980px;margin:1em auto;color:#222}"
    << "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px "
       "8px;text-align:right}"
    << "th{background:#f4f4f4}.title{font-size:13px;font-weight:bold}svg{margin:8px 0;"
    << "display:block}</style></head><body>\n<h1>diloco run report</h1>\n<p>Run directory: <code>"
    << esc(run_dir) << "</code>. Seed " << main.summary.value("seed", 0) << ", mode "
    << esc(main.start.value("mode", std::string("?"))) << ", " << main.start.value("learners", 0)
    << " learners, quorum " << main.start.value("quorum", 0) << ", "
    << main.start.value("fragments", 0) << " fragments.</p>\n";
  h << "<table id=\"summary\"><tr><th>system</th><th>eval loss</th><th>tokens</th><th>bytes "
       "between learners and shards</th><th>goodput</th><th>uptime</th><th>run "
       "s</th><th>alerts</th></tr>\n";
  for (const auto& s : systems) {
    h << "<tr><td>" << esc(s.name) << "</td><td>" << fmt(num(s.summary, "eval_loss")) << "</td><td>"
      << fmt(num(s.summary, "tokens")) << "</td><td>" << fmt(num(s.summary, "learner_bytes"))
      << "</td><td>" << fmt(100 * num(s.summary, "goodput")) << "%</td><td>"
      << fmt(100 * num(s.summary, "uptime")) << "%</td><td>" << fmt(num(s.summary, "run_s"))
      << "</td><td>" << s.alerts.size() << "</td></tr>\n";
  }
  h << "</table>\n";

  // Loss vs tokens, every system, with eval losses and the entropy rate.
  std::vector<series> loss;
  for (const auto& s : systems) loss.push_back(loss_curve(s));
  for (const auto& s : systems) {
    series e{s.name + " eval", {{num(s.summary, "tokens"), num(s.summary, "eval_loss")}}};
    e.markers = true;
    loss.push_back(std::move(e));
  }
  std::vector<std::pair<std::string, double>> lines;
  if (num(main.summary, "entropy_rate") > 0)
    lines.emplace_back("entropy rate", num(main.summary, "entropy_rate"));
  h << "<h2>Loss</h2>\n"
    << line_plot("loss", "train loss vs tokens (eval loss at the end)", "tokens",
                 "loss (nats/token)", loss, lines);
  ++res.plots;

  for (const auto& s : systems) {
    series good{s.name + " goodput", {}}, up{s.name + " uptime", {}};
    for (const auto& p : s.samples) {
      good.points.emplace_back(num(p, "t"), num(p, "goodput"));
      up.points.emplace_back(num(p, "t"), num(p, "uptime"));
    }
    up.dashed = true;
    h << line_plot(s.name == main.name ? "goodput" : "goodput-" + s.name,
                   s.name + ": goodput and uptime so far", "time (s)", "ratio", {good, up});
    ++res.plots;
  }
  h << "<h2>Learners</h2>\n" << timeline(main);
  ++res.plots;
  h << "<h2>Merges</h2>\n" << shares(main);
  ++res.plots;
  h << "<h2>Traffic</h2>\n" << bytes_bars(main);
  ++res.plots;
  if (!main.alerts.empty()) {
    h << "<h2>Alerts</h2>\n<ul id=\"alerts\">\n";
    for (const auto& a : main.alerts) {
      h << "<li>" << fmt(num(a, "t")) << " s, " << esc(a.value("kind", std::string())) << ": "
        << esc(a.value("what", std::string())) << "</li>\n";
    }
    h << "</ul>\n";
  }
  h << "</body></html>\n";
  res.path = out.empty() ? run_dir + "/report.html" : out;
  std::ofstream f(res.path);
  if (!f) return status(errc::io_error, res.path + ": cannot write");
  f << h.str();
  if (!f) return status(errc::io_error, res.path + ": write failed");
  return res;
}

}  // namespace diloco
