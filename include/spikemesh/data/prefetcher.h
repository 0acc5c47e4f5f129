// prefetcher.h — runs a producer on one background thread so the next batch is read and
// encoded while the current step computes. Items are produced strictly in request order;
// an exception in the producer is rethrown to the consumer at next().
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace sm {

template <class Item>
class Prefetcher {
 public:
  // produce(k) makes item k (k = 0, 1, ...); `count` items in all; `depth` ahead at most.
  Prefetcher(std::function<Item(int64_t)> produce, int64_t count, int depth = 1)
      : produce_(std::move(produce)), count_(count), depth_(depth) {
    worker_ = std::thread([this] { run(); });
  }
  ~Prefetcher() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Next item in order; blocks until ready. Returns nullopt after `count` items.
  std::optional<Item> next() {
    std::unique_lock<std::mutex> l(mu_);
    if (taken_ >= count_) return std::nullopt;
    cv_.wait(l, [&] { return !ready_.empty() || error_; });
    if (ready_.empty() && error_) std::rethrow_exception(error_);
    Item it = std::move(ready_.front());
    ready_.pop_front();
    ++taken_;
    cv_.notify_all();
    return it;
  }

 private:
  void run() {
    for (int64_t k = 0; k < count_; ++k) {
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || static_cast<int>(ready_.size()) < depth_; });
        if (stop_) return;
      }
      try {
        Item it = produce_(k);
        std::lock_guard<std::mutex> l(mu_);
        ready_.push_back(std::move(it));
      } catch (...) {
        std::lock_guard<std::mutex> l(mu_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      cv_.notify_all();
    }
  }

  std::function<Item(int64_t)> produce_;
  int64_t count_;
  int depth_;
  int64_t taken_ = 0;
  std::deque<Item> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread worker_;
};

}  // namespace sm
