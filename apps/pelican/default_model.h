// The bundled default model (pelican-tiny.gguf) for `pelican run` without -m.
#pragma once

#include <string>

#include "core/status.h"

namespace pelican::cli {

inline constexpr const char* kDefaultModelName = "pelican-tiny.gguf";

// The first of, in this order:
//   $PELICAN_MODELS_DIR/pelican-tiny.gguf            when the variable is set;
//   ./models/pelican-tiny.gguf                       (the current directory: a source checkout);
//   <exe>/../share/pelican/models/pelican-tiny.gguf  (an installed binary: cmake --install);
//   <exe>/../../models/pelican-tiny.gguf             (a build folder inside the source tree);
//   <source tree>/models/pelican-tiny.gguf           (the tree this binary was configured from,
//                                                      for out-of-tree build folders).
// The error lists every place it looked.
Expected<std::string> find_default_model();

}  // namespace pelican::cli
