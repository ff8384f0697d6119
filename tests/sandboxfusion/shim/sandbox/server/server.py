"""The `app` SandboxFusion's tests drive with FastAPI's TestClient: an ASGI app that forwards
each request, unchanged, to a running codegen coordinator (CODEGEN_URL, default
http://127.0.0.1:8080) and answers with codegen's status and body. The tests' assertions
therefore judge codegen's answers, not anything computed here.
"""

import os

import httpx

CODEGEN_URL = os.environ.get("CODEGEN_URL", "http://127.0.0.1:8080").rstrip("/")
# A compile plus a run, queued behind other work on a small machine: generous, since the
# tests' own limits are what they check.
TIMEOUT = float(os.environ.get("CODEGEN_SF_TIMEOUT", "600"))


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {k.decode(): v.decode() for k, v in scope["headers"] if k.lower() == b"content-type"}
    api_key = os.environ.get("CODEGEN_API_KEY")
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    url = CODEGEN_URL + scope["path"]
    if scope.get("query_string"):
        url += "?" + scope["query_string"].decode()
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        answer = await client.request(scope["method"], url, content=body, headers=headers)
    await send(
        {
            "type": "http.response.start",
            "status": answer.status_code,
            "headers": [(b"content-type", answer.headers.get("content-type", "application/json").encode())],
        }
    )
    await send({"type": "http.response.body", "body": answer.content})
