//! `/v1/lessons`: a tenant's lessons (the memory of repairs, docs/generation.md), and the
//! operators' shared set: listed, searched, read with where each was used, deleted, exported
//! and imported as JSON Lines. A tenant reads its own set and the shared one and changes its
//! own; another tenant's set and changes to the shared one are `coordinator.admin_tenants`'.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use proto::api::{ErrorBody, ErrorCode};
use proto::lesson::{Lesson, LessonImport, LessonList, LessonView};
use serde::Deserialize;
use store::{Added, LessonSet, Lessons};

use crate::Coordinator;
use crate::auth::Tenant;
use crate::error::{ApiError, unavailable};

/// Lessons a listing answers at most.
const MAX_LIMIT: usize = 500;
/// Uses a lesson's answer shows at most.
const USES_SHOWN: usize = 20;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SetParams {
    /// Another tenant's set: only for `coordinator.admin_tenants`.
    #[param(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    tenant: Option<String>,
    /// The operators' shared set (offered to every tenant; changed by admins only).
    shared: Option<bool>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListParams {
    /// Words to search the lessons' text for (signature, case, analysis, diff), BM25-ranked.
    q: Option<String>,
    /// Only lessons of this language.
    #[param(value_type = Option<proto::Language>)]
    language: Option<String>,
    /// At most this many (1–500, default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// As for every lessons route.
    #[param(pattern = r"^[A-Za-z0-9_-]{1,64}$")]
    tenant: Option<String>,
    shared: Option<bool>,
}

/// The set a request names, and whether the caller is an admin.
fn set_of(
    c: &Coordinator,
    caller: &Tenant,
    tenant: Option<&str>,
    shared: bool,
    changing: bool,
) -> Result<LessonSet, ApiError> {
    let admin = c.options.is_admin(caller);
    if shared {
        if tenant.is_some() {
            return Err(ApiError::invalid(
                "tenant",
                "names a tenant's set; `shared` names the operators' set: give one",
            ));
        }
        if changing && !admin {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "the shared lessons are changed by coordinator.admin_tenants only",
            ));
        }
        return Ok(LessonSet::Shared);
    }
    match tenant {
        Some(named) if !crate::tenants::valid_name(named) => Err(ApiError::invalid(
            "tenant",
            "not a tenant name (1 to 64 letters, digits, '-' or '_')",
        )),
        Some(named) if caller.0.as_deref() != Some(named) => {
            if !admin {
                return Err(ApiError::new(
                    ErrorCode::Forbidden,
                    "another tenant's lessons are for coordinator.admin_tenants only",
                ));
            }
            Ok(LessonSet::Tenant(Some(named.to_owned())))
        }
        _ => Ok(LessonSet::Tenant(caller.0.clone())),
    }
}

/// The set a `SetParams` route names (its query read first).
fn named_set(
    c: &Coordinator,
    caller: &Tenant,
    params: Result<Query<SetParams>, QueryRejection>,
    changing: bool,
) -> Result<(LessonSet, bool), ApiError> {
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    let shared = params.shared.unwrap_or(false);
    let set = set_of(c, caller, params.tenant.as_deref(), shared, changing)?;
    Ok((set, shared))
}

fn lessons_store(c: &Coordinator) -> Result<&dyn Lessons, ApiError> {
    c.stores.lessons.as_deref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotKept,
            "this coordinator keeps no lessons (it runs without Redis)",
        )
    })
}

fn view(stored: store::Stored, shared: bool, uses: Vec<proto::lesson::LessonUse>) -> LessonView {
    LessonView {
        lesson: stored.lesson,
        shared,
        retrieved: stored.retrieved,
        helped: stored.helped,
        uses,
    }
}

/// Lessons of a set: newest first, or nearest to `q` first.
#[utoipa::path(
    get,
    path = "/v1/lessons",
    operation_id = "list_lessons",
    tag = "lessons",
    params(ListParams),
    responses(
        (status = 200, description = "The set's lessons, with how often each was shown and helped.", body = LessonList),
        (status = 400, description = "An unknown query parameter.", body = ErrorBody),
        (status = 403, description = "`tenant` names another tenant and the caller is not in `coordinator.admin_tenants`.", body = ErrorBody),
        (status = 422, description = "A parameter out of range, or `tenant` not a tenant name or beside `shared`; the message names it.", body = ErrorBody),
        (status = 429, description = "Over the tenant's request rate; `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or this coordinator keeps no lessons.", body = ErrorBody),
    )
)]
pub(crate) async fn list(
    State(c): State<Coordinator>,
    Extension(caller): Extension<Tenant>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = params.map_err(crate::error::query_rejected)?;
    let shared = params.shared.unwrap_or(false);
    let set = set_of(&c, &caller, params.tenant.as_deref(), shared, false)?;
    let limit = params.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid("limit", "must be 1 to 500"));
    }
    let language = match params.language.as_deref() {
        Some(name) => Some(name.parse::<proto::Language>().map_err(|_| {
            ApiError::new(
                ErrorCode::UnknownLanguage,
                format!("no language {name:?} (GET /v1/languages lists them)"),
            )
            .about("language")
        })?),
        None => None,
    };
    let store = lessons_store(&c)?;
    let snapshot = store.lessons(&set).await.map_err(unavailable)?;
    let of_language: Vec<store::Stored> = snapshot
        .lessons
        .into_iter()
        .filter(|s| language.is_none_or(|l| s.lesson.language == l))
        .collect();
    let chosen: Vec<store::Stored> = match params.q.as_deref().map(str::trim) {
        Some(q) if !q.is_empty() => {
            let ranking = memory::ranking::Ranking::new(
                of_language.into_iter().map(|s| (s, shared)).collect(),
            );
            ranking.search(q, limit).into_iter().cloned().collect()
        }
        _ => of_language.into_iter().take(limit).collect(),
    };
    let lessons = chosen
        .into_iter()
        .map(|s| view(s, shared, Vec::new()))
        .collect();
    Ok(axum::Json(LessonList { lessons }).into_response())
}

/// One lesson, with its latest uses (the jobs and functions whose repairs were shown it).
#[utoipa::path(
    get,
    path = "/v1/lessons/{id}",
    operation_id = "get_lesson",
    tag = "lessons",
    params(("id" = String, Path, description = "The lesson's id."), SetParams),
    responses(
        (status = 200, description = "The lesson; a shared one shows its uses to admins only (they name other tenants' jobs).", body = LessonView),
        (status = 400, description = "An unknown query parameter.", body = ErrorBody),
        (status = 422, description = "`tenant` is not a tenant name, or names a set beside `shared`.", body = ErrorBody),
        (status = 403, description = "`tenant` names another tenant and the caller is not in `coordinator.admin_tenants`.", body = ErrorBody),
        (status = 404, description = "No such lesson in the set.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or this coordinator keeps no lessons.", body = ErrorBody),
    )
)]
pub(crate) async fn fetch(
    State(c): State<Coordinator>,
    Extension(caller): Extension<Tenant>,
    Path(id): Path<String>,
    params: Result<Query<SetParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (set, shared) = named_set(&c, &caller, params, false)?;
    let store = lessons_store(&c)?;
    let Some(stored) = store.lesson(&set, &id).await.map_err(unavailable)? else {
        return Err(no_lesson(&id));
    };
    let uses = if shared && !c.options.is_admin(&caller) {
        Vec::new()
    } else {
        store
            .lesson_uses(&set, &id, USES_SHOWN)
            .await
            .map_err(unavailable)?
    };
    Ok(axum::Json(view(stored, shared, uses)).into_response())
}

fn no_lesson(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no lesson {id} in this set")).about("id")
}

/// Deletes a lesson: later repairs are no longer shown it.
#[utoipa::path(
    delete,
    path = "/v1/lessons/{id}",
    operation_id = "delete_lesson",
    tag = "lessons",
    params(("id" = String, Path, description = "The lesson's id."), SetParams),
    responses(
        (status = 204, description = "Deleted."),
        (status = 400, description = "An unknown query parameter.", body = ErrorBody),
        (status = 422, description = "`tenant` is not a tenant name, or names a set beside `shared`.", body = ErrorBody),
        (status = 403, description = "Another tenant's set, or the shared one, and the caller is not in `coordinator.admin_tenants`.", body = ErrorBody),
        (status = 404, description = "No such lesson in the set.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or this coordinator keeps no lessons.", body = ErrorBody),
    )
)]
pub(crate) async fn delete(
    State(c): State<Coordinator>,
    Extension(caller): Extension<Tenant>,
    Path(id): Path<String>,
    params: Result<Query<SetParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (set, _) = named_set(&c, &caller, params, true)?;
    let store = lessons_store(&c)?;
    if store.remove_lesson(&set, &id).await.map_err(unavailable)? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(no_lesson(&id))
    }
}

/// The set as JSON Lines, one `Lesson` a line (without counts), for `import`.
#[utoipa::path(
    get,
    path = "/v1/lessons/export",
    operation_id = "export_lessons",
    tag = "lessons",
    params(SetParams),
    responses(
        (status = 200, description = "One `Lesson` JSON object a line (the array's items, one per line; not a JSON array), newest first.", content_type = "application/x-ndjson", body = Vec<Lesson>),
        (status = 400, description = "An unknown query parameter.", body = ErrorBody),
        (status = 422, description = "`tenant` is not a tenant name, or names a set beside `shared`.", body = ErrorBody),
        (status = 403, description = "`tenant` names another tenant and the caller is not in `coordinator.admin_tenants`.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or this coordinator keeps no lessons.", body = ErrorBody),
    )
)]
pub(crate) async fn export(
    State(c): State<Coordinator>,
    Extension(caller): Extension<Tenant>,
    params: Result<Query<SetParams>, QueryRejection>,
) -> Result<Response, ApiError> {
    let (set, _) = named_set(&c, &caller, params, false)?;
    let store = lessons_store(&c)?;
    let snapshot = store.lessons(&set).await.map_err(unavailable)?;
    let mut body = String::new();
    for stored in snapshot.lessons {
        body.push_str(&serde_json::to_string(&stored.lesson).expect("a lesson serializes"));
        body.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// Adds the lessons of a JSON Lines body (as `export` writes them) to a set, within its
/// bounds (the least useful evicted). Every line is checked before any is added.
#[utoipa::path(
    post,
    path = "/v1/lessons/import",
    operation_id = "import_lessons",
    tag = "lessons",
    params(SetParams),
    request_body(
        content = Vec<Lesson>,
        content_type = "application/x-ndjson",
        description = "One `Lesson` JSON object a line (the array's items, one per line; not a JSON array), as `export` writes them; at most `memory.max_lessons` lines."
    ),
    responses(
        (status = 200, description = "What became of the lines.", body = LessonImport),
        (status = 400, description = "An unknown query parameter, or a body that is not UTF-8.", body = ErrorBody),
        (status = 403, description = "Another tenant's set, or the shared one, and the caller is not in `coordinator.admin_tenants`.", body = ErrorBody),
        (status = 422, description = "A line that is not a lesson; `param` names it (`line 3`).", body = ErrorBody),
        (status = 503, description = "Redis is unavailable, or this coordinator keeps no lessons.", body = ErrorBody),
    )
)]
pub(crate) async fn import(
    State(c): State<Coordinator>,
    Extension(caller): Extension<Tenant>,
    params: Result<Query<SetParams>, QueryRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (set, _) = named_set(&c, &caller, params, true)?;
    let store = lessons_store(&c)?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::new(ErrorCode::MalformedBody, "the body is not UTF-8"))?;
    let mut lessons: Vec<Lesson> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let field = format!("line {}", n + 1);
        let lesson: Lesson =
            serde_json::from_str(line).map_err(|e| ApiError::invalid(&field, e.to_string()))?;
        let id_ok = (1..=64).contains(&lesson.id.len())
            && lesson
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !id_ok {
            return Err(ApiError::invalid(
                &field,
                "its id is not 1 to 64 letters, digits, '-' or '_'",
            ));
        }
        // The document declares created_ms an int64, as every time in it; a larger one would
        // be kept and then answered as a number no client of that schema can read.
        if lesson.created_ms > i64::MAX as u64 {
            return Err(ApiError::invalid(
                &field,
                "its created_ms is past the largest int64",
            ));
        }
        lessons.push(lesson);
    }
    let bounds = c.memory.bounds();
    if lessons.len() as u64 > bounds.max_count {
        return Err(ApiError::invalid(
            "body",
            format!(
                "{} lessons, more than a set holds (memory.max_lessons {})",
                lessons.len(),
                bounds.max_count
            ),
        ));
    }
    let mut report = LessonImport::default();
    for lesson in &lessons {
        match store
            .add_lesson(&set, lesson, bounds)
            .await
            .map_err(unavailable)?
        {
            Added::Yes { evicted } => {
                report.added += 1;
                report.evicted += evicted;
            }
            Added::Already => report.already += 1,
            Added::TooLarge => report.too_large += 1,
        }
    }
    Ok(axum::Json(report).into_response())
}
