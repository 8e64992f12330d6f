// Conversion driver shared by HF, GGUF and synthetic inputs (see convert.h).
#include "convert/convert.h"

#include <filesystem>

#include "core/log.h"
#include "formats/hf_folder.h"

namespace pelican {

void assign_output_types(ConvertJob& job, DType requested) {
    bool has_output = false;
    for (const PlannedTensor& t : job.tensors) has_output |= t.name == "output.weight";
    for (PlannedTensor& t : job.tensors) {
        TypeChoice c = choose_tensor_type(t.name, t.dims, requested, !has_output);
        t.type = c.type;
        if (!c.note.empty()) job.notes.push_back(std::move(c.note));
    }
}

Expected<ConvertJob> plan_convert(const std::string& input, const ConvertOptions& opt) {
    std::error_code ec;
    if (!std::filesystem::exists(input, ec)) return make_error("{}: no such file or folder", input);
    if (std::filesystem::is_directory(input, ec)) {
        if (!is_hf_folder(input))
            return make_error(
                "{}: not a Hugging Face model folder (no config.json); convert needs config.json, "
                "*.safetensors and tokenizer.json",
                input);
        return plan_convert_hf(input, opt);
    }
    return plan_convert_gguf(input, opt);
}

Expected<EmitStats> write_job(const ConvertJob& job, const std::string& output, const EmitOptions& opt) {
    for (const std::string& n : job.notes) log_warn("{}", n);
    return emit_gguf(output, job.kvs, job.tensors, opt);
}

Expected<EmitStats> convert_model(const std::string& input, const std::string& output,
                                  const ConvertOptions& opt) {
    std::error_code ec;
    if (std::filesystem::exists(output, ec) && std::filesystem::equivalent(input, output, ec))
        return make_error("{}: the output would overwrite the input", output);
    PELICAN_ASSIGN(ConvertJob job, plan_convert(input, opt));
    return write_job(job, output, opt.emit);
}

}  // namespace pelican
