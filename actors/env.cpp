#include "actors/env.hpp"

namespace diloco {

result<std::shared_ptr<const actor_env>> actor_env::make(const run_config& config,
                                                         bool virtual_time) {
  if (auto st = config.validate(); !st.ok()) return st;
  auto env = std::make_shared<actor_env>(config.model);
  env->config = config;
  env->virtual_time = virtual_time;
  auto plan = plan_fragments(env->model.layout(), config.fragments, config.packing);
  if (!plan) return plan.error();
  env->plan = std::move(plan).value();
  auto data = data_source::build(config.data, config.model.context);
  if (!data) return data.error();
  env->data = std::move(data).value();
  env->ids.learners = static_cast<uint32_t>(config.learner_capacity());
  env->ids.shards = static_cast<uint32_t>(config.shards);
  env->fragments_of.resize(config.shards);
  for (uint32_t p = 0; p < static_cast<uint32_t>(config.fragments); ++p) {
    const uint32_t s = p % static_cast<uint32_t>(config.shards);
    env->shard_of.push_back(s);
    env->fragments_of[s].push_back(p);
  }
  return std::shared_ptr<const actor_env>(std::move(env));
}

}  // namespace diloco
