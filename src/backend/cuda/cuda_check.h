// Every CUDA runtime call and kernel launch is checked; failures abort with file:line,
// since a broken device context cannot be recovered inside a decode loop.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define PELICAN_CUDA_CHECK(expr)                                                          \
    do {                                                                                  \
        cudaError_t pelican_cuda_err_ = (expr);                                           \
        if (pelican_cuda_err_ != cudaSuccess) {                                           \
            std::fprintf(stderr, "pelican: CUDA error %s at %s:%d: %s\n",                 \
                         cudaGetErrorName(pelican_cuda_err_), __FILE__, __LINE__, #expr); \
            std::abort();                                                                 \
        }                                                                                 \
    } while (0)

#define PELICAN_CUDA_CHECK_LAUNCH() PELICAN_CUDA_CHECK(cudaGetLastError())

// cuBLAS status check (the including file includes <cublas_v2.h> or <cublasLt.h>).
#define PELICAN_CUBLAS_CHECK(expr)                                                              \
    do {                                                                                        \
        cublasStatus_t pelican_cublas_st_ = (expr);                                             \
        if (pelican_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                      \
            std::fprintf(stderr, "pelican: cuBLAS error %s at %s:%d: %s\n",                     \
                         cublasGetStatusString(pelican_cublas_st_), __FILE__, __LINE__, #expr); \
            std::abort();                                                                       \
        }                                                                                       \
    } while (0)
