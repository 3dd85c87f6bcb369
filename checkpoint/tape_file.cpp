#include "checkpoint/tape_file.hpp"

#include <algorithm>
#include <limits>
#include <tuple>

#include <cstring>

#include "base/checksum.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "protocol/persist.hpp"

namespace diloco {

template <class F>
void persist_fields(F& f, tape_header& h) {
  f(h.run_id, h.seed, h.interleave_seed, h.tick_scale, h.config_text, h.roles, h.virtual_time,
    h.node, h.incarnation, h.recorded, h.volume, h.learner);
}

namespace {

constexpr std::array<char, 4> chunk_magic = {'D', 'L', 'T', 'P'};
enum chunk_kind : uint8_t {
  header_chunk = 0,
  blob_chunk = 1,
  payload_chunk = 2,
  event_chunk = 3,
  end_chunk = 4
};
constexpr size_t chunk_bytes = 4u << 20;
constexpr size_t chunk_events = 16384;

// Two's-complement sums and differences: a damaged record must not overflow a signed integer.
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

// Event chunks are packed (docs/formats.md, "Replay tapes"): most events are clock readings,
// and most fields are small or close to the one before, so each integer is a LEB128 varint,
// signed ones zigzagged, and seq and ticks are deltas within the chunk. A reading takes about
// 7 bytes instead of 61.
class event_packer {
 public:
  std::vector<uint8_t> pack(const std::vector<tape_event>& events) {
    out_.clear();
    out_.reserve(events.size() * 12);
    put(events.size());
    uint64_t seq = 0;
    int64_t tick = 0;
    std::vector<int64_t> read_value;  // by actor: its last reading in the chunk
    for (const auto& e : events) {
      out_.push_back(static_cast<uint8_t>(e.kind));
      put(e.actor);
      put(e.seq - seq);
      seq = e.seq;
      put_signed(e.type);
      if (e.kind == tape_kind::read) {
        if (read_value.size() <= e.actor) read_value.resize(e.actor + 1, 0);
        put_signed(wrap_sub(e.tick, read_value[e.actor]));
        read_value[e.actor] = e.tick;
        continue;
      }
      put_signed(wrap_sub(e.tick, tick));
      tick = e.tick;
      put(e.peer);
      put_signed(wrap_sub(e.sent_ns, e.tick));
      put_fixed(e.digest);
      if (e.kind != tape_kind::sent) put_fixed(e.payload);
      put(e.clock.size());
      for (uint64_t c : e.clock) put(c);
    }
    return std::move(out_);
  }

 private:
  void put(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<uint8_t>(v));
  }
  void put_signed(int64_t v) {
    put((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
  }
  void put_fixed(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::vector<uint8_t> out_;
};

// The reverse, refusing anything that runs past the record or does not fit its field.
class event_unpacker {
 public:
  event_unpacker(byte_view rec, std::string what) : rec_(rec), what_(std::move(what)) {}

  result<std::vector<tape_event>> unpack(size_t actors) {
    const uint64_t n = get();
    // Each event takes at least 5 bytes: a count past that is damage.
    if (!error_.ok() || n > rec_.size() / 5) return fail("its event count " + std::to_string(n));
    std::vector<tape_event> events(static_cast<size_t>(n));
    uint64_t seq = 0;
    int64_t tick = 0;
    std::vector<int64_t> read_value(actors, 0);
    for (auto& e : events) {
      if (at_ >= rec_.size()) return fail("it ends inside an event");
      e.kind = static_cast<tape_kind>(rec_[at_++]);
      const uint64_t actor = get();
      if (actor >= actors) return fail("an event of actor " + std::to_string(actor));
      e.actor = static_cast<uint32_t>(actor);
      seq += get();
      e.seq = seq;
      e.type = narrow<int32_t>(get_signed());
      if (e.kind == tape_kind::read) {
        read_value[e.actor] = wrap_add(read_value[e.actor], get_signed());
        e.tick = read_value[e.actor];
        continue;
      }
      tick = wrap_add(tick, get_signed());
      e.tick = tick;
      e.peer = narrow<uint32_t>(static_cast<int64_t>(get()));
      e.sent_ns = wrap_add(e.tick, get_signed());
      e.digest = get_fixed();
      if (e.kind != tape_kind::sent) e.payload = get_fixed();
      const uint64_t clocks = get();
      if (clocks > actors) return fail("a vector clock of " + std::to_string(clocks) + " entries");
      e.clock.resize(static_cast<size_t>(clocks));
      for (auto& c : e.clock) c = get();
      if (!error_.ok()) return error_;
    }
    if (!error_.ok()) return error_;
    if (at_ != rec_.size())
      return fail(std::to_string(rec_.size() - at_) + " bytes after its events");
    return events;
  }

 private:
  status fail(const std::string& why) {
    if (error_.ok()) error_ = status(errc::corrupt_data, what_ + ": damaged events: " + why);
    return error_;
  }
  uint64_t get() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= rec_.size()) {
        (void)fail("it ends inside a number");
        return 0;
      }
      const uint8_t b = rec_[at_++];
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    (void)fail("a number longer than 64 bits");
    return 0;
  }
  int64_t get_signed() {
    const uint64_t z = get();
    return static_cast<int64_t>((z >> 1) ^ (~(z & 1) + 1));
  }
  uint64_t get_fixed() {
    if (rec_.size() - at_ < 8 || at_ > rec_.size()) {
      (void)fail("it ends inside a digest");
      at_ = rec_.size();
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(rec_[at_ + i]) << (8 * i);
    at_ += 8;
    return v;
  }
  template <class T>
  T narrow(int64_t v) {
    if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        v > static_cast<int64_t>(std::numeric_limits<T>::max())) {
      (void)fail("a value " + std::to_string(v) + " out of its field's range");
      return 0;
    }
    return static_cast<T>(v);
  }

  byte_view rec_;
  std::string what_;
  size_t at_ = 0;
  status error_;
};

}  // namespace

const char* to_string(tape_kind k) {
  switch (k) {
    case tape_kind::start:
      return "start";
    case tape_kind::message:
      return "message";
    case tape_kind::timer:
      return "timer";
    case tape_kind::dropped:
      return "dropped";
    case tape_kind::sent:
      return "sent";
    case tape_kind::read:
      return "read";
    case tape_kind::checkpoint:
      return "checkpoint";
  }
  return "?";
}

const char* to_string(tape_read r) {
  switch (r) {
    case tape_read::clock:
      return "clock";
    case tape_read::mailbox:
      return "mailbox length";
  }
  return "?";
}

result<std::unique_ptr<tape_writer>> tape_writer::create(const std::string& path,
                                                         const tape_header& header) {
  std::unique_ptr<tape_writer> w(new tape_writer());
  w->path_ = path;
  w->file_ = std::fopen(path.c_str(), "wbx");  // never over an existing tape
  if (w->file_ == nullptr) {
    return status(errc::io_error, path + ": cannot create the tape: " + std::strerror(errno) +
                                      (errno == EEXIST ? " (a tape is never written over)" : ""));
  }
  tape_header h = header;
  if (auto st = w->write_chunk(header_chunk, save_bytes(h)); !st.ok()) return st;
  // On disk at once: a process killed before its first flush still leaves a tape that says
  // whose it is.
  if (std::fflush(w->file_) != 0)
    return status(errc::io_error, path + ": write failed: " + std::strerror(errno));
  return w;
}

tape_writer::~tape_writer() {
  (void)close();
}

bool tape_writer::has_payload(uint64_t digest) {
  return payload_keys_.count(digest) != 0;
}
bool tape_writer::has_blob(uint64_t key) {
  return blob_keys_.count(key) != 0;
}
void tape_writer::add_blob(uint64_t key, std::vector<uint8_t> bytes) {
  if (!blob_keys_.insert(key).second) return;
  buffered_bytes_ += bytes.size();
  blobs_.emplace_back(key, std::move(bytes));
}
void tape_writer::add_payload(uint64_t digest, std::vector<uint8_t> bytes) {
  if (!payload_keys_.insert(digest).second) return;
  buffered_bytes_ += bytes.size();
  payloads_.emplace_back(digest, std::move(bytes));
}
void tape_writer::add_event(tape_event e) {
  // About what the event takes packed (event_packer).
  buffered_bytes_ += e.kind == tape_kind::read ? 8 : 32 + e.clock.size() * 2;
  events_buf_.push_back(std::move(e));
  ++events_;
  if (buffered_bytes_ >= chunk_bytes || events_buf_.size() >= chunk_events) {
    (void)flush_locked();
  } else if (flush_every_s_ > 0 && events_buf_.size() % 64 == 0 &&
             std::chrono::steady_clock::now() - last_flush_ >=
                 std::chrono::duration<double>(flush_every_s_)) {
    (void)flush_locked();
  }
}

status tape_writer::write_chunk(uint8_t kind, const std::vector<uint8_t>& payload) {
  if (!error_.ok()) return error_;
  // The frame of checkpoint/frame.hpp around (kind, payload), written without copying them.
  uint8_t header[frame_header_bytes];
  std::memcpy(header, chunk_magic.data(), 4);
  const uint32_t version = tape_format_version;
  std::memcpy(header + 4, &version, 4);
  const uint64_t length = payload.size() + 1;
  std::memcpy(header + 8, &length, 8);
  checksum_stream sum;
  sum.update(&kind, 1);
  sum.update(payload.data(), payload.size());
  const uint64_t digest = sum.digest();
  std::memcpy(header + 16, &digest, 8);
  if (std::fwrite(header, 1, sizeof header, file_) != sizeof header ||
      std::fwrite(&kind, 1, 1, file_) != 1 ||
      std::fwrite(payload.data(), 1, payload.size(), file_) != payload.size()) {
    error_ = status(errc::io_error, path_ + ": write failed: " + std::strerror(errno));
    return error_;
  }
  bytes_written_ += sizeof header + length;
  return ok_status();
}

status tape_writer::flush_locked() {
  if (closed_) return error_;
  // Blobs before the payloads that refer to them, payloads before their events.
  if (!blobs_.empty()) {
    (void)write_chunk(blob_chunk, save_bytes(blobs_));
    blobs_.clear();
  }
  if (!payloads_.empty()) {
    (void)write_chunk(payload_chunk, save_bytes(payloads_));
    payloads_.clear();
  }
  if (!events_buf_.empty()) {
    (void)write_chunk(event_chunk, event_packer().pack(events_buf_));
    events_buf_.clear();
  }
  buffered_bytes_ = 0;
  last_flush_ = std::chrono::steady_clock::now();
  if (error_.ok() && std::fflush(file_) != 0)
    error_ = status(errc::io_error, path_ + ": write failed: " + std::strerror(errno));
  return error_;
}

status tape_writer::flush() {
  return flush_locked();
}

status tape_writer::close() {
  if (closed_ || file_ == nullptr) return error_;
  (void)flush_locked();
  uint64_t total = events_;
  (void)write_chunk(end_chunk, save_bytes(total));
  closed_ = true;
  if (std::fclose(file_) != 0 && error_.ok())
    error_ = status(errc::io_error, path_ + ": close failed: " + std::strerror(errno));
  file_ = nullptr;
  return error_;
}

namespace {
// Whether a whole, checksummed chunk starts anywhere at or after `from`: a recording that was
// cut loses only the end of its last chunk, so such a chunk means damage, not a cut.
bool whole_chunk_after(byte_view all, size_t from) {
  for (auto it = std::search(all.begin() + static_cast<std::ptrdiff_t>(from), all.end(),
                             chunk_magic.begin(), chunk_magic.end());
       it != all.end();
       it = std::search(it + 1, all.end(), chunk_magic.begin(), chunk_magic.end())) {
    const auto at = static_cast<size_t>(it - all.begin());
    if (all.size() - at < frame_header_bytes) return false;
    uint64_t length = 0;
    std::memcpy(&length, all.data() + at + 8, 8);
    if (length > all.size() - at - frame_header_bytes) continue;
    if (open_frame(all.subspan(at, frame_header_bytes + static_cast<size_t>(length)), chunk_magic,
                   tape_format_version, "")
            .ok())
      return true;
  }
  return false;
}

status load_header(byte_view rec, const std::string& where, const std::string& what, tape& t) {
  if (auto s = load_bytes(rec, what, t.header); !s.ok()) return s;
  if (t.header.tick_scale < 1)
    return status(errc::corrupt_data,
                  where + ": tick scale " + std::to_string(t.header.tick_scale));
  for (uint32_t a : t.header.recorded) {
    if (a >= t.header.roles.size())
      return status(errc::corrupt_data, where + ": records actor " + std::to_string(a) + " of " +
                                            std::to_string(t.header.roles.size()));
  }
  return {};
}

// Blobs and payloads are stored under the checksum of their bytes: one that changed is caught
// here, not replayed as if recorded.
template <class Value>
status load_keyed(byte_view rec, const std::string& where, const std::string& what,
                  const char* noun, std::map<uint64_t, Value>& into) {
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> entries;
  if (auto s = load_bytes(rec, what, entries); !s.ok()) return s;
  for (auto& [k, bytes] : entries) {
    if (checksum64(bytes.data(), bytes.size()) != k) {
      return status(errc::corrupt_data, where + ": a " + noun + " does not match its key " +
                                            std::to_string(k) + " (tampered or damaged)");
    }
    into[k] = Value(std::move(bytes));  // a blob takes the vector as it is
  }
  return {};
}

// An event names actors the tape has, of a kind it knows, in order, recorded here, with its
// payload on the tape.
status check_event(const tape& t, const tape_event& e, const std::string& which) {
  if (e.actor >= t.header.roles.size() ||
      (e.kind != tape_kind::timer && e.kind != tape_kind::start && e.kind != tape_kind::read &&
       e.kind != tape_kind::checkpoint && e.peer >= t.header.roles.size()))
    return status(errc::corrupt_data, which + ": names an actor the tape does not have");
  if (static_cast<uint8_t>(e.kind) > static_cast<uint8_t>(tape_kind::checkpoint))
    return status(errc::corrupt_data,
                  which + ": unknown kind " + std::to_string(static_cast<int>(e.kind)));
  if (!t.events.empty() && e.seq <= t.events.back().seq)
    return status(errc::corrupt_data, which + ": out of order");
  if (e.kind == tape_kind::read && e.type != static_cast<int32_t>(tape_read::clock) &&
      e.type != static_cast<int32_t>(tape_read::mailbox))
    return status(errc::corrupt_data, which + ": unknown read " + std::to_string(e.type));
  if (!t.header.records(e.actor))
    return status(errc::corrupt_data,
                  which + ": actor " + std::to_string(e.actor) + " is not recorded here");
  if (e.kind != tape_kind::sent && e.kind != tape_kind::read && t.payloads.count(e.payload) == 0)
    return status(errc::corrupt_data, which + ": its payload is not on the tape");
  return {};
}

status load_events(byte_view rec, const std::string& where, const std::string& what, tape& t) {
  auto events = event_unpacker(rec, what).unpack(t.header.roles.size());
  if (!events) return events.error();
  for (auto& e : *events) {
    if (auto s = check_event(t, e, where + ", event " + std::to_string(e.seq)); !s.ok()) return s;
    t.events.push_back(std::move(e));
  }
  return {};
}
}  // namespace

result<tape> read_tape(const std::string& path, bool allow_truncated) {
  auto bytes = map_whole_file(path);
  if (!bytes) return bytes.error();
  return parse_tape(bytes->view(), path, allow_truncated);
}

result<tape> parse_tape(byte_view all, const std::string& path, bool allow_truncated) {
  tape t;
  t.path = path;
  t.file_bytes = all.size();
  size_t at = 0;
  uint64_t chunk = 0, declared_events = 0;
  bool have_header = false;
  while (at < all.size()) {
    const std::string where =
        path + ": chunk " + std::to_string(chunk) + " at byte " + std::to_string(at);
    const size_t left = all.size() - at;
    if (t.complete) {
      return status(errc::corrupt_data, where + ": " + std::to_string(left) +
                                            " bytes after the end chunk (the tape was appended "
                                            "to or damaged)");
    }
    uint64_t length = 0;
    if (left >= frame_header_bytes) std::memcpy(&length, all.data() + at + 8, 8);
    if (left >= 4 && std::memcmp(all.data() + at, chunk_magic.data(), 4) != 0) {
      return status(errc::corrupt_data, where + ": not a chunk (bad magic): the tape is damaged");
    }
    if (left >= frame_header_bytes && length > left - frame_header_bytes &&
        whole_chunk_after(all, at + frame_header_bytes)) {
      // A cut recording loses the end of its last chunk; here chunks follow, so the length
      // field itself is damaged.
      return status(errc::corrupt_data, where + ": its length (" + std::to_string(length) +
                                            " bytes) runs past the end of the file although "
                                            "chunks follow: the tape is damaged, not cut");
    }
    if (left < frame_header_bytes || length > left - frame_header_bytes) {
      const std::string cut =
          where + ": truncated (" + std::to_string(left) + " bytes left of a chunk" +
          (left >= frame_header_bytes ? " of " + std::to_string(length + frame_header_bytes) : "") +
          "; the recording stopped here)";
      if (!allow_truncated || !have_header) return status(errc::corrupt_data, cut);
      t.truncation = cut;
      return t;
    }
    const size_t size = frame_header_bytes + static_cast<size_t>(length);
    auto body = open_frame(all.subspan(at, size), chunk_magic, tape_format_version, where);
    if (!body) return body.error();
    if (body->empty()) return status(errc::corrupt_data, where + ": empty chunk");
    const uint8_t kind = (*body)[0];
    const byte_view rec = body->subspan(1, body->size() - 1);
    const std::string what = where + " (" + std::to_string(kind) + ")";
    if (!have_header && kind != header_chunk)
      return status(errc::corrupt_data, where + ": the tape does not begin with its header");
    status loaded;
    switch (kind) {
      case header_chunk:
        if (have_header) return status(errc::corrupt_data, where + ": a second header");
        loaded = load_header(rec, where, what, t);
        have_header = true;
        break;
      case blob_chunk:
        loaded = load_keyed(rec, where, what, "blob", t.blobs);
        break;
      case payload_chunk:
        loaded = load_keyed(rec, where, what, "payload", t.payloads);
        break;
      case event_chunk:
        loaded = load_events(rec, where, what, t);
        break;
      case end_chunk: {
        if (auto s = load_bytes(rec, what, declared_events); !s.ok()) return s;
        if (declared_events != t.events.size()) {
          return status(errc::corrupt_data,
                        where + ": the end says " + std::to_string(declared_events) +
                            " events, the tape holds " + std::to_string(t.events.size()));
        }
        t.complete = true;
        break;
      }
      default:
        return status(errc::corrupt_data, where + ": unknown chunk kind " + std::to_string(kind));
    }
    if (!loaded.ok()) return loaded;
    at += size;
    ++chunk;
  }
  if (!have_header) return status(errc::corrupt_data, path + ": empty (no header chunk)");
  if (!t.complete) {
    const std::string cut = path + ": ends after chunk " + std::to_string(chunk - 1) + " at byte " +
                            std::to_string(at) + " without its end chunk (the recording stopped)";
    if (!allow_truncated) return status(errc::corrupt_data, cut);
    t.truncation = cut;
  }
  return t;
}

}  // namespace diloco

namespace diloco {

namespace {
std::string process_name(const tape& t) {
  return (t.header.node.empty() ? std::string("the run") : "node " + t.header.node) + " process " +
         std::to_string(t.header.incarnation) + " (" + t.path + ")";
}
}  // namespace

namespace {

// Whether an event is an input of its actor (what the actor took, not what it did).
bool is_input(const tape_event& e) {
  return e.kind != tape_kind::sent && e.kind != tape_kind::read;
}

// The volumes [from, to) of one process (sorted by volume) as one tape.
result<tape> join_volumes(std::vector<tape>& tapes, size_t from, size_t to) {
  for (size_t k = from + 1; k < to; ++k) {
    const tape& t = tapes[k];
    const uint32_t before = tapes[k - 1].header.volume;
    const std::string who = process_name(t);
    if (t.header.volume == before)
      return status(errc::invalid_argument,
                    who + " and " + tapes[k - 1].path + " record the same process" +
                        (before > 0 ? " (volume " + std::to_string(before) + ")" : ""));
    if (t.header.volume != before + 1)
      return status(errc::invalid_argument, who + ": volume " + std::to_string(before + 1) +
                                                " is missing (there are volumes " +
                                                std::to_string(before) + " and " +
                                                std::to_string(t.header.volume) + ")");
    if (!tapes[k - 1].complete)
      return status(errc::corrupt_data, tapes[k - 1].truncation + "; a later volume follows it");
    if (t.header.run_id != tapes[from].header.run_id)
      return status(errc::invalid_argument, who + " is of another run than " + tapes[from].path);
  }
  tape out = std::move(tapes[from]);
  out.first_volume = out.header.volume;
  out.volumes = static_cast<uint32_t>(to - from);
  for (size_t k = from + 1; k < to; ++k) {
    tape& t = tapes[k];
    out.path += ", " + t.path;
    out.file_bytes += t.file_bytes;
    out.complete = t.complete;
    out.truncation = t.truncation;
    for (auto& [key, bytes] : t.blobs) out.blobs.emplace(key, std::move(bytes));
    for (auto& [key, bytes] : t.payloads) out.payloads.emplace(key, std::move(bytes));
    for (auto& e : t.events) out.events.push_back(std::move(e));
  }
  if (out.first_volume == 0) return out;
  // The volumes before were rotated away: each actor's history begins at its checkpoint (or a
  // start); what comes before it ended an input that is gone.
  std::vector<bool> begun(out.header.roles.size(), false);
  std::vector<tape_event> kept;
  kept.reserve(out.events.size());
  for (auto& e : out.events) {
    if (!begun[e.actor] && is_input(e)) {
      if (e.kind != tape_kind::checkpoint && e.kind != tape_kind::start) {
        return status(errc::corrupt_data,
                      out.path + ": event " + std::to_string(e.seq) + ": actor " +
                          std::to_string(e.actor) + "'s first input in volume " +
                          std::to_string(out.first_volume) +
                          " is not a checkpoint, so replay cannot begin there (its state "
                          "could not be saved when the volume began)");
      }
      begun[e.actor] = true;
    }
    if (begun[e.actor]) kept.push_back(std::move(e));
  }
  out.events = std::move(kept);
  return out;
}

// Joins each process's volumes: one tape per process, in (node, process) order.
result<std::vector<tape>> join_processes(std::vector<tape> tapes) {
  std::sort(tapes.begin(), tapes.end(), [](const tape& a, const tape& b) {
    return std::tie(a.header.node, a.header.incarnation, a.header.volume) <
           std::tie(b.header.node, b.header.incarnation, b.header.volume);
  });
  std::vector<tape> out;
  for (size_t from = 0, to = 0; from < tapes.size(); from = to) {
    to = from + 1;
    while (to < tapes.size() && tapes[to].header.node == tapes[from].header.node &&
           tapes[to].header.incarnation == tapes[from].header.incarnation)
      ++to;
    auto joined = join_volumes(tapes, from, to);
    if (!joined) return joined.error();
    out.push_back(std::move(*joined));
  }
  return out;
}

}  // namespace

result<tape> merge_tapes(std::vector<tape> given, bool allow_truncated) {
  if (given.empty()) return status(errc::invalid_argument, "no tapes to replay");
  auto joined = join_processes(std::move(given));
  if (!joined) return joined.error();
  std::vector<tape> tapes = std::move(*joined);
  const tape_header& first = tapes.front().header;
  // actor -> the node recording it (nullptr: none yet)
  std::vector<const std::string*> recorder(first.roles.size(), nullptr);
  for (size_t k = 0; k < tapes.size(); ++k) {
    const tape& t = tapes[k];
    const tape_header& h = t.header;
    const std::string who = process_name(t);
    if (h.run_id != first.run_id || h.config_text != first.config_text || h.roles != first.roles ||
        h.virtual_time != first.virtual_time || h.tick_scale != first.tick_scale) {
      return status(errc::invalid_argument,
                    who + " is of another run than " + process_name(tapes.front()) +
                        (h.run_id != first.run_id ? " (run identity differs)"
                                                  : " (configuration or actors differ)"));
    }
    if (tapes.size() > 1 && h.virtual_time) {
      return status(errc::invalid_argument,
                    who + " is a simulated run's tape: it holds the whole run, replay it alone");
    }
    if (k > 0 && tapes[k - 1].header.node == h.node) {
      // (Two tapes of one process were joined as its volumes, or refused, above.)
      const uint32_t before = tapes[k - 1].header.incarnation;
      if (h.incarnation != before + 1)
        return status(errc::invalid_argument,
                      "node " + h.node + ": the tape of process " + std::to_string(before + 1) +
                          " is missing (there are processes " + std::to_string(before) + " and " +
                          std::to_string(h.incarnation) + ")");
    }
    const bool followed = k + 1 < tapes.size() && tapes[k + 1].header.node == h.node;
    if (!t.complete && !followed && !allow_truncated) {
      return status(errc::corrupt_data,
                    t.truncation + (t.truncation.empty() ? "" : "; ") + who +
                        " ended without its end chunk and no later process of its node "
                        "follows (replay what was recorded with --partial)");
    }
    for (uint32_t a = 0; a < h.roles.size(); ++a) {
      if (!h.records(a)) continue;
      if (recorder[a] == nullptr || *recorder[a] == h.node) {
        recorder[a] = &h.node;
        continue;
      }
      return status(errc::invalid_argument, "actor " + std::to_string(a) +
                                                " is recorded on two nodes: " + *recorder[a] +
                                                " and " + h.node);
    }
  }
  if (tapes.size() == 1) return std::move(tapes.front());

  tape out;
  out.header = first;
  // Nodes that host no learner record none; those that do must have run the same one.
  for (const tape& t : tapes) {
    if (t.header.learner.empty()) continue;
    if (!out.header.learner.empty() && out.header.learner != t.header.learner)
      return status(errc::invalid_argument, process_name(t) + " ran the learner " +
                                                t.header.learner + ", another process " +
                                                out.header.learner);
    out.header.learner = t.header.learner;
  }
  out.header.node.clear();
  out.header.incarnation = 0;
  out.header.recorded.clear();
  out.complete = true;
  for (size_t k = 0; k < tapes.size(); ++k) {
    tape& t = tapes[k];
    out.path += (k > 0 ? ", " : "") + t.path;
    out.file_bytes += t.file_bytes;
    out.complete =
        out.complete &&
        (t.complete || (k + 1 < tapes.size() && tapes[k + 1].header.node == t.header.node));
    if (!t.complete && out.truncation.empty()) out.truncation = t.truncation;
    out.segments.push_back(tape_segment{t.path, t.first_volume, t.volumes, t.header.node,
                                        t.header.incarnation, !t.complete, t.truncation});
    for (auto& [key, bytes] : t.blobs) out.blobs.emplace(key, std::move(bytes));
    for (auto& [key, bytes] : t.payloads) out.payloads.emplace(key, std::move(bytes));
    for (auto& e : t.events) {
      out.events.push_back(std::move(e));
      out.segment_of.push_back(static_cast<uint32_t>(k));
    }
  }
  // The actors some tape records (all of them when every node's tapes are there).
  for (uint32_t a = 0; a < recorder.size(); ++a) {
    if (recorder[a] != nullptr) out.header.recorded.push_back(a);
  }
  if (out.header.recorded.size() == recorder.size()) out.header.recorded.clear();
  return out;
}

}  // namespace diloco
