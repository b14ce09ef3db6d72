"""The model behind one protocol: the loop never knows which provider answers."""

from support_agent.llm.base import LlmClient, LlmResponse
from support_agent.messages import Deadline, Usage

__all__ = ["Deadline", "LlmClient", "LlmResponse", "Usage"]
