"""A gate profile over its size limit (shimgen/gates/profile.py, MAX_PROFILE_BYTES) is
refused, never cut to the limit and used: the limit is lowered here to a real profile's size
plus a little, and the profile padded with spaces (still valid JSON) to the limit and to one
byte over it."""

from __future__ import annotations

import pytest

from shimgen.gates import profile
from shimgen.gates.facts import GateDiscoveryError
from tests.badinput import shimgen


def test_a_profile_one_byte_over_its_limit_is_refused_never_cut(drivers, tmp_path,
                                                                 monkeypatch):
    real = tmp_path / "gates.json"
    proc = shimgen("gates", "--driver", str(drivers[-1].path), "--json", str(real))
    assert proc.returncode == 0, proc.stderr
    data = real.read_bytes()
    limit = len(data) + 100
    monkeypatch.setattr(profile, "MAX_PROFILE_BYTES", limit)
    at = tmp_path / "at.json"
    at.write_bytes(data + b" " * (limit - len(data)))
    assert profile.load_profile(at).to_json() == profile.load_profile(real).to_json()
    over = tmp_path / "over.json"
    over.write_bytes(data + b" " * (limit - len(data) + 1))
    with pytest.raises(GateDiscoveryError, match=f"is larger than {limit} bytes"):
        profile.load_profile(over)
