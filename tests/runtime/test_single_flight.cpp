// The in-memory kernel cache's mechanism: concurrent first requests for one key build once,
// every caller gets the same value, failures reach every waiter and are not cached.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sage/internal/single_flight.h"

namespace sage {
namespace {

using Cache = rt::SingleFlightCache<int, std::string>;

TEST(RuntimeSingleFlight, EightThreadsAskingAtOnceBuildOnce) {
  Cache cache;
  std::atomic<int> builds{0};
  std::latch start(8);
  std::vector<const std::string*> got(8, nullptr);
  std::vector<int> built(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      bool b = false;
      got[t] = &cache.get(
          7,
          [&] {
            builds.fetch_add(1);
            // Long enough that every other thread arrives while the build runs.
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            return std::make_shared<const std::string>("kernel");
          },
          &b);
      built[t] = b;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(builds.load(), 1);
  int builders = 0;
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(got[t], got[0]);  // the same object, not equal copies
    builders += built[t];
  }
  EXPECT_EQ(builders, 1);
  EXPECT_EQ(*got[0], "kernel");
  EXPECT_EQ(cache.find(7), got[0]);
}

TEST(RuntimeSingleFlight, DistinctKeysBuildIndependently) {
  Cache cache;
  std::atomic<int> builds{0};
  std::latch start(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      const int key = t % 2;
      const std::string& v = cache.get(key, [&] {
        builds.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return std::make_shared<const std::string>("k" + std::to_string(key));
      });
      EXPECT_EQ(v, "k" + std::to_string(key));
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(builds.load(), 2);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(RuntimeSingleFlight, AFailedBuildReachesEveryWaiterAndIsRetriedLater) {
  Cache cache;
  std::atomic<int> builds{0}, failures{0};
  std::latch start(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      start.arrive_and_wait();
      try {
        cache.get(1, [&]() -> std::shared_ptr<const std::string> {
          builds.fetch_add(1);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          throw std::runtime_error("compile failed");
        });
      } catch (const std::runtime_error& e) {
        if (std::string(e.what()) == "compile failed") failures.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ(failures.load(), 4);
  EXPECT_EQ(cache.find(1), nullptr);  // nothing cached
  // A later call builds again.
  bool built = false;
  EXPECT_EQ(cache.get(1, [] { return std::make_shared<const std::string>("ok"); }, &built), "ok");
  EXPECT_TRUE(built);
  EXPECT_EQ(builds.load(), 1);  // the retry's builder is a different lambda; the first one ran once
}

TEST(RuntimeSingleFlight, FindSeesOnlyFinishedValuesAndClearForgets) {
  Cache cache;
  EXPECT_EQ(cache.find(3), nullptr);
  cache.get(3, [] { return std::make_shared<const std::string>("x"); });
  ASSERT_NE(cache.find(3), nullptr);
  EXPECT_EQ(*cache.find(3), "x");
  bool built = true;
  cache.get(3, [] { return std::make_shared<const std::string>("y"); }, &built);
  EXPECT_FALSE(built);
  EXPECT_EQ(*cache.find(3), "x");
  cache.clear();
  EXPECT_EQ(cache.find(3), nullptr);
}

}  // namespace
}  // namespace sage
