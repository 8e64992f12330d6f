// pelican bench: the measuring logic and its reports (runtime/bench.h).
#include "runtime/bench.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <functional>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/cpu/cache_info.h"
#include "backend/cpu/mem_bandwidth.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "pelican/engine.h"
#include "runtime/forward_factory.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_spec.h"

namespace pelican {
namespace {

// Adds one weight tensor: `read` bytes of it per decoded token.
struct Tally {
    ModelBytes out;
    std::map<DType, int64_t> by_type;  // bytes of matrices and the embedding, per type

    void vec(const float* v, int64_t n) {
        if (v == nullptr) return;
        const int64_t b = n * static_cast<int64_t>(sizeof(float));
        out.decode_weight_bytes += b;
        out.total_bytes += b;
        out.n_params += n;
    }
    // read: the share of w one decoded token reads (routed experts: k of E of them).
    void matrix(const cpu::Weight& w, double read = 1.0) {
        out.decode_weight_bytes += static_cast<int64_t>(static_cast<double>(w.bytes()) * read);
        out.total_bytes += w.bytes();
        out.n_params += w.n_in() * w.n_out();
        by_type[w.type()] += w.bytes();
    }
};

// One layer by its kinds; read: the share of its matrices one decode step reads (0 for the MTP block:
// stored, not read by a decode step; routed experts: k of E of that).
void tally_layer(const ModelHParams& hp, const LayerWeights& l, double read, Tally& t) {
    t.vec(l.attn_norm, hp.n_embd);
    t.vec(l.ffn_norm, hp.n_embd);
    if (uses_kv(l.kind.mixer)) {
        const AttentionWeights& a = l.attn;
        for (const cpu::Weight* m : {&a.wq, &a.wk, &a.wv, &a.wo}) t.matrix(*m, read);
        t.vec(a.q_norm, hp.head_dim);
        t.vec(a.k_norm, hp.head_dim);
        t.vec(a.bq, hp.q_dim());
        t.vec(a.bk, hp.kv_dim());
        t.vec(a.bv, hp.kv_dim());
        t.vec(a.bo, hp.n_embd);
    } else {
        const DeltaNetShape& s = hp.deltanet.linear;
        const DeltaNetWeights& d = l.linear;
        for (const cpu::Weight* m : {&d.in_qkv, &d.in_z, &d.in_b, &d.in_a, &d.out}) t.matrix(*m, read);
        t.vec(d.conv, s.conv_dim() * hp.deltanet.conv_kernel);
        t.vec(d.dt_bias, s.n_v_heads);
        t.vec(d.a_log, s.n_v_heads);
        t.vec(d.norm, s.d_v);
    }
    if (l.kind.ffn == Ffn::kMoe) {
        const MoeHParams& h = hp.moe;
        const double routed = h.n_expert > 0 ? static_cast<double>(h.n_expert_used) / h.n_expert : 0.0;
        for (const cpu::Weight* m :
             {&l.moe.router, &l.moe.shared_gate, &l.moe.shared.gate, &l.moe.shared.up, &l.moe.shared.down})
            t.matrix(*m, read);
        for (const SwigluWeights& x : l.moe.experts)
            for (const cpu::Weight* m : {&x.gate, &x.up, &x.down}) t.matrix(*m, read * routed);
    } else {
        for (const cpu::Weight* m : {&l.mlp.gate, &l.mlp.up, &l.mlp.down}) t.matrix(*m, read);
        t.vec(l.mlp.b_gate, hp.n_ff);
        t.vec(l.mlp.b_up, hp.n_ff);
        t.vec(l.mlp.b_down, hp.n_embd);
    }
}

std::string human_bytes(double b) {
    if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
    if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
    return fmt::format("{:.2f} KiB", b / 1024.0);
}

std::string human_count(double n) {
    if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
    if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
    return fmt::format("{:.2f} K", n / 1e3);
}

std::string rate_cell(const RateStats& s) {
    return fmt::format("{:.2f} ({:.2f}-{:.2f})", s.median, s.min, s.max);
}

std::string file_name(const std::string& path) {
    std::string p = path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    const size_t slash = p.find_last_of('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

// Ids the benchmark may feed: normal and byte tokens below the model's vocabulary, minus BOS/EOS
// and end-of-generation ids. Every id when there is no tokenizer.
std::vector<int32_t> plain_token_ids(const Engine& engine) {
    const int32_t n_vocab = engine.n_vocab();
    const Tokenizer* tok = engine.tokenizer();
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < n_vocab; ++id) {
        if (tok != nullptr) {
            const TokenizerSpec& s = tok->spec();
            if (id >= tok->n_vocab() || id == s.bos_id || id == s.eos_id || id == s.unk_id || id == s.pad_id)
                continue;
            const TokenType t = static_cast<size_t>(id) < s.types.size() ? s.types[static_cast<size_t>(id)]
                                                                         : TokenType::Normal;
            if (t != TokenType::Normal && t != TokenType::Byte) continue;
        }
        const auto& eog = engine.end_of_generation_ids();
        if (std::binary_search(eog.begin(), eog.end(), id)) continue;
        ids.push_back(id);
    }
    return ids;
}

ModelBytes model_bytes(const Model& model) {
    const ModelHParams& hp = model.hparams();
    const ModelWeights& w = model.weights();
    Tally t;
    for (const LayerWeights& l : w.layers) tally_layer(hp, l, 1.0, t);
    if (w.mtp.present) {
        t.matrix(w.mtp.fc, 0.0);
        for (const LayerWeights& l : w.mtp.layers) tally_layer(hp, l, 0.0, t);
    }
    t.vec(w.output_norm, hp.n_embd);
    t.matrix(w.output);  // the LM head is read whole, tied or not
    // The embedding: one row per decoded token; stored in full unless it is the tied output.
    t.out.decode_weight_bytes += w.tok_embd.row_bytes();
    if (!w.tied_output) {
        t.out.total_bytes += w.tok_embd.n_bytes();
        t.out.n_params += w.tok_embd.n_elements();
        t.by_type[w.tok_embd.dtype] += w.tok_embd.n_bytes();
    }
    std::vector<std::pair<int64_t, DType>> order;
    for (const auto& [type, bytes] : t.by_type) order.emplace_back(bytes, type);
    std::sort(order.rbegin(), order.rend());
    for (const auto& [bytes, type] : order) {
        if (!t.out.types.empty()) t.out.types += ", ";
        t.out.types += dtype_name(type);
    }
    return t.out;
}

KvBytes decode_kv_bytes(const Model& model, int64_t depth, int64_t n_gen, int elem_bytes) {
    const ModelHParams& hp = model.hparams();
    KvBytes r;
    if (n_gen <= 0) return r;
    double sum = 0;
    for (int64_t pos = depth; pos < depth + n_gen; ++pos)
        sum += static_cast<double>(hp.sliding_window > 0 ? std::min(pos + 1, hp.sliding_window) : pos + 1);
    r.mean_positions = sum / static_cast<double>(n_gen);
    // K and V of every attention layer (fp32 pages on the CPU, backend/cpu/cpu_memory.h; the GPU cache may be
    // F16). Only the attention layers cache K/V; each DeltaNet layer reads
    // and writes its fp32 recurrent state (S and the conv inputs) once per token instead.
    const double row_bytes = static_cast<double>(2 * hp.n_kv_layers() * hp.kv_dim()) * elem_bytes;
    r.bytes_per_token = row_bytes * r.mean_positions;
    if (hp.has(Mixer::kDeltaNet)) {
        const DeltaNetHParams& h = hp.deltanet;
        const double state =
            static_cast<double>(h.linear.state_floats() + (h.conv_kernel - 1) * h.linear.conv_dim());
        r.bytes_per_token += 2.0 * static_cast<double>(hp.count(Mixer::kDeltaNet)) * state * sizeof(float);
    }
    return r;
}

Status check_bench_params(const BenchParams& p, int64_t n_ctx_train) {
    if (p.n_prompt <= 0) return make_error("bench: -p (prompt tokens) must be positive, got {}", p.n_prompt);
    if (p.n_gen <= 0) return make_error("bench: -n (decoded tokens) must be positive, got {}", p.n_gen);
    if (p.reps <= 0) return make_error("bench: -r (repetitions) must be positive, got {}", p.reps);
    if (p.depth < 0) return make_error("bench: -d (decode depth) must be >= 0, got {}", p.depth);
    if (p.n_batch <= 0) return make_error("bench: the batch size must be positive, got {}", p.n_batch);
    if (p.n_threads < 0 || p.n_threads > ThreadPool::max_thread_count())
        return make_error(
            "bench: -t {} is not a thread count here; pass -t between 1 and {} (4 x the {} cores; 0 "
            "picks the default, {})",
            p.n_threads, ThreadPool::max_thread_count(), ThreadPool::available_cores(),
            ThreadPool::default_thread_count());
    if (p.roofline_gbps && !(*p.roofline_gbps > 0 && std::isfinite(*p.roofline_gbps)))
        return make_error("bench: --roofline-gbps must be a positive GB/s figure, got {}", *p.roofline_gbps);
    if (n_ctx_train > 0) {
        if (p.n_prompt > n_ctx_train)
            return make_error(
                "bench: -p {} needs a context of {} tokens but the model's context is {}; pass -p {} or "
                "less",
                p.n_prompt, p.n_prompt, n_ctx_train, n_ctx_train);
        if (p.depth > n_ctx_train || p.n_gen > n_ctx_train - p.depth)
            return make_error(
                "bench: -d {} + -n {} needs a context of {} tokens but the model's context is {}; pass -d "
                "and -n that add up to {} or less",
                p.depth, p.n_gen, p.depth + p.n_gen, n_ctx_train, n_ctx_train);
    }
    return {};
}

Expected<std::vector<int64_t>> parse_depths(const std::string& s) {
    std::vector<int64_t> out;
    size_t i = 0;
    while (true) {
        const size_t j = s.find(',', i);
        const std::string item = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
        int64_t v = 0;
        const char* b = item.data();
        const auto [end, ec] = std::from_chars(b, b + item.size(), v);
        if (item.empty() || ec != std::errc() || end != b + item.size() || v < 0)
            return make_error(
                "bench: -d: '{}' is not a token count (give depths >= 0, comma-separated: -d 0,4096)", item);
        out.push_back(v);
        if (j == std::string::npos) break;
        i = j + 1;
    }
    return out;
}

RateStats rate_stats(const std::vector<double>& seconds, int64_t n) {
    std::vector<double> rates;
    for (double s : seconds) rates.push_back(s > 0 ? static_cast<double>(n) / s : 0.0);
    RateStats r;
    if (rates.empty()) return r;
    std::sort(rates.begin(), rates.end());
    const size_t m = rates.size() / 2;
    r.median = rates.size() % 2 ? rates[m] : (rates[m - 1] + rates[m]) / 2;
    r.min = rates.front();
    r.max = rates.back();
    return r;
}

Expected<BenchResult> run_bench(const Engine& engine, const BenchParams& p) {
    PELICAN_TRY(check_bench_params(p, engine.n_ctx_train()));
    const std::vector<int32_t> pool = plain_token_ids(engine);
    if (pool.empty()) return make_error("bench: the vocabulary has no normal tokens to feed the model");

    BenchResult r;
    r.params = p;
    r.model_path = engine.model().path();
    r.model_desc = engine.model().describe();
    r.model = model_bytes(engine.model());
    r.kv = decode_kv_bytes(engine.model(), p.depth, p.n_gen);
    r.n_ctx = std::max(p.n_prompt, p.depth + p.n_gen);
    r.device = engine.device_description();
    // The forward pass straight from the factory (what a Session runs), so a GPU pass can be
    // timed with its device-side decode.
    PELICAN_ASSIGN(std::unique_ptr<ForwardPass> fwd,
                   create_forward_pass(engine, ForwardOptions{.n_ctx = r.n_ctx, .n_batch = p.n_batch}));
    const bool on_gpu = fwd->device_name() != "cpu";
    PELICAN_ASSIGN(std::unique_ptr<ThreadPool> pool_owner, ThreadPool::create(on_gpu ? 1 : p.n_threads));
    ThreadPool& threads = *pool_owner;
    r.n_threads = threads.size();
    // Decode step: feeds the token at pos without sampling. CPU: eval (logits to host memory, as
    // llama-bench's llama_decode); GPU: no logits copy and no host sync per step.
    const auto step = [&](int32_t tok, int64_t pos) { return fwd->decode_no_logits(tok, pos, threads); };
    // A device pass counts the weight bytes of its own layout (hybrid: k of the E routed experts)
    // and reads its KV cache at its element size.
    if (fwd->decode_weight_bytes() >= 0) r.model.decode_weight_bytes = fwd->decode_weight_bytes();
    r.kv = decode_kv_bytes(engine.model(), p.depth, p.n_gen, fwd->kv_elem_bytes());
    r.kv_type = std::string(fwd->kv_type_name());

    std::mt19937_64 rng(p.seed);
    std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
    auto draw = [&](int64_t n) {
        std::vector<int32_t> v(static_cast<size_t>(n));
        for (int32_t& id : v) id = pool[pick(rng)];
        return v;
    };
    using clock = std::chrono::steady_clock;
    for (int rep = -1; rep < p.reps; ++rep) {  // rep -1: warm-up, not counted
        const std::vector<int32_t> prompt = draw(p.n_prompt);
        const std::vector<int32_t> ctx = draw(p.depth);
        const std::vector<int32_t> gen = draw(p.n_gen);
        BenchRun run;

        auto t0 = clock::now();
        PELICAN_TRY(fwd->eval(prompt, 0, threads));
        PELICAN_TRY(fwd->synchronize());
        run.prefill_s = seconds_since(t0);

        if (!ctx.empty()) PELICAN_TRY(fwd->eval(ctx, 0, threads));
        PELICAN_TRY(fwd->synchronize());
        t0 = clock::now();
        for (size_t i = 0; i < gen.size(); ++i) PELICAN_TRY(step(gen[i], p.depth + static_cast<int64_t>(i)));
        PELICAN_TRY(fwd->synchronize());
        run.decode_s = seconds_since(t0);
        if (rep >= 0) r.runs.push_back(run);
    }

    std::vector<double> pre, dec;
    for (const BenchRun& run : r.runs) {
        pre.push_back(run.prefill_s);
        dec.push_back(run.decode_s);
    }
    r.prefill = rate_stats(pre, p.n_prompt);
    r.decode = rate_stats(dec, p.n_gen);
    r.gbps =
        (static_cast<double>(r.model.decode_weight_bytes) + r.kv.bytes_per_token) * r.decode.median / 1e9;
    if (auto mem = read_proc_memory(); mem.ok()) r.memory_after_runs = *mem;

    // A CPU working set that fits in the last-level cache never streams from memory: a bandwidth
    // roofline says nothing about it (a 6 MB model "reached" 158% of it), so none is given.
    const double bytes_per_token = static_cast<double>(r.model.decode_weight_bytes) + r.kv.bytes_per_token;
    if (!on_gpu) r.llc_bytes = cpu::last_level_cache_bytes();
    r.fits_in_cache = !on_gpu && r.llc_bytes > 0 && bytes_per_token <= static_cast<double>(r.llc_bytes);
    // The roofline, after the timed runs (the session's threads are idle by now), same thread count.
    const std::string in_cache = fmt::format(
        "the {} read per token fit in the {} last-level cache, so decode does not stream from memory",
        human_bytes(bytes_per_token), human_bytes(static_cast<double>(r.llc_bytes)));
    if (p.roofline_gbps) {
        r.roofline_gbps = *p.roofline_gbps;
        r.roofline_source = r.fits_in_cache ? "given with --roofline-gbps; " + in_cache
                                            : std::string("given with --roofline-gbps");
    } else if (!p.measure_roofline) {
        r.roofline_source = "skipped (--no-roofline)";
    } else if (r.fits_in_cache) {
        r.roofline_source = "does not apply: " + in_cache;
    } else if (on_gpu) {
        constexpr size_t kBytes = size_t{1} << 30;
        constexpr int kPasses = 10;
        PELICAN_ASSIGN(DeviceBackend * gpu, cuda_backend());
        r.roofline_gbps = gpu->copy_bandwidth_gbps(kBytes, kPasses);
        if (r.roofline_gbps <= 0)
            return make_error(
                "bench: measuring the GPU copy bandwidth failed (2 x 1 GiB could not be allocated?); pass "
                "--roofline-gbps or --no-roofline");
        r.roofline_source = fmt::format("device-to-device copy of {}, read + write bytes, median of {}",
                                        human_bytes(static_cast<double>(kBytes)), kPasses);
    } else {
        PELICAN_ASSIGN(cpu::ReadBandwidth bw, cpu::probe_read_bandwidth(r.n_threads));
        r.roofline_gbps = bw.median_gbps;
        r.roofline_source = fmt::format("{} read {} times with {} thread(s), median{}",
                                        human_bytes(static_cast<double>(bw.bytes)), bw.passes, bw.n_threads,
                                        bw.reduced ? "; 1 GiB could not be allocated" : "");
    }
    if (r.roofline_gbps > 0) r.roofline_pct = 100.0 * r.gbps / r.roofline_gbps;
    return r;
}

std::string bench_table(const BenchResult& r) {
    const BenchParams& p = r.params;
    const std::string tg =
        p.depth > 0 ? fmt::format("tg{} @ d{}", p.n_gen, p.depth) : fmt::format("tg{}", p.n_gen);
    // CPU: a threads column; GPU: the device instead (its compute does not use host threads).
    const bool cpu = r.device == "cpu";
    std::string out = fmt::format(
        "| model | type | size | params | {} | pp{} tok/s | {} tok/s | bytes/token | GB/s | % roofline "
        "|\n"
        "|---|---|---|---|---|---|---|---|---|---|\n",
        cpu ? "threads" : "device", p.n_prompt, tg);
    out += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} + {} KV | {:.1f} | {} |\n", file_name(r.model_path),
        r.model.types, human_bytes(static_cast<double>(r.model.total_bytes)),
        human_count(static_cast<double>(r.model.n_params)), cpu ? std::to_string(r.n_threads) : r.device,
        rate_cell(r.prefill), rate_cell(r.decode),
        human_bytes(static_cast<double>(r.model.decode_weight_bytes)), human_bytes(r.kv.bytes_per_token),
        r.gbps,
        r.roofline_gbps > 0 ? fmt::format("{:.1f}%{}", r.roofline_pct, r.fits_in_cache ? " (in cache)" : "")
        : r.fits_in_cache   ? std::string("in cache")
                            : std::string("-"));
    out += fmt::format(
        "tok/s: median (min-max) of {} runs after one warm-up; decode feeds random tokens without sampling "
        "(as llama-bench tg); KV read at {:.1f} positions per step on average{}\n",
        r.runs.size(), r.kv.mean_positions, cpu ? "" : fmt::format(" ({} cache)", r.kv_type));
    if (r.roofline_gbps > 0)
        out += fmt::format("decode: {:.1f} GB/s = {:.1f}% of {} {} roofline {:.1f} GB/s ({})\n", r.gbps,
                           r.roofline_pct, r.params.roofline_gbps ? "given" : "measured",
                           cpu ? "read" : "GPU copy", r.roofline_gbps, r.roofline_source);
    else
        out += fmt::format("decode: {:.1f} GB/s; read roofline {}\n", r.gbps, r.roofline_source);
    if (r.memory_after_load || r.memory_after_runs) {
        std::vector<std::string> parts;
        if (r.memory_after_load) parts.push_back("after load: " + describe_memory(*r.memory_after_load));
        if (r.memory_after_runs) parts.push_back("after the runs: " + describe_memory(*r.memory_after_runs));
        out += fmt::format("memory {}\n", fmt::join(parts, "; "));
    }
    return out;
}

std::string bench_json(const BenchResult& r) {
    const BenchParams& p = r.params;
    nlohmann::ordered_json j;
    j["model"] = r.model_path;
    j["model_desc"] = r.model_desc;
    j["types"] = r.model.types;
    j["model_bytes"] = r.model.total_bytes;
    j["n_params"] = r.model.n_params;
    j["n_prompt"] = p.n_prompt;
    j["n_gen"] = p.n_gen;
    j["depth"] = p.depth;
    j["reps"] = p.reps;
    j["threads"] = r.n_threads;
    j["device"] = r.device;
    j["kv_type"] = r.kv_type;
    j["n_batch"] = p.n_batch;
    j["n_ctx"] = r.n_ctx;
    j["seed"] = p.seed;
    j["decode_tokens"] = "random, no sampling";
    j["prefill_tok_s"] = r.prefill.median;
    j["prefill_tok_s_min"] = r.prefill.min;
    j["prefill_tok_s_max"] = r.prefill.max;
    j["decode_tok_s"] = r.decode.median;
    j["decode_tok_s_min"] = r.decode.min;
    j["decode_tok_s_max"] = r.decode.max;
    j["weight_bytes_per_token"] = r.model.decode_weight_bytes;
    j["kv_bytes_per_token"] = r.kv.bytes_per_token;
    j["kv_mean_positions"] = r.kv.mean_positions;
    j["gbps"] = r.gbps;
    j["roofline_gbps"] = r.roofline_gbps > 0 ? nlohmann::ordered_json(r.roofline_gbps) : nullptr;
    j["roofline_pct"] = r.roofline_gbps > 0 ? nlohmann::ordered_json(r.roofline_pct) : nullptr;
    j["roofline_source"] = r.roofline_source;
    j["fits_in_cache"] = r.fits_in_cache;
    j["llc_bytes"] = r.llc_bytes > 0 ? nlohmann::ordered_json(r.llc_bytes) : nullptr;
    nlohmann::ordered_json pre = nlohmann::ordered_json::array(), dec = nlohmann::ordered_json::array();
    for (const BenchRun& run : r.runs) {
        pre.push_back(run.prefill_s);
        dec.push_back(run.decode_s);
    }
    j["prefill_s"] = std::move(pre);
    j["decode_s"] = std::move(dec);
    const auto memory = [](const std::optional<ProcMemory>& m) {
        if (!m) return nlohmann::ordered_json(nullptr);
        return nlohmann::ordered_json{
            {"rss", m->rss}, {"anon", m->anon}, {"file", m->file}, {"shmem", m->shmem}, {"peak", m->peak}};
    };
    j["memory_after_load"] = memory(r.memory_after_load);
    j["memory_after_runs"] = memory(r.memory_after_runs);
    return j.dump();
}

}  // namespace pelican
