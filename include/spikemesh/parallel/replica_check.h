// replica_check.h — checksums of parameter replicas and their comparison over a group, used
// to verify that data-parallel replicas start (and stay) bitwise identical. A checksum is a
// CRC-32 pair over the raw bytes (so -0.0 != 0.0 and NaN payloads count): equal checksums
// mean equal bytes except with negligible probability.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spikemesh/comm/agree.h"  // text_hash (moved there)
#include "spikemesh/core/tensor.h"
#include "spikemesh/layers/param.h"

namespace sm {

class Comm;

uint64_t tensor_checksum(const Tensor& t, uint64_t seed = 0);
// Over every value tensor in order (names included, so a reordering changes it).
uint64_t params_checksum(const std::vector<Param*>& params);

// Collective over `comm`: all-gathers `checksum`; when ranks differ, throws an internal error
// listing each rank's value ("<what> differ across the dp group: rank 0 ..., rank 1 ...").
void check_replicas_identical(Comm& comm, uint64_t checksum, const std::string& what);

}  // namespace sm
