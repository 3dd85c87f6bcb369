// The data-parallel baseline's all-reduce on a syncer shard: the learners' gradients of a
// step for each fragment the shard owns, averaged once every live learner's is in, and the
// mean sent back to all of them.
#include <spdlog/spdlog.h>

#include "actors/shard_parts.hpp"
#include "tensor/codec.hpp"
#include "tensor/merge.hpp"

namespace diloco::shard {

void on_gradient(self_ptr self, gradient_msg& msg) {
  auto& st = self->state;
  owned_fragment* of = find_owned(self, msg.fragment);
  if (of == nullptr)
    return reject(self,
                  "gradient for fragment " + std::to_string(msg.fragment) + " (not owned here)");
  if (msg.learner >= st.env->ids.learners) return reject(self, "gradient from unknown learner");
  const size_t n = frag_of(self, of->id).size;
  float_buffer values = take_buffer(st, n);
  if (auto s = decode_checked(msg.grad, values.all()); !s.ok()) {
    st.spare.push_back(std::move(values));
    return reject(self, "gradient of fragment " + std::to_string(of->id) + ": " + s.to_string());
  }
  of->dp_grads[msg.step][msg.learner] = std::move(values);
}

// Data parallel: once every live learner's gradient of a step is in, send back their mean.
void reduce_ready_steps(self_ptr self, owned_fragment& of) {
  auto& st = self->state;
  const size_t n = frag_of(self, of.id).size;
  for (auto it = of.dp_grads.begin(); it != of.dp_grads.end();) {
    auto& by_learner = it->second;
    bool complete = !st.live.empty();
    for (const auto& [learner, h] : st.live) complete = complete && by_learner.count(learner) > 0;
    if (!complete) break;  // steps complete in order
    std::vector<merge_input> inputs;
    for (const auto& [learner, g] : by_learner) {
      if (st.live.count(learner) > 0) inputs.push_back({cfspan(g.data(), n), 1.0});
    }
    fspan mean(st.merged.data(), n);
    const local_ranges all = {{0, n}};
    if (auto s = merge(merge_rule::plain_average,
                       span<const merge_input>(inputs.data(), inputs.size()), all, mean);
        !s.ok()) {
      spdlog::error("syncer {}: gradient reduction failed: {}", st.index, s.to_string());
    }
    if (auto s = encode(codec_config::make(codec_kind::fp32), mean, fspan(), st.blob); !s.ok()) {
      // Finite gradients whose mean overflowed.
      ++st.counters.merges_refused;
      spdlog::error("syncer {}: reduction of fragment {} at step {} refused: {}", st.index, of.id,
                    it->first, s.to_string());
      return;
    }
    const tensor_blob blob(st.blob);
    for (const auto& [learner, h] : st.live) {
      reduced_gradient_msg msg{st.out.make_stamp(now_ns(self)), of.id, it->first,
                               static_cast<uint32_t>(inputs.size()), blob};
      post(self, *st.env, st.out, st.env->ids.learner(learner), h,
           blob.size() + message_overhead_bytes, true, std::move(msg));
    }
    st.counters.merges += 1;
    st.counters.deltas_merged += inputs.size();
    for (auto& [learner, g] : by_learner) st.spare.push_back(std::move(g));
    it = of.dp_grads.erase(it);
  }
}
}  // namespace diloco::shard
