"""tilake for agents: the Model Context Protocol server of ``tilake mcp`` (docs/agent.md).

:mod:`tilake.agent.tools` and :mod:`tilake.agent.explain` are the tools as plain functions (JSON in and
out, no MCP import); :mod:`tilake.agent.server` registers them with the ``mcp`` SDK (the optional extra
``.[mcp]``) and serves them over stdio.
"""
