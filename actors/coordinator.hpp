// The snapshot coordinator role: starts Chandy-Lamport snapshots (periodically in simulated
// time, at scripted times, every N cluster steps as the metrics actor counts them, or on
// demand), collects every actor's part, and writes the snapshot directory: one file per actor,
// then the manifest (checkpoint/snapshot_files.hpp). One snapshot at a time: a request while
// one is being collected is counted as skipped. Writing is the only thing here that touches
// the wall clock or the disk, and neither feeds back into the run.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "protocol/interfaces.hpp"
#include "runtime/directory.hpp"
#include "runtime/env.hpp"
#include "runtime/transport.hpp"

namespace diloco {

class snapshot_writer;

// What the harness adds to the config for the manifest: the run's identity and its config
// as text, and whom to tell when a snapshot is committed.
struct snapshot_context {
  uint64_t run_id = 0;
  std::string config_text;
  // Committed: its number, directory, bytes and the seconds its files took to write and sync.
  std::function<void(uint64_t snapshot, const std::string& path, uint64_t bytes, double write_s)>
      on_commit;
  // The number of this execution's first snapshot. A deployed run resumed from snapshot n
  // goes on above n (and above every snapshot already in the directory): its restored actors
  // have recorded up to n and take no part in a snapshot numbered n or below.
  uint64_t first_snapshot = 1;
};

struct coordinator_state {
  std::shared_ptr<const actor_env> env;
  directory_ptr dir;
  std::shared_ptr<const snapshot_context> ctx;
  outbox out;

  // Saved in snapshots.
  uint64_t next = 1;  // number of the next snapshot
  uint64_t tick_seq = 0;
  int64_t start_ns = 0;
  int64_t next_periodic_ns = -1;  // -1: no periodic snapshots
  uint32_t next_at = 0;           // index into the sorted scripted times
  bool stopped = false;
  coordinator_report report;

  // The snapshot being collected (not saved: a restored run has none). Each part is written to
  // its file as it comes (checkpoint/snapshot_files.hpp, snapshot_writer), so the coordinator
  // holds one part at a time, whatever the number of actors; the manifest goes last.
  uint64_t collecting = 0;
  int64_t collecting_since_ns = 0;
  std::vector<uint8_t> arrived;  // by actor index: its part came
  size_t parts_in = 0;
  std::shared_ptr<snapshot_writer> writer;
  std::string failure;      // why this snapshot cannot be written ("": nothing went wrong yet)
  int64_t resume_tick = 0;  // the earliest cut so far
  double write_s = 0.0;     // wall seconds spent writing its files
  uint64_t bytes = 0;       // its parts' payload bytes

  static inline const char* name = "snapshot_coordinator";
};

// What a snapshot keeps of this state (actors/state_io.cpp saves and loads it with
// protocol/persist.hpp): every field the actor computes with, beside the struct so that a
// field added above is added here too. Not kept: the wiring (env, dir), the snapshot agent,
// and scratch that every use overwrites.
template <class F>
void persist_fields(F& f, coordinator_state& x) {
  // The report's counters are this process's (a resumed run counts its own snapshots).
  f(x.next, x.tick_seq, x.start_ns, x.next_periodic_ns, x.next_at, x.stopped, x.out);
}

// Control messages to the coordinator are not on a modelled link: they count no bytes.
template <class Msg>
uint64_t received_bytes(const coordinator_state&, const Msg&) {
  return 0;
}

coordinator_actor::behavior_type snapshot_coordinator(
    coordinator_actor::stateful_pointer<coordinator_state> self,
    std::shared_ptr<const actor_env> env, directory_ptr dir,
    std::shared_ptr<const snapshot_context> ctx);

}  // namespace diloco
