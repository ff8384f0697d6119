"""SandboxFusion's /run_code request and response models, from its published client."""

from sandbox_fusion.models import RunCodeRequest, RunCodeResponse, RunStatus

__all__ = ["RunCodeRequest", "RunCodeResponse", "RunStatus"]
