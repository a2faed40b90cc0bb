"""schemathesis over the published OpenAPI document, against the real server on loopback.

Schema-valid and schema-violating cases for every operation: no case may get a 5xx or hang, every
status must be documented, every JSON body must match its documented schema, and what the schema
forbids must be refused (4xx). The document is generated from the Structs that decode requests,
so a case that passes the schema but not the server (or the reverse) is a mismatch this finds.
"""
from __future__ import annotations

import threading
from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, negative_data_rejection,
                                               response_schema_conformance, status_code_conformance)

from srv_process import API_KEY

KEY = {"x-api-key": API_KEY}
CASES_PER_OPERATION = 100  # × 2 modes × 6 operations: ≥ 1,000 cases after deduplication
_tally: Counter = Counter()
_lock = threading.Lock()


@pytest.fixture(scope="module")
def api_schema(hostile_server):
    schema = schemathesis.openapi.from_url(hostile_server.base_url + "/openapi.json", headers=KEY)
    schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                                    max_examples=CASES_PER_OPERATION)
    return schema


# The profiler routes start real traces (their caps have their own test in test_security).
schema = schemathesis.pytest.from_fixture("api_schema").exclude(path_regex="_profile$")


@schema.parametrize()
@settings(max_examples=CASES_PER_OPERATION, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_fuzz_case(case):
    response = case.call_and_validate(
        headers=KEY, timeout=30,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance,
                response_schema_conformance, negative_data_rejection])
    with _lock:
        _tally[case.operation.label] += 1
        _tally[f"status {response.status_code // 100}xx"] += 1


def test_fuzz_ran_enough_and_left_the_server_healthy(hostile_server):
    """Runs after the fuzz cases (file order)."""
    ops = {k: v for k, v in _tally.items() if not k.startswith("status")}
    total = sum(ops.values())
    print(f"== schemathesis: {total} cases over {len(ops)} operations; "
          + ", ".join(f"{k}: {v}" for k, v in sorted(_tally.items()) if k.startswith("status")))
    assert total >= 1000, _tally
    assert _tally["status 5xx"] == 0
    assert httpx.get(hostile_server.base_url + "/health").status_code == 200
