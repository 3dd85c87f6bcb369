// CAF type-ID registration of every message type. Every node of a deployment registers the
// same block, so the types get the same IDs and names everywhere. Call
// `register_protocol(cfg)` on each actor_system_config before creating the system.
#pragma once

#include <caf/actor_system_config.hpp>
#include <caf/type_id.hpp>

#include "protocol/interfaces.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(diloco, caf::first_custom_type_id)
CAF_ADD_TYPE_ID(diloco, (diloco::join_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::schedule_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::outer_gradient_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::fragment_update_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::pull_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::gradient_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::reduced_gradient_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::progress_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::stop_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::flushed_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::step_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::grace_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::fault_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::chaos_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::capacity_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::deadline_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::leave_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::peer_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::copy_request))
CAF_ADD_TYPE_ID(diloco, (diloco::copy_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::recovery_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::membership_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::shard_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::start_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::kill_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::restart_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::closed_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::marker_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::snapshot_part))
CAF_ADD_TYPE_ID(diloco, (diloco::snapshot_request))
CAF_ADD_TYPE_ID(diloco, (diloco::snapshot_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::coordinator_report))
CAF_ADD_TYPE_ID(diloco, (diloco::coordinator_actor))
CAF_ADD_TYPE_ID(diloco, (diloco::report_request))
CAF_ADD_TYPE_ID(diloco, (diloco::learner_report))
CAF_ADD_TYPE_ID(diloco, (diloco::shard_report))
CAF_ADD_TYPE_ID(diloco, (diloco::global_request))
CAF_ADD_TYPE_ID(diloco, (diloco::global_snapshot))
CAF_ADD_TYPE_ID(diloco, (diloco::run_report))
CAF_ADD_TYPE_ID(diloco, (diloco::supervisor_report))
CAF_ADD_TYPE_ID(diloco, (diloco::learner_actor))
CAF_ADD_TYPE_ID(diloco, (diloco::shard_actor))
CAF_ADD_TYPE_ID(diloco, (diloco::scheduler_actor))
CAF_ADD_TYPE_ID(diloco, (diloco::metrics_actor))
CAF_ADD_TYPE_ID(diloco, (diloco::supervisor_actor))
CAF_ADD_TYPE_ID(diloco, (diloco::merge_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::rewire_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::diverged_msg))
CAF_ADD_TYPE_ID(diloco, (diloco::service_tick))
CAF_ADD_TYPE_ID(diloco, (diloco::pace_msg))
CAF_END_TYPE_ID_BLOCK(diloco)

namespace diloco {

inline void register_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::diloco>();
}

}  // namespace diloco
