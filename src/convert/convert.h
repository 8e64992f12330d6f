// `pelican convert`: Hugging Face folders (f32/f16/bf16 safetensors + config.json + tokenizer.json)
// and GGUF files to GGUF files that pelican and llama.cpp load, with round-to-nearest
// quantization (core/dequantize.h quantize_row); and synthetic models of any supported shape with
// seeded random weights and a real vocabulary (convert/synthetic.h).
//
// HF input: tensors are renamed to GGUF names (model/tensor_names.h); q/k projections of
// llama/mistral/granite are permuted to GGUF's interleaved rope layout (model/rope_permute.h);
// hyper-parameters and tokenizer become GGUF metadata (convert/metadata.h). GGUF input: metadata
// and tensor names are kept; tensors are re-encoded to the requested type (a tensor already of
// its output type is copied byte for byte). Output types per tensor: convert/tensor_plan.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "convert/gguf_emit.h"
#include "convert/tensor_plan.h"
#include "core/status.h"
#include "formats/gguf.h"

namespace pelican {

struct ConvertOptions {
    DType type = DType::F16;  // requested output type (one of convert_types())
    std::string name;         // general.name; default: the input folder / file name
    EmitOptions emit;
};

// Everything to write: metadata, tensors, and whatever keeps their sources mapped.
struct ConvertJob {
    std::vector<GgufKV> kvs;
    std::vector<PlannedTensor> tensors;
    std::vector<std::string> notes;  // type fallbacks etc., printed by the caller
    std::shared_ptr<const void> keepalive;
};

// Plans the conversion of an HF folder or a GGUF file (chosen by what `input` is).
Expected<ConvertJob> plan_convert(const std::string& input, const ConvertOptions& opt);
Expected<ConvertJob> plan_convert_hf(const std::string& folder, const ConvertOptions& opt);
Expected<ConvertJob> plan_convert_gguf(const std::string& path, const ConvertOptions& opt);

// The checks made before any planning (core/output_file.h): output is not one of the inputs (a file or
// the files of an HF folder; empty names are skipped) and may be written (opt.force: replace it).
Status check_convert_output(const std::string& output, const std::vector<std::string>& inputs,
                            const EmitOptions& opt);

// check_convert_output, then plans and writes `output`. Notes go to stderr as warnings.
Expected<EmitStats> convert_model(const std::string& input, const std::string& output,
                                  const ConvertOptions& opt);

// Sets each tensor's output type by choose_tensor_type(); collects fallback notes.
void assign_output_types(ConvertJob& job, DType requested);
// Writes a planned job (notes to stderr first).
Expected<EmitStats> write_job(const ConvertJob& job, const std::string& output, const EmitOptions& opt);

}  // namespace pelican
