"""shimgen/cuda.py, the one table of CUDA facts, against cuda.h's values as cuda-python's
enums give them: every result code and every attribute number, by name; and the rule of
which exports return a CUresult, against every export of the real Debian drivers."""

import re

from cuda.bindings import __version__ as bindings_version
from cuda.bindings import driver

from shimgen import cuda
from shimgen.driver.library import read_driver

# The test extra pins cuda-bindings of CUDA 12, the generation of the runtime it pins
# (nvidia-cuda-runtime-cu12, which the tests' drivers, 535 to 555, can run). shimgen's table
# also holds what cuda.h 13 added (the H200's driver 580): with bindings of 12 those are
# these, and nothing else may differ; with bindings of 13 (`pip install 'cuda-bindings>=13'`)
# the tables are equal.
NEWER_THAN_12 = {
    "results": {36, 47, 227, 917, 918, 919},
    "attributes": set(range(144, 162)),
}


def _added_since(kind: str) -> set[int]:
    return NEWER_THAN_12[kind] if bindings_version.startswith("12.") else set()


def test_result_codes_match_cuda_h():
    want = {int(e): e.name for e in driver.CUresult}
    assert {k: v for k, v in cuda.RESULTS.items() if k not in _added_since("results")} == want
    assert _added_since("results") <= set(cuda.RESULTS)
    # the shim's own failure when no driver can be loaded (302 would be SYMBOL_NOT_FOUND)
    assert cuda.CUDA_ERROR_SHARED_OBJECT_INIT_FAILED == 303
    assert want[302] == "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND"


def test_attribute_numbers_match_cuda_h():
    prefix = "CU_DEVICE_ATTRIBUTE_"
    want = {int(e): e.name[len(prefix):] for e in driver.CUdevice_attribute
            if e.name != prefix + "MAX"}
    # cuda.h keeps a few old names as aliases of the same number: each of ours is one of them
    newer = _added_since("attributes")
    for number, name in cuda.ATTRIBUTES.items():
        if number not in newer:
            assert int(getattr(driver.CUdevice_attribute, prefix + name)) == number, name
    assert set(cuda.ATTRIBUTES) == set(want) | newer and not newer & set(want)


def test_gate_attributes_are_named():
    assert cuda.attribute_name(cuda.ATTR_GDR) == "GPU_DIRECT_RDMA_SUPPORTED"
    assert cuda.attribute_name(cuda.ATTR_DMABUF) == "DMA_BUF_SUPPORTED"
    assert cuda.attribute_name(9999) == "ATTRIBUTE_9999"
    assert cuda.result_name(801) == "CUDA_ERROR_NOT_SUPPORTED"


# Exports the rule counts that cuda-python binds under no name (checked by hand in NVIDIA's
# headers, each declared there returning CUresult): cudaGL.h's deprecated OpenGL functions,
# cudaProfiler.h's cuProfilerInitialize (removed in CUDA 12), cuda.h 12's
# cuGraphInstantiateWithFlags.
DOCUMENTED_WITHOUT_BINDING = {
    "cuGLCtxCreate", "cuGLInit", "cuGLMapBufferObject", "cuGLMapBufferObjectAsync",
    "cuGLRegisterBufferObject", "cuGLSetBufferObjectMapFlags", "cuGLUnmapBufferObject",
    "cuGLUnmapBufferObjectAsync", "cuGLUnregisterBufferObject", "cuProfilerInitialize",
    "cuGraphInstantiateWithFlags",
}


def api_name(export: str) -> str:
    """The driver API's name of an export: without its ABI suffix (_v2, _ptds, _ptsz)."""
    return re.sub(r"(_v\d+)?(_ptds|_ptsz)?$", "", export)


def test_result_rule_matches_every_export_of_the_real_drivers(drivers):
    """Every export the time paths count errors of is a driver API function that returns a
    CUresult (cuda-python binds it, and its bindings return one from every function, or
    NVIDIA's headers declare it so); every export left out is outside the API's naming or
    in no header."""
    for d in drivers:
        names = read_driver(d.path).function_names()
        counted = [n for n in names if cuda.returns_result(n)]
        left_out = sorted(set(names) - set(counted))
        for n in counted:
            assert hasattr(driver, api_name(n)) or api_name(n) in DOCUMENTED_WITHOUT_BINDING, n
        for n in left_out:
            assert not hasattr(driver, api_name(n)), n
            assert n.startswith("cudbg") or n in cuda.NO_RESULT_EXPORTS, n
        assert "cudbgGetAPI" in left_out and "cuInit" in counted


def test_the_runtime_reads_its_variables_by_the_names_of_runenv():
    """Every SHIMGEN_* variable the runtime reads comes from shimgen/runenv.py through
    facts.h (SHIMGEN_ENV_<KEY>), never a name typed in the C; every key it uses exists."""
    import re
    from pathlib import Path

    from shimgen.runenv import ENV

    runtime = Path(__file__).resolve().parents[2] / "runtime"
    src = "\n".join(p.read_text() for p in runtime.rglob("*.c"))
    assert not re.search(r'getenv\(\s*"SHIMGEN_', src)
    used = set(re.findall(r"SHIMGEN_ENV_([A-Z_]+)", src))
    assert used and used <= set(ENV), used - set(ENV)


def test_the_readmes_table_of_variables_is_runenvs():
    """Every variable the shim reads (runenv.ENV) and the command's own (runenv.DEBUG) has a
    row in the table of docs/run.md (the README's reference), and the table names no other."""
    import re
    from pathlib import Path

    from shimgen import runenv

    readme = (Path(__file__).resolve().parents[2] / "docs" / "run.md").read_text()
    rows = set(re.findall(r"^\| `(SHIMGEN_[A-Z_]+)", readme, re.M))
    assert rows == set(runenv.ENV.values()) | {runenv.DEBUG}
