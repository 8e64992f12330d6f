// Shared by the convert tests (convert_test: HF / GGUF conversion, errors, CLI; convert_synthetic_test:
// synthetic models): a temporary directory, quiet convert options, the test vocabulary and a synthetic
// model writer. Needs PELICAN_SOURCE_DIR / PELICAN_SHARED_DIR (tests/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "convert/convert.h"
#include "convert/synthetic.h"
#include "core/dequantize.h"
#include "formats/gguf.h"
#include "temp_dir.h"

namespace pelican::test {

namespace fs = std::filesystem;

inline const fs::path kSource = PELICAN_SOURCE_DIR;
inline const fs::path kSpmVocab =
    fs::path(PELICAN_SHARED_DIR) / "data" / "vocab" / "ggml-vocab-llama-spm.gguf";

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Convert options without a progress bar, 2 threads.
inline ConvertOptions quiet(DType t) {
    ConvertOptions o;
    o.type = t;
    o.emit.progress = false;
    o.emit.threads = 2;
    return o;
}

// A small llama-shaped config for synthetic models, and a synthetic model of arch written to out.
inline const char* kSynthConfig = R"({"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "rope_theta": 10000.0, "rms_norm_eps": 1e-5})";

inline Expected<EmitStats> write_synthetic(const std::string& arch, const std::string& config,
                                           const std::string& out, DType t, uint64_t seed,
                                           const std::string& vocab = kSpmVocab.string(), int threads = 2) {
    SyntheticOptions s{
        .arch = arch, .config_json = config, .config_name = "test config", .vocab = vocab, .seed = seed};
    ConvertOptions o = quiet(t);
    o.emit.threads = threads;
    PELICAN_ASSIGN(ConvertJob job, plan_synthetic(s, o));
    return write_job(job, out, o.emit);
}

inline std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A GGUF tensor dequantized to fp32.
inline std::vector<float> to_f32(const GgufFile& f, const GgufTensorInfo& t) {
    std::vector<float> out(t.n_elements());
    EXPECT_TRUE(
        dequantize_row(t.type, f.tensor_data(t).data(), out.data(), static_cast<int64_t>(out.size())).ok());
    return out;
}

// The largest |v| of the block of `block` values holding element i.
inline float block_amax(const std::vector<float>& v, size_t i, size_t block) {
    const size_t b0 = i / block * block;
    float a = 0;
    for (size_t j = b0; j < b0 + block; ++j) a = std::max(a, std::fabs(v[j]));
    return a;
}

}  // namespace pelican::test
