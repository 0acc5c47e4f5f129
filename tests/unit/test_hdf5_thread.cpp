// test_hdf5_thread.cpp — the HDF5 thread (io/hdf5_thread.h): every task runs on that one thread,
// in order; a task's exception reaches its poster; a background job serves Local tasks at its
// yields while a Collective task waits for the job to end; without a thread, tasks run inline
// (nested calls included).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "spikemesh/io/hdf5_thread.h"

namespace sm {
namespace {

TEST(Hdf5Thread, RunsEveryTaskOnOneThreadInOrderAndPassesExceptions) {
  Hdf5Thread t;
  std::set<std::thread::id> where;
  std::vector<int> order;
  std::thread other([&] {
    for (int i = 0; i < 50; ++i) hdf5_call([&] { where.insert(std::this_thread::get_id()); order.push_back(i); });
  });
  other.join();
  for (int i = 50; i < 100; ++i) hdf5_call([&] { where.insert(std::this_thread::get_id()); order.push_back(i); });
  EXPECT_EQ(where.size(), 1u);
  EXPECT_EQ(where.count(std::this_thread::get_id()), 0u);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(hdf5_call([] { return 42; }), 42);
  EXPECT_THROW(hdf5_call([] { throw std::runtime_error("x"); }), std::runtime_error);
  EXPECT_EQ(hdf5_call([] { return hdf5_call([] { return 7; }); }), 7);  // a task's own call runs at once
}

TEST(Hdf5Thread, ABackgroundJobServesLocalTasksAtItsYieldsAndCollectiveOnesAfterIt) {
  Hdf5Thread t;
  std::atomic<bool> release{false};
  std::atomic<int> yields{0};
  auto job = hdf5_background([&] {
    while (!release) {
      hdf5_yield();
      ++yields;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  EXPECT_FALSE(job->done());
  // A Local task runs while the job is still going (at one of its yields).
  auto local = std::async(std::launch::async, [&] { return hdf5_call([&] { return job->done(); }, Hdf5Task::Local); });
  const bool served = local.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!served) release = true;  // let the job end, so that the task runs and the future can be joined
  ASSERT_TRUE(served) << "a Local task waited for the background job";
  EXPECT_FALSE(local.get()) << "the Local task ran after the job had ended";
  EXPECT_FALSE(job->done());
  // A Collective task waits until the job has ended.
  auto collective = std::async(std::launch::async, [&] { return hdf5_call([&] { return job->done(); }, Hdf5Task::Collective); });
  EXPECT_EQ(collective.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  release = true;
  EXPECT_TRUE(collective.get()) << "the Collective task ran before the job ended";
  job->wait();
  EXPECT_TRUE(job->done());
  EXPECT_FALSE(job->failed());
  EXPECT_GE(job->seconds(), 0.0);
}

TEST(Hdf5Thread, ABackgroundJobsExceptionReachesWait) {
  Hdf5Thread t;
  auto job = hdf5_background([] { throw std::runtime_error("write failed"); });
  EXPECT_THROW(job->wait(), std::runtime_error);
  EXPECT_TRUE(job->failed());
}

TEST(Hdf5Thread, WithoutAThreadTasksRunInlineAndMayNest) {
  const auto me = std::this_thread::get_id();
  EXPECT_EQ(hdf5_call([&] { return hdf5_call([&] { return std::this_thread::get_id() == me; }); }), true);
  EXPECT_THROW(hdf5_call([] { throw std::runtime_error("x"); }), std::runtime_error);
  EXPECT_EQ(hdf5_call([] { return 3; }), 3);  // the mutex was released by the throw
  EXPECT_THROW(hdf5_background([] {}), std::exception);
  hdf5_yield();  // outside a job: nothing
}

}  // namespace
}  // namespace sm
