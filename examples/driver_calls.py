"""A few CUDA driver calls through ctypes, for trying shimgen: no CUDA toolkit is needed, and
no GPU (without one, cuInit returns 100, CUDA_ERROR_NO_DEVICE, and cuDeviceGetCount 3,
CUDA_ERROR_NOT_INITIALIZED). Without an installed driver, libcuda.so.1 is found only under
the shim (`shimgen run --driver PATH -- python3 examples/driver_calls.py`)."""

import ctypes

cuda = ctypes.CDLL("libcuda.so.1")
version, count = ctypes.c_int(), ctypes.c_int()
print("cuDriverGetVersion:", cuda.cuDriverGetVersion(ctypes.byref(version)), version.value)
print("cuInit:", cuda.cuInit(0))
print("cuDeviceGetCount:", cuda.cuDeviceGetCount(ctypes.byref(count)), count.value)
