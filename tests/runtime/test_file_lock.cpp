// The cross-process compile lock: exclusive across processes (and open files), released when
// its holder is killed, and a stuck holder makes a waiter give up with a clear error.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "runtime/runtime_fixtures.h"
#include "sage/internal/file_lock.h"

namespace sage {
namespace {

using rt::FileLock;
namespace fs = std::filesystem;

// Forks a child that takes the lock, reports it through a pipe and then waits to be killed.
// Returns the child's pid once it holds the lock.
pid_t child_holding(const std::string& path) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    FileLock lock(path);
    const char c = 'L';
    if (::write(fds[1], &c, 1) != 1) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(fds[1]);
  char c = 0;
  const bool ok = ::read(fds[0], &c, 1) == 1 && c == 'L';
  ::close(fds[0]);
  return ok ? pid : -1;
}

TEST(RuntimeFileLock, ExclusiveBetweenOpenFilesAndCreatesItsFolder) {
  test::ScratchDir dir("lock");
  const std::string path = dir.file("locks/deep/a.lock");
  auto first = FileLock::try_lock(path);
  ASSERT_TRUE(first.has_value());
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(FileLock::try_lock(path).has_value());  // flock conflicts across open files
  first.reset();
  EXPECT_TRUE(FileLock::try_lock(path).has_value());
}

TEST(RuntimeFileLock, HeldByAnotherProcess) {
  test::ScratchDir dir("lock");
  const std::string path = dir.file("b.lock");
  const pid_t child = child_holding(path);
  ASSERT_GT(child, 0);
  EXPECT_FALSE(FileLock::try_lock(path).has_value());
  ::kill(child, SIGTERM);
  ::waitpid(child, nullptr, 0);
}

TEST(RuntimeFileLock, LockOfAKilledProcessIsRecovered) {
  test::ScratchDir dir("lock");
  const std::string path = dir.file("c.lock");
  const pid_t child = child_holding(path);
  ASSERT_GT(child, 0);
  ASSERT_FALSE(FileLock::try_lock(path).has_value());
  ::kill(child, SIGKILL);  // no chance to clean up: the lock file stays behind
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(fs::exists(path));
  const auto t0 = std::chrono::steady_clock::now();
  FileLock lock(path, 5.0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(RuntimeFileLock, WaiterGivesUpOnAStuckHolder) {
  test::ScratchDir dir("lock");
  const std::string path = dir.file("d.lock");
  const pid_t child = child_holding(path);
  ASSERT_GT(child, 0);
  try {
    FileLock lock(path, 0.3);
    ADD_FAILURE() << "took a lock another process holds";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::io_error);
    EXPECT_NE(std::string(e.what()).find("still locked"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
}

TEST(RuntimeFileLock, WaiterProceedsWhenTheHolderReleases) {
  test::ScratchDir dir("lock");
  const std::string path = dir.file("e.lock");
  const pid_t child = child_holding(path);
  ASSERT_GT(child, 0);
  std::thread killer([child] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(child, SIGKILL);
  });
  FileLock lock(path, 10.0);
  EXPECT_GT(lock.waited_s(), 0.1);
  killer.join();
  ::waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace sage
