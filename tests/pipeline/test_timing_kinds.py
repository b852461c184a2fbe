"""Which timing entry each function's stub takes (shimgen/calls/model.py, timing_kind;
runtime/arch/x86_64/timing.S): what a function's declaration lets the entry leave unkept
around rdtsc. Declarations read by the headers' own parser (shimgen/calls/parse.py)."""

from __future__ import annotations

import pytest

from shimgen.calls.model import TIMED_ANY, TIMED_RESULT, TIMED_RESULT_TWO, timing_kind
from shimgen.calls.parse import parse_declarations

DECLARATIONS = """
typedef enum cudaError_enum { CUDA_SUCCESS = 0 } CUresult;
typedef struct CUctx_st *CUcontext;
typedef struct CUmemLocation_st { int type; int id; } CUmemLocation;
typedef unsigned long long CUdeviceptr;
typedef struct CUpair_st { unsigned long long lo, hi; } CUpair;
CUresult cuOne(CUcontext *pctx);
CUresult cuNone(void);
CUresult cuTwo(CUcontext ctx, unsigned int flags);
CUresult cuThree(CUcontext ctx, unsigned int flags, int dev);
CUresult cuFloats(float a, CUcontext c, double b, CUdeviceptr d);
CUresult cuStruct(CUmemLocation loc);
CUresult cuVarargs(int a, ...);
int cuNotResult(int a);
CUpair cuWide(int a);
CUresult cudbgThing(int a);
"""


@pytest.fixture(scope="module")
def desc():
    pytest.importorskip("pycparser")
    return parse_declarations(DECLARATIONS)


@pytest.mark.parametrize("name, kind", [
    ("cuOne", TIMED_RESULT_TWO),
    ("cuNone", TIMED_RESULT_TWO),
    ("cuTwo", TIMED_RESULT_TWO),
    # a third integer argument is in rdx: kept
    ("cuThree", TIMED_RESULT),
    # floats are in xmm registers: two integer arguments
    ("cuFloats", TIMED_RESULT_TWO),
    # a struct by value may take two registers, or rdx: kept
    ("cuStruct", TIMED_RESULT),
    # varargs: rax holds the count of vector registers, kept
    ("cuVarargs", TIMED_ANY),
    # no CUresult: its rdx may be half the result
    ("cuNotResult", TIMED_ANY),
    ("cuWide", TIMED_ANY),
    # declared with a CUresult, but not an export counted as one (cuda.returns_result)
    ("cudbgThing", TIMED_ANY),
    # no declaration of that very name
    ("cuMissing", TIMED_ANY),
])
def test_the_entry_keeps_what_the_declaration_may_pass(desc, name, kind):
    assert timing_kind(desc, name) == kind


def test_varargs_are_recorded_by_the_parser(desc):
    assert desc["functions"]["cuVarargs"].get("varargs") is True
    assert "varargs" not in desc["functions"]["cuOne"]
