// io_retry.h — transient I/O errors on shared file systems (a dataset read or a checkpoint
// write that fails with EIO, EAGAIN, ESTALE or a failed HDF5 call): retried with a doubling
// delay a bounded number of times, each failure named on stderr with the rank, before the
// error is let through. Errors that no retry can fix (disk full, quota, permission, read-only
// file system, file too large, the file-size limit) are never retried.
// Policy: SPIKEMESH_IO_RETRIES attempts in all (default 4, 1 = no retry, at most 20), the first
// delay SPIKEMESH_IO_RETRY_DELAY_MS (default 500 ms), doubling up to 30 s. Checked at start-up
// (main). Keep the total wait below --comm-timeout: the other ranks wait for the retrying one.
// When the last attempt of a retryable failure fails too, the error thrown is an Input error
// whose message starts with kIoGaveUp (io_gave_up): the trainer checkpoints and ends on it.
// Test hook: SPIKEMESH_TEST_IO_FAULTS="dataset-read:N[@K],checkpoint-write:M[@K]" makes N dataset
// reads / M checkpoint writes of this process fail as with EIO, after K that succeed (default 0);
// only on the rank SPIKEMESH_TEST_IO_FAULT_RANK names, when set (the launcher's rank variable).
// Local; the retry of a collective operation is the caller's (it must fail alike everywhere).
#pragma once
#include <functional>
#include <string>

namespace sm {

class Error;

enum class IoSite { DatasetRead, CheckpointWrite };

struct IoRetryPolicy {
  int attempts = 4;
  double first_delay_ms = 500;
};

constexpr const char* kIoGaveUp = "I/O failed after retries: ";
bool io_gave_up(const Error& e);

// The policy from the environment (Input error naming the variable when malformed).
IoRetryPolicy io_retry_policy();

// True (and one fault used up) when the test hook says this call at `site` fails.
bool take_io_fault(IoSite site);

// A message of an error that retrying cannot fix.
bool permanent_io_error(const std::string& message);

// Runs `attempt`; after a failure for which `retryable(e)` holds (and that is not permanent) and
// attempts remain, prints "spikemesh: warning (<rank>): <what> failed (attempt k of n): <error>;
// retrying in X s" when `report`, sleeps, calls `before_retry` (may be empty) and runs `attempt`
// again. A failure that is not retryable is rethrown unchanged; the last attempt's retryable
// failure becomes "<kIoGaveUp><what>: <error> (n attempts)" (Input). `policy`: null reads the
// environment (callers that retry a collective pass one policy agreed by every rank).
void with_io_retries(const std::string& what, const std::function<void()>& attempt,
                     const std::function<bool(const Error&)>& retryable, const std::function<void()>& before_retry,
                     bool report = true, const IoRetryPolicy* policy = nullptr);

}  // namespace sm
