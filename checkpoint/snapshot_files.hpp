// Snapshot directories on disk (docs/formats.md, "Snapshots").
//
//   ROOT/snapshot-000004/actor-00000.dlsa ... actor-NNNNN.dlsa   one file per actor
//   ROOT/snapshot-000004/MANIFEST                                 written last
//
// Each file is a checksummed frame (checkpoint/frame.hpp). An actor file holds the run's
// identity, the snapshot number, the actor's index and role, and its part (state at the cut,
// pending timers, recorded channel messages). The manifest holds the run's identity and
// configuration, the tick to resume at, and every actor file's size and checksum; it is
// written only after every actor file is durable, by atomic rename, so a directory without a
// manifest is a snapshot that was being written when the process died. Nothing is ever
// written over: a snapshot number that exists already goes to "snapshot-000004.1".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/span.hpp"
#include "base/status.hpp"
#include "protocol/tensor_blob.hpp"

namespace diloco {

// 2: a learner's computation is saved as its own bytes (any model), not as the MLP's fields.
// 3: the learner kinds keep their progress since the last report as one meter; a shard keeps
// the outer gradients waiting for service under a modelled merge cost, and each fragment its
// outer round in progress; the data-parallel shard slots save a reducer's state.
// 4: the metrics actor keeps each learner's reported tokens and steps over its incarnations.
// 5: the manifest lists each actor file's frame checksum (of its payload), so that one pass
// writes a file and one pass checks it; the built-in learner's state is the same.
// 6: the manifest's run identity is a hash of the configuration's values (config/identity.hpp),
// no longer of its printed text.
// 7: a shard keeps each learner's reported step time and when an armed grace window ends (the
// window follows the slowest live learner and moves earlier as deltas arrive).
// 8: adaptive inner steps: a learner keeps its schedule with a change waiting for its step, its
// recent sends and measured rounds; a shard the learners' join latencies and newest arrivals,
// and each pending delta's time on the wire and tau; the scheduler H, tau and the needs heard.
// 9: regional syncers: a shard slot keeps its view of the shards, its merged sends awaiting
// their answer and its uplink's error feedback; a learner its view of its regional syncer.
// 10: a regional syncer under adaptive inner steps keeps the schedule change it measures under,
// its wide-area rounds and its shards' latest answers, and each merged send's bytes.
constexpr uint32_t snapshot_format_version = 10;

struct actor_file_header {
  uint64_t run_id = 0;
  uint64_t snapshot = 0;
  uint32_t index = 0;
  uint8_t role = 0;  // runtime/channels.hpp actor_role
  int64_t cut_tick = 0;
  std::string summary;
};

struct manifest_entry {
  uint32_t index = 0;
  uint8_t role = 0;
  std::string file;  // name inside the snapshot directory
  uint64_t bytes = 0;
  uint64_t checksum = 0;  // the file's frame checksum: XXH3 of its payload
  int64_t cut_tick = 0;
  std::string summary;
};

struct snapshot_manifest {
  uint64_t run_id = 0;
  uint64_t snapshot = 0;
  int64_t tick_scale = 1;
  int64_t resume_tick = 0;  // the earliest cut: the clock restarts here
  std::string config_text;  // the run's configuration (YAML, as `diloco config` prints it)
  std::vector<manifest_entry> actors;  // by actor index
};

struct actor_file {
  actor_file_header header;
  std::vector<uint8_t> part;
};
result<actor_file> decode_actor_file(byte_view file, const std::string& what);

std::vector<uint8_t> encode_manifest(const snapshot_manifest& m);
result<snapshot_manifest> decode_manifest(byte_view file, const std::string& what);

// A snapshot written part by part as its parts come, so that its writer never holds more than
// the part in hand (a deployed leader receiving learners' parts of gigabytes): open() makes
// the directory, write_part() writes one actor's file (durable when it returns), commit() the
// manifest last, once every actor's file is there; abandon() removes the directory (a snapshot
// given up, or one whose write failed). A writer destroyed without commit() abandons.
class snapshot_writer {
 public:
  // A new directory for snapshot `snapshot` under root (never one that exists: an earlier
  // attempt at the number gets ".1" and so on).
  static result<std::unique_ptr<snapshot_writer>> open(const std::string& root, uint64_t snapshot);
  ~snapshot_writer();
  snapshot_writer(const snapshot_writer&) = delete;
  snapshot_writer& operator=(const snapshot_writer&) = delete;

  // Actor h.index's file: the header, then the part's pieces in order, never joined.
  status write_part(const actor_file_header& h, const std::vector<byte_view>& pieces);
  // The manifest, with an entry per actor file written (sorted by index); every index from 0
  // to `actors` - 1 must have been written. Returns the directory.
  result<std::string> commit(snapshot_manifest manifest, size_t actors);
  status abandon();
  const std::string& dir() const { return dir_; }
  uint64_t bytes() const { return bytes_; }  // of the actor files written so far

 private:
  snapshot_writer() = default;
  std::string dir_;
  std::vector<manifest_entry> entries_;
  uint64_t bytes_ = 0;
  bool done_ = false;
};

// Writes a whole snapshot under root: the actor files (parts[i] is actor i's, in pieces that
// are written in order, never joined), then the manifest. Returns the directory written.
result<std::string> write_snapshot(const std::string& root, snapshot_manifest manifest,
                                   const std::vector<actor_file_header>& headers,
                                   const std::vector<std::vector<byte_view>>& parts);

// A snapshot directory under root, as found.
struct snapshot_listing {
  std::string path;
  std::string name;
  uint64_t snapshot = 0;
  uint32_t attempt = 0;  // the ".N" suffix
  bool has_manifest = false;
};
// Sorted oldest first (by number, then attempt). Entries that are not snapshot directories
// are ignored; a root that cannot be read is an error.
result<std::vector<snapshot_listing>> list_snapshots(const std::string& root);

// Everything of one snapshot, checked: the manifest (frame, version), every actor file
// (present, size and checksum as the manifest says, frame, run and snapshot and index as the
// manifest says). Errors name the file and the problem.
struct loaded_snapshot {
  std::string path;
  snapshot_manifest manifest;
  // By actor index, each a view into its mapped file (checkpoint/file_io.hpp map_file: the
  // page cache's pages, not a copy); empty for an actor `wanted` left out.
  std::vector<tensor_blob> parts;
};
// `wanted`, when given, names the actors whose parts are read: the others' files are checked to
// be there at the size the manifest lists, and neither read nor checksummed (a deployed resume
// needs the shards' parts only: the learners' are several model sizes each).
using part_filter = std::function<bool(uint32_t index)>;
result<loaded_snapshot> load_snapshot(const std::string& path, const part_filter& wanted = {});

// Every check load_snapshot makes, made on every file without stopping at the first problem,
// for `diloco inspect`.
struct actor_file_check {
  manifest_entry entry;
  std::string problem;  // empty: the file is as the manifest says
};
struct snapshot_inspection {
  std::string path;
  std::optional<snapshot_manifest> manifest;
  std::string manifest_problem;  // why there is no manifest
  std::vector<actor_file_check> actors;
  bool ok() const;
};
snapshot_inspection inspect_snapshot(const std::string& path);

// The snapshot to resume from under root: the newest complete one that loads (or number
// `only`, when given). Each newer one that was skipped is reported in `skipped` with why.
struct resume_choice {
  loaded_snapshot snapshot;
  std::vector<std::string> skipped;
};
// `check`, when given, is made on each candidate after its files load (a structural check of
// its contents); a candidate it refuses is skipped like a damaged one.
result<resume_choice> choose_snapshot(
    const std::string& root, std::optional<uint64_t> only = std::nullopt,
    const std::function<status(const loaded_snapshot&)>& check = {});

// "244.1 MB in 0.41 s, 595 MB/s": a snapshot's size and how fast its files were written.
std::string snapshot_rate(uint64_t bytes, double seconds);

// Deletes run `run_id`'s oldest complete snapshots (by when they were written) beyond `keep`,
// and incomplete ones numbered below its newest complete one. Another run's snapshots in the
// same root are never deleted, and a directory holding files a snapshot writer does not make
// keeps them (remove_snapshot_dir).
void prune_snapshots(const std::string& root, uint32_t keep, uint64_t run_id);

// Removes a snapshot directory's own files (actor files, the manifest, their temporaries),
// then the directory; a directory that holds anything else keeps it, and is kept (an error
// saying so).
status remove_snapshot_dir(const std::string& path);

}  // namespace diloco
