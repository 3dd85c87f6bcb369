#include "checkpoint/file_io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

#include "base/checksum.hpp"
#include "checkpoint/frame.hpp"

namespace diloco {

namespace {

status os_error(const std::string& what, const std::string& path) {
  return status(errno == ENOENT ? errc::not_found : errc::io_error,
                path + ": " + what + ": " + std::strerror(errno));
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// All of `bytes` at the file's position (or at `offset` when it is not negative).
bool write_all(int fd, byte_view bytes, off_t offset = -1) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = offset < 0 ? ::write(fd, bytes.data() + done, bytes.size() - done)
                                 : ::pwrite(fd, bytes.data() + done, bytes.size() - done,
                                            offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The temporary file of an atomic write: fd open on `tmp`.
struct temp_file {
  std::string path;
  std::string tmp;
  int fd = -1;
};

result<temp_file> open_temp(const std::string& path) {
  temp_file t{path, path + ".tmp." + std::to_string(::getpid()), -1};
  t.fd = ::open(t.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (t.fd < 0) return os_error("cannot create", t.tmp);
  return t;
}

// A write into the temporary file failed: it goes, with the reason.
status abandon(temp_file& t, const std::string& what) {
  const status st = os_error(what, t.tmp);
  ::close(t.fd);
  ::unlink(t.tmp.c_str());
  return st;
}

// The end of every atomic write: fsync, rename over the target, fsync the directory.
status commit_temp(temp_file& t) {
  const int fd = t.fd;
  const std::string& tmp = t.tmp;
  const std::string& path = t.path;
  if (::fsync(fd) != 0) {
    const status st = os_error("fsync failed", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const status st = os_error("cannot rename into place", path);
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename is durable only once the directory entry is.
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

}  // namespace

status write_file_atomic(const std::string& path, byte_view bytes) {
  return write_file_atomic(path, std::vector<byte_view>{bytes});
}

status write_file_atomic(const std::string& path, const std::vector<byte_view>& pieces) {
  auto t = open_temp(path);
  if (!t) return t.error();
  for (const byte_view bytes : pieces) {
    if (!write_all(t->fd, bytes)) return abandon(*t, "write failed");
  }
  return commit_temp(*t);
}

result<uint64_t> write_frame_atomic(const std::string& path, const std::array<char, 4>& magic,
                                    uint32_t version, const std::vector<byte_view>& payload) {
  auto t = open_temp(path);
  if (!t) return t.error();
  uint64_t length = 0;
  for (const byte_view p : payload) length += p.size();
  // Room for the header first; each chunk is checksummed while it is still in the cache.
  if (::lseek(t->fd, static_cast<off_t>(frame_header_bytes), SEEK_SET) < 0)
    return abandon(*t, "seek failed");
  constexpr size_t chunk = size_t{4} << 20;
  checksum_stream sum;
  for (const byte_view p : payload) {
    for (size_t at = 0; at < p.size(); at += chunk) {
      const byte_view c = p.subspan(at, std::min(chunk, p.size() - at));
      sum.update(c.data(), c.size());
      if (!write_all(t->fd, c)) return abandon(*t, "write failed");
    }
  }
  const uint64_t checksum = sum.digest();
  const auto header = make_frame_header(magic, version, length, checksum);
  if (!write_all(t->fd, byte_view(header.data(), header.size()), 0))
    return abandon(*t, "write failed");
  if (auto s = commit_temp(*t); !s.ok()) return s;
  return checksum;
}

namespace {

// All `n` bytes of fd from its start into `to`; errors name `path`.
status read_all(int fd, uint8_t* to, size_t n, const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, to + done, n - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return r == 0 ? status(errc::io_error, path + ": file shrank while reading")
                    : os_error("read failed", path);
    done += static_cast<size_t>(r);
  }
  return ok_status();
}

// A regular file opened for reading, closed when this goes.
struct open_file {
  int fd = -1;
  uint64_t size = 0;
  ~open_file() {
    if (fd >= 0) ::close(fd);
  }
};
status open_regular(const std::string& path, open_file& f) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return os_error("cannot open", path);
  struct stat sb {};
  if (::fstat(f.fd, &sb) != 0 || !S_ISREG(sb.st_mode))
    return status(errc::io_error, path + ": not a regular file");
  f.size = static_cast<uint64_t>(sb.st_size);
  return ok_status();
}

}  // namespace

result<std::vector<uint8_t>> read_file(const std::string& path) {
  open_file f;
  if (auto st = open_regular(path, f); !st.ok()) return st;
  std::vector<uint8_t> out(static_cast<size_t>(f.size));
  if (auto st = read_all(f.fd, out.data(), out.size(), path); !st.ok()) return st;
  return out;
}

namespace {

std::atomic<bool> mapping_on{true};

// A read-only mapping, unmapped when its last holder lets go.
struct file_mapping {
  void* at = nullptr;
  size_t bytes = 0;
  file_mapping(void* a, size_t n) : at(a), bytes(n) {}
  ~file_mapping() { ::munmap(at, bytes); }
  file_mapping(const file_mapping&) = delete;
  file_mapping& operator=(const file_mapping&) = delete;
};

}  // namespace

result<held_bytes> map_file(int fd, uint64_t size, const std::string& path) {
  if (size > std::numeric_limits<size_t>::max() / 2)
    return status(errc::io_error, path + ": " + std::to_string(size) + " bytes do not fit");
  const size_t n = static_cast<size_t>(size);
  if (n == 0) return held_bytes(std::vector<uint8_t>());
  void* at = mapping_on.load() ? ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0)
                               : MAP_FAILED;
  if (at != MAP_FAILED) {
    auto owner = std::make_shared<const file_mapping>(at, n);
    return held_bytes(owner, byte_view(static_cast<const uint8_t*>(at), n));
  }
  // A file system that cannot map files: read them into memory of their own.
  std::shared_ptr<uint8_t[]> buf(new uint8_t[n]);  // not zeroed: every byte is read below
  if (auto st = read_all(fd, buf.get(), n, path); !st.ok()) return st;
  const byte_view view(buf.get(), n);
  return held_bytes(std::shared_ptr<const void>(std::move(buf)), view);
}

void set_file_mapping(bool on) {
  mapping_on.store(on);
}

result<held_bytes> map_whole_file(const std::string& path) {
  open_file f;
  if (auto st = open_regular(path, f); !st.ok()) return st;
  return map_file(f.fd, f.size, path);
}

}  // namespace diloco
