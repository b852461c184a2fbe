"""Decoded calls (SHIMGEN_TRACE=calls): the model of the driver's prototypes, from NVIDIA's
own headers read by a C parser (where.py, headers.py, parse.py, model.py), what the build captures
per function (model.capture_table), and the records of a trace file read and decoded
(records.py, decode.py)."""

from .. import face

__getattr__, __all__ = face(__name__, {
    "BODY": "records",
    "DUR": "records",
    "Decoder": "decode",
    "IDX": "records",
    "NAMED": "decode",
    "RETURNED": "records",
    "ROW": "records",
    "SEQ": "records",
    "START": "records",
    "STATE": "records",
    "TID": "records",
    "capture_table": "model",
    "load_run": "records",
    "description": "model",
    "header_stamp_lines": "where",
    "prototype": "model",
    "timing_kinds": "model",
})
