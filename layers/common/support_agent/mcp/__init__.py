"""MCP both ways: our tools served to a customer's own assistant (our_tools.py, server.py, endpoint.py; in process
for TOOL_MODE=mcp: inprocess.py), and outside servers' reviewed tools offered to the agent (allowlist.py, pins.py,
outside.py)."""
