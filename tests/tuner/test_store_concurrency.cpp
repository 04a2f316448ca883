// Several processes on one tune database: concurrent writers lose nothing and see no error;
// a writer killed mid-transaction leaves a database that opens, checks clean and resumes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "store_fixtures.h"

using namespace sage;
using namespace sage::tuner;
using namespace sage::test;

namespace {

// Runs `body` in a forked child. The child waits until `go` is closed, so that several
// children start writing at the same moment; its exit status is 0 on success, 1 after
// printing the error. No SQLite connection is open in the parent across fork().
pid_t spawn(const int go[2], const std::function<void()>& body) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::close(go[1]);  // our copy of the write end, or EOF would never come
  char c;
  while (::read(go[0], &c, 1) > 0) {
  }
  int rc = 0;
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", int(::getpid()), e.what());
    rc = 1;
  }
  std::fflush(stderr);
  ::_exit(rc);  // no atexit handlers or gtest teardown in the child
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string uid_for(int proc, int i) { return cat("proc", proc, "-row", i); }

}  // namespace

TEST(StoreConcurrency, FourProcessesWritingOneFreshDb_LoseNothingAndRaiseNoError) {
  TempDir dir;
  const std::string path = dir.file("shared/tune.db");  // not there yet: creation races too
  const int kProcs = 4, kRows = 150;
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    kids.push_back(spawn(go, [&, p] {
      OpenOptions o;
      o.warn = [](const std::string& m) { throw std::runtime_error("unexpected warning: " + m); };
      Store s(path, o);
      KernelRecord shared = kernel(0);          // every process writes this one (upsert race)
      KernelRecord own = kernel(100 + p);
      s.record_kernel(shared);
      s.record_kernel(own);
      for (int i = 0; i < kRows; ++i) {
        Measurement m = measurement(i % 2 ? own : shared, 100.0 + p + i * 0.01);
        m.uid = uid_for(p, i);
        s.record_measurement(m);
        if (i % 50 == 49) s.decide_winner(winner_key());
      }
    }));
  }
  ::close(go[0]);
  ::close(go[1]);  // start them all
  for (pid_t k : kids) EXPECT_EQ(wait_exit_code(k), 0) << "a writer failed (see its message above)";

  Store s(path);
  EXPECT_FALSE(s.report().rebuilt);
  StoreCounts c = s.counts();
  EXPECT_EQ(c.measurements, kProcs * kRows);
  EXPECT_EQ(c.kernels, 1 + kProcs);
  EXPECT_EQ(c.winners, 1);
  std::set<std::string> uids;
  for (const auto& m : s.measurements()) uids.insert(m.uid);
  for (int p = 0; p < kProcs; ++p)
    for (int i = 0; i < kRows; ++i) EXPECT_TRUE(uids.count(uid_for(p, i))) << uid_for(p, i);
  EXPECT_TRUE(s.verify_kernels().empty());
  EXPECT_EQ(RawDb(path).scalar("PRAGMA integrity_check"), "ok");
}

TEST(StoreConcurrency, WriterKilledMidWrite_DbOpensChecksCleanAndResumes) {
  TempDir dir;
  const std::string path = dir.file("tune.db");
  { Store s(path); }
  std::set<int> confirmed;  // rows whose commit the child reported before it was killed
  int next_row = 0;
  for (int round = 0; round < 3; ++round) {
    int progress[2], go[2];
    ASSERT_EQ(::pipe(progress), 0);
    ASSERT_EQ(::pipe(go), 0);
    int first = next_row;
    pid_t kid = spawn(go, [&] {
      ::close(progress[0]);
      Store s(path);
      // Large cubins make every transaction span many pages, so the kill lands inside one.
      for (int i = first;; ++i) {
        KernelRecord k = kernel(1000 + i, 256 * 1024);
        s.record_kernel(k);
        Measurement m = measurement(k, 100.0 + i);
        m.uid = uid_for(9, i);
        s.record_measurement(m);
        if (::write(progress[1], &i, sizeof i) != sizeof i) throw std::runtime_error("pipe");
      }
    });
    ::close(go[0]);
    ::close(go[1]);
    ::close(progress[1]);
    int row = -1, got = 0;
    // Let it commit a few rows, then kill it at a moment that differs per round.
    while (got < 5 + 7 * round && ::read(progress[0], &row, sizeof row) == sizeof row) {
      confirmed.insert(row);
      ++got;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(300 * round));
    ASSERT_EQ(::kill(kid, SIGKILL), 0);
    EXPECT_EQ(wait_exit_code(kid), 128 + SIGKILL);
    // Rows confirmed after we stopped reading but before the kill are committed too.
    while (::read(progress[0], &row, sizeof row) == sizeof row) confirmed.insert(row);
    ::close(progress[0]);
    ASSERT_GE(got, 5);

    EXPECT_EQ(RawDb(path).scalar("PRAGMA integrity_check"), "ok") << "round " << round;
    WarningSink sink;
    Store s(path, sink.options());
    EXPECT_FALSE(s.report().rebuilt) << "round " << round;
    EXPECT_TRUE(sink.messages.empty());
    std::set<std::string> uids;
    for (const auto& m : s.measurements()) uids.insert(m.uid);
    for (int r : confirmed) EXPECT_TRUE(uids.count(uid_for(9, r))) << "committed row " << r << " lost";
    EXPECT_TRUE(s.verify_kernels().empty()) << "a half-written cubin became visible";
    // Resume: the parent goes on writing where the child stopped.
    int before = int(s.counts().measurements);
    for (int i = 0; i < 5; ++i) s.record_measurement(measurement(kernel(0), 50.0 + i));
    EXPECT_EQ(s.counts().measurements, before + 5);
    next_row = *confirmed.rbegin() + 1000;  // fresh uids for the next child
  }
}
