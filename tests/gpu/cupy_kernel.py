"""CuPy RawKernel + ElementwiseKernel, and a Triton kernel, each checked against NumPy/torch.

Prints CUPY_OK, TRITON_OK, then CUPY_TRITON_OK when both ran; exits non-zero on any wrong
result or error, and when Triton cannot be imported (docs/validation.md lists it as run).
"""

import sys

import cupy as cp
import numpy as np

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
"""


def check_cupy() -> None:
    n = 1 << 20
    rng = np.random.default_rng(7)
    xh = rng.standard_normal(n, dtype=np.float32)
    yh = rng.standard_normal(n, dtype=np.float32)
    x, y = cp.asarray(xh), cp.asarray(yh)
    out = cp.empty_like(x)
    k = cp.RawKernel(SAXPY, "saxpy")
    k(((n + 255) // 256,), (256,), (np.float32(2.5), x, y, out, np.int32(n)))
    got = cp.asnumpy(out)
    want = np.float32(2.5) * xh + yh
    if not np.allclose(got, want, rtol=1e-6, atol=1e-6):
        raise SystemExit(f"FAIL RawKernel saxpy: max err {np.abs(got - want).max()}")

    sq = cp.ElementwiseKernel("float32 a, float32 b", "float32 c", "c = a * a + b", "sqadd")
    got2 = cp.asnumpy(sq(x, y))
    if not np.allclose(got2, xh * xh + yh, rtol=1e-6, atol=1e-6):
        raise SystemExit("FAIL ElementwiseKernel")
    s = float(cp.sum(x).get())
    if abs(s - float(xh.sum(dtype=np.float64))) > 1e-1:
        raise SystemExit(f"FAIL reduction {s}")
    cp.cuda.Stream.null.synchronize()
    print(f"CUPY_OK n={n} cupy {cp.__version__}")


def check_triton() -> None:
    try:
        import torch
        import triton
        import triton.language as tl
    except Exception as e:  # noqa: BLE001
        raise SystemExit(f"FAIL Triton cannot be imported: {e!r}") from None

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0
                 + tl.load(y_ptr + offs, mask=mask), mask=mask)

    n = 98432
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(n, device="cuda", generator=g)
    y = torch.rand(n, device="cuda", generator=g)
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    if not torch.allclose(out, x * 3.0 + y):
        raise SystemExit("FAIL triton add_kernel")
    print(f"TRITON_OK n={n} triton {triton.__version__}")


def main() -> int:
    check_cupy()
    check_triton()
    print("CUPY_TRITON_OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
