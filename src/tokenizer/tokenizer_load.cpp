// Tokenizer::load: picks the loader from the path (GGUF file, tokenizer.json, HF folder).
#include <cstring>
#include <filesystem>
#include <fstream>

#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

namespace pelican {

namespace {

bool has_gguf_magic(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    char magic[4] = {};
    return f.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

Expected<Tokenizer> Tokenizer::load(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (ec || !fs::exists(st)) return make_error("{}: no such file or directory", path);
    if (fs::is_directory(st)) return from_hf(path);
    if (fs::path(path).extension() == ".json") return from_hf(path);
    if (fs::path(path).extension() == ".gguf" || has_gguf_magic(path)) {
        PELICAN_ASSIGN(GgufFile file, GgufFile::open(path));
        return from_gguf(file);
    }
    return make_error("{}: not a GGUF file, tokenizer.json or Hugging Face folder", path);
}

}  // namespace pelican
