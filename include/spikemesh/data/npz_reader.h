// npz_reader.h — numpy .npy arrays inside an .npz archive (np.savez / np.savez_compressed),
// read with libzip: the arrays SpikingJelly's dataset preprocessing writes (events_np/*.npz:
// t, x, y, p). Only what event files need: 1-d (or any-shape, C-order) arrays of integer or
// bool dtype in either byte order, widened to int64.
// Invariant: every error is an Input error naming the archive and the member.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sm {

struct NpyArray {
  std::string descr;            // numpy dtype string, e.g. "<u4", ">u4", "<i8", "|u1", "|b1"
  std::vector<int64_t> shape;
  std::vector<int64_t> values;  // every element widened to int64, C order
};

// The members `names` ("t" reads "t.npy") of the archive at `path`; Input error if one is
// missing, not an .npy, Fortran-ordered, or of a non-integer dtype.
std::map<std::string, NpyArray> read_npz_integers(const std::string& path, const std::vector<std::string>& names);

}  // namespace sm
