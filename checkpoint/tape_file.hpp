// Replay tapes on disk (docs/formats.md, "Tapes"): what every actor of a run received, in
// order, and what it sent, so that `diloco replay` can re-execute actors and check them.
//
// A tape is a sequence of checksummed chunks (checkpoint/frame.hpp), written as the run goes:
// a header (run identity, configuration, seeds, actors), then batches of blobs, payloads and
// events. A run that dies leaves a tape whose complete chunks are all readable. Payloads are
// message contents without their stamps, stored once by content digest; the tensor blobs
// inside them are stored once by their own checksum; each event refers to a payload and
// carries its own stamp (sender, vector clock, send time).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"
#include "protocol/tensor_blob.hpp"

namespace diloco {

// 2: reads (real-time runs) and the recording node, its process and actors in the header.
// 3: volumes (a rotating recording) and checkpoints.
// 4: checkpoints of the metrics actor carry each learner's reported tokens and steps.
// 5: a timer event carries when the timer was set (sent_ns; peer: the actor itself; -1: not
//    known, set before a resume).
// 6: the run identity in the header is a hash of the configuration's values
//    (config/identity.hpp), no longer of its printed text.
// 7: checkpoints of a shard keep each learner's step time and its armed grace windows' ends.
// 8: adaptive inner steps: schedules carry a change and the step it holds from, replies the
// uplink's time on the wire and the join's latency, deltas their tau; the pace report; the
// actors' states keep what they measured (actors/pace.hpp).
// 9: regional syncers (actors past the services; their states in checkpoints).
// 10: a regional syncer's state as snapshot format 10 keeps it (its checkpoints).
constexpr uint32_t tape_format_version = 10;

enum class tape_kind : uint8_t {
  start = 0,    // the harness started the actor (fresh, or restored from a snapshot)
  message = 1,  // a message from another actor arrived and was handled
  timer = 2,    // one of the actor's own timers fired
  dropped = 3,  // a message reached the slot while no process ran there
  sent = 4,     // the actor sent a message (peer: the destination)
  read = 5,     // the actor read a value from outside the run (type: tape_read, tick: the value)
  // A rotating recording began a new volume: the actor's state before its first input there
  // (payload: a start_msg restoring it), so that replay can begin at this volume.
  checkpoint = 6,
};
const char* to_string(tape_kind k);

// What a real-time actor read that its inputs do not determine (runtime/transport.hpp): replay
// gives the recorded value back instead of reading it again.
enum class tape_read : int32_t {
  clock = 0,    // the shared clock (runtime/shared_clock.hpp), nanoseconds
  mailbox = 1,  // the length of the actor's mailbox
};
const char* to_string(tape_read r);

struct tape_event {
  uint64_t seq = 0;  // global order of the run
  uint32_t actor = 0;
  tape_kind kind = tape_kind::message;
  int32_t type = -1;            // protocol/wire.hpp tag
  int64_t tick = 0;             // when (clock ticks; env.tick_scale per simulated ns)
  uint32_t peer = 0;            // sender (inputs) or destination (sent)
  int64_t sent_ns = 0;          // the stamp's send time; a timer: when it was set (-1: unknown)
  uint64_t digest = 0;          // content digest (protocol/digest.hpp)
  uint64_t payload = 0;         // inputs: the key of the stored message (XXH3 of its record)
  std::vector<uint64_t> clock;  // the stamp's vector clock (empty: no stamp)
};

struct tape_header {
  uint64_t run_id = 0;
  uint64_t seed = 0;
  uint64_t interleave_seed = 0;
  int64_t tick_scale = 1;
  std::string config_text;     // the run's configuration (YAML)
  std::vector<uint8_t> roles;  // by actor index (runtime/channels.hpp actor_role)
  bool virtual_time = true;
  // Deployed runs: every node records its own actors on its own tape. `node` names it (empty:
  // the whole run in one process), `incarnation` is its process (0 the first, one more per
  // restart), `recorded` the actors it hosts (empty: all of them).
  std::string node;
  uint32_t incarnation = 0;
  std::vector<uint32_t> recorded;
  // A rotating recording (tape_recorder::rotate) writes a process's history as volumes 0, 1,
  // ...: each one a whole tape file, each actor's events on it beginning with a checkpoint.
  uint32_t volume = 0;
  // The learner the recording process ran (python3 -m diloco ... --learner MODULE:FUNCTION);
  // empty: the built-in model, or no learner hosted there. Replay needs the same one.
  std::string learner;

  bool records(uint32_t actor) const {
    return recorded.empty() || std::find(recorded.begin(), recorded.end(), actor) != recorded.end();
  }
};

// Appends chunks to a tape file. Not thread-safe: its user (tape_recorder) serializes calls.
// Records are buffered and written as a chunk every `chunk_bytes` or on flush().
class tape_writer {
 public:
  static result<std::unique_ptr<tape_writer>> create(const std::string& path,
                                                     const tape_header& header);
  ~tape_writer();

  // Whether a payload / blob with this key is stored already (or queued).
  bool has_payload(uint64_t digest);
  bool has_blob(uint64_t key);
  void add_blob(uint64_t key, std::vector<uint8_t> bytes);
  void add_payload(uint64_t digest, std::vector<uint8_t> bytes);
  void add_event(tape_event e);
  // Writes what is buffered as chunks; errors are kept and returned here and by close().
  status flush();
  // Writes the end chunk and closes the file.
  status close();

  uint64_t events() const { return events_; }
  uint64_t bytes_written() const { return bytes_written_; }
  // Written and buffered: what the file will hold after the next flush.
  uint64_t bytes_total() const { return bytes_written_ + buffered_bytes_; }
  // Also write what is buffered once it is this old (0: only by size): a process killed while
  // recording then loses at most about this much of its run (real-time and deployed runs).
  void flush_every(double seconds) { flush_every_s_ = seconds; }

 private:
  tape_writer() = default;
  status flush_locked();
  status write_chunk(uint8_t kind, const std::vector<uint8_t>& payload);

  std::string path_;
  std::FILE* file_ = nullptr;
  status error_;
  std::unordered_set<uint64_t> payload_keys_, blob_keys_;
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> blobs_, payloads_;
  std::vector<tape_event> events_buf_;
  size_t buffered_bytes_ = 0;
  uint64_t events_ = 0;
  uint64_t bytes_written_ = 0;
  bool closed_ = false;
  double flush_every_s_ = 0;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
};

// Where a stretch of a tape's events was recorded: one file, of one process.
struct tape_segment {
  std::string path;           // its files, comma-separated when it has several volumes
  uint32_t first_volume = 0;  // > 0: the volumes before were rotated away
  uint32_t volumes = 1;
  std::string node;          // "": the whole run in one process
  uint32_t incarnation = 0;  // the node's process (0 the first)
  bool cut = false;          // the recording stopped early (the process died): no end chunk
  std::string truncation;    // then: what was cut off, and where
};

// A whole tape in memory, checked: every chunk's frame and checksum, every record, every
// event's payload present. Errors name the file, the chunk and the byte offset.
struct tape {
  std::string path;
  tape_header header;
  std::map<uint64_t, tensor_blob> blobs;              // key -> encoded blob (held once)
  std::map<uint64_t, std::vector<uint8_t>> payloads;  // key -> message record (no stamp)
  std::vector<tape_event> events;                     // by seq
  bool complete = false;  // the end chunk was there (false: the run died while recording)
  uint64_t file_bytes = 0;
  std::string truncation;  // with allow_truncated: what was cut off, and where
  // The volumes joined here (merge_tapes): the first one's number and how many.
  uint32_t first_volume = 0;
  uint32_t volumes = 1;
  // A deployed run's tapes merged into one (merge_tapes): where each event was recorded. Empty
  // for a single file.
  std::vector<tape_segment> segments;
  std::vector<uint32_t> segment_of;  // by event: index into segments

  uint32_t segment(size_t event) const { return segment_of.empty() ? 0 : segment_of[event]; }
};
// A tape cut short (the recording process died) is an error naming where, unless
// allow_truncated: then its complete chunks are returned and `truncation` says what is missing.
// Damage inside a complete chunk is always an error.
result<tape> read_tape(const std::string& path, bool allow_truncated = false);
// The same from bytes in memory; `path` names them in errors.
result<tape> parse_tape(byte_view bytes, const std::string& path, bool allow_truncated = false);

// The tapes of every node (and every process of a node) of one deployed run, as one tape: each
// actor's events are those of the tapes that record it, process after process. They must be of
// one run (run identity, configuration, actors) and each actor recorded by one node; two tapes
// of the same process, or a process of a node missing between two others, are refused by name.
// A tape cut short is taken when a later process of its node follows (it was killed) or when
// allow_truncated. One tape is returned as it is.
//
// The volumes of one process join into one history; they must follow each other without a gap,
// and only the last may be cut. When the first ones were rotated away, each actor's history
// begins at its first checkpoint (what it recorded before, the end of an input whose start is
// gone, is left out).
result<tape> merge_tapes(std::vector<tape> tapes, bool allow_truncated = false);

}  // namespace diloco
