"""Stands in for SandboxFusion's server package when its own runner tests run against codegen.

Those tests import three things from `sandbox`: the request and response models, the command
status enum, and the FastAPI `app` they call through `TestClient`. The models are
SandboxFusion's own, re-exported from its published client (PyPI `sandbox-fusion`); the app
forwards every request to codegen's `/run_code` (see `server/server.py`). Nothing else of
SandboxFusion's server is here, so a test that needs more fails to import rather than passing.
"""
