// Conversion driver shared by HF, GGUF and synthetic inputs (see convert.h).
#include "convert/convert.h"

#include <filesystem>

#include "core/log.h"
#include "core/output_file.h"
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

Status check_convert_output(const std::string& output, const std::vector<std::string>& inputs,
                            const EmitOptions& opt) {
    for (const std::string& in : inputs) PELICAN_TRY(check_output_not_input(output, in));
    if (opt.fd >= 0) return {};  // written into the descriptor, not to a path
    return check_output_path(output, opt.force);
}

Expected<EmitStats> convert_model(const std::string& input, const std::string& output,
                                  const ConvertOptions& opt) {
    PELICAN_TRY(check_convert_output(output, {input}, opt.emit));
    PELICAN_ASSIGN(ConvertJob job, plan_convert(input, opt));
    return write_job(job, output, opt.emit);
}

}  // namespace pelican
