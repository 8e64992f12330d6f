// This process' memory as the kernel counts it (/proc/self/status on Linux), for load reports and
// tests that bound what loading a model costs.
//
//   PELICAN_ASSIGN(ProcMemory m, read_proc_memory());
//   fmt::print("{}\n", describe_memory(m));
//   // "RSS 612.40 MiB (anon 598.10 MiB, file 14.30 MiB), peak 640.00 MiB"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace pelican {

// Bytes (the kernel reports kB; converted here). rss = anon + file + shmem.
struct ProcMemory {
    uint64_t rss = 0;    // VmRSS: resident now
    uint64_t anon = 0;   // RssAnon: heap, stacks, owned weight copies
    uint64_t file = 0;   // RssFile: mapped file pages (the model's mmap) and the binary
    uint64_t shmem = 0;  // RssShmem: shared memory (a memfd model, as bench --synthetic writes)
    uint64_t peak = 0;   // VmHWM: the highest rss so far ("high water mark")
};

// Parses the text of a /proc/<pid>/status file. Errors: a field missing or not a "N kB" count.
Expected<ProcMemory> parse_proc_status(std::string_view status);
// This process' figures. Errors: /proc/self/status cannot be read (not Linux, no /proc).
Expected<ProcMemory> read_proc_memory();
// Resets this process' peak (VmHWM) to its RSS now, so that a later read's peak is the highest
// RSS since this call: writes "5" to /proc/self/clear_refs (Linux 4.0 and later).
// Errors: the file cannot be opened or written.
Status reset_peak_memory();
// "RSS 612.40 MiB (anon 598.10 MiB, file 14.30 MiB), peak 640.00 MiB"; shmem is shown when not zero.
std::string describe_memory(const ProcMemory& m);

}  // namespace pelican
