// Recording and replaying what actors receive and send (checkpoint/tape_file.hpp holds the
// file format). The transport (runtime/transport.hpp) reports every input an actor handles and
// every message it sends to the run's tape hook, when there is one:
//
//   - recording (`tape_recorder`): each input is stored (its content once, by digest; its
//     tensor blobs once, by checksum) with its stamp and tick; each send by its digest;
//   - replaying (`replay_tape`, hosts/simulation.hpp): the driver feeds an actor its recorded
//     inputs at their recorded ticks, nothing it sends is delivered, and the hook compares each
//     send with the recorded one. The first difference is the divergence.
#pragma once

#include <caf/message.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/tape_file.hpp"
#include "protocol/messages.hpp"
#include "runtime/config.hpp"

namespace diloco {

// What a rotating recording asks of an actor when a new volume begins: its state as a
// snapshot part (runtime/snapshot.hpp), empty when it could not be saved.
using checkpoint_source = std::function<std::vector<uint8_t>()>;

class tape_hook {
 public:
  virtual ~tape_hook() = default;
  // Replaying: inputs come from the tape, and nothing an actor sends or schedules is delivered.
  virtual bool replaying() const = 0;
  // An input the actor is about to handle: `content` is the message without its stamp, of
  // type `type` (protocol/wire.hpp tag); `st` is its stamp (nullptr: none). `checkpoint` gives
  // the actor's state as it is before this input, for a recording that needs it.
  virtual void input(uint32_t actor, tape_kind kind, int64_t tick, int type,
                     const caf::message& content, uint64_t digest, const stamp* st,
                     const checkpoint_source& checkpoint) = 0;
  // The actor sent a message of type `type` (protocol/wire.hpp tag) with content digest
  // `digest` to `dest`.
  virtual void sent(uint32_t actor, uint32_t dest, int64_t tick, int type, uint64_t digest,
                    const stamp& st) = 0;
  // Recording: the actor read `value` from outside the run (real time). Replaying: what the
  // actor reads instead of reading it again (the recorded value).
  virtual void read(uint32_t actor, tape_read what, int64_t value) {
    (void)actor, (void)what, (void)value;
  }
  virtual int64_t replay_read(uint32_t actor, tape_read what) {
    (void)actor, (void)what;
    return 0;
  }
  // A timer fired at `now` while the actor's earliest pending timer was due at `due`.
  virtual void timer_mismatch(uint32_t actor, int64_t due, int64_t now) {
    (void)actor, (void)due, (void)now;
  }
  // Replaying: the actor recorded its state on request (a marker).
  virtual void state(uint32_t actor, std::vector<uint8_t> bytes, std::string summary) {
    (void)actor, (void)bytes, (void)summary;
  }
};

// A real-time or deployed run's tape reaches its file at least this often (seconds): a process
// killed while recording loses about this much of its history.
constexpr double tape_flush_s = 1.0;

// A bound of N bytes on a tape (`--tape-max-bytes N`) keeps this many volumes of N / this
// bytes each: the newest history, between three quarters of N and N (and the chunk being
// written past it). Each volume begins with a checkpoint, one state per actor; a bound below
// eight times the checkpoints' size is overrun (the recorder says so).
constexpr uint32_t tape_volumes_kept = 4;

// Records a run to a tape file, or to a rotating series of them (rotate()).
class tape_recorder final : public tape_hook {
 public:
  static result<std::shared_ptr<tape_recorder>> create(const std::string& path,
                                                       const tape_header& header);
  bool replaying() const override { return false; }
  void input(uint32_t actor, tape_kind kind, int64_t tick, int type, const caf::message& content,
             uint64_t digest, const stamp* st, const checkpoint_source& checkpoint) override;
  void sent(uint32_t actor, uint32_t dest, int64_t tick, int type, uint64_t digest,
            const stamp& st) override;
  void read(uint32_t actor, tape_read what, int64_t value) override;
  // Writes the end of the tape; the first write error of the run, if any.
  status close();
  uint64_t events() const;
  // Bytes written to all volumes, the deleted ones included.
  uint64_t bytes_written() const;
  // Real-time and deployed runs: what is recorded reaches the file within `seconds`.
  void flush_every(double seconds);
  // A bounded recording that keeps the newest history: once a volume holds `volume_bytes`, and
  // at least as much history as checkpoints, the next one begins (PATH.v1.tape, PATH.v2.tape, ...
  // beside PATH.tape), each actor's first event on it a checkpoint of its state, and only the
  // newest `keep` volumes stay on disk (0: all of them). Replay can begin at any volume.
  void rotate(uint64_t volume_bytes, uint32_t keep);
  // `--tape-max-bytes`: rotate through tape_volumes_kept volumes of max_bytes / that (0: none).
  void bound(uint64_t max_bytes) {
    if (max_bytes > 0) rotate(max_bytes / tape_volumes_kept, tape_volumes_kept);
  }
  // The volume being written, the oldest still on disk, and the path of volume `v`.
  uint32_t volume() const;
  uint32_t oldest_kept() const;
  std::string volume_path(uint32_t v) const;
  // Checkpoints written, and actors whose state could not be saved for one.
  uint64_t checkpoints() const;
  uint64_t checkpoints_missed() const;

 private:
  tape_recorder(std::unique_ptr<tape_writer> w, std::string path, tape_header header);
  // Writes the actor's pending reads (the tape's lock held).
  void drain_locked(uint32_t actor);
  // Closes the volume and begins the next one, when it is full (the lock held).
  void maybe_rotate_locked();
  void checkpoint_locked(uint32_t actor, int64_t tick, const checkpoint_source& source);

  // An actor's reads since its last event: they go to the tape with its next event (or at
  // close), so that a reading takes the actor's own lock rather than the tape's. An actor
  // reads the clock about six times per input; one lock for the whole process made a node's
  // actors wait for each other whenever the holder was preempted.
  struct pending_reads {
    std::mutex mu;
    std::vector<std::pair<tape_read, int64_t>> reads;
  };
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<pending_reads>> pending_;  // by actor
  std::unique_ptr<tape_writer> writer_;
  std::string path_;
  tape_header header_;
  status error_;  // of an earlier volume
  uint64_t seq_ = 0;
  uint64_t events_before_ = 0, bytes_before_ = 0;  // in the volumes closed
  double flush_every_s_ = 0;
  uint64_t volume_bytes_ = 0;
  uint32_t keep_ = 0;
  std::vector<bool> needs_checkpoint_;  // by actor: not yet on the current volume
  uint64_t checkpoint_bytes_ = 0;       // on the current volume
  bool warned_ = false;                 // that volumes outgrow volume_bytes_
  uint64_t checkpoints_ = 0, missed_ = 0;
};

// The wire tag of a message type, looked up once per type.
int wire_tag_slow(const caf::message& msg);
template <class Msg>
int wire_tag_of() {
  static const int tag = wire_tag_slow(caf::make_message(Msg{}));
  return tag;
}

// The header of a tape of a run of `config` (its roles, tick scale and seeds).
tape_header make_tape_header(const run_config& config, uint64_t run_id, std::string config_text,
                             bool virtual_time);

// The key under which a tensor blob is stored on a tape: XXH3 of its bytes.
uint64_t blob_key(const tensor_blob& blob);

// A payload from the tape as a message again, with the event's stamp put back.
result<caf::message> tape_message(const tape& t, const tape_event& e);

}  // namespace diloco
