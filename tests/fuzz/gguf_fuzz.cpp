// libFuzzer entry: parse arbitrary bytes as GGUF; on success touch every accessor and re-encode,
// and the re-encoded file must parse again to the same structure.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "formats/gguf.h"
#include "formats/gguf_info.h"
#include "formats/gguf_writer.h"

namespace {

// Sums bytes so the compiler cannot drop the reads (and ASan sees every access).
uint64_t touch(std::span<const uint8_t> s) {
    uint64_t h = 0;
    for (uint8_t b : s) h = h * 31 + b;
    return h;
}

// A broken invariant is a bug: report it and abort so libFuzzer records the input.
void check_impl(bool ok, const char* what, int line) {
    if (ok) return;
    std::fprintf(stderr, "gguf_fuzz.cpp:%d: check failed: %s\n", line, what);
    std::abort();
}
#define check(x) check_impl((x), #x, __LINE__)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace pelican;
    auto f = GgufFile::parse({data, size}, "fuzz");
    if (!f) return 0;
    volatile uint64_t sink = f->version() + f->alignment() + f->data_offset();
    for (const auto& kv : f->kvs()) {
        const GgufValue* v = f->find(kv.key);
        check(v != nullptr);
        (void)f->get_string(kv.key);
        (void)f->get_int(kv.key);
        (void)f->get_float(kv.key);
        (void)f->get_bool(kv.key);
        (void)f->get_string_array(kv.key);
        (void)f->get_f32_array(kv.key);
        (void)f->get_i32_array(kv.key);
        (void)v->as_int();
        (void)v->as_float();
    }
    for (const auto& t : f->tensors()) {
        check(f->find_tensor(t.name) != nullptr);
        auto d = f->tensor_data(t);
        check(d.size() == t.n_bytes);
        sink = sink + touch(d) + t.n_elements();
    }
    (void)gguf_summary(*f, false);
    (void)gguf_summary(*f, true);

    // Round trip: what the writer produces from a parsed file must parse to the same structure.
    auto bytes = gguf_to_bytes(*f);
    if (!bytes) std::fprintf(stderr, "%s\n", bytes.error().message.c_str());
    check(bytes.ok());
    auto g = GgufFile::parse(*bytes, "fuzz-rewritten");
    if (!g) std::fprintf(stderr, "%s\n", g.error().message.c_str());
    check(g.ok());
    check(g->kvs().size() == f->kvs().size() && g->tensors().size() == f->tensors().size());
    for (size_t i = 0; i < f->tensors().size(); ++i) {
        const auto& a = f->tensors()[i];
        const auto& b = g->tensors()[i];
        check(a.name == b.name && a.dims == b.dims && a.type == b.type && a.n_bytes == b.n_bytes);
        check(touch(f->tensor_data(a)) == touch(g->tensor_data(b)));
    }
    return 0;
}
