"""The cluster's MCP tools driven by a real MCP client: the PyPI `mcp` package (`Client`).

Run by tests/tests/e2e/mcp.rs against a cluster of its own; each check prints one `ok: ...` line
and any failure ends the run with its reason (exit 1).

  mcp_client.py http URL KEY OTHER_KEY   /mcp over streamable HTTP: the tools, run_code, a
                                         session, the other tenant's refusals, 401 without a key
  mcp_client.py stdio CODEGEN URL KEY    `codegen mcp` over stdio: one run_code
"""

import asyncio
import base64
import sys

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TOOLS = {
    "run_code",
    "create_session",
    "run_cell",
    "read_file",
    "write_file",
    "list_files",
    "close_session",
    "list_languages",
}


def ok(what):
    print(f"ok: {what}", flush=True)


def text(result):
    """The text of a tool's answer (its text blocks, joined)."""
    return "\n".join(block.text for block in result.content if block.type == "text")


async def call(client, name, arguments=None):
    """A tool's answer, which must not be a tool error."""
    result = await client.call_tool(name, arguments or {})
    assert not result.is_error, f"{name} {arguments}: a tool error: {text(result)}"
    return result


async def refused(client, name, arguments, code):
    """A tool's answer, which must be a tool error naming the API's `code` first."""
    result = await client.call_tool(name, arguments)
    assert result.is_error, f"{name} {arguments}: not an error: {text(result)}"
    assert text(result).startswith(f"{code}: "), f"{name}: not {code}: {text(result)}"
    assert result.structured_content["code"] == code, result.structured_content
    return result


def over_http(url, key, mode="auto"):
    """A client of `url` with `key` (none: no Authorization header); with its HTTP client, to close."""
    headers = {"Authorization": f"Bearer {key}"} if key else None
    http = create_mcp_http_client(headers=headers)
    return Client(streamable_http_client(url, http_client=http), mode=mode), http


async def http_checks(base, key, other_key):
    url = f"{base}/mcp"
    client, http = over_http(url, key)
    async with http, client:
        tools = await client.list_tools()
        names = {tool.name for tool in tools.tools}
        assert names == TOOLS, f"the tools: {sorted(names)}"
        schema = next(t for t in tools.tools if t.name == "run_code").input_schema
        assert set(schema["required"]) == {"language", "code"}, schema
        assert {"stdin", "timeout_ms"} <= set(schema["properties"]), schema
        ok(f"{len(names)} tools listed: {', '.join(sorted(names))} (protocol {client.session.protocol_version})")

        result = await call(client, "list_languages")
        assert "python: " in text(result) and "sessions (create_session): python" in text(result), text(result)
        ok("list_languages names python and the session languages")

        result = await call(client, "run_code", {"language": "python", "code": "print(6 * 7)"})
        assert "status: passed" in text(result), text(result)
        assert "--- stdout ---\n42\n" in text(result), text(result)
        assert result.structured_content["stdout"] == "42\n", result.structured_content
        ok("run_code python printed 42")

        result = await call(
            client,
            "run_code",
            {"language": "py", "code": "import sys; print(input()[::-1]); sys.exit(3)", "stdin": "abc", "timeout_ms": 120000},
        )
        assert "status: failed" in text(result) and "exit_code: 3" in text(result), text(result)
        assert result.structured_content["stdout"] == "cba\n", result.structured_content
        ok("run_code with stdin and a timeout: failed with exit code 3, its stdout kept")

        await refused(client, "run_code", {"language": "cobol", "code": "x"}, "unknown_language")
        await refused(client, "run_code", {"language": "python", "code": "1", "timeout_ms": 0}, "invalid_field")
        ok("run_code's refusals carry the API's codes (unknown_language, invalid_field)")

        # A session: state between cells, files both ways, then closed.
        result = None
        for _ in range(600):  # right after the worker starts, the coordinator may not know it yet
            result = await client.call_tool("create_session", {"language": "python"})
            if not (result.is_error and text(result).startswith("no_session_host: ")):
                break
            await asyncio.sleep(0.5)
        assert not result.is_error, text(result)
        session = result.structured_content["id"]
        assert f"session_id: {session}" in text(result) and "state: live" in text(result), text(result)
        ok(f"create_session: {session}")

        await call(client, "run_cell", {"session_id": session, "code": "x = 20"})
        result = await call(client, "run_cell", {"session_id": session, "code": "print('half', x // 2)\nx * 2"})
        assert "status: ok" in text(result) and "value: 40" in text(result), text(result)
        assert "--- stdout ---\nhalf 10\n" in text(result), text(result)
        ok("run_cell set x, and the next cell read it (value 40)")

        result = await call(client, "run_cell", {"session_id": session, "code": "1 / 0"})
        assert "status: error" in text(result) and "ZeroDivisionError" in text(result), text(result)
        ok("a cell's error is its answer, the session lives on")

        await call(client, "write_file", {"session_id": session, "path": "data/in.txt", "content": "hello\n"})
        blob = bytes(range(256))
        await call(
            client,
            "write_file",
            {"session_id": session, "path": "blob.bin", "content": base64.b64encode(blob).decode(), "encoding": "base64"},
        )
        result = await call(client, "run_cell", {"session_id": session, "code": "open('data/in.txt').read().upper()"})
        assert "value: 'HELLO\\n'" in text(result), text(result)
        await call(client, "run_cell", {"session_id": session, "code": "open('out.txt', 'w').write('from the cell')"})
        result = await call(client, "read_file", {"session_id": session, "path": "out.txt"})
        assert text(result) == "from the cell", text(result)
        result = await call(client, "read_file", {"session_id": session, "path": "blob.bin"})
        assert result.structured_content["encoding"] == "base64", result.structured_content
        assert base64.b64decode(result.structured_content["content"]) == blob, "blob.bin came back changed"
        result = await call(client, "list_files", {"session_id": session})
        listed = {f["path"]: f["size"] for f in result.structured_content["files"]}
        assert listed == {"data/in.txt": 6, "blob.bin": 256, "out.txt": 13}, listed
        assert "data/in.txt\t6 bytes" in text(result), text(result)
        await refused(client, "read_file", {"session_id": session, "path": "../etc/passwd"}, "invalid_field")
        ok("write_file (text and base64), read_file (text and binary) and list_files")

        # Another tenant's client sees none of it: as unknown as a session that never was.
        other, other_http = over_http(url, other_key)
        async with other_http, other:
            await refused(other, "run_cell", {"session_id": session, "code": "x"}, "not_found")
            await refused(other, "read_file", {"session_id": session, "path": "out.txt"}, "not_found")
            await refused(other, "list_files", {"session_id": session}, "not_found")
            await refused(other, "close_session", {"session_id": session}, "not_found")
        result = await call(client, "run_cell", {"session_id": session, "code": "x"})
        assert "value: 20" in text(result), text(result)
        ok("the other tenant's client gets not_found for the session, which lives on")

        result = await call(client, "close_session", {"session_id": session})
        assert "state: ended" in text(result) and "ended_by: deleted" in text(result), text(result)
        await refused(client, "run_cell", {"session_id": session, "code": "x"}, "session_ended")
        await refused(client, "run_cell", {"session_id": "not-an-id", "code": "x"}, "invalid_id")
        ok("close_session ended it; a cell after it is session_ended")

    # An MCP client of the handshake era (the initialize handshake, as older clients speak it).
    client, http = over_http(url, key, mode="legacy")
    async with http, client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        result = await call(client, "run_code", {"language": "bash", "code": "echo legacy"})
        assert "--- stdout ---\nlegacy\n" in text(result), text(result)
        ok(f"a handshake-era client (initialize) lists the tools and runs code (protocol {client.session.protocol_version})")

    # Without a key, or with a wrong one: the API's 401, before any MCP is spoken.
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    for headers, code in [({}, "api_key_required"), ({"Authorization": "Bearer wrong"}, "api_key_unknown")]:
        # A connection each: the refusal comes before the body is read, after which the
        # server closes the connection rather than read on.
        async with httpx2.AsyncClient() as raw:
            response = await raw.post(
                url,
                json=initialize,
                headers={"Accept": "application/json, text/event-stream", **headers},
            )
            assert response.status_code == 401, (response.status_code, response.text)
            assert response.json()["code"] == code, response.text
    client, http = over_http(url, None)
    try:
        async with http, client:
            await client.list_tools()
    except Exception:  # the client's own error for the refused request (it hides the status)
        pass
    else:
        raise AssertionError("a client without a key was served")
    ok("no key or a wrong key: 401 with the API's codes, and the MCP client fails to connect")


async def stdio_checks(codegen, base, key):
    server = StdioServerParameters(command=codegen, args=["mcp", "--url", base], env={"CODEGEN_API_KEY": key})
    async with Client(server) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert names == TOOLS, f"the tools: {sorted(names)}"
        result = await call(client, "run_code", {"language": "python", "code": "print('over stdio', 2 ** 10)"})
        assert "status: passed" in text(result), text(result)
        assert "--- stdout ---\nover stdio 1024\n" in text(result), text(result)
        await refused(client, "run_cell", {"session_id": "0192aaaa-0000-7000-8000-000000000000", "code": "x"}, "not_found")
        ok("codegen mcp over stdio: the tools listed, run_code printed 'over stdio 1024', an unknown session is not_found")


def main():
    mode, *args = sys.argv[1:]
    if mode == "http":
        asyncio.run(http_checks(*args))
    elif mode == "stdio":
        asyncio.run(stdio_checks(*args))
    else:
        sys.exit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
