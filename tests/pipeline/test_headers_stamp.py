"""A shim's capture table is rendered from NVIDIA's headers: the stamp the shim cache keys
its entries by (shim/sources.py) changes when the headers a build reads are installed,
removed or changed (cuda.h, cudaTypedefs.h of any include directory looked in), and not for
another file beside them; so a shim built before the headers were there is not reused."""

import os

from shimgen.calls import where
from shimgen.shim.sources import stamp


def test_the_shim_cache_stamp_follows_the_headers_a_build_reads(tmp_path, monkeypatch):
    toolkit = tmp_path / "include"
    toolkit.mkdir()
    monkeypatch.setattr(where, "TOOLKIT_INCLUDES", (str(toolkit),))
    none = stamp()
    (toolkit / "cuda.h").write_text("#define CUDA_VERSION 12020\n")
    only_cuda = stamp()
    (toolkit / "cudaTypedefs.h").write_text("#include <cuda.h>\n")
    both = stamp()
    assert len({none, only_cuda, both}) == 3
    (toolkit / "other.h").write_text("int x;\n")
    assert stamp() == both
    os.utime(toolkit / "cudaTypedefs.h", ns=(1, 1))
    touched = stamp()
    assert touched != both
    (toolkit / "cuda.h").write_text("#define CUDA_VERSION 12090\n")
    assert stamp() not in (both, touched)
    (toolkit / "cuda.h").unlink()
    (toolkit / "cudaTypedefs.h").unlink()
    assert stamp() == none


def test_the_directories_looked_in_are_the_headers_reader_s():
    """calls/headers.py looks for the headers where the stamp looks: one list."""
    from shimgen.calls import headers

    assert headers.candidates is where.candidates
