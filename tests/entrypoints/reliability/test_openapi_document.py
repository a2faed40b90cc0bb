"""The published OpenAPI document states what validation enforces: bounds, closed objects, the
error bodies of each dialect, and the key it needs."""
from __future__ import annotations

import httpx

from srv_process import API_KEY


def _doc(server) -> dict:
    r = httpx.get(server.base_url + "/openapi.json", headers={"Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200
    return r.json()


def _field(schemas: dict, name: str, field: str) -> dict:
    prop = schemas[name]["properties"][field]
    return next((a for a in prop.get("anyOf", [prop]) if a.get("type") != "null"), prop)


def test_bounds_and_closed_objects(server):
    doc = _doc(server)
    schemas = doc["components"]["schemas"]
    for name in ("ChatCompletionRequest", "CompletionRequest", "MessagesRequest"):
        assert schemas[name]["additionalProperties"] is False, name
    assert _field(schemas, "CompletionRequest", "top_k") == {"type": "integer", "minimum": -1,
                                                             "maximum": 2**31 - 1}
    assert _field(schemas, "CompletionRequest", "seed")["maximum"] == 2**63 - 1 - 256
    assert _field(schemas, "ChatCompletionRequest", "top_p")["exclusiveMinimum"] == 0
    assert _field(schemas, "MessagesRequest", "temperature") == {"type": "number", "minimum": 0,
                                                                 "maximum": 1}
    assert _field(schemas, "ChatCompletionRequest", "n")["maximum"] == 128
    stop = schemas["CompletionRequest"]["properties"]["stop"]["anyOf"]
    assert {"type": "string", "maxLength": 256} in stop
    assert {"type": "array", "items": {"type": "string", "maxLength": 256}, "maxItems": 64} in stop
    assert schemas["MessagesRequest"]["required"] == ["max_tokens", "messages"]


def test_errors_documented_in_each_dialect(server):
    paths = _doc(server)["paths"]
    ref = "#/components/schemas/{}"
    for path in ("/v1/chat/completions", "/v1/completions"):
        bad = paths[path]["post"]["responses"]["400"]["content"]["application/json"]["schema"]
        assert bad == {"$ref": ref.format("ErrorResponse")}
    bad = paths["/v1/messages"]["post"]["responses"]["400"]["content"]["application/json"]["schema"]
    assert bad == {"$ref": ref.format("AnthropicErrorResponse")}
    assert paths["/health"]["get"]["security"] == []


def test_security_schemes_when_a_key_is_set(server):
    doc = _doc(server)
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "x-api-key"}
    assert doc["security"] == [{"bearer": []}, {"x-api-key": []}]
