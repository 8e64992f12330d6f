// Finding the bundled default model (default_model.h).
#include "default_model.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace pelican::cli {

Expected<std::string> find_default_model() {
    namespace fs = std::filesystem;
    std::vector<fs::path> places;
    if (const char* dir = std::getenv("PELICAN_MODELS_DIR"); dir && *dir) places.push_back(fs::path(dir));
    places.push_back(fs::path("models"));
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        places.push_back(exe.parent_path() / ".." / "share" / "pelican" / "models");
        places.push_back(exe.parent_path() / ".." / ".." / "models");
    }
#ifdef PELICAN_SOURCE_MODELS_DIR
    places.push_back(fs::path(PELICAN_SOURCE_MODELS_DIR));
#endif
    std::string tried;
    for (const fs::path& dir : places) {
        const fs::path p = (dir / kDefaultModelName).lexically_normal();
        if (fs::is_regular_file(p, ec)) return p.string();
        tried += (tried.empty() ? "" : ", ") + p.string();
    }
    return make_error(
        "no -m MODEL given and the bundled default {} is not in any of: {}; give a model with -m MODEL (a "
        "GGUF file or a Hugging Face model folder), or set PELICAN_MODELS_DIR to the folder holding {}",
        kDefaultModelName, tried, kDefaultModelName);
}

}  // namespace pelican::cli
