"""shimgen: generate a complete forwarding shim for NVIDIA's CUDA driver library."""

__version__ = "0.1.0"
