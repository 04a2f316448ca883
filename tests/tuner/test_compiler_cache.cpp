// The on-disk cubin cache: hits, keys, damaged entries, failures, concurrency.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "sage/common/error.h"
#include "sage/common/strings.h"
#include "sage/tuner/compiler.h"

namespace sage::tuner {
namespace {

namespace fs = std::filesystem;

const char* kKernel = R"(
extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

class CubinCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "sage-cubin-cache-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    opts_.arch = "sm_86";
    opts_.cache_dir = dir_;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string entry(const std::string& key, const char* ext) const {
    return dir_ + "/" + key.substr(0, 2) + "/" + key + ext;
  }
  std::string dir_;
  CompileOptions opts_;
};

TEST_F(CubinCacheTest, MissThenHitWithSameKeyAndResources) {
  CompileResult first = compile("axpy_v", kKernel, opts_);
  ASSERT_TRUE(first.ok) << first.log;
  EXPECT_FALSE(first.cache_hit);
  EXPECT_TRUE(fs::exists(entry(first.key, ".cubin")));
  EXPECT_TRUE(fs::exists(entry(first.key, ".json")));
  EXPECT_EQ(first.key, content_hash(kKernel, opts_));

  CompileResult second = compile("axpy_v", kKernel, opts_);
  ASSERT_TRUE(second.ok) << second.log;
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(second.key, first.key);
  EXPECT_EQ(second.cubin, first.cubin);
  EXPECT_EQ(second.log, first.log);
  EXPECT_TRUE(second.cache_note.empty());
  ASSERT_EQ(second.kernels.size(), first.kernels.size());
  EXPECT_EQ(second.kernels[0].kernel, "axpy");
  EXPECT_EQ(second.kernels[0].registers, first.kernels[0].registers);
  EXPECT_DOUBLE_EQ(second.build_ms, first.build_ms);  // the original compile's time

  std::string meta = read_file(entry(first.key, ".json"));
  for (const char* field : {"\"arch\": \"sm_86\"", "\"nvrtc_version\"", "\"cubin_sha256\"",
                            "\"options\"", "\"kernels\"", "\"build_ms\"", "\"log\"", "\"name\": \"axpy_v\""})
    EXPECT_NE(meta.find(field), std::string::npos) << field << " missing from\n" << meta;
}

TEST_F(CubinCacheTest, DifferentOptionOrSourceGivesDifferentKey) {
  CompileResult base = compile("a", kKernel, opts_);
  CompileOptions other = opts_;
  other.extra = {"-DVARIANT=2"};
  CompileResult opt = compile("a", kKernel, other);
  CompileResult src = compile("a", std::string(kKernel) + "// changed\n", opts_);
  ASSERT_TRUE(base.ok && opt.ok && src.ok);
  EXPECT_NE(base.key, opt.key);
  EXPECT_NE(base.key, src.key);
  EXPECT_FALSE(opt.cache_hit);
  EXPECT_FALSE(src.cache_hit);
}

TEST_F(CubinCacheTest, CorruptedCubinIsDetectedAndRecompiled) {
  CompileResult first = compile("axpy_v", kKernel, opts_);
  ASSERT_TRUE(first.ok) << first.log;
  std::string bytes = read_file(entry(first.key, ".cubin"));
  bytes[bytes.size() / 2] ^= 0x5a;
  write_file_atomic(entry(first.key, ".cubin"), bytes);

  CompileResult again = compile("axpy_v", kKernel, opts_);
  ASSERT_TRUE(again.ok) << again.log;
  EXPECT_FALSE(again.cache_hit);
  EXPECT_EQ(again.cubin, first.cubin);  // the recompiled cubin, not the damaged file
  EXPECT_NE(again.cache_note.find("does not match the sha256"), std::string::npos) << again.cache_note;
  EXPECT_NE(again.cache_note.find("recompiled"), std::string::npos) << again.cache_note;
  EXPECT_NE(again.log.find(again.cache_note), std::string::npos);
  // The entry was rewritten: the next request hits and carries no stale note.
  CompileResult third = compile("axpy_v", kKernel, opts_);
  EXPECT_TRUE(third.cache_hit);
  EXPECT_TRUE(third.cache_note.empty());
  EXPECT_EQ(third.log.find("recompiled"), std::string::npos);
}

TEST_F(CubinCacheTest, UnreadableMetadataIsAMissWithANote) {
  CompileResult first = compile("axpy_v", kKernel, opts_);
  ASSERT_TRUE(first.ok);
  write_file_atomic(entry(first.key, ".json"), "{ not json");
  CompileResult again = compile("axpy_v", kKernel, opts_);
  ASSERT_TRUE(again.ok);
  EXPECT_FALSE(again.cache_hit);
  EXPECT_NE(again.cache_note.find("unreadable"), std::string::npos) << again.cache_note;
  EXPECT_TRUE(compile("axpy_v", kKernel, opts_).cache_hit);
}

TEST_F(CubinCacheTest, MissingCubinIsAMissWithANote) {
  CompileResult first = compile("axpy_v", kKernel, opts_);
  ASSERT_TRUE(first.ok);
  fs::remove(entry(first.key, ".cubin"));
  CompileResult again = compile("axpy_v", kKernel, opts_);
  ASSERT_TRUE(again.ok);
  EXPECT_FALSE(again.cache_hit);
  EXPECT_NE(again.cache_note.find("no readable cubin"), std::string::npos) << again.cache_note;
}

TEST_F(CubinCacheTest, FailedCompilesAreNotCached) {
  const char* bad = "extern \"C\" __global__ void k() { undefined_call(); }\n";
  CompileResult r = compile("bad", bad, opts_);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(fs::exists(entry(r.key, ".json")));
  EXPECT_FALSE(fs::exists(entry(r.key, ".cubin")));
  CompileResult again = compile("bad", bad, opts_);
  EXPECT_FALSE(again.ok);
  EXPECT_FALSE(again.cache_hit);
}

TEST_F(CubinCacheTest, UseCacheFalseNeitherReadsNorWrites) {
  CompileOptions off = opts_;
  off.use_cache = false;
  CompileResult r = compile("axpy_v", kKernel, off);
  ASSERT_TRUE(r.ok);
  EXPECT_FALSE(fs::exists(entry(r.key, ".json")));
  ASSERT_TRUE(compile("axpy_v", kKernel, opts_).ok);  // now stored
  CompileResult again = compile("axpy_v", kKernel, off);
  EXPECT_FALSE(again.cache_hit);
}

TEST_F(CubinCacheTest, KeepPtxIsStoredAndServedFromTheCache) {
  ASSERT_TRUE(compile("axpy_v", kKernel, opts_).ok);  // an entry without PTX
  CompileOptions ptx = opts_;
  ptx.keep_ptx = true;
  CompileResult withptx = compile("axpy_v", kKernel, ptx);
  ASSERT_TRUE(withptx.ok);
  EXPECT_FALSE(withptx.cache_hit);  // the entry had no PTX: compiled again
  EXPECT_TRUE(withptx.cache_note.empty());  // that is not damage
  EXPECT_NE(withptx.ptx.find(".target sm_86"), std::string::npos);
  CompileResult hit = compile("axpy_v", kKernel, ptx);
  EXPECT_TRUE(hit.cache_hit);
  EXPECT_EQ(hit.ptx, withptx.ptx);
}

TEST_F(CubinCacheTest, ConcurrentCompilesOfOneKeyAgree) {
  std::vector<CompileResult> results(6);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i)
    threads.emplace_back([&, i] { results[i] = compile("axpy_v", kKernel, opts_); });
  for (auto& t : threads) t.join();
  int hits = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok) << r.log;
    EXPECT_EQ(r.cubin, results[0].cubin);
    EXPECT_TRUE(r.cache_note.empty()) << r.cache_note;
    hits += r.cache_hit;
  }
  EXPECT_EQ(hits, int(results.size()) - 1);  // one compiled; the others waited and hit
}

TEST_F(CubinCacheTest, ProcessesStoringOneKeyLeaveAValidEntry) {
  // Separate processes (unlike threads) are not serialized: each writes its own temp files
  // and renames them into place; whatever order the renames land in, the entry is whole.
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 1;
      try {
        rc = compile("axpy_v", kKernel, opts_).ok ? 0 : 1;
      } catch (...) {
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  CompileResult r = compile("axpy_v", kKernel, opts_);
  EXPECT_TRUE(r.cache_hit);
  EXPECT_TRUE(r.cache_note.empty()) << r.cache_note;
  // No temp files are left behind.
  for (const auto& f : fs::recursive_directory_iterator(dir_))
    EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << f.path();
}

TEST_F(CubinCacheTest, UnwritableCacheDirThrowsIoError) {
  std::string file = dir_ + "/plain-file";
  write_file_atomic(file, "x");
  CompileOptions o = opts_;
  o.cache_dir = file + "/cubins";  // a folder under a regular file cannot be created
  try {
    compile("axpy_v", kKernel, o);
    FAIL() << "expected an io_error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::io_error);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST(CubinCacheDefaults, SageCacheDirOverridesTheDefault) {
  const char* old = std::getenv("SAGE_CACHE_DIR");
  std::string saved = old ? old : "";
  ::setenv("SAGE_CACHE_DIR", "/tmp/sage-cache-test-root", 1);
  EXPECT_EQ(default_cache_dir(), "/tmp/sage-cache-test-root/cubins");
  ::unsetenv("SAGE_CACHE_DIR");
  EXPECT_EQ(default_cache_dir(), cache_dir() + "/cubins");
  if (old) ::setenv("SAGE_CACHE_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace sage::tuner
