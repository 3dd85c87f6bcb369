#include "tensor/fragment.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/check.hpp"

namespace diloco {

void fragment::gather(const float* buffer, float* local) const {
  for (const auto& s : spans) {
    std::memcpy(local, buffer + s.offset, s.count * sizeof(float));
    local += s.count;
  }
}

void fragment::scatter(const float* local, float* buffer) const {
  for (const auto& s : spans) {
    std::memcpy(buffer + s.offset, local, s.count * sizeof(float));
    local += s.count;
  }
}

std::vector<std::pair<size_t, size_t>> fragment::local_ranges(bool embedding) const {
  std::vector<std::pair<size_t, size_t>> out;
  size_t at = 0;
  for (const auto& s : spans) {
    if (s.embedding == embedding) {
      if (!out.empty() && out.back().second == at) {
        out.back().second = at + s.count;
      } else {
        out.emplace_back(at, at + s.count);
      }
    }
    at += s.count;
  }
  return out;
}

std::vector<std::pair<uint32_t, std::vector<std::pair<size_t, size_t>>>> fragment::tensor_ranges()
    const {
  std::vector<std::pair<uint32_t, std::vector<std::pair<size_t, size_t>>>> out;
  size_t at = 0;
  for (const auto& s : spans) {
    if (!s.embedding) {
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const auto& group) { return group.first == s.tensor; });
      if (it == out.end()) it = out.insert(out.end(), {s.tensor, {}});
      it->second.emplace_back(at, at + s.count);
    }
    at += s.count;
  }
  return out;
}

const char* to_string(fragment_pattern p) {
  return p == fragment_pattern::balanced ? "balanced" : "strided";
}

result<fragment_pattern> parse_fragment_pattern(const std::string& text) {
  if (text == "balanced") return fragment_pattern::balanced;
  if (text == "strided") return fragment_pattern::strided;
  return status(errc::invalid_argument,
                "fragment pattern '" + text + "': expected 'balanced' or 'strided'");
}

size_t fragment_plan::largest() const {
  size_t m = 0;
  for (const auto& f : fragments) m = std::max(m, f.size);
  return m;
}

size_t fragment_plan::total() const {
  size_t t = 0;
  for (const auto& f : fragments) t += f.size;
  return t;
}

double fragment_plan::imbalance() const {
  if (fragments.empty() || total() == 0) return 0.0;
  return static_cast<double>(largest()) * fragments.size() / static_cast<double>(total());
}

namespace {

struct piece {
  size_t tensor = 0;  // index into the input list
  size_t offset = 0;  // within the tensor
  size_t count = 0;
};

// Cuts items into pieces of at most total / (3 P), then LPT. Returns per fragment its pieces.
std::vector<std::vector<piece>> pack(const std::vector<size_t>& sizes, int count) {
  DILOCO_CHECK(count > 0, "fragments: at least one (validated)");
  const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
  // Rounded down so that ideal + piece_max <= 4/3 ideal holds exactly, not just up to rounding.
  const size_t piece_max = std::max<size_t>(1, total / (3 * static_cast<size_t>(count)));
  std::vector<piece> pieces;
  for (size_t t = 0; t < sizes.size(); ++t) {
    const size_t n = sizes[t];
    if (n == 0) continue;
    // Equal pieces rather than piece_max-and-remainder keeps the pieces alike.
    const size_t parts = (n + piece_max - 1) / piece_max;
    for (size_t k = 0; k < parts; ++k) {
      const size_t begin = n * k / parts, end = n * (k + 1) / parts;
      pieces.push_back({t, begin, end - begin});
    }
  }
  // Largest first; ties by position so the plan is deterministic.
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const piece& a, const piece& b) { return a.count > b.count; });
  std::vector<std::vector<piece>> bins(count);
  std::vector<size_t> load(count, 0);
  for (const auto& p : pieces) {
    const auto lightest =
        static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    bins[lightest].push_back(p);
    load[lightest] += p.count;
  }
  return bins;
}

fragment make_fragment(int id, std::vector<param_span> spans) {
  std::sort(spans.begin(), spans.end(),
            [](const param_span& a, const param_span& b) { return a.offset < b.offset; });
  fragment f;
  f.id = id;
  // Adjacent pieces of the same tensor merge back into one span.
  for (const auto& s : spans) {
    if (!f.spans.empty() && f.spans.back().offset + f.spans.back().count == s.offset &&
        f.spans.back().tensor == s.tensor) {
      f.spans.back().count += s.count;
    } else {
      f.spans.push_back(s);
    }
    f.size += s.count;
  }
  return f;
}

status check_count(const param_layout& layout, int count) {
  if (count < 1) return status(errc::invalid_argument, "fragments: must be >= 1");
  if (static_cast<size_t>(count) > layout.param_count()) {
    return status(errc::invalid_argument, "fragments: " + std::to_string(count) +
                                              " is more than the model's " +
                                              std::to_string(layout.param_count()) + " parameters");
  }
  return {};
}

}  // namespace

std::vector<std::vector<size_t>> pack_sizes(const std::vector<size_t>& sizes, int count) {
  std::vector<std::vector<size_t>> out;
  for (const auto& bin : pack(sizes, count)) {
    out.emplace_back();
    for (const auto& p : bin) out.back().push_back(p.count);
  }
  return out;
}

result<fragment_plan> plan_balanced(const param_layout& layout, int count) {
  if (auto st = check_count(layout, count); !st.ok()) return st;
  std::vector<size_t> sizes;
  for (const auto& t : layout.tensors()) sizes.push_back(t.size());
  fragment_plan plan;
  int id = 0;
  for (const auto& bin : pack(sizes, count)) {
    std::vector<param_span> spans;
    for (const auto& p : bin) {
      const tensor_info& t = layout.at(p.tensor);
      spans.push_back({t.offset + p.offset, p.count, t.role == tensor_role::embedding,
                       static_cast<uint32_t>(p.tensor)});
    }
    plan.fragments.push_back(make_fragment(id++, std::move(spans)));
  }
  return plan;
}

result<fragment_plan> plan_strided(const param_layout& layout, int count) {
  if (auto st = check_count(layout, count); !st.ok()) return st;
  if (count > layout.layer_count()) {
    return status(errc::invalid_argument,
                  "fragments: the strided pattern needs at most one fragment per layer (" +
                      std::to_string(layout.layer_count()) + "), got " + std::to_string(count));
  }
  std::vector<std::vector<param_span>> spans(count);
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    const tensor_info& t = layout.tensors()[i];
    spans[t.layer % count].push_back(
        {t.offset, t.size(), t.role == tensor_role::embedding, static_cast<uint32_t>(i)});
  }
  fragment_plan plan;
  for (int p = 0; p < count; ++p) plan.fragments.push_back(make_fragment(p, std::move(spans[p])));
  return plan;
}

result<fragment_plan> plan_fragments(const param_layout& layout, int count, fragment_pattern p) {
  return p == fragment_pattern::balanced ? plan_balanced(layout, count)
                                         : plan_strided(layout, count);
}

}  // namespace diloco
