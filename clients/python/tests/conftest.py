"""Shared fixtures.

Tests marked ``cluster`` talk to a REAL coordinator at ``$CODEGEN_URL`` (default
``http://127.0.0.1:8080``, with ``$CODEGEN_API_KEY`` when keys are configured) whose workers
answer generation jobs with the scripted FAKE model (``examples/scripted-model.json``). They
are skipped when no ready coordinator answers there, unless ``CODEGEN_REQUIRE_CLUSTER=1``, which
makes that a failure. Every other test is a unit test and needs no network.
"""

from __future__ import annotations

import json
import os
import pathlib
import uuid

import httpx
import pytest

from codegen_client import AsyncClient, Client

HERE = pathlib.Path(__file__).parent
SNAPSHOT = HERE / "openapi.json"
URL = (os.environ.get("CODEGEN_URL") or "http://127.0.0.1:8080").rstrip("/")

_ready: bool | None = None
_why = ""


def cluster_ready() -> bool:
    global _ready, _why
    if _ready is None:
        try:
            answer = httpx.get(f"{URL}/readyz", timeout=5)
            _ready = answer.status_code == 200
            _why = f"{URL}/readyz answered {answer.status_code}: {answer.text[:200]}"
        except httpx.HTTPError as e:
            _ready = False
            _why = f"no coordinator at {URL}: {e}"
    return _ready


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("cluster") for item in items):
        return
    if cluster_ready():
        return
    if os.environ.get("CODEGEN_REQUIRE_CLUSTER") == "1":
        raise pytest.UsageError(f"CODEGEN_REQUIRE_CLUSTER=1 but {_why}")
    skip = pytest.mark.skip(reason=_why)
    for item in items:
        if item.get_closest_marker("cluster"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def snapshot() -> dict:
    """The committed copy of the coordinator's ``/openapi.json``."""
    return json.loads(SNAPSHOT.read_text())


@pytest.fixture
def client() -> Client:
    with Client(URL) as c:
        yield c


@pytest.fixture
async def aclient() -> AsyncClient:
    async with AsyncClient(URL) as c:
        yield c


@pytest.fixture
def nonce() -> str:
    """A word no other test run used: keeps jobs out of the solution cache."""
    return uuid.uuid4().hex[:12]


#: The request the scripted FAKE model answers (examples/requests.jsonl, first line): its plan
#: (sieve, sum_primes) answers every instruction that names nothing the script knows better.
SIEVE = "Find all primes up to n with the sieve of Eratosthenes, and sum them."
