from __future__ import annotations

import pytest

from driverfetch import DriverFetchError, FetchedDriver, fetch_all


@pytest.fixture(scope="session")
def drivers() -> list[FetchedDriver]:
    """Real Debian libcuda builds. A failure to fetch them fails the run: no silent skip."""
    try:
        return fetch_all()
    except DriverFetchError as e:
        pytest.fail(f"cannot fetch Debian's libcuda packages: {e}", pytrace=False)
