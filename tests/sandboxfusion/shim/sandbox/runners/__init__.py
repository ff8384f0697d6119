"""SandboxFusion's command status, from its published client."""

from sandbox_fusion.models import CommandRunStatus

__all__ = ["CommandRunStatus"]
