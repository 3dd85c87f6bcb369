// Running a whole cluster in one process on virtual time, deterministically.
//
// The actor system uses CAF's test coordinator: one thread, and a clock that only moves when
// nothing is ready to run. Whenever several actors are ready, a generator seeded from the run
// seed picks which runs next, so different seeds explore different interleavings and one seed
// always gives the same run, bit for bit.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/snapshot_files.hpp"
#include "protocol/interfaces.hpp"
#include "runtime/config.hpp"
#include "runtime/env.hpp"
#include "runtime/observer.hpp"
#include "runtime/tape.hpp"
#include "tensor/params.hpp"

namespace diloco {

struct sim_options {
  // Called every few thousand events with the virtual time (s) and the events so far.
  std::function<void(double virtual_s, uint64_t events)> on_progress;
  uint64_t progress_every_events = 4096;
  // Snapshots (config `snapshot`): the run's identity and config text for the manifests, and a
  // call for each committed snapshot.
  uint64_t run_id = 0;
  std::string config_text;
  std::function<void(uint64_t snapshot, const std::string& path, uint64_t bytes, double write_s)>
      on_snapshot;
  // Stop the run (as if the process died) once this snapshot is committed (0: never).
  uint64_t stop_after_snapshot = 0;
  // Resume: the snapshot to continue from (its manifest's config must be the run's).
  // Its parts go to the actors at the start and are dropped from it then (a model-sized
  // snapshot is not held for the rest of the run); its manifest and path stay.
  std::shared_ptr<loaded_snapshot> resume;
  // The caller has checked that every part loads (hosts/resume_check.hpp check_snapshot_loads):
  // the run does not load each one a second time before it starts.
  bool resume_checked = false;
  // Record the run to this tape (runtime/tape.hpp).
  std::shared_ptr<tape_hook> tape;
  // The live monitor the metrics actor feeds (observe/live_metrics.hpp); none by default.
  std::shared_ptr<run_observer> observer;
  // On demand: when this flag becomes true (a signal handler may set it), the run takes a
  // snapshot (config `snapshot.dir` must be set) and clears the flag.
  std::atomic<bool>* snapshot_now = nullptr;
  // The learners' model (tensor/compute.hpp); empty: the built-in MLP of config.model.
  model_maker model;
  // Evaluate the global model every this many simulated seconds (0: only at the end). The
  // model is read from the shards between two events (then on_eval_taken(t) is called, there
  // and then) and evaluated outside the actors: the run is the same with or without it.
  // on_eval(t, loss) follows later, once the evaluation is done: at the latest at the next
  // evaluation's time or the run's end, at the same point of the run for any number of
  // threads (with more than one, evaluations run on the pool beside the learners' steps).
  // Decoupled and synchronous DiLoCo (data parallel keeps no global model on its shards).
  double eval_every_s = 0;
  std::function<void(double virtual_s)> on_eval_taken;
  std::function<void(double virtual_s, double eval_loss)> on_eval;
  // Threads for the learners' computation (docs/architecture.md "Parallel simulation"): with
  // more than one, each learner computes its next inner step ahead on a pool of this many.
  // The run is the same for any number, its trace hash included.
  int threads = 1;
  // Fold every message into the actors' traces (sim_result::trace_hash). Off, the run is the
  // same and its trace hash is 0: for runs whose hash nobody reads (a `diloco chaos` cell),
  // which then do a tenth less work. A taped run is traced.
  bool trace = true;
};

struct realtime_options {
  int threads = 0;  // CAF scheduler workers; 0: one per core
  // Called about every `progress_interval_s` with the tokens the metrics actor has counted.
  std::function<void(uint64_t tokens)> on_progress;
  double progress_interval_s = 0.2;
  double timeout_s = 0;                    // give up after this long (0: never)
  std::shared_ptr<tape_hook> tape;         // record the run to this tape
  std::shared_ptr<run_observer> observer;  // live monitor (observe/live_metrics.hpp)
  model_maker model;                       // the learners' model; empty: the built-in MLP
};

struct sim_result {
  run_config config;
  run_report run;
  supervisor_report supervisor;
  std::vector<learner_report> learners;       // by learner index
  std::vector<shard_report> shards;           // by shard index
  std::vector<shard_report> regionals;        // by regional syncer (shard: its slot)
  float_buffer params;                        // the final model (global, or the DP replicas')
  std::shared_ptr<const model_family> model;  // the model the run trained (names, shapes)
  double eval_loss = 0.0;
  std::string eval_error;     // why the final model has no evaluation (a user's model failed)
  double initial_loss = NAN;  // the initial model's on the same set (NaN: not evaluated)
  // False when the learners offer no evaluation at all (a PyTorch learner with data of its own
  // and no evaluate=): the trained model is the result, without a loss.
  bool evaluation_offered = true;
  double entropy_rate = -1.0;  // nats/token; negative when unknown
  double eval_floor = -1.0;    // the true model's loss on the eval set (data_source); ditto
  double virtual_s = 0.0;      // simulated duration of the run
  double wall_s = 0.0;         // all of it: set-up, the run, collection, evaluation
  double run_wall_s = 0.0;     // the run alone (first message to the last flush)
  uint64_t events = 0;         // messages processed
  uint64_t trace_hash = 0;     // every actor's input trace, combined in index order
  coordinator_report snapshots;
  uint64_t resumed_from = 0;  // the snapshot this run continued from (0: a fresh start)
  bool interrupted = false;   // stopped after a snapshot (sim_options::stop_after_snapshot)

  uint64_t tokens() const;
  // Useful chip-time over total chip-time, from the failure model's state (chaos actor).
  double goodput() const;
  // Share of the time in which training progressed anywhere.
  double uptime() const;
  uint64_t learner_bytes() const;  // sent + received by all learners
  // Sent + received by the shards: with regions, what crossed the wide-area links (a regional
  // syncer's learners reach it over their region's own network).
  uint64_t wide_area_bytes() const;
  int64_t idle_ns() const;
};

// Deterministic: one thread, virtual time, seeded interleaving (the simulation).
// Refuses (an error saying why and what to do) a run whose learners' and shards' buffers
// alone need more than `available` bytes of memory; run_simulation checks it against the
// memory available when it starts.
status check_memory(const run_config& config, uint64_t model_floats, uint64_t available);

result<sim_result> run_simulation(const run_config& config, const sim_options& options = {});

// The invariants every run must keep, whatever faults it met; returns the violations found
// (empty: all held):
//   - no delta merged twice (each shard's merge log);
//   - none merged into the wrong fragment (shards reject them; a learner never saw a version
//     go backwards);
//   - every delta that reached a shard was merged, dropped as stale, or rejected: counted;
//   - after the run stopped (and with it the faults), every live learner holds each fragment
//     at the shard's final version, bit for bit.
std::vector<std::string> check_invariants(const sim_result& result);

// Why a run that trained a model has no result to show (empty: it has one): its final model
// did not evaluate to a finite loss, or it evaluates worse than the model the run started from
// (the run diverged; the bound the command line exits 3 by).
std::string missing_result(const sim_result& result);

// Real time: the same actors on CAF's threaded scheduler, steps as fast as the hardware goes
// (slowdowns emulated by waiting), links as fast as memory. Not deterministic; the placement of
// a deployment in one process. `virtual_s` reports wall-clock seconds of the run.
result<sim_result> run_realtime(const run_config& config, const realtime_options& options = {});

// Replay (`diloco replay`): re-executes actors from a tape. Each selected actor gets its
// recorded inputs, in the recorded order and at the recorded ticks, with nothing delivered
// between actors; every message it sends is compared (type, destination, content digest,
// vector clock) with the recorded one, and what a real-time actor read from outside the run
// (the clock) is the recorded value. The first difference stops the replay. A deployed run's
// tapes, merged (merge_tapes), replay the same way: an actor whose node was restarted is
// spawned afresh where the next process's tape begins, as the new process did.
struct replay_options {
  int64_t actor = -1;  // only this actor (-1: every actor, each from its own inputs)
  int64_t until = -1;  // with actor: stop before its input number `until` and dump its state
  // Called just before input `until` would be delivered (e.g. to stop in a debugger).
  std::function<void(const tape_event&)> at_until;
  std::function<void(uint64_t done, uint64_t total)> on_progress;
  model_maker model;  // the recorded run's model; empty: the built-in MLP
};
struct replay_divergence {
  uint32_t actor = 0;
  uint64_t input_index = 0;  // the actor's input being handled (0-based)
  uint64_t input_event = 0;  // its position in tape.events
  uint64_t input_seq = 0;    // its number on the tape that recorded it (tape_event::seq)
  int64_t tick = 0;
  uint64_t sent_index = 0;  // the actor's send that differs (0-based)
  std::string what;         // what differs, recorded vs replayed
  std::vector<uint64_t> recorded_clock, replayed_clock;
};
struct replay_result {
  uint64_t inputs = 0;          // delivered
  uint64_t sends_checked = 0;   // matched the recording
  uint64_t sends_past_cut = 0;  // sent past the end of a cut recording: not checkable
  uint64_t reads_given = 0;     // recorded values given in place of reading the clock
  // Inputs whose payload matched the send their (recorded) sender made; the others came from
  // actors no tape given records, or from a part of a sender's recording that was cut
  uint64_t inputs_matched = 0;
  // States at a rotating recording's checkpoints that matched the replayed actor's
  uint64_t checkpoints_checked = 0;
  std::vector<uint32_t> actors;
  std::optional<replay_divergence> divergence;
  bool stopped_at_until = false;
  std::vector<uint8_t> state;  // at `until`: the actor's state (actors/state_io.hpp)
  std::string summary;
};
result<replay_result> replay_tape(const run_config& config, const tape& t,
                                  const replay_options& options = {});

}  // namespace diloco
