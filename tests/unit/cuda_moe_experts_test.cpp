// The GPU MoE expert matmuls (backend/cuda/gemv.h expert slots, moe.h grouping and combine) on fresh
// random inputs (PELICAN_TEST_SEED replays a failure); routing and combine alone are in
// cuda_moe_test.cpp, the shared helpers in cuda_moe_test_util.h.
//  * Expert-slot GEMV: for every kernel variant, each slot's output (and the y gaps) must equal
//    bit for bit a plain gemv() with the same variant on a GpuMatrix uploaded from that expert's
//    rows alone, on the slot's activations / residual (the same kernel arithmetic runs; the
//    plain GEMV itself is checked against the references by cuda_gemv_test).
//  * Grouped experts (prompt chunks): moe_group_slots' grouping, then the grouped expert GEMVs against
//    the slot-wise ones; the fused decode combine in the down GEMV against moe_combine, bit for bit.
// A whole MoE block as the forward pass chains it is in cuda_moe_block_test.cpp.
// Small mode (PELICAN_CUDA_TEST_SMALL=1, cuda_test_util.h; for compute-sanitizer): the expert GEMV at
// n_in 256 only, and its many-slot case with 40 slots instead of 300.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gpu_matrix.h"
#include "backend/cuda/moe.h"
#include "cuda_moe_test_util.h"
#include "cuda_test_buffers.h"
#include "cuda_test_util.h"
#include "ops/ops_qwen35.h"
#include "ops_test_util.h"

namespace pelican {
namespace {

using cuda::DeviceBuffer;
using test::check_route_result;
using test::copy_to;
using test::from_device;
using test::kU;
using test::Rng;
using test::same_bits;
using test::to_device;
using test::upload_rows;

#define SKIP_WITHOUT_GPU()                \
    if (!cuda::gpu_available()) {         \
        GTEST_SKIP() << "no CUDA device"; \
    }                                     \
    static_assert(true, "")

// ---- expert-slot GEMV ----------------------------------------------------------------------------

struct ExpertCase {
    DType t = DType::Q4_0;
    int64_t n_in = 256;
    int n_expert = 8;
    int64_t expert_rows = 64;  // glu: gate + up rows per expert
    bool glu = false;
    std::vector<int32_t> ids{5, 0, 7, 5};
    bool shared_x = false;  // x_slot_stride 0: every slot reads the same x
    int x_slot_div = 1;
    int64_t x_pad = 4;  // per-slot x rows: n_in + x_pad floats apart
    int x_misalign = 0;
    bool norm = false, one_plus = false, residual = false, alias = false;
    float scale = 1.0f;
    int64_t y_pad = 0;  // y_slot_stride = width + y_pad (0: the default, width)
    std::string describe() const {
        std::ostringstream s;
        s << dtype_name(t) << " n_in " << n_in << " experts " << n_expert << "x" << expert_rows
          << (glu ? " glu" : "") << " ids";
        for (int32_t i : ids) s << " " << i;
        if (shared_x)
            s << " shared-x";
        else
            s << " x-div " << x_slot_div;
        if (x_misalign) s << " x-misaligned";
        if (norm) s << (one_plus ? " norm(1+w)" : " norm");
        if (residual) s << (alias ? " residual(=y)" : " residual");
        if (scale != 1.0f) s << " scale " << scale;
        if (y_pad) s << " y-pad " << y_pad;
        return s.str();
    }
};

void run_expert_case(Rng& rng, const ExpertCase& c) {
    const std::string what = c.describe();
    SCOPED_TRACE(what);
    const int n_slots = static_cast<int>(c.ids.size());
    const int64_t n_in = c.n_in, width = c.glu ? c.expert_rows / 2 : c.expert_rows;
    const test::RandomMatrix m = test::random_matrix(rng, c.t, n_in, c.n_expert * c.expert_rows, true);
    cuda::GpuMatrix all = upload_rows(m, 0, m.n_out);
    std::map<int, cuda::GpuMatrix> per;  // expert -> its rows alone
    for (int32_t id : c.ids) {
        const int e = id < 0 || id >= c.n_expert ? 0 : id;  // the kernel reads expert 0 for bad ids
        if (!per.count(e)) per[e] = upload_rows(m, e * c.expert_rows, c.expert_rows);
    }

    const int n_x = c.shared_x ? 1 : (n_slots + c.x_slot_div - 1) / c.x_slot_div;
    const int64_t xs = c.shared_x ? 0 : n_in + c.x_pad;
    std::vector<float> xbuf(static_cast<size_t>(c.x_misalign + std::max<int64_t>(xs, n_in) * n_x), NAN);
    for (int r = 0; r < n_x; ++r) {
        const std::vector<float> row = test::random_vec(rng, n_in);
        std::copy(row.begin(), row.end(), xbuf.begin() + c.x_misalign + r * xs);
    }
    std::vector<float> nw(static_cast<size_t>(n_in));
    for (auto& v : nw) v = c.one_plus ? 0.2f * rng.normal() : 1.0f + 0.2f * rng.normal();
    const int64_t ys = width + c.y_pad;
    const float sentinel = 12345.0f;
    std::vector<float> res(static_cast<size_t>(ys * n_slots), sentinel);
    for (int s = 0; s < n_slots; ++s)
        for (int64_t i = 0; i < width; ++i) res[static_cast<size_t>(s * ys + i)] = rng.normal();
    const std::vector<float> y_init = c.residual && c.alias ? res : std::vector<float>(res.size(), sentinel);

    DeviceBuffer dx = to_device(xbuf), dnw = to_device(nw), dres = to_device(res), dids = to_device(c.ids),
                 dy = to_device(y_init), dy_ref = to_device(y_init);
    auto base_args = [&](float* y) {
        cuda::GemvArgs a;
        if (c.norm) {
            a.norm_w = dnw.as<float>();
            a.norm_eps = 1e-5f;
            a.norm_one_plus = c.one_plus;
        }
        a.scale = c.scale;
        a.glu = c.glu;
        a.y = y;
        return a;
    };
    const float* x0 = dx.as<float>() + c.x_misalign;
    const int nv = cuda::gemv_variant_count();
    test::GemvKernelReset reset_kernel;
    for (int v = 0; v < nv; ++v) {
        const std::string vn = cuda::gemv_variant_name(v);
        copy_to(dy, y_init);
        copy_to(dy_ref, y_init);
        // All slots in one call.
        cuda::GemvArgs a = base_args(dy.as<float>());
        a.x = x0;
        a.residual = c.residual ? (c.alias ? dy.as<float>() : dres.as<float>()) : nullptr;
        a.expert_ids = dids.as<int32_t>();
        a.n_expert_slots = n_slots;
        a.expert_rows = c.expert_rows;
        a.x_slot_stride = xs;
        a.x_slot_div = c.x_slot_div;
        a.y_slot_stride = c.y_pad ? ys : 0;
        cuda::gemv_force_variant(v);
        cuda::gemv(all, a, nullptr);
        // Each slot alone on its expert's matrix.
        for (int s = 0; s < n_slots; ++s) {
            const int32_t id = c.ids[static_cast<size_t>(s)];
            const int e = id < 0 || id >= c.n_expert ? 0 : id;
            cuda::GemvArgs b = base_args(dy_ref.as<float>() + s * ys);
            b.x = x0 + (s / c.x_slot_div) * xs;
            if (c.residual) b.residual = c.alias ? b.y : dres.as<float>() + s * ys;
            cuda::gemv(per[e], b, nullptr);
        }
        cuda::gemv_force_variant(-1);
        const cudaError_t st = cudaDeviceSynchronize();
        ASSERT_EQ(st, cudaSuccess) << vn << ": " << cudaGetErrorString(st);
        const std::vector<float> got = from_device<float>(dy.get(), y_init.size()),
                                 want = from_device<float>(dy_ref.get(), y_init.size());
        size_t first = 0;
        if (!same_bits(got, want, &first)) {
            ADD_FAILURE() << "variant " << vn << ": slot " << first / ys << " element " << first % ys
                          << ": expert " << got[first] << " vs plain " << want[first];
            break;
        }
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float f) { return std::isfinite(f); }))
            << "variant " << vn;
    }
    cuda::free_matrix(all);
    for (auto& [e, gm] : per) cuda::free_matrix(gm);
}

TEST(CudaMoe, ExpertGemvMatchesPerExpertGemv) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    const std::vector<int64_t> n_ins =
        test::cuda_test_size(std::vector<int64_t>{256, 512}, std::vector<int64_t>{256});
    for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::BF16, DType::F16, DType::F32})
        for (int64_t n_in : n_ins) {
            // Decode gate/up: the shared normed x, [gate; up] per expert, SwiGLU.
            ExpertCase g;
            g.t = t;
            g.n_in = n_in;
            g.expert_rows = 2 * 96;
            g.glu = true;
            g.shared_x = true;
            g.norm = true;
            run_expert_case(rng, g);
            // Decode down: per-slot x, in-place residual, scale.
            ExpertCase d;
            d.t = t;
            d.n_in = n_in;
            d.residual = d.alias = true;
            d.scale = 0.5f;
            run_expert_case(rng, d);
            // Prefill: 2 tokens x 3 experts (x row = slot / 3), separate residual, padded y.
            ExpertCase p;
            p.t = t;
            p.n_in = n_in;
            p.ids = {2, 6, 6, 1, 3, 0};
            p.x_slot_div = 3;
            p.norm = p.one_plus = p.residual = true;
            p.y_pad = 3;
            run_expert_case(rng, p);
            p.glu = true;
            p.expert_rows = 2 * 40;
            p.residual = false;
            run_expert_case(rng, p);
        }
    // Misaligned x (scalar activation loads) and an odd float row length.
    for (DType t : {DType::F32, DType::BF16}) {
        ExpertCase c;
        c.t = t;
        c.n_in = 100;
        c.x_pad = 1;
        c.x_misalign = 1;
        c.glu = true;
        c.expert_rows = 2 * 24;
        run_expert_case(rng, c);
    }
    ExpertCase q;
    q.x_pad = 3;
    q.x_misalign = 3;
    q.norm = true;
    run_expert_case(rng, q);
    // One slot; many slots (more than fit the GPU at once with one CTA per slot).
    ExpertCase one;
    one.ids = {3};
    run_expert_case(rng, one);
    ExpertCase many;
    many.t = DType::Q8_0;
    many.ids.clear();
    for (int i = 0; i < test::cuda_test_size(300, 40); ++i)
        many.ids.push_back(static_cast<int32_t>(rng.index(8)));
    many.shared_x = true;
    many.expert_rows = 32;
    run_expert_case(rng, many);
}

// Grouped experts (prompt chunks): moe_group_slots puts every slot in exactly one row of a group of
// its expert (group_expert, row_slot, slot_row consistent); the expert GEMVs with 8 token rows per
// group on gathered rows (moe_gather_rows) give each slot what the one-token expert-slot GEMV gives
// (within 1e-5 of the row's scale: at these shapes both kernels sum in the same order, the extra lanes
// adding zeros, so a 1-ulp difference that could flip the down GEMV's int8 rounding is not expected);
// unused groups are skipped (their rows keep a sentinel); moe_combine through slot_row equals the
// slot-wise combine on the same values.
TEST(CudaMoe, GroupedExpertsMatchSlots) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    for (DType t : {DType::Q4_0, DType::Q4_K, DType::F32}) {
        SCOPED_TRACE(dtype_name(t));
        const int n_exp = 17, n_tok = 37, ko = 3, slots = n_tok * ko;
        const int64_t n_in = 256, ff = t == DType::Q4_K ? 256 : 64;  // Q4_K rows: multiples of 256
        const test::RandomMatrix gu = test::random_matrix(rng, t, n_in, n_exp * 2 * ff, true),
                                 dn = test::random_matrix(rng, t, ff, n_exp * n_in, true);
        const cuda::GpuMatrix mgu = upload_rows(gu, 0, gu.n_out), mdn = upload_rows(dn, 0, dn.n_out);
        std::vector<int32_t> ids(static_cast<size_t>(slots));
        for (auto& id : ids) id = static_cast<int32_t>(rng.index(n_exp));
        ids[0] = ids[1] = ids[2] = 4;  // a popular expert (several groups)
        for (int i = 3; i < 30; ++i) ids[static_cast<size_t>(i)] = 4;
        const std::vector<float> x = test::random_vec(rng, n_tok * n_in);
        const int groups = cuda::moe_group_max_groups(slots, n_exp);
        const int64_t rows = static_cast<int64_t>(groups) * cuda::kMoeGroupRows;
        DeviceBuffer dids = to_device(ids), dx = to_device(x),
                     dge = to_device(std::vector<int32_t>(groups, 99)),
                     dsr = to_device(std::vector<int32_t>(slots, 99)),
                     drs = to_device(std::vector<int32_t>(static_cast<size_t>(rows), 99)),
                     dxg = to_device(std::vector<float>(static_cast<size_t>(rows * n_in), NAN)),
                     dag = to_device(std::vector<float>(static_cast<size_t>(rows * ff), NAN)),
                     dog = to_device(std::vector<float>(static_cast<size_t>(rows * n_in), 12345.0f)),
                     das = to_device(std::vector<float>(static_cast<size_t>(slots * ff), NAN)),
                     dos = to_device(std::vector<float>(static_cast<size_t>(slots * n_in), NAN));
        cuda::MoeGroupArgs ga;
        ga.ids = dids.as<int32_t>();
        ga.n_slots = slots;
        ga.n_experts = n_exp;
        ga.max_groups = groups;
        ga.group_expert = dge.as<int32_t>();
        ga.slot_row = dsr.as<int32_t>();
        ga.row_slot = drs.as<int32_t>();
        cuda::moe_group_slots(ga, nullptr);
        cuda::moe_gather_rows(dx.as<float>(), n_in, ko, drs.as<int32_t>(), dge.as<int32_t>(), rows,
                              dxg.as<float>(), nullptr);
        cuda::GemvArgs g;
        g.x = dxg.as<float>();
        g.n_tok = cuda::kMoeGroupRows;
        g.glu = true;
        g.expert_ids = dge.as<int32_t>();
        g.n_expert_slots = groups;
        g.expert_rows = 2 * ff;
        g.x_slot_stride = cuda::kMoeGroupRows * n_in;
        g.y = dag.as<float>();
        g.y_slot_stride = cuda::kMoeGroupRows * ff;
        g.skip_negative_ids = true;
        cuda::gemv(mgu, g, nullptr);
        cuda::GemvArgs d;
        d.x = dag.as<float>();
        d.n_tok = cuda::kMoeGroupRows;
        d.expert_ids = dge.as<int32_t>();
        d.n_expert_slots = groups;
        d.expert_rows = n_in;
        d.x_slot_stride = cuda::kMoeGroupRows * ff;
        d.y = dog.as<float>();
        d.y_slot_stride = cuda::kMoeGroupRows * n_in;
        d.skip_negative_ids = true;
        cuda::gemv(mdn, d, nullptr);
        // Slot-wise reference on the GPU.
        cuda::GemvArgs gs;
        gs.x = dx.as<float>();
        gs.glu = true;
        gs.expert_ids = dids.as<int32_t>();
        gs.n_expert_slots = slots;
        gs.expert_rows = 2 * ff;
        gs.x_slot_stride = n_in;
        gs.x_slot_div = ko;
        gs.y = das.as<float>();
        cuda::gemv(mgu, gs, nullptr);
        cuda::GemvArgs ds;
        ds.x = das.as<float>();
        ds.expert_ids = dids.as<int32_t>();
        ds.n_expert_slots = slots;
        ds.expert_rows = n_in;
        ds.x_slot_stride = ff;
        ds.y = dos.as<float>();
        cuda::gemv(mdn, ds, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

        const auto ge = from_device<int32_t>(dge.get(), static_cast<size_t>(groups));
        const auto sr = from_device<int32_t>(dsr.get(), static_cast<size_t>(slots));
        const auto rs = from_device<int32_t>(drs.get(), static_cast<size_t>(rows));
        std::vector<int> seen(static_cast<size_t>(rows), 0);
        for (int s2 = 0; s2 < slots; ++s2) {
            const int r = sr[static_cast<size_t>(s2)];
            ASSERT_TRUE(r >= 0 && r < rows) << "slot " << s2;
            EXPECT_EQ(rs[static_cast<size_t>(r)], s2) << "row " << r;
            EXPECT_EQ(ge[static_cast<size_t>(r / cuda::kMoeGroupRows)], ids[static_cast<size_t>(s2)])
                << "slot " << s2;
            ++seen[static_cast<size_t>(r)];
        }
        for (int64_t r = 0; r < rows; ++r)
            EXPECT_EQ(seen[static_cast<size_t>(r)], rs[static_cast<size_t>(r)] >= 0 ? 1 : 0) << "row " << r;
        int used = 0;
        for (int32_t e : ge) used += e >= 0;
        EXPECT_LE(used, slots / cuda::kMoeGroupRows + n_exp);
        for (int g2 = 0; g2 < groups; ++g2)  // the used groups first, then -1
            EXPECT_EQ(ge[static_cast<size_t>(g2)] >= 0, g2 < used) << "group " << g2;

        const auto og = from_device<float>(dog.get(), static_cast<size_t>(rows * n_in));
        const auto os = from_device<float>(dos.get(), static_cast<size_t>(slots * n_in));
        int bad = 0;
        for (int s2 = 0; s2 < slots; ++s2) {
            double mag = 0.0;
            for (int64_t i = 0; i < n_in; ++i)
                mag = std::max(mag, std::fabs(static_cast<double>(os[s2 * n_in + i])));
            const int64_t r = sr[static_cast<size_t>(s2)];
            for (int64_t i = 0; i < n_in; ++i) {
                const double a = og[static_cast<size_t>(r * n_in + i)],
                             b = os[static_cast<size_t>(s2 * n_in + i)];
                if (!(std::fabs(a - b) <= 1e-5 * mag + 1e-30) && bad++ < 5)
                    ADD_FAILURE() << "slot " << s2 << " element " << i << ": grouped " << a << " slot-wise "
                                  << b;
            }
        }
        EXPECT_EQ(bad, 0);
        // skip_negative_ids: the rows of unused groups keep their sentinel.
        for (int64_t r = static_cast<int64_t>(used) * cuda::kMoeGroupRows; r < rows; ++r)
            if (og[static_cast<size_t>(r * n_in)] != 12345.0f) {
                ADD_FAILURE() << "row " << r << " of an unused group was written";
                break;
            }

        // The combine through slot_row equals the slot-wise combine on the grouped values.
        std::vector<float> osr(static_cast<size_t>(slots * n_in));
        for (int s2 = 0; s2 < slots; ++s2)
            std::copy_n(og.begin() + sr[static_cast<size_t>(s2)] * n_in, n_in, osr.begin() + s2 * n_in);
        const std::vector<float> w = test::random_vec(rng, slots), res = test::random_vec(rng, n_tok * n_in);
        DeviceBuffer dw = to_device(w), dres = to_device(res), dosr = to_device(osr),
                     y1 = to_device(std::vector<float>(static_cast<size_t>(n_tok * n_in), NAN)),
                     y2 = to_device(std::vector<float>(static_cast<size_t>(n_tok * n_in), NAN));
        cuda::MoeCombineArgs c;
        c.n_tok = n_tok;
        c.n_embd = n_in;
        c.k = ko;
        c.weights = dw.as<float>();
        c.residual = dres.as<float>();
        c.expert_out = dog.as<float>();
        c.slot_row = dsr.as<int32_t>();
        c.y = y1.as<float>();
        cuda::moe_combine(c, nullptr);
        c.expert_out = dosr.as<float>();
        c.slot_row = nullptr;
        c.y = y2.as<float>();
        cuda::moe_combine(c, nullptr);
        size_t first = 0;
        EXPECT_TRUE(same_bits(from_device<float>(y1.get(), static_cast<size_t>(n_tok * n_in)),
                              from_device<float>(y2.get(), static_cast<size_t>(n_tok * n_in)), &first))
            << "element " << first;
        cuda::GpuMatrix a = mgu, b = mdn;
        cuda::free_matrix(a);
        cuda::free_matrix(b);
    }
}

// The fused combine of the decode down projection (GemvArgs::comb_*): x = res + sum_j w_j y_j written
// by the GEMV's last CTA per row group equals, bit for bit, the same GEMV followed by moe_combine, for
// every plain variant (every configuration's row groups), twice in a row (the counters reset) and in place
// (comb_res == comb_y).
TEST(CudaMoe, FusedCombineEqualsCombine) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    const int nv = cuda::gemv_variant_count();
    struct Case {
        DType t;
        int64_t ff;
    };
    for (const Case& cs :
         {Case{DType::Q4_0, 64}, Case{DType::Q4_0, 512}, Case{DType::Q4_K, 256}, Case{DType::F32, 64}}) {
        const DType t = cs.t;
        SCOPED_TRACE(std::string(dtype_name(t)) + " ff " + std::to_string(cs.ff));
        const int n_exp = 12, k = 9;
        const int64_t ff = cs.ff, n_out = 300;
        const test::RandomMatrix dn = test::random_matrix(rng, t, ff, n_exp * n_out, true);
        const cuda::GpuMatrix m = upload_rows(dn, 0, dn.n_out);
        std::vector<int32_t> ids(static_cast<size_t>(k));
        for (auto& id : ids) id = static_cast<int32_t>(rng.index(n_exp));
        const std::vector<float> act = test::random_vec(rng, k * ff), w = test::random_vec(rng, k),
                                 res = test::random_vec(rng, n_out);
        DeviceBuffer dids = to_device(ids), dact = to_device(act), dw = to_device(w),
                     dctr = to_device(std::vector<uint32_t>(static_cast<size_t>(n_out), 0u)),
                     dya = to_device(std::vector<float>(static_cast<size_t>(k * n_out), NAN)),
                     dyb = to_device(std::vector<float>(static_cast<size_t>(k * n_out), NAN)),
                     dxa = to_device(res), dxb = to_device(res);
        for (int v = 0; v < nv; v += test::cuda_test_small() ? 5 : 1) {
            SCOPED_TRACE(cuda::gemv_variant_name(v));
            test::GemvKernelReset reset_variant;
            copy_to(dxa, res);
            copy_to(dxb, res);
            cuda::GemvArgs d;
            d.x = dact.as<float>();
            d.expert_ids = dids.as<int32_t>();
            d.n_expert_slots = k;
            d.expert_rows = n_out;
            d.x_slot_stride = ff;
            d.y = dyb.as<float>();
            cuda::gemv_force_variant(v);
            cuda::gemv(m, d, nullptr);
            cuda::MoeCombineArgs c;
            c.n_tok = 1;
            c.n_embd = n_out;
            c.k = k;
            c.weights = dw.as<float>();
            c.expert_out = dyb.as<float>();
            c.residual = dxb.as<float>();
            c.y = dxb.as<float>();
            cuda::moe_combine(c, nullptr);
            d.y = dya.as<float>();
            d.comb_ctr = dctr.as<uint32_t>();
            d.comb_w = dw.as<float>();
            d.comb_res = dxa.as<float>();
            d.comb_y = dxa.as<float>();
            for (int rep = 0; rep < 2; ++rep) {  // in place: the second run adds the sum again
                cuda::gemv(m, d, nullptr);
                if (rep == 0) {
                    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
                    size_t first = 0;
                    ASSERT_TRUE(same_bits(from_device<float>(dxa.get(), static_cast<size_t>(n_out)),
                                          from_device<float>(dxb.get(), static_cast<size_t>(n_out)), &first))
                        << "element " << first;
                    cuda::moe_combine(c, nullptr);  // the reference's second pass
                }
            }
            cuda::gemv_force_variant(-1);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            size_t first = 0;
            EXPECT_TRUE(same_bits(from_device<float>(dxa.get(), static_cast<size_t>(n_out)),
                                  from_device<float>(dxb.get(), static_cast<size_t>(n_out)), &first))
                << "second run, element " << first;
            const auto ctr = from_device<uint32_t>(dctr.get(), static_cast<size_t>(n_out));
            EXPECT_TRUE(std::all_of(ctr.begin(), ctr.end(), [](uint32_t x) { return x == 0; }))
                << "the arrival counters must be back at 0";
        }
        cuda::GpuMatrix mm = m;
        cuda::free_matrix(mm);
    }
}

TEST(CudaMoe, ExpertGemvBadIdsReadExpertZero) {
    SKIP_WITHOUT_GPU();
    Rng rng;
    ExpertCase c;
    c.ids = {8, -1, 3, 1000000};
    run_expert_case(rng, c);
}

}  // namespace
}  // namespace pelican
