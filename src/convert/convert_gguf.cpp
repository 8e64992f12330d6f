// Plan for GGUF -> GGUF re-encoding (see convert.h).
#include <filesystem>

#include "convert/convert.h"
#include "core/log.h"
#include "formats/gguf_writer.h"

namespace pelican {

Expected<ConvertJob> plan_convert_gguf(const std::string& path, const ConvertOptions& opt) {
    PELICAN_ASSIGN(GgufFile file, GgufFile::open(path));
    auto f = std::make_shared<GgufFile>(std::move(file));
    ConvertJob job;
    job.keepalive = f;

    for (const GgufKV& kv : f->kvs()) {
        if (kv.key == "general.file_type" || kv.key == "general.quantization_version") continue;
        if (kv.key == "general.name" && !opt.name.empty()) continue;
        job.kvs.push_back(kv);
    }
    job.kvs.push_back({"general.file_type", gguf_u32(gguf_file_type(opt.type))});
    job.kvs.push_back({"general.quantization_version", gguf_u32(2)});
    if (!opt.name.empty()) job.kvs.push_back({"general.name", gguf_string(opt.name)});

    for (const GgufTensorInfo& t : f->tensors()) {
        const std::span<const uint8_t> data = f->tensor_data(t);
        if (data.size() != t.n_bytes) return make_error("{}: tensor {} lies outside the file", path, t.name);
        PlannedTensor p;
        p.name = t.name;
        p.dims = t.dims;
        p.src = data.data();
        p.src_type = t.type;
        job.tensors.push_back(std::move(p));
    }
    assign_output_types(job, opt.type);
    bool lossy = false;
    for (const PlannedTensor& t : job.tensors)
        lossy |= t.type != t.src_type && dtype_info(t.src_type).block_elems > 1;
    if (lossy)
        job.notes.push_back(
            fmt::format("{}: re-encoding already quantized tensors; precision lost by the earlier "
                        "quantization is not recovered",
                        path));
    return job;
}

}  // namespace pelican
