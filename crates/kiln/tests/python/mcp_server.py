"""A small MCP server for Kiln's end-to-end tests of its MCP client (`kiln-mcp`).

It serves a few deterministic tools over MCP's streamable HTTP transport with the
official `mcp` Python SDK, so the tests exercise a real, independent server
implementation rather than one built with the same Rust SDK as the client.

Usage: python mcp_server.py PORT [TOKEN]

Listens on http://127.0.0.1:PORT/mcp. With TOKEN, every HTTP request must carry
`Authorization: Bearer TOKEN`; others get 401. Ready once the port accepts
connections (uvicorn also logs "Uvicorn running on ..."). Runs until killed.

Tools: add(a, b) -> a + b; get_weather(city) -> "It is sunny and 21 C in {city}.";
fail() -> always an error result (isError) whose text contains "fail always fails";
secret_lookup(key) -> "value-of-{key}".

Works with mcp 2.x (`MCPServer`) and mcp 1.x (`FastMCP`).
"""

import sys

import uvicorn

try:  # mcp >= 2: FastMCP was renamed MCPServer
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("kiln-test-tools")

    def http_app():
        return server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")

except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP
    from mcp.server.fastmcp.exceptions import ToolError

    server = FastMCP("kiln-test-tools", host="127.0.0.1", streamable_http_path="/mcp")

    def http_app():
        return server.streamable_http_app()


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"It is sunny and 21 C in {city}."


@server.tool()
def fail() -> str:
    """Always fails; for testing tool errors."""
    raise ToolError("fail always fails")


@server.tool()
def secret_lookup(key: str) -> str:
    """Look up the value stored under a key."""
    return f"value-of-{key}"


class RequireBearer:
    """ASGI middleware: rejects HTTP requests without the expected bearer token."""

    def __init__(self, app, token):
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            print(f"rejected {scope['method']} {scope['path']}: missing or wrong bearer token", file=sys.stderr, flush=True)
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b'Bearer realm="mcp"')],
                }
            )
            await send({"type": "http.response.body", "body": b"missing or wrong bearer token"})
            return
        await self.app(scope, receive, send)


def main():
    port = int(sys.argv[1])
    token = sys.argv[2] if len(sys.argv) > 2 else None
    app = http_app()
    if token:
        app = RequireBearer(app, token)
    # uvicorn's access log is the minimal request log: one line per request.
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="info")


if __name__ == "__main__":
    main()
