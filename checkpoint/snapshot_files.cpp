#include "checkpoint/snapshot_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/check.hpp"
#include "base/checksum.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/frame.hpp"
#include "protocol/persist.hpp"

namespace diloco {

namespace fs = std::filesystem;

// Field lists of the file records (protocol/persist.hpp).
template <class F>
void persist_fields(F& f, actor_file_header& h) {
  f(h.run_id, h.snapshot, h.index, h.role, h.cut_tick, h.summary);
}
template <class F>
void persist_fields(F& f, manifest_entry& e) {
  f(e.index, e.role, e.file, e.bytes, e.checksum, e.cut_tick, e.summary);
}
template <class F>
void persist_fields(F& f, snapshot_manifest& m) {
  f(m.run_id, m.snapshot, m.tick_scale, m.resume_tick, m.config_text, m.actors);
}

namespace {

constexpr std::array<char, 4> actor_magic = {'D', 'L', 'S', 'A'};
constexpr std::array<char, 4> manifest_magic = {'D', 'L', 'S', 'M'};

std::string actor_file_name(uint32_t index) {
  char name[32];
  std::snprintf(name, sizeof(name), "actor-%05u.dlsa", index);
  return name;
}

std::string snapshot_name(uint64_t n, uint32_t attempt) {
  char name[48];
  if (attempt == 0) {
    std::snprintf(name, sizeof(name), "snapshot-%06llu", static_cast<unsigned long long>(n));
  } else {
    std::snprintf(name, sizeof(name), "snapshot-%06llu.%u", static_cast<unsigned long long>(n),
                  attempt);
  }
  return name;
}

// "snapshot-000004" or "snapshot-000004.2".
bool parse_snapshot_name(const std::string& name, uint64_t& n, uint32_t& attempt) {
  const std::string prefix = "snapshot-";
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  const std::string num = rest.substr(0, dot);
  if (num.empty() || num.size() > 18 || num.find_first_not_of("0123456789") != std::string::npos)
    return false;
  n = std::stoull(num);
  attempt = 0;
  if (dot != std::string::npos) {
    const std::string a = rest.substr(dot + 1);
    if (a.empty() || a.size() > 9 || a.find_first_not_of("0123456789") != std::string::npos)
      return false;
    attempt = static_cast<uint32_t>(std::stoul(a));
  }
  return true;
}

std::string hex(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

result<actor_file> decode_actor_file(byte_view file, const std::string& what) {
  auto payload = open_frame(file, actor_magic, snapshot_format_version, what);
  if (!payload) return payload.error();
  actor_file out;
  if (auto s = load_bytes(*payload, what, out.header, out.part); !s.ok()) return s;
  return out;
}

std::vector<uint8_t> encode_manifest(const snapshot_manifest& m) {
  snapshot_manifest copy = m;
  return make_frame(manifest_magic, snapshot_format_version, save_bytes(copy));
}

result<snapshot_manifest> decode_manifest(byte_view file, const std::string& what) {
  auto payload = open_frame(file, manifest_magic, snapshot_format_version, what);
  if (!payload) return payload.error();
  snapshot_manifest m;
  if (auto s = load_bytes(*payload, what, m); !s.ok()) return s;
  for (size_t i = 0; i < m.actors.size(); ++i) {
    const auto& e = m.actors[i];
    if (e.index != i) {
      return status(errc::corrupt_data, what + ": actor entry " + std::to_string(i) +
                                            " has index " + std::to_string(e.index));
    }
    if (e.file.empty() || e.file.find('/') != std::string::npos || e.file[0] == '.') {
      return status(errc::corrupt_data, what + ": actor " + std::to_string(i) + " names file '" +
                                            e.file + "', which is not a plain file name");
    }
  }
  if (m.tick_scale < 1)
    return status(errc::corrupt_data, what + ": tick scale " + std::to_string(m.tick_scale));
  // The clock restarts at the earliest cut: a writer sets it so, and a restore relies on it (a
  // tick past every cut would have the actors' pending timers due in their past).
  if (!m.actors.empty()) {
    int64_t earliest = INT64_MAX;
    for (const auto& e : m.actors) {
      if (e.cut_tick < 0) {
        return status(errc::corrupt_data, what + ": actor " + std::to_string(e.index) +
                                              " has cut tick " + std::to_string(e.cut_tick));
      }
      earliest = std::min(earliest, e.cut_tick);
    }
    if (m.resume_tick != earliest) {
      return status(errc::corrupt_data, what + ": resume tick " + std::to_string(m.resume_tick) +
                                            " is not the earliest cut, " +
                                            std::to_string(earliest));
    }
  }
  return m;
}

namespace {

// Whether `name` is a file a snapshot writer makes: an actor file or the manifest, or the
// temporary of either (checkpoint/file_io.hpp: NAME.tmp.PID).
bool snapshot_file_name(const std::string& name) {
  std::string base = name;
  const size_t tmp = name.find(".tmp.");
  if (tmp != std::string::npos) {
    const std::string pid = name.substr(tmp + 5);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) return false;
    base = name.substr(0, tmp);
  }
  if (base == "MANIFEST") return true;
  unsigned index = 0;
  char rest = 0;
  return base.size() == 16 && std::sscanf(base.c_str(), "actor-%5u.dls%c", &index, &rest) == 2 &&
         rest == 'a' && base == actor_file_name(index);
}

}  // namespace

status remove_snapshot_dir(const std::string& path) {
  std::error_code ec;
  std::vector<fs::path> ours;
  bool other = false;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && snapshot_file_name(it->path().filename().string())) {
      ours.push_back(it->path());
    } else {
      other = true;
    }
  }
  if (ec) return status(errc::io_error, path + ": cannot list: " + ec.message());
  for (const auto& f : ours) {
    if (!fs::remove(f, ec) && ec)
      return status(errc::io_error, f.string() + ": cannot remove: " + ec.message());
  }
  if (other) {
    return status(errc::io_error, path + ": kept: it holds files that are not a snapshot's");
  }
  if (!fs::remove(path, ec) && ec)
    return status(errc::io_error, path + ": cannot remove: " + ec.message());
  return ok_status();
}

result<std::unique_ptr<snapshot_writer>> snapshot_writer::open(const std::string& root,
                                                               uint64_t snapshot) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec)
    return status(errc::io_error, root + ": cannot create the snapshot directory: " + ec.message());
  std::unique_ptr<snapshot_writer> w(new snapshot_writer());
  // A new directory: never write into one that exists (an earlier attempt at this number).
  for (uint32_t attempt = 0;; ++attempt) {
    w->dir_ = root + "/" + snapshot_name(snapshot, attempt);
    if (::mkdir(w->dir_.c_str(), 0755) == 0) break;
    if (errno != EEXIST) {
      return status(errc::io_error, w->dir_ + ": cannot create: " + std::strerror(errno));
    }
  }
  return w;
}

snapshot_writer::~snapshot_writer() {
  if (!done_) (void)abandon();
}

status snapshot_writer::write_part(const actor_file_header& h,
                                   const std::vector<byte_view>& pieces) {
  DILOCO_CHECK(!done_, "snapshot writer: a part after the commit");
  // The payload is save_bytes(header, part) with the part as a byte vector: the header's
  // record and the part's length, then the part's pieces as they are.
  uint64_t part_bytes = 0;
  for (const byte_view p : pieces) part_bytes += p.size();
  actor_file_header header = h;
  const std::vector<uint8_t> prefix = save_bytes(header, part_bytes);
  std::vector<byte_view> payload;
  payload.reserve(pieces.size() + 1);
  payload.emplace_back(prefix.data(), prefix.size());
  payload.insert(payload.end(), pieces.begin(), pieces.end());
  manifest_entry e;
  e.index = h.index;
  e.role = h.role;
  e.file = actor_file_name(h.index);
  e.bytes = frame_header_bytes + prefix.size() + part_bytes;
  e.cut_tick = h.cut_tick;
  e.summary = h.summary;
  auto sum = write_frame_atomic(dir_ + "/" + e.file, actor_magic, snapshot_format_version, payload);
  if (!sum) return sum.error();
  e.checksum = *sum;
  bytes_ += e.bytes;
  entries_.push_back(std::move(e));
  return ok_status();
}

result<std::string> snapshot_writer::commit(snapshot_manifest manifest, size_t actors) {
  DILOCO_CHECK(!done_, "snapshot writer: one commit");
  std::sort(entries_.begin(), entries_.end(),
            [](const manifest_entry& a, const manifest_entry& b) { return a.index < b.index; });
  DILOCO_CHECK(entries_.size() == actors, "snapshot writer: a commit with every actor's file");
  for (size_t i = 0; i < entries_.size(); ++i)
    DILOCO_CHECK(entries_[i].index == i, "snapshot writer: one file per actor index");
  manifest.actors = entries_;
  const std::vector<uint8_t> m = encode_manifest(manifest);
  if (auto s = write_file_atomic(dir_ + "/MANIFEST", byte_view(m.data(), m.size())); !s.ok())
    return s;
  done_ = true;
  return dir_;
}

status snapshot_writer::abandon() {
  if (done_) return ok_status();
  done_ = true;
  return remove_snapshot_dir(dir_);
}

result<std::string> write_snapshot(const std::string& root, snapshot_manifest manifest,
                                   const std::vector<actor_file_header>& headers,
                                   const std::vector<std::vector<byte_view>>& parts) {
  DILOCO_CHECK(headers.size() == parts.size(), "snapshot files: one header per part");
  auto w = snapshot_writer::open(root, manifest.snapshot);
  if (!w) return w.error();
  for (size_t i = 0; i < parts.size(); ++i) {
    if (auto s = (*w)->write_part(headers[i], parts[i]); !s.ok()) return s;
  }
  return (*w)->commit(std::move(manifest), parts.size());
}

result<std::vector<snapshot_listing>> list_snapshots(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return status(errc::not_found, root + ": no such snapshot directory");
  }
  std::vector<snapshot_listing> out;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    snapshot_listing l;
    l.name = it->path().filename().string();
    if (!it->is_directory(ec) || !parse_snapshot_name(l.name, l.snapshot, l.attempt)) continue;
    l.path = it->path().string();
    l.has_manifest = fs::exists(it->path() / "MANIFEST", ec);
    out.push_back(std::move(l));
  }
  if (ec) return status(errc::io_error, root + ": cannot list: " + ec.message());
  std::sort(out.begin(), out.end(), [](const snapshot_listing& a, const snapshot_listing& b) {
    return a.snapshot != b.snapshot ? a.snapshot < b.snapshot : a.attempt < b.attempt;
  });
  return out;
}

namespace {

result<snapshot_manifest> read_manifest(const std::string& path) {
  const std::string mpath = path + "/MANIFEST";
  auto mbytes = read_file(mpath);
  if (!mbytes) {
    if (mbytes.error().code() == errc::not_found) {
      return status(
          errc::not_found,
          mpath + ": missing (the snapshot was not finished: the process died while writing it)");
    }
    return mbytes.error();
  }
  return decode_manifest(byte_view(mbytes->data(), mbytes->size()), mpath);
}

// What an actor file holds: the header, and the part (a view into the mapped file).
struct read_actor {
  actor_file_header header;
  tensor_blob part;
};

// Why an actor file the manifest lists could not be opened or looked at (`err`: errno).
status unopened_actor_file(const std::string& fpath, const manifest_entry& e, int err) {
  if (err == ENOENT) {
    return status(errc::not_found,
                  fpath + ": missing (the manifest lists actor " + std::to_string(e.index) + ")");
  }
  return status(errc::io_error, fpath + ": cannot open: " + std::strerror(err));
}

// An actor file's kind and size against its manifest entry.
status check_listed_file(const std::string& fpath, const manifest_entry& e, const struct stat& sb) {
  if (!S_ISREG(sb.st_mode)) return status(errc::io_error, fpath + ": not a regular file");
  const uint64_t size = static_cast<uint64_t>(sb.st_size);
  if (size == e.bytes) return ok_status();
  return status(errc::corrupt_data, fpath + ": " + std::to_string(size) +
                                        " bytes, the manifest says " + std::to_string(e.bytes) +
                                        (size < e.bytes ? " (truncated)" : ""));
}

// An actor file that is not read: there, a regular file, of the size its entry lists.
status check_unread_actor_file(const std::string& path, const manifest_entry& e) {
  const std::string fpath = path + "/" + e.file;
  struct stat sb {};
  if (::stat(fpath.c_str(), &sb) != 0) return unopened_actor_file(fpath, e, errno);
  return check_listed_file(fpath, e, sb);
}

// One actor file against its manifest entry: present, size and frame checksum as listed, a
// valid frame whose payload has that checksum, and the run, snapshot and actor the manifest
// expects. The file is mapped (checkpoint/file_io.hpp map_file), read once by the checksum; its
// part is a view into the mapping, never copied.
result<read_actor> check_actor_file(const std::string& path, const snapshot_manifest& m,
                                    const manifest_entry& e) {
  const std::string fpath = path + "/" + e.file;
  struct fd_guard {
    int fd;
    ~fd_guard() {
      if (fd >= 0) ::close(fd);
    }
  } f{::open(fpath.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return unopened_actor_file(fpath, e, errno);
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0) return status(errc::io_error, fpath + ": not a regular file");
  if (auto st = check_listed_file(fpath, e, sb); !st.ok()) return st;
  const uint64_t size = static_cast<uint64_t>(sb.st_size);
  auto mapped = map_file(f.fd, size, fpath);
  if (!mapped) return mapped.error();
  const byte_view file = mapped->view();
  auto frame = check_frame_header(file, size, actor_magic, snapshot_format_version, fpath);
  if (!frame) return frame.error();
  const uint64_t sum = frame->checksum;
  if (sum != e.checksum) {
    return status(errc::corrupt_data, fpath + ": checksum " + hex(sum) + ", the manifest says " +
                                          hex(e.checksum) + " (the file was changed or corrupted)");
  }
  const byte_view payload = file.subspan(frame_header_bytes, static_cast<size_t>(frame->length));
  if (checksum64(payload.data(), payload.size()) != sum)
    return status(errc::corrupt_data, fpath + ": checksum mismatch (the file is corrupted)");
  // The header record and the part's length, then the part.
  read_actor out;
  uint64_t part_bytes = 0;
  auto prefix = load_prefix(payload, fpath, out.header, part_bytes);
  if (!prefix) return prefix.error();
  if (part_bytes != payload.size() - *prefix) {
    return status(errc::corrupt_data, fpath + ": its part claims " + std::to_string(part_bytes) +
                                          " bytes, the frame holds " +
                                          std::to_string(payload.size() - *prefix));
  }
  const auto& h = out.header;
  if (h.run_id != m.run_id) {
    return status(errc::corrupt_data, fpath + ": belongs to run " + hex(h.run_id) +
                                          ", the manifest to run " + hex(m.run_id));
  }
  if (h.role != e.role) {
    return status(errc::corrupt_data, fpath + ": has role " + std::to_string(h.role) +
                                          ", the manifest says " + std::to_string(e.role));
  }
  if (h.snapshot != m.snapshot || h.index != e.index) {
    return status(errc::corrupt_data,
                  fpath + ": is actor " + std::to_string(h.index) + " of snapshot " +
                      std::to_string(h.snapshot) + ", the manifest expects actor " +
                      std::to_string(e.index) + " of snapshot " + std::to_string(m.snapshot));
  }
  out.part =
      tensor_blob(mapped->sub(frame_header_bytes + *prefix, static_cast<size_t>(part_bytes)));
  return out;
}

}  // namespace

result<loaded_snapshot> load_snapshot(const std::string& path, const part_filter& wanted) {
  loaded_snapshot out;
  out.path = path;
  auto manifest = read_manifest(path);
  if (!manifest) return manifest.error();
  out.manifest = std::move(*manifest);
  for (const auto& e : out.manifest.actors) {
    if (wanted && !wanted(e.index)) {
      if (auto st = check_unread_actor_file(path, e); !st.ok()) return st;
      out.parts.emplace_back();
      continue;
    }
    auto file = check_actor_file(path, out.manifest, e);
    if (!file) return file.error();
    out.parts.push_back(std::move(file->part));  // a tensor_blob: shared, never copied
  }
  DILOCO_CHECK(out.parts.size() == out.manifest.actors.size(),
               "load_snapshot: one part for every actor the manifest lists");
  return out;
}

snapshot_inspection inspect_snapshot(const std::string& path) {
  snapshot_inspection out;
  out.path = path;
  auto manifest = read_manifest(path);
  if (!manifest) {
    out.manifest_problem = manifest.error().message();
    return out;
  }
  out.manifest = std::move(*manifest);
  for (const auto& e : out.manifest->actors) {
    actor_file_check c;
    c.entry = e;
    if (auto file = check_actor_file(path, *out.manifest, e); !file) {
      c.problem = file.error().message();
    }
    out.actors.push_back(std::move(c));
  }
  return out;
}

bool snapshot_inspection::ok() const {
  if (!manifest) return false;
  for (const auto& a : actors) {
    if (!a.problem.empty()) return false;
  }
  return true;
}

result<resume_choice> choose_snapshot(const std::string& root, std::optional<uint64_t> only,
                                      const std::function<status(const loaded_snapshot&)>& check) {
  auto listing = list_snapshots(root);
  if (!listing) return listing.error();
  resume_choice choice;
  for (auto it = listing->rbegin(); it != listing->rend(); ++it) {
    if (only && it->snapshot != *only) continue;
    auto loaded = load_snapshot(it->path);
    if (loaded && check) {
      if (auto st = check(*loaded); !st.ok()) {
        choice.skipped.push_back(it->name + ": " + st.message());
        continue;
      }
    }
    if (loaded) {
      choice.snapshot = std::move(*loaded);
      return choice;
    }
    choice.skipped.push_back(it->name + ": " + loaded.error().message());
  }
  std::string why = only ? "no usable snapshot " + std::to_string(*only) : "no usable snapshot";
  why += " in " + root;
  if (listing->empty()) why += " (it holds no snapshot directories)";
  for (const auto& s : choice.skipped) why += "\n  " + s;
  return status(errc::not_found, why);
}

std::string snapshot_rate(uint64_t bytes, double seconds) {
  char b[96];
  const double mb = static_cast<double>(bytes) / 1e6;
  if (seconds > 0) {
    std::snprintf(b, sizeof b, "%.1f MB in %.2f s, %.0f MB/s", mb, seconds, mb / seconds);
  } else {
    std::snprintf(b, sizeof b, "%.1f MB", mb);
  }
  return b;
}

void prune_snapshots(const std::string& root, uint32_t keep, uint64_t run_id) {
  auto listing = list_snapshots(root);
  if (!listing) return;
  // This run's complete snapshots, newest last by when their manifest was written (another run
  // may have left higher numbers here). Another run's snapshots are never this run's to prune.
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, const snapshot_listing*>> by_time;
  for (const auto& l : *listing) {
    if (!l.has_manifest) continue;
    auto m = read_manifest(l.path);
    if (!m || m->run_id != run_id) continue;
    by_time.emplace_back(fs::last_write_time(l.path + "/MANIFEST", ec), &l);
  }
  std::stable_sort(by_time.begin(), by_time.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<const snapshot_listing*> complete;
  for (const auto& [t, l] : by_time) complete.push_back(l);
  if (complete.size() > keep) {
    for (size_t i = 0; i + keep < complete.size(); ++i)
      (void)remove_snapshot_dir(complete[i]->path);
  }
  // Incomplete ones below this run's newest (a writer that died): only their own files go, so
  // a directory that also holds anything else stays, with it.
  if (!complete.empty()) {
    const snapshot_listing* newest = complete.back();
    for (const auto& l : *listing) {
      const bool older = l.snapshot < newest->snapshot ||
                         (l.snapshot == newest->snapshot && l.attempt < newest->attempt);
      if (!l.has_manifest && older) (void)remove_snapshot_dir(l.path);
    }
  }
}

}  // namespace diloco
