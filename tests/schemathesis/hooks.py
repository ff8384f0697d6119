"""Schemathesis hooks for the coordinator's API (loaded by scripts/test).

`POST /v1/batches` takes JSON Lines (`application/x-ndjson`): its document describes the body
as an array of job submissions, one per line. Schemathesis has no serializer for that media
type, so this one writes an array as one JSON value per line and anything else (what negative
testing generates) as a single JSON line.
"""

import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx, value):
    if isinstance(value, list):
        return "".join(json.dumps(item) + "\n" for item in value).encode()
    return (json.dumps(value) + "\n").encode()
