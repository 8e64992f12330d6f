// A model's weights as a device backend holds them (runtime/device_backend.h): opaque to the
// engine, which only shares and counts them. No dependencies, so backend kernels may include it.
#pragma once

#include <cstddef>

namespace pelican {

class DeviceModel {
public:
    virtual ~DeviceModel() = default;
    // Weight bytes one decode step reads in this layout.
    virtual size_t decode_read_bytes() const = 0;
};

}  // namespace pelican
