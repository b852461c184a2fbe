"""A busy job for the reader race test (test_inflight_race.py): threads that each call one
driver function, short ones (cuGetErrorName, cuGetErrorString, cuDeviceGetCount) and a long
one (cuDriverGetVersion, which the test's hook makes sleep up to 20 ms), some idling 1.2 s
between calls; threads that exit and new ones; forks; forks that exec this program again.
Each thread (and each child) appends "TID FUNCTION" to MAPFILE before its first call.

    python busy_inflight.py SECONDS MAPFILE
    python busy_inflight.py exec-child MAPFILE
"""

import ctypes
import os
import random
import sys
import threading
import time

LIB = ctypes.CDLL("libcuda.so.1")
FUNCS = {"long": "cuDriverGetVersion", "name": "cuGetErrorName", "string": "cuGetErrorString",
         "count": "cuDeviceGetCount"}
IDLE_S = 1.2


def note(mapfile: str, kind: str) -> None:
    fd = os.open(mapfile, os.O_WRONLY | os.O_APPEND)
    os.write(fd, f"{threading.get_native_id()} {FUNCS[kind]}\n".encode())
    os.close(fd)


def call(kind: str) -> None:
    if kind == "long":
        v = ctypes.c_int()
        LIB.cuDriverGetVersion(ctypes.byref(v))
    elif kind == "count":
        n = ctypes.c_int()
        LIB.cuDeviceGetCount(ctypes.byref(n))
    else:
        p = ctypes.c_char_p()
        getattr(LIB, FUNCS[kind])(random.choice((1, 2, 100, 999)), ctypes.byref(p))


def worker(mapfile: str, kind: str, life: float) -> None:
    note(mapfile, kind)
    end = time.monotonic() + life
    while time.monotonic() < end:
        call(kind)
        r = random.random()
        if r < 0.01:
            time.sleep(IDLE_S)  # outside any call: a stale frame would age meanwhile
        elif r < 0.3:
            time.sleep(random.random() * 0.002)


def child(mapfile: str) -> None:
    note(mapfile, "string")
    for _ in range(200):
        call("string")
    os._exit(0)


def main(seconds: float, mapfile: str) -> None:
    note(mapfile, "string")
    end = time.monotonic() + seconds
    threads: list[threading.Thread] = []
    while time.monotonic() < end:
        threads = [t for t in threads if t.is_alive()]
        while len(threads) < 6:
            t = threading.Thread(target=worker, args=(mapfile, random.choice(list(FUNCS)),
                                                      random.uniform(0.2, 2.0)))
            t.start()
            threads.append(t)
        for _ in range(50):
            call("string")
        r = random.random()
        if r < 0.1:
            pid = os.fork()
            if pid == 0:
                child(mapfile)
            os.waitpid(pid, 0)
        elif r < 0.15:
            pid = os.fork()
            if pid == 0:
                os.execv(sys.executable, [sys.executable, __file__, "exec-child", mapfile])
            os.waitpid(pid, 0)
        time.sleep(random.random() * 0.05)
    for t in threads:
        t.join()


if __name__ == "__main__":
    if sys.argv[1] == "exec-child":
        note(sys.argv[2], "name")
        for _ in range(200):
            call("name")
    else:
        main(float(sys.argv[1]), sys.argv[2])
