"""`shimgen report`: a run's traces read into one model and shown as a table, JSON or CSV,
or two runs side by side.

source.py reads what a run left (traces, run.json, notices) through the trace readers
(trace/), model.py folds them into one report, format.py and compare.py write one run and
two (facts.py: the values both show), inject.py the injected faults, output.py the rules
every output keeps; main.py is the command and the summary `shimgen run` prints.
"""

from .. import face

__getattr__, __all__ = face(__name__, {
    "BY": "model",
    "command": "main:command",
    "dump_json": "output",
    "last_launch_text": "kernels",
    "seconds_text": "output",
    "shown": "output",
    "size_text": "memory",
    "summary_for_run": "main",
    "write_calls_timeline": "calls_timeline:write_run",
})
