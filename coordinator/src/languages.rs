//! `GET /v1/languages`: every language the sandbox runs, from `proto::Language`'s specs and
//! the workers' image names.

use axum::Json;
use axum::extract::State;
use proto::Language;
use proto::api::{ErrorBody, LanguageInfo, Languages};

use crate::Coordinator;

/// Every language: its names, version, image, and the program + test form.
#[utoipa::path(
    get,
    path = "/v1/languages",
    operation_id = "list_languages",
    tag = "executions",
    responses(
        (status = 200, description = "Every language the sandbox has an image for.", body = Languages),
        (status = 429, description = "Over the tenant's request rate (`coordinator.tenants.<name>.requests_per_second`); `Retry-After` says when to retry.", body = ErrorBody),
        (status = 503, description = "Redis is unavailable: the tenant's request rate cannot be metered.", body = ErrorBody),
    )
)]
pub(crate) async fn languages(State(c): State<Coordinator>) -> Json<Languages> {
    Json(Languages {
        languages: Language::ALL
            .iter()
            .map(|language| info(*language, c.image(*language)))
            .collect(),
    })
}

fn info(language: Language, image: String) -> LanguageInfo {
    let spec = language.spec();
    LanguageInfo {
        name: spec.name.into(),
        aliases: spec.aliases.iter().map(|a| (*a).to_owned()).collect(),
        sandbox_fusion: spec.sandbox_fusion.map(str::to_owned),
        version: spec.version.into(),
        image,
        compiled: spec.compiled,
        generation: spec.generation,
        main_file: spec.main_file.into(),
        test_file: spec.test_file.into(),
        test_form: spec.test_form.into(),
        libraries: spec.libraries.iter().map(|l| (*l).to_owned()).collect(),
    }
}
