// An exclusive lock on a file (flock), to let one process at a time build a cache entry.
// Internal header.
//
// flock() locks belong to the open file description: the kernel drops them when the holder
// closes the file or dies in any way (crash, SIGKILL), so a lock left behind by a killed
// process never blocks anyone: there is no stale lock to detect. The lock file itself stays
// (removing it would let two processes lock two different files of one name).
#pragma once
#include <optional>
#include <string>

namespace sage::rt {

class FileLock {
 public:
  // Creates `path` (and its folder) when missing and waits for the lock, polling, for at most
  // `timeout_s` seconds. Throws Error(io_error) naming the path when the file cannot be
  // opened or locked, and when the wait times out (the holder is stuck).
  explicit FileLock(const std::string& path, double timeout_s = 600);
  // The lock if it is free now, otherwise nullopt; throws like the constructor.
  static std::optional<FileLock> try_lock(const std::string& path);

  ~FileLock();
  FileLock(FileLock&& o) noexcept;
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  const std::string& path() const { return path_; }
  double waited_s() const { return waited_s_; }  // time spent waiting for the holder

 private:
  FileLock() = default;
  static int open_file(const std::string& path);
  int fd_ = -1;
  std::string path_;
  double waited_s_ = 0;
};

}  // namespace sage::rt
