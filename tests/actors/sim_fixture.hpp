// An actor system on CAF's test coordinator for actor unit tests: one thread, virtual time,
// `drain()` runs everything that is ready and every timer until nothing is left.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <caf/send.hpp>
#include <memory>
#include <vector>

#include "protocol/type_ids.hpp"
#include "runtime/config.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"

namespace diloco::testing {

// The smallest cluster an actor test needs: the MLP at its smallest, `learners` learners and
// `shards` shards over `fragments` fragments, a quorum of one, a short evaluation.
inline run_config tiny_config(int learners, int shards, int fragments) {
  run_config c;
  c.model.hidden = 16;
  c.model.embed_dim = 4;
  c.model.context = 3;
  c.learners = learners;
  c.shards = shards;
  c.fragments = fragments;
  c.quorum = 1;
  c.data.eval_tokens = 64;
  return c;
}

// A stand-in actor ignores what it has no handler for, silently (caf::drop would answer each
// message with an error, and an unexpected error stops the actor that gets it).
inline void ignore_unhandled(caf::scheduled_actor* self) {
  self->set_default_handler(
      [](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
        return caf::message{};
      });
}

class sim_fixture {
 public:
  sim_fixture() {
    cfg_.set("scheduler.policy", caf::atom("testing"));
    cfg_.set("logger.file-verbosity", caf::atom("quiet"));
    cfg_.set("logger.console-verbosity", caf::atom("quiet"));
    register_protocol(cfg_);
    sys_ = std::make_unique<caf::actor_system>(cfg_);
    sched_ = &dynamic_cast<caf::scheduler::test_coordinator&>(sys_->scheduler());
  }
  ~sim_fixture() {
    for (auto& a : owned_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    drain();
  }

  caf::actor_system& sys() { return *sys_; }
  // Runs ready actors and fires timers (advancing virtual time) until nothing is left.
  void drain() { drain(SIZE_MAX); }
  // The same for at most `timeouts` timers: a run whose timers go on for ever (random failures).
  void drain(size_t timeouts) {
    for (;;) {
      sched_->run();
      if (!sched_->has_pending_timeout() || timeouts-- == 0) return;
      sched_->trigger_timeout();
    }
  }
  // An actor that drops whatever it receives, silently.
  caf::actor sink() {
    return own(sys_->spawn([](caf::event_based_actor* self) -> caf::behavior {
      ignore_unhandled(self);
      return {[](start_msg) {}};
    }));
  }
  // A directory for testing actors on their own: every slot a sink until the test puts an
  // actor there.
  std::shared_ptr<cluster_directory> sink_directory(const actor_env& env) {
    auto dir = std::make_shared<cluster_directory>();
    for (uint32_t i = 0; i < env.ids.learners; ++i)
      dir->learners.push_back(caf::actor_cast<learner_actor>(sink()));
    for (uint32_t i = 0; i < env.ids.shards; ++i)
      dir->shards.push_back(caf::actor_cast<shard_actor>(sink()));
    dir->scheduler = caf::actor_cast<scheduler_actor>(sink());
    dir->metrics = caf::actor_cast<metrics_actor>(sink());
    dir->chaos = caf::actor_cast<supervisor_actor>(sink());
    return dir;
  }
  // Actors the fixture stops before the system goes away.
  template <class Handle>
  Handle own(Handle h) {
    owned_.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

 private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  caf::scheduler::test_coordinator* sched_ = nullptr;
  std::vector<caf::actor> owned_;
};

}  // namespace diloco::testing
