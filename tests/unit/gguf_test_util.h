// Byte-level GGUF builder for tests: writes fields exactly as told, so tests can build corrupt files.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace pelican::test {

struct GgufBuilder {
    std::vector<uint8_t> bytes;

    template <typename T>
    void put(T v) {
        uint8_t b[sizeof(T)];
        std::memcpy(b, &v, sizeof(T));
        bytes.insert(bytes.end(), b, b + sizeof(T));
    }
    void u32(uint32_t v) { put(v); }
    void u64(uint64_t v) { put(v); }
    void raw(std::string_view s) { bytes.insert(bytes.end(), s.begin(), s.end()); }
    void str(std::string_view s) {
        u64(s.size());
        raw(s);
    }
    void header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
        raw("GGUF");
        u32(version);
        u64(n_tensors);
        u64(n_kv);
    }
    void kv_u32(std::string_view key, uint32_t v) {
        str(key);
        u32(4);
        u32(v);
    }
    void kv_str(std::string_view key, std::string_view v) {
        str(key);
        u32(8);
        str(v);
    }
    void tensor_info(std::string_view name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
        str(name);
        u32(static_cast<uint32_t>(dims.size()));
        for (uint64_t d : dims) u64(d);
        u32(type);
        u64(offset);
    }
    void pad_to(size_t a) {
        while (bytes.size() % a) bytes.push_back(0);
    }
    void zeros(size_t n) { bytes.insert(bytes.end(), n, 0); }
};

}  // namespace pelican::test
