"""Stands in for SandboxFusion's server package when its own runner tests run against codegen.

Those tests import three things from `sandbox`: the request and response models, the command
status enum, and the FastAPI `app` they call through `TestClient`. The models state the
/run_code wire contract (pydantic v2, as the tests use them); the app forwards every request
to codegen's coordinator (see `server/server.py`), so the tests' assertions judge codegen's
answers. Nothing else of SandboxFusion's server is here: a test that needs more fails to
import rather than passing.
"""
