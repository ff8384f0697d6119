"""SandboxFusion's /run_code request and response, as pydantic v2 models: the wire contract
codegen's /run_code implements (field for field; SandboxFusion's tests build requests with
`model_dump()` and parse answers with these). Its published client defines the same fields
with pydantic's v1 API, which those tests cannot use.
"""

from enum import Enum
from typing import Dict, List, Optional

from pydantic import BaseModel

from sandbox.runners import CommandRunResult


class RunStatus(str, Enum):
    Success = "Success"
    Failed = "Failed"
    SandboxError = "SandboxError"


class RunCodeRequest(BaseModel):
    compile_timeout: float = 10
    run_timeout: float = 10
    memory_limit_MB: int = -1
    code: str
    stdin: Optional[str] = None
    language: str
    files: Dict[str, Optional[str]] = {}
    fetch_files: List[str] = []


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str
    compile_result: Optional[CommandRunResult] = None
    run_result: Optional[CommandRunResult] = None
    executor_pod_name: Optional[str] = None
    files: Dict[str, str] = {}


__all__ = ["RunCodeRequest", "RunCodeResponse", "RunStatus"]
