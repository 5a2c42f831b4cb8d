"""The documentation tests read files only: no object store (the suite's SeaweedFS is started for the others)."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def object_store():
    return None
