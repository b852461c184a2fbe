"""The facts that the gate modules share, kept once: which attribute names each gate
(`GATE_RULES`: discovery names the gates by them, the proof runs the device table with the
first), the two directions of an init-site change (`SET`, `MASK`: initsite.py chooses and
proves them, patch.py applies them) and where the emulator maps the driver (`BASE`:
emulator.py maps it there; prove.py and initsite.py write the device table and the changed
bytes at their addresses there). No capstone, no unicorn."""

from __future__ import annotations

from dataclasses import dataclass

from ..cuda import ATTR_DMABUF, ATTR_GDR, attribute_name
from ..cudaversions import ATTRIBUTE_SINCE, cuda_of_driver, cuda_text
from ..errors import ShimgenError

SET, MASK = "set", "mask"  # the driver made to set a gate's bit, or never to set it

BASE = 0x10_0000_0000  # where the emulator maps the library; never 0, so NULL reads fault


@dataclass(frozen=True)
class GateRule:
    """A gate is named after the attribute whose case tests its bits: the gating bits and
    globals of that case, less those of the gates named before it."""

    name: str
    attribute: int
    required: bool  # discovery fails when the case is missing or tests no bit of its own


GATE_RULES = (
    GateRule("gdr", ATTR_GDR, required=True),  # GPU_DIRECT_RDMA_SUPPORTED
    GateRule("dmabuf", ATTR_DMABUF, required=False),  # DMA_BUF_SUPPORTED: its extra bits
)


def why_no_gate(name: str, driver_version: str) -> str:
    """Why a driver has no gate of this name, when the reason is its age: "; driver
    470.256.02 is CUDA 11.4: the dmabuf gate's attribute 124, DMA_BUF_SUPPORTED, came with
    CUDA 11.7". Empty when the gate is unknown or the driver new enough."""
    rule = next((r for r in GATE_RULES if r.name == name), None)
    cuda = cuda_of_driver(driver_version)
    since = ATTRIBUTE_SINCE.get(rule.attribute, 0) if rule is not None else 0
    if rule is None or cuda is None or cuda >= since:
        return ""
    return (f"; driver {driver_version} is CUDA {cuda_text(cuda)}: the {name} gate's "
            f"attribute {rule.attribute}, {attribute_name(rule.attribute)}, came with CUDA "
            f"{cuda_text(since)}")


class GateDiscoveryError(ShimgenError):
    """The driver's layout is not the one this analyser knows, or a profile is malformed; the
    message says what is missing."""
