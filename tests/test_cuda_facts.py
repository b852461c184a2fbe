"""shimgen/cuda.py, the one table of CUDA facts, against cuda.h's values as cuda-python's
enums give them: every result code and every attribute number, by name."""

from cuda.bindings import driver

from shimgen import cuda


def test_result_codes_match_cuda_h():
    want = {int(e): e.name for e in driver.CUresult}
    assert cuda.RESULTS == want
    # the shim's own failure when no driver can be loaded (302 would be SYMBOL_NOT_FOUND)
    assert cuda.CUDA_ERROR_SHARED_OBJECT_INIT_FAILED == 303
    assert want[302] == "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"


def test_attribute_numbers_match_cuda_h():
    prefix = "CU_DEVICE_ATTRIBUTE_"
    want = {int(e): e.name[len(prefix):] for e in driver.CUdevice_attribute
            if e.name != prefix + "MAX"}
    # cuda.h keeps a few old names as aliases of the same number: each of ours is one of them
    for number, name in cuda.ATTRIBUTES.items():
        assert int(getattr(driver.CUdevice_attribute, prefix + name)) == number, name
    assert set(cuda.ATTRIBUTES) == set(want)


def test_gate_attributes_are_named():
    assert cuda.attribute_name(cuda.ATTR_GDR) == "GPU_DIRECT_RDMA_SUPPORTED"
    assert cuda.attribute_name(cuda.ATTR_DMABUF) == "DMA_BUF_SUPPORTED"
    assert cuda.attribute_name(9999) == "ATTRIBUTE_9999"
    assert cuda.result_name(801) == "CUDA_ERROR_NOT_SUPPORTED"
