"""Models of the jobs app: Training Jobs, the node registry, and attempts (placements)."""

from ..nodes.models import ConsoleListening, HardwareEvent, Node, NodeGPU, NodeToken, RejectedAgentMessage
from ..storage.models import ReadyAttemptKey, StorageSpace
from .attempts import JobAttempt, Placement, PlacementState
from .environments import TrainingEnvironment
from .jobs import JobStatusChange, JobTag, ServerType, TrainingJob

__all__ = [
    "ConsoleListening", "HardwareEvent", "JobAttempt", "JobStatusChange", "JobTag", "Node", "NodeGPU", "NodeToken",
    "Placement", "PlacementState", "ReadyAttemptKey", "RejectedAgentMessage", "ServerType", "StorageSpace",
    "TrainingEnvironment",
    "TrainingJob",
]
