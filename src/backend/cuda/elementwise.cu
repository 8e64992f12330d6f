// Element-wise and row-wise fp32 kernels of the forward pass (see elementwise.h): rms_norm,
// add_scaled, swiglu_stacked, add_bias, scale, convert_f32. fp32 arithmetic throughout; float4
// loads/stores where the pointers and length allow, a scalar grid-stride loop otherwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/pdl.cuh"

namespace pelican::cuda {
namespace {

constexpr int kThreads = 256;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for a grid-stride loop over n items (capped: each thread then loops).
unsigned grid_for(int64_t n) {
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 4 ? 65535 * 4 : blocks));
}

// ---- rms_norm: one block per row -------------------------------------------------------------

template <int kBlock>
__device__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < kBlock / 32 ? red[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red[0] = v;
    }
    __syncthreads();
    return red[0];
}

// x, y: [n_rows, n]; w [n] or nullptr. vec4: n % 4 == 0 and x, y, w 16-byte aligned.
template <int kBlock, bool kVec4>
__global__ void __launch_bounds__(kBlock)
    rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* y, int64_t n, float eps,
                    bool one_plus) {
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * n;
    float* yr = y + row * n;
    float ss = 0.0f;
    if constexpr (kVec4) {
        const auto* x4 = reinterpret_cast<const float4*>(xr);
        for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
            const float4 v = x4[i];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += xr[i] * xr[i];
    }
    ss = block_sum<kBlock>(ss, red);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    const float add = one_plus ? 1.0f : 0.0f;
    if constexpr (kVec4) {
        const auto* x4 = reinterpret_cast<const float4*>(xr);
        const auto* w4 = reinterpret_cast<const float4*>(w);
        auto* y4 = reinterpret_cast<float4*>(yr);
        for (int64_t i = threadIdx.x; i < n / 4; i += blockDim.x) {
            float4 v = x4[i];
            const float4 wv = w ? w4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            const float wadd = w ? add : 1.0f;
            v.x = v.x * inv * (wv.x + wadd);
            v.y = v.y * inv * (wv.y + wadd);
            v.z = v.z * inv * (wv.z + wadd);
            v.w = v.w * inv * (wv.w + wadd);
            y4[i] = v;
        }
    } else {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            const float wi = w ? w[i] + add : 1.0f;
            yr[i] = xr[i] * inv * wi;
        }
    }
}

template <int kBlock>
void launch_rms(bool vec, unsigned grid, const float* x, const float* w, float* y, int64_t n, float eps,
                bool one_plus, cudaStream_t stream) {
    if (vec)
        rms_norm_kernel<kBlock, true><<<grid, kBlock, 0, stream>>>(x, w, y, n, eps, one_plus);
    else
        rms_norm_kernel<kBlock, false><<<grid, kBlock, 0, stream>>>(x, w, y, n, eps, one_plus);
}

// ---- simple element-wise kernels -------------------------------------------------------------

__global__ void add_scaled_kernel(const float* a, const float* b, float s, float* y, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = a[i] + s * b[i];
}
__global__ void add_scaled_kernel4(const float4* a, const float4* b, float s, float4* y, int64_t n4) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float4 va = a[i], vb = b[i];
        y[i] = make_float4(va.x + s * vb.x, va.y + s * vb.y, va.z + s * vb.z, va.w + s * vb.w);
    }
}

__global__ void scale_kernel(const float* x, float s, float* y, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = s * x[i];
}
__global__ void scale_kernel4(const float4* x, float s, float4* y, int64_t n4) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float4 v = x[i];
        y[i] = make_float4(s * v.x, s * v.y, s * v.z, s * v.w);
    }
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// gu [n_rows, 2 * n_half], y [n_rows, n_half]; one index per output element.
__global__ void swiglu_stacked_kernel(const float* __restrict__ gu, float* __restrict__ y, int64_t n_rows,
                                      int64_t n_half) {
    const int64_t total = n_rows * n_half;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / n_half, c = i - r * n_half;
        const float* g = gu + r * 2 * n_half;
        y[i] = silu_mul(g[c], g[n_half + c]);
    }
}
// As above in float4 units (n_half % 4 == 0, pointers 16-byte aligned); h4 = n_half / 4.
__global__ void swiglu_stacked_kernel4(const float4* __restrict__ gu, float4* __restrict__ y, int64_t n_rows,
                                       int64_t h4) {
    const int64_t total = n_rows * h4;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / h4, c = i - r * h4;
        const float4 g = gu[r * 2 * h4 + c], u = gu[r * 2 * h4 + h4 + c];
        y[i] = make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z), silu_mul(g.w, u.w));
    }
}

// x [n_rows, x_stride], gate [n_rows, gate_stride]; one index per gated element.
// PDL launch (decode: between the attention kernel and the wo GEMV, both PDL): waits for the
// previous grid before touching x or gate; the implicit trigger at exit.
__global__ void sigmoid_gate_mul_kernel(float* x, int64_t x_stride, const float* __restrict__ gate,
                                        int64_t gate_stride, int64_t n_rows, int64_t n) {
    pdl_wait();
    const int64_t total = n_rows * n;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / n, c = i - r * n;
        const float g = gate[r * gate_stride + c];
        x[r * x_stride + c] *= 1.0f / (1.0f + expf(-g));
    }
}

__global__ void add_bias_kernel(float* y, const float* __restrict__ bias, int64_t n_rows, int64_t n) {
    const int64_t total = n_rows * n;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] += bias[i % n];
}
__global__ void add_bias_kernel4(float4* y, const float4* __restrict__ bias, int64_t n_rows, int64_t n4) {
    const int64_t total = n_rows * n4;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float4 v = y[i];
        const float4 b = bias[i % n4];
        v.x += b.x;
        v.y += b.y;
        v.z += b.z;
        v.w += b.w;
        y[i] = v;
    }
}

// Two outputs per thread: x [n] fp32 -> y [n] half / bfloat16 (round to nearest even).
template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
    return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

template <typename T>
__global__ void convert_kernel(const float* __restrict__ x, T* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = from_f32<T>(x[i]);
}
// 4 elements per step: float4 in, 8 bytes out (x 16-byte, y 8-byte aligned).
template <typename T>
__global__ void convert_kernel4(const float4* __restrict__ x, T* __restrict__ y, int64_t n4) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float4 v = x[i];
        union {
            T h[4];
            uint2 u;
        } o;
        o.h[0] = from_f32<T>(v.x);
        o.h[1] = from_f32<T>(v.y);
        o.h[2] = from_f32<T>(v.z);
        o.h[3] = from_f32<T>(v.w);
        reinterpret_cast<uint2*>(y)[i] = o.u;
    }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t n_rows, int64_t n, float eps, bool one_plus,
              cudaStream_t stream) {
    if (n_rows <= 0 || n <= 0) return;
    const bool vec = n % 4 == 0 && aligned16(x) && aligned16(y) && (w == nullptr || aligned16(w));
    const unsigned grid = static_cast<unsigned>(n_rows);
    // Block size from the row length (about 2+ items per thread): qk-norm rows of 64..256 floats
    // get 64 threads, hidden rows of 2K..8K floats 256..1024.
    const int64_t items = vec ? n / 4 : n;
    if (items >= 2048)
        launch_rms<1024>(vec, grid, x, w, y, n, eps, one_plus, stream);
    else if (items >= 512)
        launch_rms<256>(vec, grid, x, w, y, n, eps, one_plus, stream);
    else
        launch_rms<64>(vec, grid, x, w, y, n, eps, one_plus, stream);
    PELICAN_CUDA_CHECK_LAUNCH();
}

void add_scaled(const float* a, const float* b, float s, float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    if (n % 4 == 0 && aligned16(a) && aligned16(b) && aligned16(y)) {
        add_scaled_kernel4<<<grid_for(n / 4), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(a),
                                                                     reinterpret_cast<const float4*>(b), s,
                                                                     reinterpret_cast<float4*>(y), n / 4);
    } else {
        add_scaled_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, b, s, y, n);
    }
    PELICAN_CUDA_CHECK_LAUNCH();
}

void swiglu_stacked(const float* gu, float* y, int64_t n_rows, int64_t n_half, cudaStream_t stream) {
    if (n_rows <= 0 || n_half <= 0) return;
    if (n_half % 4 == 0 && aligned16(gu) && aligned16(y)) {
        const int64_t h4 = n_half / 4;
        swiglu_stacked_kernel4<<<grid_for(n_rows * h4), kThreads, 0, stream>>>(
            reinterpret_cast<const float4*>(gu), reinterpret_cast<float4*>(y), n_rows, h4);
    } else {
        swiglu_stacked_kernel<<<grid_for(n_rows * n_half), kThreads, 0, stream>>>(gu, y, n_rows, n_half);
    }
    PELICAN_CUDA_CHECK_LAUNCH();
}

void sigmoid_gate_mul(float* x, int64_t x_stride, const float* gate, int64_t gate_stride, int64_t n_rows,
                      int64_t n, cudaStream_t stream) {
    if (n_rows <= 0 || n <= 0) return;
    launch_pdl(sigmoid_gate_mul_kernel, dim3(grid_for(n_rows * n)), dim3(kThreads), 0, stream, x, x_stride,
               gate, gate_stride, n_rows, n);
}

void add_bias(float* y, const float* bias, int64_t n_rows, int64_t n, cudaStream_t stream) {
    if (n_rows <= 0 || n <= 0) return;
    if (n % 4 == 0 && aligned16(y) && aligned16(bias)) {
        add_bias_kernel4<<<grid_for(n_rows * n / 4), kThreads, 0, stream>>>(
            reinterpret_cast<float4*>(y), reinterpret_cast<const float4*>(bias), n_rows, n / 4);
    } else {
        add_bias_kernel<<<grid_for(n_rows * n), kThreads, 0, stream>>>(y, bias, n_rows, n);
    }
    PELICAN_CUDA_CHECK_LAUNCH();
}

void scale(const float* x, float s, float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    if (n % 4 == 0 && aligned16(x) && aligned16(y)) {
        scale_kernel4<<<grid_for(n / 4), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x), s,
                                                                reinterpret_cast<float4*>(y), n / 4);
    } else {
        scale_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, s, y, n);
    }
    PELICAN_CUDA_CHECK_LAUNCH();
}

namespace {
template <typename T>
void convert_to(const float* x, void* y, int64_t n, cudaStream_t stream) {
    T* out = static_cast<T*>(y);
    if (n % 4 == 0 && aligned16(x) && (reinterpret_cast<uintptr_t>(y) & 7u) == 0) {
        convert_kernel4<T>
            <<<grid_for(n / 4), kThreads, 0, stream>>>(reinterpret_cast<const float4*>(x), out, n / 4);
    } else {
        convert_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(x, out, n);
    }
    PELICAN_CUDA_CHECK_LAUNCH();
}
}  // namespace

void convert_f32(const float* x, void* y, DType out_type, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    if (out_type == DType::F16) {
        convert_to<__half>(x, y, n, stream);
    } else if (out_type == DType::BF16) {
        convert_to<__nv_bfloat16>(x, y, n, stream);
    } else {
        std::fprintf(stderr, "pelican: cuda::convert_f32: unsupported output type %u (F16 or BF16)\n",
                     static_cast<unsigned>(out_type));
        std::abort();
    }
}

}  // namespace pelican::cuda
