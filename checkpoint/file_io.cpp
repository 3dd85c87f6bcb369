#include "checkpoint/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

}  // namespace

status write_file_atomic(const std::string& path, byte_view bytes) {
  return write_file_atomic(path, std::vector<byte_view>{bytes});
}

status write_file_atomic(const std::string& path, const std::vector<byte_view>& pieces) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return os_error("cannot create", tmp);
  for (const byte_view bytes : pieces) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const status st = os_error("write failed", tmp);
        ::close(fd);
        ::unlink(tmp.c_str());
        return st;
      }
      done += static_cast<size_t>(n);
    }
  }
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

result<std::vector<uint8_t>> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return os_error("cannot open", path);
  struct stat sb {};
  if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    ::close(fd);
    return status(errc::io_error, path + ": not a regular file");
  }
  std::vector<uint8_t> out(static_cast<size_t>(sb.st_size));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const status st = n == 0 ? status(errc::io_error, path + ": file shrank while reading")
                               : os_error("read failed", path);
      ::close(fd);
      return st;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

}  // namespace diloco
