// Small cluster configurations the actor tests share: fast enough for the default suite,
// with every kind of fault when asked.
#pragma once

#include "runtime/config.hpp"

namespace diloco::testing {

// A learner's step-time multiplier and jitter at the default step time.
inline speed_config timing(double slowdown, double jitter) {
  speed_config s;
  s.slowdown = slowdown;
  s.jitter = jitter;
  return s;
}

inline run_config fast_config() {
  run_config c;
  c.model.context = 4;
  c.model.embed_dim = 8;
  c.model.hidden = 32;
  c.data.eval_tokens = 2048;
  c.learners = 4;
  c.shards = 2;
  c.batch = 16;
  c.fragments = 4;
  c.period_steps = 16;
  c.overlap_steps = 2;
  c.token_budget = 4 * 16 * 600;
  c.inner.lr = 3e-3;
  c.inner.total_steps = c.steps_per_learner();
  c.uplink = codec_config::make(codec_kind::int4);
  c.downlink = codec_kind::int4;
  return c;
}

// Everything at once: random interruptions, a scripted kill, lossy links, a partition, a
// shard restart and a membership change, so every actor has timers, dead slots and in-flight
// messages at the cuts.
inline run_config chaos_config() {
  run_config c = fast_config();
  c.max_learners = 5;
  c.chips_per_learner = 1000;
  c.interruptions.mtbi_hours = 250.0 * 1000 / 3600.0;
  c.interruptions.recovery_s = 30;
  c.failures = {failure_event{2, 120.0, 40.0}};
  c.link.drop_rate = 0.02;
  c.link.dup_rate = 0.02;
  c.partitions = {partition_event{{3}, 250.0, 40.0}};
  c.shard_restarts = {shard_restart_event{1, 330.0, 20.0}};
  c.membership = {membership_event{4, 180.0, true}};
  return c;
}

// Adaptive inner steps (period_steps: auto) on links that carry a large model's payloads
// (link.model_params) and slow to a tenth from 200 s to 400 s: H and tau go up, then back.
inline run_config adaptive_config() {
  run_config c = fast_config();
  c.period_auto.enabled = true;
  c.period_auto.max_steps = 256;
  c.link.model_params = 1e10;
  c.link_changes = {link_change{"", 200.0, 200.0, 0.1, 1.0}};
  return c;
}

// Regional syncers: three learners in eu and two in us sync through their region's regional
// syncer, a sixth (no region) with the shards directly; the regions' wide-area links are slow
// next to their own networks.
inline run_config regional_config(bool syncers = true) {
  run_config c = fast_config();
  c.learners = 6;
  c.token_budget = 6 * 16 * 500;
  c.inner.total_steps = c.steps_per_learner();
  region_config eu, us;
  eu.name = "eu";
  us.name = "us";
  eu.bandwidth_gbps = us.bandwidth_gbps = 0.5;
  eu.syncer = us.syncer = syncers;
  c.regions = {eu, us};
  speed_config s;
  c.speeds.assign(6, s);
  for (int i = 0; i < 3; ++i) c.speeds[static_cast<size_t>(i)].region = "eu";
  for (int i = 3; i < 5; ++i) c.speeds[static_cast<size_t>(i)].region = "us";
  return c;
}

// Regional syncers with adaptive inner steps: the wide-area links as fast as the learner
// without a region's; eu's (which only its regional syncer crosses; its learners reach it
// over eu's own network) carries a large model's payloads and slows to a tenth from 200 s to
// 400 s.
inline run_config regional_adaptive_config() {
  run_config c = regional_config();
  for (auto& r : c.regions) r.bandwidth_gbps = c.link.bandwidth_gbps;
  c.period_auto.enabled = true;
  c.period_auto.max_steps = 256;
  c.link.model_params = 1e10;
  c.link_changes = {link_change{"eu", 200.0, 200.0, 0.1, 1.0}};
  return c;
}

// fast_config with another token budget (and the inner schedule sized to it).
inline run_config fast_config(uint64_t token_budget) {
  run_config c = fast_config();
  c.token_budget = token_budget;
  c.inner.total_steps = c.steps_per_learner();
  return c;
}

}  // namespace diloco::testing
