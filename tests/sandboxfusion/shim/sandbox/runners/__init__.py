"""SandboxFusion's command status, as its /run_code answers state it."""

from enum import Enum
from typing import Optional

from pydantic import BaseModel


class CommandRunStatus(str, Enum):
    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: Optional[float] = None
    return_code: Optional[int] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None


__all__ = ["CommandRunResult", "CommandRunStatus"]
