// event_formats.h — decoders of the published event-camera file formats into one event
// stream, with SpikingJelly's conventions (docs/architecture.md §8c; the bit layouts, flips
// and dtypes are those of spikingjelly.datasets' readers):
//  * CIFAR10-DVS .aedat (jAER AEDAT 2.0): '#' header lines, then big-endian u32 address +
//    big-endian u32 timestamp per event; x = 127 - ((a >> 8) & 0x7F), y = 127 - ((a >> 1) &
//    0x7F), p = 1 - (a & 1) (a transpose and both axes flipped; every other bit ignored).
//  * AEDAT 3.1 (DVS128 Gesture): header ending "#!END-HEADER\r\n", then packets of a 28-byte
//    little-endian header and eventCapacity * eventSize bytes; polarity packets (type 1):
//    x = bits 17-31, y = bits 2-16, p = bit 1 of the data word (the valid bit is ignored, every
//    slot up to the capacity is read), t = u32 timestamp | tsOverflow << 31; other packets skipped.
//  * ATIS .bin (N-MNIST, N-Caltech101): 5 bytes per event: x, y, p (bit 7) + t bits 22-16, t bits
//    15-8, t bits 7-0 (x and y 8 bits each: a y = 240 overflow marker is an ordinary, off-sensor event).
//  * SpikingJelly's extracted events_np/*.npz (keys t, x, y, p; any integer dtype).
// Invariants: events keep the file's order (nothing sorted, nothing dropped); every decoder
// names the file in its Input errors (truncated, not that format, coordinates outside the
// sensor); `t_u32` says the source timestamps are unsigned 32-bit, whose arithmetic
// (SpikingJelly's split_by='time') wraps like numpy's uint32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace sm {

struct EventStream {
  std::vector<int64_t> t;     // [n] microseconds, as stored (not rebased)
  std::vector<uint16_t> x, y; // [n] column, row
  std::vector<uint8_t> p;     // [n] polarity 0/1 (channel 0 of a frame counts p == 0)
  bool t_u32 = false;         // timestamps came as uint32 (CIFAR10-DVS, N-MNIST)
  int64_t size() const { return static_cast<int64_t>(t.size()); }
  void reserve(size_t n);
  void push(int64_t tt, uint32_t xx, uint32_t yy, uint32_t pp);
};

enum class EventFileFormat { Aedat2Cifar10Dvs, Aedat31, AtisBin, Npz };
const char* event_format_name(EventFileFormat f);

// Decodes `path` (whole file). Throws an Input error naming the file when it is not of that
// format or truncated.
EventStream read_event_file(const std::string& path, EventFileFormat format);

// Input error naming `path` and the first event outside a sensor of `h` x `w` pixels.
void check_events_on_sensor(const EventStream& ev, int h, int w, const std::string& path);

// CIFAR10-DVS folders may hold jAER AEDAT 2.0 (as published) or AEDAT 3.1 (re-exported with
// DV): the format of an .aedat file from its first header line; Input error if neither.
EventFileFormat sniff_aedat_version(const std::string& path);

}  // namespace sm
