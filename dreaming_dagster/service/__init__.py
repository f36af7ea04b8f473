"""The memory service: an HTTP API (``dreaming serve``) and MCP tools (``dreaming mcp``) over the same
save / recall / sync functions the Python API calls, for companion backends in any language."""
