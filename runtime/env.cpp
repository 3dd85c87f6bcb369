#include "runtime/env.hpp"

#include "runtime/builtin_model.hpp"

#include <algorithm>
#include <climits>
#include <string>

namespace diloco {

float_buffer actor_env::fragments_base() const {
  float_buffer params(model->layout().buffer_floats());  // zeroed
  size_t covered = 0;
  for (const auto& frag : plan.fragments) covered += frag.size;
  if (covered != model->layout().param_count()) model->init(params, config.seed);
  return params;
}

namespace {
model_maker& process_model() {
  static model_maker maker;
  return maker;
}
std::string& process_name() {
  static std::string name;
  return name;
}
}  // namespace

void set_process_model(model_maker maker, std::string name) {
  process_model() = std::move(maker);
  process_name() = process_model() ? std::move(name) : std::string();
}

const std::string& process_model_name() {
  return process_name();
}

result<std::shared_ptr<const actor_env>> actor_env::make(const run_config& config,
                                                         bool virtual_time, hooks with) {
  if (auto st = config.validate(); !st.ok()) return st;
  auto env = std::make_shared<actor_env>();
  env->config = config;
  env->virtual_time = virtual_time;
  env->tape = std::move(with.tape);
  env->offload = std::move(with.offload);
  env->observer = std::move(with.observer);
  env->ahead = std::move(with.ahead);
  env->merge_pool = std::move(with.merge_pool);
  env->timeline = std::move(with.timeline);
  env->traced = with.traced;
  auto data = data_source::build(config.data, config.model.context);
  if (!data) return data.error();
  env->data = std::move(data).value();
  const model_maker& maker = with.model ? with.model : process_model();
  if (maker) {
    auto model = maker(config, env->data);
    if (!model) return model.error();
    env->model = std::move(model).value();
  } else if (!config.model.file.empty()) {
    auto model = layout_file_family(config.model.file);
    if (!model) return model.error();
    env->model = std::move(model).value();
  } else {
    env->model = builtin_mlp_family(config.model, config.batch, env->data);
  }
  auto plan = plan_fragments(env->model->layout(), config.fragments, config.packing);
  if (!plan) return plan.error();
  env->plan = std::move(plan).value();
  if (config.link.model_params > 0) {
    env->payload_scale = config.link.model_params / static_cast<double>(std::max<size_t>(
                                                        1, env->model->layout().param_count()));
  }
  env->ids = actor_ids_of(config);
  for (uint32_t l = 0; l < env->ids.learners; ++l) env->learner_links.push_back(config.link_of(l));
  for (uint32_t r = 0; r < env->ids.regionals; ++r) {
    env->regional_wan.push_back(config.regional_wan_at(r, -1));
    env->regional_names.push_back(config.regions[config.regional_regions()[r]].name);
    env->regional_local.push_back(config.regional_local(r));
  }
  env->regional_of.assign(env->ids.learners, -1);
  if (env->ids.regionals > 0) {
    env->regional_learners.assign(env->ids.regionals, 0);
    for (uint32_t l = 0; l < env->ids.learners; ++l) {
      env->regional_of[l] = config.regional_of(l);
      if (env->regional_of[l] >= 0) env->regional_learners[env->regional_of[l]] += 1;
    }
  }
  env->fragments_of.resize(config.shards);
  for (uint32_t p = 0; p < static_cast<uint32_t>(config.fragments); ++p) {
    const uint32_t s = p % static_cast<uint32_t>(config.shards);
    env->shard_of.push_back(s);
    env->fragments_of[s].push_back(p);
  }
  // A regional syncer's slot (shard slot shards + r) holds every fragment.
  for (uint32_t r = 0; r < env->ids.regionals; ++r) {
    std::vector<uint32_t> all(static_cast<size_t>(config.fragments));
    for (uint32_t p = 0; p < all.size(); ++p) all[p] = p;
    env->fragments_of.push_back(std::move(all));
  }
  if (virtual_time) {
    while (env->tick_scale < static_cast<int64_t>(env->ids.count())) env->tick_scale *= 2;
    env->max_virtual_ns = INT64_MAX / env->tick_scale / 2 * ns_per_slot(env->tick_scale);
    if (config.duration_s > to_s(env->max_virtual_ns)) {
      return status(errc::invalid_argument, "duration_s: " + std::to_string(config.duration_s) +
                                                " s is more than a simulation of " +
                                                std::to_string(env->ids.count()) +
                                                " actors can represent (" +
                                                std::to_string(to_s(env->max_virtual_ns)) + " s)");
    }
  }
  return std::shared_ptr<const actor_env>(std::move(env));
}

}  // namespace diloco
