"""The model behind one protocol: the loop never knows which provider answers."""

from support_agent.llm.base import Deadline, LlmClient, LlmResponse, Usage

__all__ = ["Deadline", "LlmClient", "LlmResponse", "Usage"]
