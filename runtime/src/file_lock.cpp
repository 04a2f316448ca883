#include "sage/internal/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "sage/common/error.h"
#include "sage/common/strings.h"

namespace sage::rt {

int FileLock::open_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) throw Error(Errc::io_error, cat("cannot open lock file: ", std::strerror(errno)), path);
  return fd;
}

FileLock::FileLock(const std::string& path, double timeout_s) : path_(path) {
  fd_ = open_file(path);
  const auto t0 = std::chrono::steady_clock::now();
  // Polling rather than a blocking flock(): a waiter can give up on a holder that is stuck
  // (stopped, hung on a network file system) instead of hanging its caller forever.
  auto pause = std::chrono::milliseconds(1);
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK && err != EINTR) {
      ::close(fd_);
      fd_ = -1;
      throw Error(Errc::io_error, cat("cannot lock: ", std::strerror(err)), path);
    }
    waited_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited_s_ > timeout_s) {
      ::close(fd_);
      fd_ = -1;
      throw Error(Errc::io_error, cat("still locked by another process after ", human_duration(waited_s_)), path);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::optional<FileLock> FileLock::try_lock(const std::string& path) {
  FileLock l;
  l.path_ = path;
  l.fd_ = open_file(path);
  if (::flock(l.fd_, LOCK_EX | LOCK_NB) == 0) return std::optional<FileLock>(std::move(l));
  const int err = errno;
  if (err == EWOULDBLOCK) return std::nullopt;  // l closes its descriptor
  throw Error(Errc::io_error, cat("cannot lock: ", std::strerror(err)), path);
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the description releases the lock
}

FileLock::FileLock(FileLock&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), waited_s_(o.waited_s_) {}

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    waited_s_ = o.waited_s_;
  }
  return *this;
}

}  // namespace sage::rt
