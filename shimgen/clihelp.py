"""What `shimgen COMMAND --help` says of each command (cliargs.py): the line of the command
list, a paragraph of what it does, and an example. Text only."""

from __future__ import annotations

from .runenv import SHIM_LIBRARY

DESCRIPTIONS = {
    "run": ("run a command under the shim and report its driver calls", """\
Run COMMAND, and every process it starts, under the shim for this machine's
driver (built once and cached). The trace goes to a run directory, and the
report is printed on stderr when the command ends. Exit status: the command's
(128+N if signal N killed it).""", """\
example:
  shimgen run -- python train.py
  shimgen run --trace timeline -o runs/ddp -- torchrun --nproc-per-node 8 train.py
  shimgen run --limit memory=2GiB -- python train.py"""),
    "report": ("summarize the traces of a run, or compare two runs", """\
Read a run directory (or trace files) and print every function's calls,
times, percentiles and error returns; with two run directories, compare
them. A file that cannot be read is named with why; the rest is reported.
With --calls (a run traced with --trace calls): every call with its arguments,
outputs and result, one line each.""", """\
example:
  shimgen report shimgen-runs/20261202-101500-python
  shimgen report --by rank --json runs/ddp
  shimgen report --calls --function 'cuMemAlloc*' --errors runs/oom   (--trace calls)
  shimgen report --calls --first-difference runs/on-555 runs/on-580"""),
    "top": ("show what a running job is doing now, refreshed every second", """\
Read a run directory's trace files (every node's part) every second and show
each process: running, complete or died, its calls per second, and its longest
driver call in progress with how long it has lasted. q or Ctrl-C leaves. Only
reads: no trace file is written, no process is stopped.""", """\
example:
  shimgen top shimgen-runs/20261202-101500-python
  shimgen top --once --json runs/ddp"""),
    "build": (f"build {SHIM_LIBRARY} for a driver", """\
Read every exported function of the driver, generate the forwarding shim and
build it with meson into OUT/cudashim-<version>-<build-id>/. A rebuild
replaces the earlier one whole, or leaves it as it was. Preload the library
with LD_PRELOAD; unset it to roll back.""", f"""\
example:
  shimgen build --driver /usr/lib/x86_64-linux-gnu/libcuda.so.1 -o build
  LD_PRELOAD=build/cudashim-<version>-<build-id>/{SHIM_LIBRARY} python train.py"""),
    "gates": ("find the attribute gates in a driver binary", """\
Find the device attributes the driver gates behind bits of its device
state (GPUDirect RDMA, DMA-BUF), each bit's init site, and the checks
that refuse peer access between two GPU generations (p2p-mixed), and prove
them by running the driver's own code in an emulator. Says the verdict first
(each gate, the attributes it controls, the proof, what to run next); -v adds
the listing; --json gives the profile that `build --gate-profile` and `patch`
take.""", """\
example:
  shimgen gates --driver /usr/lib/x86_64-linux-gnu/libcuda.so.1
  shimgen gates --driver /usr/lib/x86_64-linux-gnu/libcuda.so.1 --json gates.json"""),
    "patch": ("write a copy of the driver with its gates' init sites changed", """\
Write a copy of the driver whose gate bits are set (or, with --mask,
never set) at their init sites, or (p2p-mixed) whose peer checks accept two
GPU generations, with the libcuda.so.1 and libcuda.so links
and a manifest of every byte changed. The driver itself is only read. No
shim is needed: LD_LIBRARY_PATH=DIR.""", """\
example:
  shimgen patch --gates gdr -o patched && LD_LIBRARY_PATH=patched ./perftest"""),
    "probe": ("ask this machine's GPUs about gated features (cuda-python)", """\
Ask this machine's GPUs, through cuda-python, for the gated attributes,
DMA-BUF export and GPUDirect RDMA allocation, each in a fresh process; with
--shim, also under that shim, side by side. With --p2p: peer access and
measured copy bandwidth of every GPU pair.""", """\
example:
  shimgen probe --shim build/cudashim-580.159.04-<build-id>/libcudashim.so"""),
    "exports": ("list the functions a driver exports", """\
Print the name of every function the driver exports, one a line, in the
order of its dynamic symbol table: the functions the shim forwards.""", """\
example:
  shimgen exports --driver /usr/lib/x86_64-linux-gnu/libcuda.so.1 | wc -l"""),
    "hook-header": ("print shimgen/hook.h, the header user hooks include", """\
Print the header that a user hook file includes (#include <shimgen/hook.h>):
SHIMGEN_HOOK, SHIMGEN_REAL, SHIMGEN_DECLARE and the common CUDA types and
result names, so that a hook compiles without a CUDA toolkit. Every build with
--hook has the same header in its src/include/shimgen/.""", """\
example:
  shimgen hook-header > include/shimgen/hook.h   # for an editor; builds need not"""),
    "diff": ("what a driver upgrade changes: exports, cuGetProcAddress answers, gates, hooks",
             """\
Compare two drivers as a shim sees them: the functions and objects added and
removed, the cuGetProcAddress queries whose answer changes (another variant,
a new _ptsz, a query that now fails), each gate's offset, bit, proof and init
sites, and the hooked names that vanish or change; a change many names share
is one line with their count (-v lists them). Exit status as diff(1):
0 no differences, 1 differences, 2 trouble.

diff loads both drivers and runs their code as you (to ask their
cuGetProcAddress): only compare drivers you would run. Each must be a file
that only you or root can change, in directories only you or root can
change; a shim built by shimgen is refused.""", """\
example:
  shimgen diff /usr/lib/x86_64-linux-gnu/libcuda.so.1 new-driver/ --hook memlimit.c"""),
}
