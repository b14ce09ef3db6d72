"""The MCP server: the registry's tools for a customer's own assistant (mcp/tools.py)."""
