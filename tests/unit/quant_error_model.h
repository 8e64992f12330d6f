// The error model of reduced-precision weights against the transformers golden fixtures (shared
// by model_quant_golden_test.cpp and the GPU golden tests in cuda_forward_test.cpp): the bounds
// on the relative logit error and the KL divergence a converted GGUF may show.
#pragma once

#include <cmath>
#include <numbers>
#include <optional>
#include <string>

#include "core/status.h"
#include "formats/gguf.h"
#include "ops/act_quant.h"

namespace pelican {

// ---- Error model -------------------------------------------------------------------------------
// Rounding a matrix W to a type leaves dW with ||dW||_F = eps_w * ||W||_F; for activations x that
// do not depend on the rounding, ||dW x|| / ||W x|| ~ eps_w as well. The fixtures' matrices are
// N(0, 0.1^2) (initializer_range 0.1; norms and biases stay f32), so eps_w follows from the type:
//  - float with p significant bits: the error of x = m * 2^e (m in [1, 2)) is uniform within
//    +-ulp/2, ulp = 2^(e+1-p), so its rms relative to x is 2^(1-p) / sqrt(12) * sqrt(E[1/m^2]);
//    m is log-uniform for Gaussian values, E[1/m^2] = 3 / (8 ln 2) = 0.541, giving
//    eps_w = 0.4246 * 2^-p (the worst case per element is 2^-p): bf16 p = 8, f16 p = 11.
//  - 32-blocks with scale d = amax / q_max (q8_0: 127; q4_0: 8, codes -8..7): the error is uniform
//    within +-d/2, so eps_w = kappa / (q_max * sqrt(12)) with kappa = rms(amax) / rms(x) of a
//    block of 32 Gaussians = 2.39 (Monte Carlo, 10^5 blocks): q8_0 5.4e-3, q4_0 8.6e-2.
// The CPU integer kernels also round the activations of a block-quantized matmul to 8 bits per
// 32-block (ops/act_quant.h): eps_a = kappa_a / (127 * sqrt(12)); activations are not Gaussian,
// so take the hard limit kappa_a <= sqrt(32) (amax^2 <= sum of the block's squares): 1.29e-2.
// Float weights keep fp32 activations (eps_a = 0).
//
// Each quantized matrix is an independent error source: the token embedding (a lookup: eps_w),
// every projection of every layer and the output head (eps_w and eps_a; a tied embedding counts
// twice), each with the type the converted file actually holds (q4_0 keeps the output head in
// q8_0: its Q6_K choice falls back for 64-element rows). The sources add in quadrature:
// rho_model = sqrt(sum eps^2). An error enters the residual stream at its block's relative size
// and RMSNorm rescales it, so it reaches the logits with a gain of order one. Measured
// rho / rho_model over the llama-family fixtures: bf16/f16 0.89-1.09, q4_0 0.82-1.14, q8_0
// 0.50-0.61 (eps_a's hard limit overestimates); granite 0.18-0.36 (its 0.22 residual multiplier
// damps the blocks). Bound: rho_bound = 2 * rho_model, a factor 2 on the gain.
//
// KL divergence: for a logit perturbation D, KL(p || softmax(z + D)) = Var_p(D) / 2 + O(D^3);
// the random-init models' distributions are nearly flat (logit std ~0.8, granite ~0.1 after its
// logit scaling), so Var_p(D) ~ mean_i D_i^2 and the mean over positions is rho^2 * S / 2 with
// S = mean over positions of ||ref||^2 / V (this holds within 3% on every fixture and type).
// Bound: kld_bound = rho_bound^2 * S / 2 (the factor 2 on rho makes it 4x the model).
//
// Near-ties: D_i ~ N(0, sigma^2) per logit with sigma = rho_bound * ||ref_row|| / sqrt(V); the
// argmax can only flip where the reference's top-2 gap is within a few sigma of the difference
// of two such errors, so rows with gap <= 6 * sqrt(2) * sigma are excluded (a 6-sigma flip has
// probability ~1e-9 per row) and counted. For q8_0/q4_0 that band covers nearly every row, so
// their top-1 agreement is mostly printed, not checked.
constexpr double kGaussianBlockCrest = 2.39;  // rms(amax) / rms(x), 32 N(0,1) values
constexpr double kGain = 2;                   // safety factor on the propagation gain
constexpr double kTieSigmas = 6;

// Relative rms error of rounding N(0, s^2) weights to `t`, or nullopt when no model is derived.
inline std::optional<double> weight_eps(DType t) {
    const double sqrt12 = std::sqrt(12.0), m_factor = 2 / sqrt12 * std::sqrt(3 / (8 * std::numbers::ln2));
    switch (t) {
        case DType::F32:
            return m_factor * std::ldexp(1.0, -24);
        case DType::F16:
            return m_factor * std::ldexp(1.0, -11);
        case DType::BF16:
            return m_factor * std::ldexp(1.0, -8);
        case DType::Q8_0:
            return kGaussianBlockCrest / (127 * sqrt12);
        case DType::Q4_0:
            return kGaussianBlockCrest / (8 * sqrt12);
        default:
            return std::nullopt;
    }
}

// Relative rms error of the 8-bit activations an integer kernel uses with weights of type t.
inline double act_eps(DType t) {
    const int block = act_quant_block(t);
    return block > 0 ? std::sqrt(static_cast<double>(block)) / (127 * std::sqrt(12.0)) : 0.0;
}

// rho_model = sqrt(sum of eps^2 over the error sources) of a converted GGUF (see the model above).
inline Expected<double> model_rel_error(const std::string& gguf) {
    PELICAN_ASSIGN(auto f, GgufFile::open(gguf));
    const bool tied = f.find_tensor("output.weight") == nullptr;
    double sum = 0;
    for (const GgufTensorInfo& t : f.tensors()) {
        if (t.dims.size() < 2 && t.type == DType::F32) continue;  // norms, biases: exact
        const auto ew = weight_eps(t.type);
        if (!ew) return make_error("{}: no error model for type {}", t.name, dtype_name(t.type));
        const double matmul = *ew * *ew + act_eps(t.type) * act_eps(t.type);
        if (t.name == "token_embd.weight")
            sum += *ew * *ew + (tied ? matmul : 0.0);
        else
            sum += matmul;
    }
    return std::sqrt(sum);
}

}  // namespace pelican
