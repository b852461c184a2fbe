"""The tables of `shimgen probe --p2p`: one process's answers (`format_p2p`), or the answers
without and with the shim side by side (`side_by_side`), from the plain data that
`shimgen.probe.p2p.collect_p2p` returns.
"""

from __future__ import annotations

from ..cuda import CUDA_SUCCESS
from .bindings import result_text

ATTRIBUTE_LABELS = {
    "performance_rank": "perf rank",
    "access_supported": "access",
    "native_atomic_supported": "atomics",
    "cuda_array_access_supported": "array access",
}


def one_line_status(data: dict) -> str | None:
    """The one line that says why there is no pair table, or None when there are pairs."""
    if data.get("cuInit") is None:
        return f"no GPU: {data.get('error') or 'the CUDA driver was not called'}"
    if data["cuInit"] != CUDA_SUCCESS:
        name = data.get("cuInit_name") or result_text(data["cuInit"])
        return f"no GPU: cuInit returned {name}"
    devs = data.get("devices") or []
    if not devs:
        if data.get("error"):
            return f"no GPU: {data['error']}"
        return "no GPU: cuDeviceGetCount found 0 devices"
    if len(devs) == 1:
        return f"1 GPU (0: {devs[0]['name']}): no GPU pairs to query or measure"
    return None


def _gb(m: dict | None) -> str:
    if not m:
        return "-"
    if "error" in m:
        return "error"
    return f"{m['gbps']:.1f}" if m.get("gbps") is not None else "-"


def _ratio(p: dict) -> str:
    a, b = (p.get("peer") or {}).get("gbps"), (p.get("bounce") or {}).get("gbps")
    return f"{a / b:.2f}x" if a and b else "-"


def _checks(p: dict) -> str:
    out = []
    for key in ("peer", "bounce"):
        m = p.get(key) or {}
        if "error" in m:
            out.append(f"{key}: {m['error']}")
        elif m.get("check") not in (None, "ok"):
            out.append(f"{key}: {m['check']}")
    return "; ".join(out) or "ok"


def _driver_line(data: dict) -> str:
    v = data.get("driver_version")
    cuda = f"CUDA {v // 1000}.{v % 1000 // 10}" if isinstance(v, int) else "CUDA ?"
    devs = ", ".join(f"{d['ordinal']}: {d['name']}" for d in data.get("devices") or [])
    where = data.get("libcuda") or "?"
    shim = "libcudashim.so mapped" if data.get("shim_mapped") else "no shim mapped"
    return f"driver {where} ({cuda}), {shim}; {len(data.get('devices') or [])} GPUs: {devs}"


def format_p2p(data: dict) -> str:
    """A table: one row per ordered GPU pair; one line when there are no pairs."""
    status = one_line_status(data)
    if status is not None:
        return status
    mib = data["size_bytes"] / (1 << 20)
    head = ["pair", "can access", "perf rank", "access", "atomics", "array access",
            "peer enabled", "peer GB/s", "bounce GB/s", "peer/bounce", "data check"]
    rows = []
    for p in data["pairs"]:
        a = p["attributes"]
        rows.append([
            f"{p['src']} -> {p['dst']}",
            _yes(p["can_access_peer"]),
            *(str(a.get(k, "-")) for k in ("performance_rank", "access_supported",
                                           "native_atomic_supported",
                                           "cuda_array_access_supported")),
            _peer_enabled(p),
            _gb(p.get("peer")), _gb(p.get("bounce")), _ratio(p), _checks(p),
        ])
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(len(head))]
    lines = [_driver_line(data),
             f"{data['count']} copies of {mib:g} MiB per measurement after one warm-up copy, "
             "timed with CUDA events; GB/s = 1e9 bytes/s delivered to the destination GPU",
             "peer = cuMemcpyPeerAsync; bounce = device -> pinned host -> device, "
             "double-buffered"]
    for r in [head, *rows]:
        lines.append("  ".join(f"{v:>{w}}" if c else f"{v:<{w}}"
                               for c, (v, w) in enumerate(zip(r, widths, strict=True)))
                     .rstrip())
    if data.get("error"):
        lines.append(f"error: {data['error']}")
    return "\n".join(lines)


def _yes(v) -> str:
    return {1: "yes", 0: "no"}.get(v, str(v)) if isinstance(v, int) else str(v)


def _peer_enabled(p: dict) -> str:
    if p.get("peer_enable") is None:
        return "no" if "peer_access" in p else "-"
    if p["peer_access"]:
        return "yes"
    return result_text(p["peer_enable"])


def _rows(data: dict) -> list[tuple[str, str, float | None]]:
    """(what, shown value, number to compare or None) for the side-by-side report."""
    rows: list[tuple[str, str, float | None]] = [
        ("libcudashim.so mapped", "yes" if data.get("shim_mapped") else "no", None),
        ("cuInit", data.get("cuInit_name") or str(data.get("error") or "not called"), None),
        ("driver version", str(data.get("driver_version")), None),
    ]
    status = one_line_status(data)
    if status is not None:
        rows.append(("result", status, None))
        return rows
    for d in data["devices"]:
        rows.append((f"dev {d['ordinal']}", d["name"], None))
    for p in data["pairs"]:
        k = f"{p['src']} -> {p['dst']} "
        rows.append((k + "cuDeviceCanAccessPeer", _yes(p["can_access_peer"]), None))
        for key, label in ATTRIBUTE_LABELS.items():
            rows.append((k + label, str(p["attributes"].get(key, "-")), None))
        rows.append((k + "peer access enabled", _peer_enabled(p), None))
        for key, label in (("peer", "peer copy GB/s"), ("bounce", "host-bounce GB/s")):
            m = p.get(key) or {}
            rows.append((k + label, _gb(m), m.get("gbps")))
        rows.append((k + "data check", _checks(p), None))
    if data.get("error"):
        rows.append(("error", data["error"], None))
    return rows


def side_by_side(plain: dict, shimmed: dict, shim_said: list[str] = ()) -> str:
    """Both answers, row by row; bandwidths get the ratio with/without shim, other values
    that differ are marked."""
    left = {k: (v, n) for k, v, n in _rows(plain)}
    right_rows = _rows(shimmed)
    right = {k: (v, n) for k, v, n in right_rows}
    keys = [k for k, _, _ in _rows(plain)] + [k for k, _, _ in right_rows if k not in left]
    width = max(len(k) for k in keys)
    vw = max([len("without shim")] + [len(v) for v, _ in left.values()])
    lines = [f"{'':<{width}}  {'without shim':<{vw}}  with shim",
             f"({plain.get('count')} copies of {(plain.get('size_bytes') or 0) / (1 << 20):g} "
             "MiB per measurement; GB/s = 1e9 bytes/s; bounce = device -> pinned host -> "
             "device)"]
    for k in keys:
        (a, na), (b, nb) = left.get(k, ("-", None)), right.get(k, ("-", None))
        if na and nb:
            mark = f"  ratio {nb / na:.3f}"
        elif k == "libcudashim.so mapped":
            mark = ""
        else:
            mark = "  <- changed" if a != b else ""
        lines.append(f"{k:<{width}}  {a:<{vw}}  {b}{mark}".rstrip())
    for ln in shim_said:
        lines.append(f"(shim said) {ln}")
    return "\n".join(lines)
