#include "runtime/tape.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "base/check.hpp"
#include "base/checksum.hpp"
#include "protocol/persist.hpp"
#include "protocol/wire.hpp"
#include "runtime/channels.hpp"
#include "runtime/env.hpp"

namespace diloco {

tape_header make_tape_header(const run_config& config, uint64_t run_id, std::string config_text,
                             bool virtual_time) {
  tape_header h;
  h.run_id = run_id;
  h.seed = config.seed;
  h.interleave_seed = config.interleave_seed;
  h.config_text = std::move(config_text);
  // The learner model is not part of the configuration: the header names it, so that a replay
  // with another model can say why it diverges (apps/cmd_replay.cpp).
  h.learner = process_model_name();
  h.virtual_time = virtual_time;
  const actor_indices ids = actor_ids_of(config);
  for (uint32_t i = 0; i < ids.count(); ++i)
    h.roles.push_back(static_cast<uint8_t>(role_of(ids, i)));
  h.tick_scale = 1;
  if (virtual_time) {
    while (h.tick_scale < static_cast<int64_t>(ids.count())) h.tick_scale *= 2;
  }
  return h;
}

uint64_t blob_key(const tensor_blob& blob) {
  return checksum64(blob.view().data(), blob.size());
}

namespace {

// Saving: each blob goes to the writer once, the record keeps its key.
class writer_refs final : public blob_refs {
 public:
  explicit writer_refs(tape_writer& w) : w_(w) {}
  uint64_t put(const tensor_blob& blob) override {
    const uint64_t key = blob_key(blob);
    if (!w_.has_blob(key)) w_.add_blob(key, blob.copy());
    return key;
  }
  const tensor_blob* get(uint64_t) const override { return nullptr; }

 private:
  tape_writer& w_;
};

// Loading: blobs from the tape's table, shared (never copied) by every message that names them.
class tape_refs final : public blob_refs {
 public:
  explicit tape_refs(const tape& t) : t_(t) {}
  uint64_t put(const tensor_blob&) override { return 0; }
  const tensor_blob* get(uint64_t key) const override {
    auto found = t_.blobs.find(key);
    return found == t_.blobs.end() ? nullptr : &found->second;
  }

 private:
  const tape& t_;
};

}  // namespace

result<std::shared_ptr<tape_recorder>> tape_recorder::create(const std::string& path,
                                                             const tape_header& header) {
  auto w = tape_writer::create(path, header);
  if (!w) return w.error();
  return std::shared_ptr<tape_recorder>(new tape_recorder(std::move(*w), path, header));
}

tape_recorder::tape_recorder(std::unique_ptr<tape_writer> w, std::string path, tape_header header)
    : writer_(std::move(w)), path_(std::move(path)), header_(std::move(header)) {
  const size_t actors = header_.roles.size();
  pending_.reserve(actors);
  for (size_t a = 0; a < actors; ++a) pending_.push_back(std::make_unique<pending_reads>());
  needs_checkpoint_.assign(actors, false);
}

std::string tape_recorder::volume_path(uint32_t v) const {
  if (v == 0) return path_;
  const std::string suffix = ".tape";
  const bool tape_named = path_.size() > suffix.size() &&
                          path_.compare(path_.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string base = tape_named ? path_.substr(0, path_.size() - suffix.size()) : path_;
  return base + ".v" + std::to_string(v) + (tape_named ? suffix : "");
}

void tape_recorder::rotate(uint64_t volume_bytes, uint32_t keep) {
  std::lock_guard<std::mutex> guard(mu_);
  volume_bytes_ = volume_bytes;
  keep_ = keep;
}

void tape_recorder::maybe_rotate_locked() {
  // A volume holds its checkpoints and at least as much history: one whose checkpoints take
  // more than half of volume_bytes_ grows past it.
  if (volume_bytes_ == 0 || writer_->bytes_total() < std::max(volume_bytes_, 2 * checkpoint_bytes_))
    return;
  if (2 * checkpoint_bytes_ > volume_bytes_ && !warned_) {
    warned_ = true;
    spdlog::warn(
        "{}: the tape's bound is too small for this run: one volume's checkpoints (every "
        "actor's state) take {:.1f} MB, so each volume grows to {:.1f} MB, not {:.1f} MB (raise "
        "--tape-max-bytes to at least {:.0f} MB)",
        path_, checkpoint_bytes_ / 1e6, 2 * checkpoint_bytes_ / 1e6, volume_bytes_ / 1e6,
        2.0 * checkpoint_bytes_ * std::max<uint32_t>(keep_, 1) / 1e6);
  }
  const status closed = writer_->close();
  if (error_.ok()) error_ = closed;
  events_before_ += writer_->events();
  bytes_before_ += writer_->bytes_written();
  header_.volume += 1;
  writer_.reset();
  auto next = tape_writer::create(volume_path(header_.volume), header_);
  if (!next) {  // the recording ends here; close() says why
    if (error_.ok()) error_ = next.error();
    return;
  }
  writer_ = std::move(*next);
  writer_->flush_every(flush_every_s_);
  needs_checkpoint_.assign(needs_checkpoint_.size(), true);
  checkpoint_bytes_ = 0;
  if (keep_ > 0 && header_.volume >= keep_) {
    // Gone already when an earlier volume failed to close: not an error.
    (void)std::remove(volume_path(header_.volume - keep_).c_str());
  }
}

void tape_recorder::drain_locked(uint32_t actor) {
  DILOCO_CHECK(actor < pending_.size(), "tape: an actor the header does not have");
  pending_reads& p = *pending_[actor];
  std::lock_guard<std::mutex> mine(p.mu);
  if (p.reads.empty()) return;
  if (writer_) {
    for (const auto& [what, value] : p.reads) {
      tape_event e;
      e.seq = seq_++;
      e.actor = actor;
      e.kind = tape_kind::read;
      e.type = static_cast<int32_t>(what);
      e.tick = value;
      writer_->add_event(std::move(e));
    }
  }
  p.reads.clear();
}

namespace {

// An input's content, its tensor blobs and its event (without seq), stored on `w`.
tape_event store_input(tape_writer& w, uint32_t actor, tape_kind kind, int64_t tick, int type,
                       const caf::message& content, uint64_t digest, const stamp* st) {
  writer_refs refs(w);
  wire_message m{content};
  auto record = save_bytes_with(&refs, m);
  DILOCO_CHECK(!record.empty(), "tape: an input saved as nothing");
  tape_event e;
  e.actor = actor;
  e.kind = kind;
  e.type = type;
  e.tick = tick;
  e.digest = digest;
  e.payload = checksum64(record.data(), record.size());
  if (st != nullptr) {
    e.peer = st->sender;
    e.sent_ns = st->sent_at_ns;
    e.clock = st->clock.ticks();
  }
  if (!w.has_payload(e.payload)) w.add_payload(e.payload, std::move(record));
  return e;
}

}  // namespace

void tape_recorder::checkpoint_locked(uint32_t actor, int64_t tick,
                                      const checkpoint_source& source) {
  DILOCO_CHECK(actor < needs_checkpoint_.size(), "tape: a checkpoint of an unknown actor");
  needs_checkpoint_[actor] = false;
  std::vector<uint8_t> part = source ? source() : std::vector<uint8_t>{};
  if (part.empty()) {  // replay cannot begin this actor at this volume (join_volumes says so)
    ++missed_;
    return;
  }
  const uint64_t digest = checksum64(part.data(), part.size());
  checkpoint_bytes_ += part.size();
  start_msg restore{tensor_blob(std::move(part)), 0};
  tape_event e = store_input(*writer_, actor, tape_kind::checkpoint, tick, wire_tag_of<start_msg>(),
                             caf::make_message(std::move(restore)), digest, nullptr);
  e.seq = seq_++;
  writer_->add_event(std::move(e));
  ++checkpoints_;
}

void tape_recorder::input(uint32_t actor, tape_kind kind, int64_t tick, int type,
                          const caf::message& content, uint64_t digest, const stamp* st,
                          const checkpoint_source& checkpoint) {
  std::lock_guard<std::mutex> guard(mu_);
  drain_locked(actor);  // what the previous input read
  if (writer_) maybe_rotate_locked();
  if (!writer_) return;
  if (needs_checkpoint_[actor]) {
    // A start needs none: the actor begins there.
    if (kind == tape_kind::start)
      needs_checkpoint_[actor] = false;
    else
      checkpoint_locked(actor, tick, checkpoint);
  }
  tape_event e = store_input(*writer_, actor, kind, tick, type, content, digest, st);
  e.seq = seq_++;
  writer_->add_event(std::move(e));
}

int wire_tag_slow(const caf::message& msg) {
  return wire_tag(msg);
}

void tape_recorder::sent(uint32_t actor, uint32_t dest, int64_t tick, int type, uint64_t digest,
                         const stamp& st) {
  std::lock_guard<std::mutex> guard(mu_);
  DILOCO_CHECK(dest < pending_.size(), "tape: a send to an actor the header does not have");
  drain_locked(actor);  // read before this send, while handling the same input
  if (!writer_) return;
  tape_event e;
  e.seq = seq_++;
  e.actor = actor;
  e.kind = tape_kind::sent;
  e.type = type;
  e.tick = tick;
  e.peer = dest;
  e.sent_ns = st.sent_at_ns;
  e.digest = digest;
  e.clock = st.clock.ticks();
  writer_->add_event(std::move(e));
}

void tape_recorder::read(uint32_t actor, tape_read what, int64_t value) {
  DILOCO_CHECK(actor < pending_.size(), "tape: an actor the header does not have");
  pending_reads& p = *pending_[actor];
  std::lock_guard<std::mutex> mine(p.mu);
  p.reads.emplace_back(what, value);
}

status tape_recorder::close() {
  std::lock_guard<std::mutex> guard(mu_);
  for (uint32_t a = 0; a < pending_.size(); ++a) drain_locked(a);
  const status closed = writer_ ? writer_->close() : ok_status();
  return error_.ok() ? closed : error_;
}

void tape_recorder::flush_every(double seconds) {
  std::lock_guard<std::mutex> guard(mu_);
  flush_every_s_ = seconds;
  if (writer_) writer_->flush_every(seconds);
}

uint32_t tape_recorder::volume() const {
  std::lock_guard<std::mutex> guard(mu_);
  return header_.volume;
}
uint32_t tape_recorder::oldest_kept() const {
  std::lock_guard<std::mutex> guard(mu_);
  return keep_ > 0 && header_.volume + 1 > keep_ ? header_.volume + 1 - keep_ : 0;
}
uint64_t tape_recorder::checkpoints() const {
  std::lock_guard<std::mutex> guard(mu_);
  return checkpoints_;
}
uint64_t tape_recorder::checkpoints_missed() const {
  std::lock_guard<std::mutex> guard(mu_);
  return missed_;
}
uint64_t tape_recorder::events() const {
  std::lock_guard<std::mutex> guard(mu_);
  return events_before_ + (writer_ ? writer_->events() : 0);
}
uint64_t tape_recorder::bytes_written() const {
  std::lock_guard<std::mutex> guard(mu_);
  return bytes_before_ + (writer_ ? writer_->bytes_written() : 0);
}

result<caf::message> tape_message(const tape& t, const tape_event& e) {
  auto it = t.payloads.find(e.payload);
  if (it == t.payloads.end()) {
    return status(errc::corrupt_data,
                  t.path + ": event " + std::to_string(e.seq) + ": its payload is not on the tape");
  }
  tape_refs refs(t);
  wire_message m;
  const std::string what = t.path + ": payload of event " + std::to_string(e.seq);
  if (auto s = load_bytes_with(&refs, byte_view(it->second.data(), it->second.size()), what, m);
      !s.ok())
    return s;
  // Messages carry a stamp (some with an empty clock: a node's registry telling of a closed
  // link); timers and starts do not.
  if (e.kind != tape_kind::message && e.kind != tape_kind::dropped) return m.msg;
  stamp st{e.peer, vector_clock(e.clock), e.sent_ns};
  return wire_with_stamp(m.msg, &st);
}

}  // namespace diloco
