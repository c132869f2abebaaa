"""Models of the jobs app: Training Jobs, the node registry, and attempts (placements)."""

from .attempts import JobAttempt, Placement, PlacementState
from .environments import TrainingEnvironment
from .jobs import JobStatusChange, JobTag, ServerType, TrainingJob
from .nodes import ConsoleListening, HardwareEvent, Node, NodeGPU, NodeToken, RejectedAgentMessage

__all__ = [
    "ConsoleListening", "HardwareEvent", "JobAttempt", "JobStatusChange", "JobTag", "Node", "NodeGPU", "NodeToken",
    "Placement", "PlacementState", "RejectedAgentMessage", "ServerType", "TrainingEnvironment", "TrainingJob",
]
