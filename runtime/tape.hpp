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
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint/tape_file.hpp"
#include "protocol/messages.hpp"
#include "runtime/config.hpp"

namespace diloco {

class tape_hook {
 public:
  virtual ~tape_hook() = default;
  // Replaying: inputs come from the tape, and nothing an actor sends or schedules is delivered.
  virtual bool replaying() const = 0;
  // An input the actor is about to handle: `content` is the message without its stamp, of
  // type `type` (protocol/wire.hpp tag); `st` is its stamp (nullptr: none).
  virtual void input(uint32_t actor, tape_kind kind, int64_t tick, int type,
                     const caf::message& content, uint64_t digest, const stamp* st) = 0;
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

// Records a run to a tape file.
class tape_recorder final : public tape_hook {
 public:
  static result<std::shared_ptr<tape_recorder>> create(const std::string& path,
                                                       const tape_header& header);
  bool replaying() const override { return false; }
  void input(uint32_t actor, tape_kind kind, int64_t tick, int type, const caf::message& content,
             uint64_t digest, const stamp* st) override;
  void sent(uint32_t actor, uint32_t dest, int64_t tick, int type, uint64_t digest,
            const stamp& st) override;
  void read(uint32_t actor, tape_read what, int64_t value) override;
  // Writes the end of the tape; the first write error of the run, if any.
  status close();
  uint64_t events() const;
  uint64_t bytes_written() const;
  // Real-time and deployed runs: what is recorded reaches the file within `seconds`.
  void flush_every(double seconds);
  // A bound on the tape's size (0: none). Once the tape holds `bytes`, each actor's recording
  // ends before its next input (what the input it is handling sends is still recorded), so
  // that every actor's history on the tape is whole up to where it ends.
  void limit(uint64_t bytes) { limit_bytes_ = bytes; }
  // How many actors' recordings the limit ended (0: none).
  uint64_t actors_stopped() const;

 private:
  tape_recorder(std::unique_ptr<tape_writer> w, size_t actors);
  bool stopped_locked(uint32_t actor) const { return actor < stopped_.size() && stopped_[actor]; }
  // Writes the actor's pending reads (the tape's lock held).
  void drain_locked(uint32_t actor);

  // An actor's reads since its last event: they go to the tape with its next event (or at
  // close), so that a reading takes the actor's own lock rather than the tape's. An actor
  // reads the clock about six times per input; one lock for the whole process made a node's
  // actors wait for each other whenever the holder was preempted.
  struct pending_reads {
    std::mutex mu;
    std::vector<std::pair<tape_read, int64_t>> reads;
  };
  std::vector<std::unique_ptr<pending_reads>> pending_;  // by actor
  std::unique_ptr<tape_writer> writer_;
  uint64_t seq_ = 0;
  uint64_t limit_bytes_ = 0;
  std::vector<bool> stopped_;  // by actor: its recording ended at the limit
  uint64_t stopped_count_ = 0;
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
