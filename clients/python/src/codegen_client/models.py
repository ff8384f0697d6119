"""Request and answer bodies of the coordinator's API, as pydantic v2 models.

Each model names the schema of ``/openapi.json`` it stands for (``schema_name``; the variants
of a tagged union also ``schema_variant``, the value of their tag: ``event`` for ``Progress``,
``kind`` for ``AgentStep``, named by ``schema_tag``). The
test suite checks every model against the server's document: the same field names, and a
field is required here exactly when the schema requires it. So a field added on the server
fails that test until it is added here.

Answers accept fields they do not know (``extra="allow"``: an older client keeps working
against a newer server, and the unknown field is still readable as an attribute); requests
refuse them, as the server does (``deny_unknown_fields``).

Statuses and other enumerations are plain strings (a newer server may add values); the
module-level tuples list the values this client knows.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

__all__ = [
    # requests
    "FileBytes",
    "ExecutionSubmission",
    "ExecutionBatchItem",
    "ExecutionBatch",
    "JobSubmission",
    "AgentSettings",
    "SessionCreate",
    "CellRequest",
    # executions
    "CompileResult",
    "ExecutionResult",
    "ExecutionView",
    "BatchItemView",
    "StreamedItemView",
    "ExecutionBatchView",
    "Webhook",
    "WebhookAttempt",
    # jobs
    "JobAccepted",
    "JobProgress",
    "FunctionProgress",
    "Param",
    "Output",
    "FunctionSpec",
    "TestCase",
    "TestResult",
    "Analysis",
    "Improvement",
    "Quality",
    "Tokens",
    "JobMetrics",
    "Change",
    "JobResult",
    "AgentCall",
    "AgentTool",
    "Cut",
    "AgentStep",
    "AgentStepStart",
    "AgentStepModel",
    "AgentStepObservation",
    "AgentStepOther",
    "AgentTotals",
    "AgentOutcome",
    "Progress",
    "ProgressQueued",
    "ProgressPlanning",
    "ProgressPlanned",
    "ProgressReplanning",
    "ProgressFunctionCached",
    "ProgressFunctionStarted",
    "ProgressAttempt",
    "ProgressFunctionDone",
    "ProgressFinished",
    "ProgressAgentStep",
    "JobEvent",
    # batches
    "BatchAccepted",
    "BatchJob",
    "BatchView",
    "ExpiredJob",
    "BatchResult",
    "BatchResults",
    # lists
    "JobSummary",
    "JobList",
    "BatchSummary",
    "BatchList",
    "ExecutionSummary",
    "ExecutionList",
    # usage, languages
    "Usage",
    "UsagePeriod",
    "LanguageInfo",
    "Languages",
    # sessions
    "SessionView",
    "SessionList",
    "Unrestorable",
    "Restore",
    "CheckpointNote",
    "CellError",
    "DisplayOutput",
    "CellResult",
    "SessionFile",
    "SessionFiles",
    "CacheStats",
    "CacheCleared",
    # the cluster
    "ClusterView",
    "WorkerView",
    "WorkerStatus",
    "PoolStatus",
    "ModelStatus",
    "QueueView",
    # lessons
    "Lesson",
    "LessonUse",
    "LessonView",
    "LessonList",
    "LessonImport",
    "ErrorBody",
    "SCHEMA_MODELS",
    "UNION_SCHEMAS",
    "ENUM_SCHEMAS",
    "TAGGED_UNIONS",
    "EXECUTION_VERDICTS",
    "JOB_STATUSES",
    "JOB_FINAL_STATUSES",
    "JOB_MODES",
    "AGENT_ENDS",
    "LESSON_SOURCES",
    "USAGE_PERIODS",
]

#: Every status of an execution's verdict (`queued` is not one: it has none yet).
EXECUTION_VERDICTS = (
    "passed",
    "failed",
    "timeout",
    "cpu_time_limit",
    "memory_limit",
    "compile_error",
    "output_limit",
    "sandbox_error",
    "error",
)
JOB_STATUSES = ("queued", "planning", "running", "integrating", "succeeded", "failed", "cancelled")
#: A job in one of these has ended.
JOB_FINAL_STATUSES = ("succeeded", "failed", "cancelled")
#: What a job does (``JobSubmission.mode``; absent: ``generate``).
JOB_MODES = ("generate", "debug", "refactor", "agent")
#: Whether a job's repairs use the tenant's lessons (``JobSubmission.memory``).
MEMORY_USES = ("on", "off")
#: Why an agent run ended (``AgentOutcome.ended_by``).
AGENT_ENDS = (
    "finished",
    "max_steps",
    "wall_time",
    "tokens",
    "cpu",
    "stuck",
    "malformed",
    "cancelled",
    "failed",
)
#: What made a lesson (``Lesson.source``): a pipeline repair, or an agent's edit.
LESSON_SOURCES = ("repair", "agent")
#: How ``GET /v1/usage`` divides its window into ``Usage.series`` (its ``per``).
USAGE_PERIODS = ("hour", "day")


class _Answer(BaseModel):
    """A body the server sends: unknown fields are kept, not refused."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    schema_name: ClassVar[str | None] = None


class _Request(BaseModel):
    """A body the client sends: unknown fields are refused, as the server refuses them."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_name: ClassVar[str | None] = None

    def to_json(self) -> dict[str, Any]:
        """The body as sent: fields left unset are left out (the server's defaults apply)."""
        return self.model_dump(mode="json", exclude_none=True, by_alias=True)


# --- requests -------------------------------------------------------------------------------


class FileBytes(BaseModel):
    """A file's content as base64 (any bytes); a plain ``str`` is UTF-8 text."""

    model_config = ConfigDict(extra="forbid")
    base64: str

    @classmethod
    def of(cls, data: bytes) -> FileBytes:
        return cls(base64=base64.b64encode(data).decode("ascii"))

    def bytes(self) -> bytes:
        return base64.b64decode(self.base64)


#: A file of an execution: UTF-8 text, or ``{"base64": ...}`` for any bytes.
FileContent = Union[str, FileBytes]


def file_bytes(content: FileContent) -> bytes:
    """The bytes of a file as the API sends it (text as UTF-8)."""
    return content.bytes() if isinstance(content, FileBytes) else content.encode("utf-8")


class ExecutionSubmission(_Request):
    """``POST /v1/executions``: one program (plus an optional ``test``)."""

    schema_name = "ExecutionSubmission"
    language: str
    code: str
    test: str | None = None
    stdin: str | None = None
    timeout_ms: int | None = None
    cpu_time_ms: int | None = None
    compile_timeout_ms: int | None = None
    memory_mb: int | None = None
    fresh_container: bool | None = None
    files: dict[str, FileContent] | None = None
    return_files: list[str] | None = None


class ExecutionBatchItem(ExecutionSubmission):
    """An item of ``POST /v1/executions/batch``: a submission plus your label ``id``."""

    schema_name = "ExecutionBatchItem"
    id: str | None = None


class ExecutionBatch(_Request):
    schema_name = "ExecutionBatch"
    items: list[ExecutionBatchItem]
    callback_url: str | None = None


class AgentSettings(_Request):
    """``JobSubmission.agent``: an agent run's budgets and sampling; every field has a server
    default (``max_steps`` 50, ``max_seconds`` 600, ``max_cpu_ms`` 300000, ``stuck_repeats``
    4, ``stuck_errors`` 3, ``max_observation_chars`` 10000)."""

    schema_name = "AgentSettings"
    max_steps: int | None = None
    max_seconds: int | None = None
    max_cpu_ms: int | None = None
    stuck_repeats: int | None = None
    stuck_errors: int | None = None
    max_observation_chars: int | None = None
    seed: int | None = None
    temperature: float | None = None


class JobSubmission(_Request):
    """``POST /v1/jobs`` (and one line of ``POST /v1/batches``)."""

    schema_name = "JobSubmission"
    instruction: str
    language: str | None = None
    constraints: str | None = None
    test_requirements: str | None = None
    max_iterations: int | None = None
    candidates: int | None = None
    max_tokens_total: int | None = None
    callback_url: str | None = None
    mode: str | None = None
    code: str | None = None
    error: str | None = None
    goals: list[str] | None = None
    files: dict[str, str] | None = None
    agent: AgentSettings | None = None
    memory: str | None = None


class SessionCreate(_Request):
    schema_name = "SessionCreate"
    language: str
    memory_mb: int | None = None
    idle_timeout_s: int | None = None
    packages: list[str] | None = None


class CellRequest(_Request):
    schema_name = "CellRequest"
    code: str
    timeout_ms: int | None = None


# --- executions -----------------------------------------------------------------------------


class CompileResult(_Answer):
    schema_name = "CompileResult"
    status: str
    exit_code: int | None = None
    output: str
    duration_ms: int


class _Verdict(_Answer):
    """The fields of a verdict, all but ``status`` absent while it is ``queued``."""

    status: str
    exit_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None
    truncated: bool | None = None
    duration_ms: int | None = None
    cpu_ms: int | None = None
    peak_memory_kb: int | None = None
    reason: str | None = None
    error_kind: str | None = None
    files: dict[str, FileContent] | None = None
    file_errors: dict[str, str] | None = None
    compile: CompileResult | None = None

    @property
    def done(self) -> bool:
        """The verdict is in (``status`` is not ``queued``)."""
        return self.status != "queued"

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def file(self, path: str) -> bytes:
        """The bytes of a returned file (``return_files``)."""
        if not self.files or path not in self.files:
            raise KeyError(path)
        return file_bytes(self.files[path])


class ExecutionResult(_Verdict):
    """A verdict (what an execution answers once it ran)."""

    schema_name = "ExecutionResult"
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    duration_ms: int


class ExecutionView(_Verdict):
    """``GET /v1/executions/{id}``: the verdict, or ``{"id", "status": "queued"}``."""

    schema_name = "ExecutionView"
    id: str


class BatchItemView(_Verdict):
    """One item of an execution batch: its label, its execution and the verdict (or
    ``queued``)."""

    schema_name = "BatchItemView"
    id: str
    execution_id: str


class StreamedItemView(BatchItemView):
    """One line of a streamed batch (``?stream=true``): an item as soon as its verdict is in."""

    schema_name = "StreamedItemView"
    index: int


class WebhookAttempt(_Answer):
    schema_name = "WebhookAttempt"
    at_ms: int
    status: int | None = None
    error: str | None = None
    duration_ms: int


class Webhook(_Answer):
    schema_name = "Webhook"
    url: str
    state: str
    attempts: list[WebhookAttempt]


class ExecutionBatchView(_Answer):
    schema_name = "ExecutionBatchView"
    done: int
    total: int
    results: list[BatchItemView]
    batch_id: str | None = None
    webhook: Webhook | None = None


# --- jobs -----------------------------------------------------------------------------------


class JobAccepted(_Answer):
    """The 202 answer of ``POST /v1/jobs``."""

    schema_name = "JobAccepted"
    job_id: str
    status: str


class FunctionProgress(_Answer):
    schema_name = "FunctionProgress"
    done: bool
    passed: bool
    attempts: int


class JobProgress(_Answer):
    """``GET /v1/jobs/{id}`` while the job runs."""

    schema_name = "JobProgress"
    job_id: str
    status: str
    functions: dict[str, FunctionProgress]
    webhook: Webhook | None = None

    @property
    def finished(self) -> bool:
        return self.status in JOB_FINAL_STATUSES


class Param(_Answer):
    schema_name = "Param"
    name: str
    type: str


class Output(_Answer):
    schema_name = "Output"
    type: str
    description: str


class FunctionSpec(_Answer):
    schema_name = "FunctionSpec"
    name: str
    purpose: str
    inputs: list[Param]
    outputs: Output
    dependencies: list[str]
    complexity: str


class TestCase(_Answer):
    __test__ = False  # not a pytest class
    schema_name = "TestCase"
    name: str
    kind: str
    inputs: dict[str, Any]
    expected_output: Any
    expected_error: str | None
    given: bool = False


class TestResult(_Answer):
    __test__ = False
    schema_name = "TestResult"
    function: str
    test: str
    passed: bool
    actual_output: Any
    error: str | None = None
    error_kind: str | None = None
    duration_ms: float


class Analysis(_Answer):
    schema_name = "Analysis"
    error_kind: str
    root_cause: str
    changes: str


class Improvement(_Answer):
    schema_name = "Improvement"
    function: str
    attempt: int
    error_kind: str
    error: str
    fix: str
    analysis: Analysis | None = None
    lessons: list[str] = Field(default_factory=list)


class Quality(_Answer):
    schema_name = "Quality"
    score: float
    tests_passed: int
    tests_total: int
    coverage: float | None
    complexity: dict[str, int]
    docstrings: float | None
    dangerous_calls: list[str]
    unmeasured: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


class Tokens(_Answer):
    schema_name = "Tokens"
    prompt: int
    completion: int


class Tally(_Answer):
    """How many cases of a kind passed, and what writing them cost."""

    schema_name = "Tally"
    passed: int
    total: int
    tokens: Tokens


class JobMetrics(_Answer):
    schema_name = "JobMetrics"
    generation_ms: int
    execution_ms: int
    sandbox_cpu_ms: int = 0
    total_ms: int
    model_calls: int
    tokens: Tokens
    cache: str


class Change(_Answer):
    schema_name = "Change"
    mode: str
    function: str
    diff: str
    root_cause: str | None = None
    changes: str | None = None
    reproducing_tests: list[str] = Field(default_factory=list)
    dropped_tests: list[str] = Field(default_factory=list)
    goals: list[str] = Field(default_factory=list)
    quality_before: Quality | None = None


# Agent jobs (``mode: "agent"``): the recorded steps of a run and its outcome.


class AgentCall(_Answer):
    """A tool call as the model made it."""

    schema_name = "AgentCall"
    id: str
    tool: str
    arguments: str  # JSON text as the model wrote it, not always valid

    def parsed_arguments(self) -> Any:
        """``arguments`` as JSON (``ValueError`` when the model wrote none that parses)."""
        return json.loads(self.arguments)


class AgentTool(_Answer):
    """A tool as the model was offered it (``parameters``: the JSON schema of its arguments)."""

    schema_name = "AgentTool"
    name: str
    description: str
    parameters: dict[str, Any]


class Cut(_Answer):
    """What was cut from an observation over ``max_observation_chars``."""

    schema_name = "Cut"
    total_chars: int
    omitted_chars: int


class _AgentStepBase(_Answer):
    schema_name = "AgentStep"
    schema_tag: ClassVar[str] = "kind"
    schema_variant: ClassVar[str]


class AgentStepStart(_AgentStepBase):
    """The run's start: the system prompt, the task and the tools, as the model is shown them."""

    schema_variant = "start"
    kind: Literal["start"]
    index: int
    system: str
    task: str
    tools: list[AgentTool]
    model: str
    at_ms: int
    worker: str


class AgentStepModel(_AgentStepBase):
    """The model's answer: what it said and the tools it calls (``problem``: why an answer
    meant as a call could not be read as one)."""

    schema_variant = "model"
    kind: Literal["model"]
    index: int
    step: int
    text: str
    calls: list[AgentCall]
    problem: str | None = None
    prompt_tokens: int
    completion_tokens: int
    model_calls: int
    token_ids: list[int] | None = None
    duration_ms: int
    at_ms: int
    worker: str


class AgentStepObservation(_AgentStepBase):
    """What a call got back (``call_id`` absent: the feedback on a malformed answer)."""

    schema_variant = "observation"
    kind: Literal["observation"]
    index: int
    call_id: str | None = None
    tool: str
    content: str
    error: bool
    malformed: bool = False
    cut: Cut | None = None
    cpu_ms: int
    duration_ms: int
    at_ms: int
    worker: str
    lessons: list[str] = Field(default_factory=list)


class AgentStepOther(_Answer):
    """A step of a kind this client does not know yet (a newer server's)."""

    kind: str


AGENT_STEP_VARIANTS: tuple[type[_AgentStepBase], ...] = (
    AgentStepStart,
    AgentStepModel,
    AgentStepObservation,
)
_AGENT_STEP_KINDS = {cls.schema_variant for cls in AGENT_STEP_VARIANTS}


def _agent_step_kind(value: Any) -> str:
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if kind in _AGENT_STEP_KINDS else "other"


#: One recorded step of an agent run, by its ``kind``: ``AgentStepStart``, ``AgentStepModel``
#: or ``AgentStepObservation`` (``AgentStepOther`` for a kind this client does not know).
AgentStep = Annotated[
    Union[
        Annotated[AgentStepStart, Tag("start")],
        Annotated[AgentStepModel, Tag("model")],
        Annotated[AgentStepObservation, Tag("observation")],
        Annotated[AgentStepOther, Tag("other")],
    ],
    Discriminator(_agent_step_kind),
]


class AgentTotals(_Answer):
    """What a run spent (``resumed``: times it was taken again after its worker was lost)."""

    schema_name = "AgentTotals"
    steps: int
    tool_calls: int
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    sandbox_cpu_ms: int
    wall_ms: int
    resumed: int


class AgentOutcome(_Answer):
    """``JobResult.agent``: why the run ended, what ``finish`` said, the files it named (with
    their contents; those it could not read in ``missing``, with why), and what it spent."""

    schema_name = "AgentOutcome"
    ended_by: str
    answer: str | None = None
    files: dict[str, str] = Field(default_factory=dict)
    missing: dict[str, str] = Field(default_factory=dict)
    totals: AgentTotals
    session_id: str

    @property
    def finished(self) -> bool:
        """The model called ``finish`` (no budget or stuck detection ended the run)."""
        return self.ended_by == "finished"


class JobResult(_Answer):
    """A job that ended (succeeded, failed or cancelled), with its code, tests and metrics
    (an agent job: its outcome in ``agent``; its steps: ``jobs.transcript``)."""

    schema_name = "JobResult"
    job_id: str
    status: str
    instruction: str
    language: str
    language_reason: str = ""
    plan_source: str = "model"
    function_specs: list[FunctionSpec]
    implementations: dict[str, str]
    tests: dict[str, list[TestCase]]
    contradicted_tests: dict[str, list[TestCase]] = Field(default_factory=dict)
    test_results: list[TestResult]
    all_tests_passed: bool
    passed_given: Tally | None = None
    passed_generated: Tally | None = None
    stopped_by: str | None = None
    improvement_history: list[Improvement]
    documentation: str
    quality: Quality
    metrics: JobMetrics
    failure: str | None = None
    webhook: Webhook | None = None
    validation: str
    manual_review_recommended: bool
    change: Change | None = None
    agent: AgentOutcome | None = None

    @property
    def finished(self) -> bool:
        return self.status in JOB_FINAL_STATUSES


# Progress events: `GET /v1/jobs/{id}/events`, one class per `event`.


class _ProgressBase(_Answer):
    schema_name = "Progress"
    schema_variant: ClassVar[str]


class ProgressQueued(_ProgressBase):
    schema_variant = "queued"
    event: Literal["queued"]
    job_id: str


class ProgressPlanning(_ProgressBase):
    schema_variant = "planning"
    event: Literal["planning"]


class ProgressPlanned(_ProgressBase):
    """The plan: its functions, each after its dependencies (``dependencies``: each
    function's, those without any left out; the edges of the job's graph)."""

    schema_variant = "planned"
    event: Literal["planned"]
    functions: list[str]
    dependencies: dict[str, list[str]] = Field(default_factory=dict)


class ProgressReplanning(_ProgressBase):
    schema_variant = "replanning"
    event: Literal["replanning"]
    problem: str


class ProgressFunctionCached(_ProgressBase):
    schema_variant = "function_cached"
    event: Literal["function_cached"]
    function: str


class ProgressFunctionStarted(_ProgressBase):
    """A function's work began (``worker``: the worker that runs it)."""

    schema_variant = "function_started"
    event: Literal["function_started"]
    function: str
    worker: str | None = None


class ProgressAttempt(_ProgressBase):
    schema_variant = "attempt"
    event: Literal["attempt"]
    function: str
    attempt: int
    passed: bool
    error_kind: str | None = None
    validation: str | None = None
    worker: str | None = None  # the worker that ran it


class ProgressFunctionDone(_ProgressBase):
    schema_variant = "function_done"
    event: Literal["function_done"]
    function: str
    passed: bool
    attempts: int


class ProgressFinished(_ProgressBase):
    schema_variant = "finished"
    event: Literal["finished"]
    status: str
    all_tests_passed: bool
    validation: str
    cache: str
    failure: str | None = None


class ProgressAgentStep(_ProgressBase):
    """An agent job recorded a step (the model's answer, or a call's observation)."""

    schema_variant = "agent_step"
    event: Literal["agent_step"]
    step: AgentStep


class ProgressOther(_Answer):
    """An event this client does not know yet (a newer server's)."""

    event: str


Progress = Annotated[
    ProgressQueued
    | ProgressPlanning
    | ProgressPlanned
    | ProgressReplanning
    | ProgressFunctionCached
    | ProgressFunctionStarted
    | ProgressAttempt
    | ProgressFunctionDone
    | ProgressFinished
    | ProgressAgentStep,
    Field(discriminator="event"),
]

PROGRESS_VARIANTS: tuple[type[_ProgressBase], ...] = (
    ProgressQueued,
    ProgressPlanning,
    ProgressPlanned,
    ProgressReplanning,
    ProgressFunctionCached,
    ProgressFunctionStarted,
    ProgressAttempt,
    ProgressFunctionDone,
    ProgressFinished,
    ProgressAgentStep,
)
_PROGRESS_BY_EVENT = {cls.schema_variant: cls for cls in PROGRESS_VARIANTS}


def parse_progress(data: dict[str, Any]) -> _ProgressBase | ProgressOther:
    """A progress event's data as its class (``ProgressOther`` for an unknown ``event``)."""
    cls = _PROGRESS_BY_EVENT.get(str(data.get("event")))
    if cls is None:
        return ProgressOther.model_validate(data)
    return cls.model_validate(data)


class JobEvent(BaseModel):
    """One server-sent event of a job's stream: its id (resume after it with
    ``Last-Event-ID``), its name and its data."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    schema_name: ClassVar[str] = "JobEvent"
    id: str | None  # always sent by the server; required (possibly None) here
    event: str
    data: Any  # a Progress variant (or ProgressOther)

    @property
    def finished(self) -> bool:
        return self.event == "finished"


# --- batches --------------------------------------------------------------------------------


class BatchAccepted(_Answer):
    """The 202 answer of ``POST /v1/batches``."""

    schema_name = "BatchAccepted"
    batch_id: str
    jobs: list[str]


class BatchJob(_Answer):
    schema_name = "BatchJob"
    job_id: str
    status: str


class BatchView(_Answer):
    """``GET /v1/batches/{id}``."""

    schema_name = "BatchView"
    batch_id: str
    status: str
    counts: dict[str, int]
    jobs: list[BatchJob]
    webhook: Webhook | None = None

    @property
    def done(self) -> bool:
        return self.status == "done"

    @property
    def finished_jobs(self) -> int:
        """Jobs that have ended (or whose state expired): the long poll's ``finished``."""
        return sum(n for s, n in self.counts.items() if s in JOB_FINAL_STATUSES or s == "unknown")


class ExpiredJob(_Answer):
    """A job of a batch whose state has expired: ``{"job_id", "status": "unknown"}``."""

    schema_name = "ExpiredJob"
    job_id: str
    status: str

    @property
    def finished(self) -> bool:
        """Nothing more will happen to it (a batch counts it as done)."""
        return True


def _batch_result_kind(value: Any) -> str:
    """Which member of ``BatchResult`` an answer is: a result has ``function_specs`` (as
    ``GET /v1/jobs/{id}`` is read), an expired job is ``unknown``, else progress."""
    if isinstance(value, dict):
        if "function_specs" in value:
            return "result"
        return "expired" if value.get("status") == "unknown" else "progress"
    if isinstance(value, JobResult):
        return "result"
    return "expired" if isinstance(value, ExpiredJob) else "progress"


#: One job of a batch's results: its ``JobResult`` once it ended, its ``JobProgress`` before,
#: or ``ExpiredJob`` once its state has expired.
BatchResult = Annotated[
    Union[
        Annotated[JobResult, Tag("result")],
        Annotated[JobProgress, Tag("progress")],
        Annotated[ExpiredJob, Tag("expired")],
    ],
    Discriminator(_batch_result_kind),
]


class BatchResults(_Answer):
    """``GET /v1/batches/{id}/results``: a page of the batch's jobs in input order, each as
    ``GET /v1/jobs/{id}`` answers it (or ``ExpiredJob``)."""

    schema_name = "BatchResults"
    batch_id: str
    total: int
    results: list[BatchResult]
    next_cursor: str | None = None


# --- lists ----------------------------------------------------------------------------------


class JobSummary(_Answer):
    schema_name = "JobSummary"
    job_id: str
    status: str
    submitted_at_ms: int
    language: str
    instruction: str


class JobList(_Answer):
    schema_name = "JobList"
    jobs: list[JobSummary]
    next_cursor: str | None = None


class BatchSummary(_Answer):
    schema_name = "BatchSummary"
    batch_id: str
    status: str
    submitted_at_ms: int
    jobs: int


class BatchList(_Answer):
    schema_name = "BatchList"
    batches: list[BatchSummary]
    next_cursor: str | None = None


class ExecutionSummary(_Answer):
    schema_name = "ExecutionSummary"
    id: str
    status: str
    submitted_at_ms: int
    language: str


class ExecutionList(_Answer):
    schema_name = "ExecutionList"
    executions: list[ExecutionSummary]
    next_cursor: str | None = None


# --- usage, languages -----------------------------------------------------------------------


class UsagePeriod(_Answer):
    """One hour's or one day's (UTC) totals of ``Usage.series``, from ``from_ms``."""

    schema_name = "UsagePeriod"
    from_ms: int
    jobs: int
    executions: int
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    sandbox_ms: int
    sandbox_cpu_ms: int


class Usage(_Answer):
    """``GET /v1/usage``: what the tenant's work that ended in ``[from_ms, to_ms)`` cost;
    with ``per`` (``hour`` or ``day``), also ``series``: the totals per period, oldest first
    (periods that charged nothing left out)."""

    schema_name = "Usage"
    tenant: str | None = None
    from_ms: int
    to_ms: int
    jobs: int
    executions: int
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    sandbox_ms: int
    sandbox_cpu_ms: int
    series: list[UsagePeriod] | None = None


class LanguageInfo(_Answer):
    schema_name = "LanguageInfo"
    name: str
    aliases: list[str]
    sandbox_fusion: str | None = None
    version: str
    image: str
    compiled: bool
    generation: bool
    main_file: str
    test_file: str
    test_form: str
    libraries: list[str]


class Languages(_Answer):
    schema_name = "Languages"
    languages: list[LanguageInfo]

    def names(self) -> list[str]:
        return [language.name for language in self.languages]


# --- sessions -------------------------------------------------------------------------------


class Unrestorable(_Answer):
    schema_name = "Unrestorable"
    name: str
    reason: str


class Restore(_Answer):
    schema_name = "Restore"
    lost_worker: str
    reason: str
    after_cell: int
    unrestorable: list[Unrestorable]
    restored_ms: int


class SessionView(_Answer):
    schema_name = "SessionView"
    id: str
    language: str
    state: str
    memory_mb: int
    idle_timeout_s: int
    packages: list[str] = Field(default_factory=list)
    created_ms: int
    last_used_ms: int
    expires_ms: int
    cells: int
    ended_reason: str | None = None
    ended_by: str | None = None
    restores: int = 0
    last_restore: Restore | None = None

    @property
    def live(self) -> bool:
        return self.state == "live"


class SessionList(_Answer):
    schema_name = "SessionList"
    sessions: list[SessionView]


class CheckpointNote(_Answer):
    schema_name = "CheckpointNote"
    saved: bool
    bytes: int
    unrestorable: list[Unrestorable] = Field(default_factory=list)
    error: str | None = None


class CellError(_Answer):
    schema_name = "CellError"
    type: str
    message: str
    traceback: str = ""


class DisplayOutput(_Answer):
    schema_name = "DisplayOutput"
    mime: str
    base64: str | None = None
    text: str | None = None


class CellResult(_Answer):
    """What a cell did: ``status`` ``ok``, ``error`` or ``timeout`` (the session lives on)."""

    schema_name = "CellResult"
    status: str
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    value: str | None = None
    error: CellError | None = None
    exit_code: int | None = None
    display: list[DisplayOutput] = Field(default_factory=list)
    files_changed: list[str] = Field(default_factory=list)
    duration_ms: int
    cpu_ms: int | None = None
    peak_memory_kb: int | None = None
    checkpoint: CheckpointNote | None = None
    restored: Restore | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class SessionFile(_Answer):
    schema_name = "SessionFile"
    path: str
    size: int
    modified_ms: int


class SessionFiles(_Answer):
    schema_name = "SessionFiles"
    files: list[SessionFile]

    def paths(self) -> list[str]:
        return [f.path for f in self.files]


# --- caches ---------------------------------------------------------------------------------


class CacheStats(_Answer):
    """``GET /v1/cache/stats``: the solution and function caches."""

    schema_name = "CacheStats"
    model: str
    solutions: int
    functions: int
    counters: dict[str, int]


class CacheCleared(_Answer):
    schema_name = "CacheCleared"
    removed: int


# --- the cluster ----------------------------------------------------------------------------


class PoolStatus(_Answer):
    """One language's pool of warm containers on a worker (``size``: the warm ones it keeps,
    ``live``: those existing, idle, busy or starting; ``waiting``: runs waiting for one)."""

    schema_name = "PoolStatus"
    language: str
    size: int
    idle: int
    live: int
    waiting: int


class ModelStatus(_Answer):
    """A worker's model: the calls allowed in flight across the cluster (``limit``), this
    worker's in flight now, and its calls since it started by outcome (``ok``, ...)."""

    schema_name = "ModelStatus"
    provider: str
    model: str
    limit: int
    in_flight: int
    calls: dict[str, int] = Field(default_factory=dict)


class WorkerStatus(_Answer):
    """What a worker last announced from its own metrics (``unable``: why it cannot generate
    code; ``tasks`` and ``sandbox_runs``: counts since it started, by outcome and verdict)."""

    schema_name = "WorkerStatus"
    started_ms: int = 0
    at_ms: int = 0
    unable: str | None = None
    in_flight: int = 0
    sessions: int = 0
    pools: list[PoolStatus] = Field(default_factory=list)
    model: ModelStatus | None = None
    tasks: dict[str, int] = Field(default_factory=dict)
    sandbox_runs: dict[str, int] = Field(default_factory=dict)


class WorkerView(_Answer):
    """A live worker (``generates``: it has a model; ``status``: absent from a worker that
    announces none, e.g. an older one)."""

    schema_name = "WorkerView"
    name: str
    generates: bool
    status: WorkerStatus | None = None


class QueueView(_Answer):
    """One queue of the broker (``ready``: messages waiting for a consumer)."""

    schema_name = "QueueView"
    name: str
    ready: int
    consumers: int


class ClusterView(_Answer):
    """``GET /v1/cluster`` (admin tenants): the live workers and the broker's queues
    (``queues`` empty with ``queues_error`` set when the broker could not be asked)."""

    schema_name = "ClusterView"
    at_ms: int
    workers: list[WorkerView]
    queues: list[QueueView]
    queues_error: str | None = None


# --- lessons --------------------------------------------------------------------------------


class Lesson(_Answer):
    """One lesson: a failure (``signature``, ``case``) and the change that fixed it (``diff``,
    ``analysis``); a line of ``GET /v1/lessons/export`` and of ``POST /v1/lessons/import``.
    ``id`` is content-derived: the same fix of the same failure is one lesson."""

    schema_name = "Lesson"
    id: str
    language: str
    error_kind: str
    signature: str
    case: str
    diff: str
    analysis: str
    model: str
    job: str
    function: str
    source: str
    created_ms: int
    given: bool = False


class LessonUse(_Answer):
    """One use of a lesson: a repair that was shown it, and whether that repair passed."""

    schema_name = "LessonUse"
    lesson: str
    job: str
    function: str
    passed: bool
    at_ms: int


class LessonView(Lesson):
    """``GET /v1/lessons/{id}`` (and an item of ``GET /v1/lessons``): a lesson with where it
    is kept (``shared``: the operators' set) and how it has done (``retrieved``: repairs
    shown it, ``helped``: those that passed, ``uses``: its latest uses, newest first)."""

    schema_name = "LessonView"
    shared: bool
    retrieved: int
    helped: int
    uses: list[LessonUse]

    def as_lesson(self) -> Lesson:
        """The lesson alone (as ``export`` writes it and ``import`` takes it)."""
        return Lesson.model_validate(lesson_json(self))


#: The fields ``LessonView`` adds to ``Lesson`` (left out of what ``import`` sends).
LESSON_VIEW_FIELDS = ("shared", "retrieved", "helped", "uses")


def lesson_json(lesson: Lesson | Mapping[str, Any]) -> dict[str, Any]:
    """A lesson as one line of ``POST /v1/lessons/import`` takes it: a ``Lesson`` (or a
    mapping of its fields, checked as one), without the counts of a ``LessonView``."""
    if not isinstance(lesson, Lesson):
        lesson = Lesson.model_validate(dict(lesson))
    data = lesson.model_dump(mode="json", by_alias=True)
    for name in LESSON_VIEW_FIELDS:
        data.pop(name, None)
    return data


class LessonList(_Answer):
    """``GET /v1/lessons``: newest first; with ``q``, nearest first."""

    schema_name = "LessonList"
    lessons: list[LessonView]


class LessonImport(_Answer):
    """``POST /v1/lessons/import``: what became of the lines (``added``; ``already`` in the
    set; ``too_large`` alone for the set's byte bound; ``evicted``: lessons evicted to make
    room, the least useful first)."""

    schema_name = "LessonImport"
    added: int
    already: int
    too_large: int
    evicted: int


class ErrorBody(_Answer):
    schema_name = "ErrorBody"
    error: str
    code: str
    param: str | None = None
    limit: str | None = None


#: Every model that stands for a schema of ``/openapi.json`` (the drift check's list).
SCHEMA_MODELS: tuple[type[BaseModel], ...] = (
    ExecutionSubmission,
    ExecutionBatchItem,
    ExecutionBatch,
    JobSubmission,
    SessionCreate,
    CellRequest,
    CompileResult,
    ExecutionResult,
    ExecutionView,
    BatchItemView,
    StreamedItemView,
    ExecutionBatchView,
    WebhookAttempt,
    Webhook,
    JobAccepted,
    FunctionProgress,
    JobProgress,
    Param,
    Output,
    FunctionSpec,
    TestCase,
    TestResult,
    Analysis,
    Improvement,
    Quality,
    Tokens,
    Tally,
    JobMetrics,
    Change,
    AgentSettings,
    AgentCall,
    AgentTool,
    Cut,
    *AGENT_STEP_VARIANTS,
    AgentTotals,
    AgentOutcome,
    JobResult,
    *PROGRESS_VARIANTS,
    BatchAccepted,
    BatchJob,
    BatchView,
    ExpiredJob,
    BatchResults,
    JobSummary,
    JobList,
    BatchSummary,
    BatchList,
    ExecutionSummary,
    ExecutionList,
    UsagePeriod,
    Usage,
    LanguageInfo,
    Languages,
    Unrestorable,
    Restore,
    SessionView,
    SessionList,
    CheckpointNote,
    CellError,
    DisplayOutput,
    CellResult,
    SessionFile,
    SessionFiles,
    CacheStats,
    CacheCleared,
    PoolStatus,
    ModelStatus,
    WorkerStatus,
    WorkerView,
    QueueView,
    ClusterView,
    Lesson,
    LessonUse,
    LessonView,
    LessonList,
    LessonImport,
    ErrorBody,
    JobEvent,
)

#: Schemas that are a union of others, and the models the client reads them as.
UNION_SCHEMAS: dict[str, tuple[str, ...]] = {
    "JobView": ("JobResult", "JobProgress"),
    "Outcome": ("ExecutionResult",),  # plus the inline `{"status": "queued"}`
    "BatchResult": ("JobView", "ExpiredJob"),  # JobView read as JobResult or JobProgress
}

#: Enumerations the client lists, by schema name.
ENUM_SCHEMAS: dict[str, tuple[str, ...]] = {
    "Status": EXECUTION_VERDICTS,
    "JobStatus": JOB_STATUSES,
    "ExpiredStatus": ("unknown",),
    "Mode": JOB_MODES,
    "AgentEnd": AGENT_ENDS,
    "MemoryUse": MEMORY_USES,
    "LessonSource": LESSON_SOURCES,
    "UsagePer": USAGE_PERIODS,
}

#: Unions tagged by a field whose every variant has its model here: the schema, its tag and
#: the models (each names its tag value as ``schema_variant``).
TAGGED_UNIONS: dict[str, tuple[str, tuple[type[BaseModel], ...]]] = {
    "Progress": ("event", PROGRESS_VARIANTS),
    "AgentStep": ("kind", AGENT_STEP_VARIANTS),
}
