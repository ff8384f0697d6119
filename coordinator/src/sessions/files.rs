//! A session's files: a path checked as the session takes it, then read or written by the
//! session's worker.

use axum::body::Bytes;
use proto::api::ErrorCode;
use proto::api::sessions::SessionFiles;

use super::host::{HostCall, Reached};
use crate::auth::Tenant;
use crate::error::ApiError;
use crate::{Coordinator, now_ms};

impl Coordinator {
    /// The regular files below session `id`'s working directory. `GET /v1/sessions/{id}/files`.
    pub(super) async fn list_session_files(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<SessionFiles, ApiError> {
        let record = self.live_session(tenant, id).await?;
        let call = HostCall::on_files(reqwest::Method::GET, "/files".into(), None);
        let Reached {
            record, response, ..
        } = self.on_host(record, &call).await?;
        let files = response
            .json()
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, format!("the worker's answer: {e}")))?;
        let _ = self
            .sessions()?
            .touch_session(&record.id, now_ms(), false, 0)
            .await;
        Ok(SessionFiles { files })
    }

    /// The bytes of file `path` (relative to the working directory) of session `id` of
    /// `tenant`. `GET /v1/sessions/{id}/files/{path}` and SandboxFusion's `/run_jupyter`.
    pub(crate) async fn get_session_file(
        &self,
        tenant: &Tenant,
        id: &str,
        path: &str,
    ) -> Result<Bytes, ApiError> {
        check_path(path)?;
        let record = self.live_session(tenant, id).await?;
        // A name longer than a file system allows names no file: not found, as any other
        // missing file (asking the kernel would only get its "name too long").
        if path.split('/').any(|name| name.len() > MAX_NAME_BYTES) {
            return Err(crate::error::not_found(format!(
                "no file {path} in the session (a name of it is over {MAX_NAME_BYTES} bytes)"
            ))
            .about("path"));
        }
        let call = HostCall::on_files(
            reqwest::Method::GET,
            format!("/files/{}", encode_path(path)),
            None,
        );
        let Reached {
            record, response, ..
        } = self
            .on_host(record, &call)
            .await
            .map_err(|e| e.about("path"))?;
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ApiError::new(ErrorCode::Internal, format!("the worker's answer: {e}")))?;
        let _ = self
            .sessions()?
            .touch_session(&record.id, now_ms(), false, 0)
            .await;
        Ok(bytes)
    }

    /// Writes `bytes` to file `path` (relative to the working directory, folders made as
    /// needed) of session `id` of `tenant`. `PUT /v1/sessions/{id}/files/{path}` and
    /// SandboxFusion's `/run_jupyter`.
    pub(crate) async fn put_session_file(
        &self,
        tenant: &Tenant,
        id: &str,
        path: &str,
        bytes: Bytes,
    ) -> Result<(), ApiError> {
        check_path(path)?;
        let record = self.live_session(tenant, id).await?;
        let call = HostCall::on_files(
            reqwest::Method::PUT,
            format!("/files/{}", encode_path(path)),
            Some(bytes),
        );
        let Reached { record, .. } = self
            .on_host(record, &call)
            .await
            .map_err(|e| e.about("path"))?;
        let _ = self
            .sessions()?
            .touch_session(&record.id, now_ms(), false, 0)
            .await;
        Ok(())
    }
}

/// The longest file or folder name a session's file system takes (Linux's `NAME_MAX`).
const MAX_NAME_BYTES: usize = 255;

/// A file's path as a session takes it: relative to its working directory, without `.`,
/// `..` or empty segments.
pub(crate) fn check_path(path: &str) -> Result<(), ApiError> {
    let bad = path.is_empty()
        || path.len() > 1024
        || path.contains('\0')
        || path
            .split('/')
            .any(|segment| segment.is_empty() || segment == "." || segment == "..");
    if bad {
        return Err(ApiError::invalid(
            "path",
            "must be a relative path below the working directory, without `.`, `..` or empty segments (at most 1024 bytes)",
        ));
    }
    Ok(())
}

/// A relative path as one URL path of segments, each percent-encoded.
fn encode_path(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            segment
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_leaving_the_working_directory_is_refused_before_it_is_sent() {
        for bad in [
            "../etc/passwd",
            "a/../../b",
            "/etc/passwd",
            "a//b",
            "./a",
            "",
            "a\0b",
        ] {
            assert_eq!(
                check_path(bad).unwrap_err().body().param.as_deref(),
                Some("path"),
                "{bad:?}"
            );
        }
        for good in ["a.txt", "data/blob.bin", "..hidden", "a..b/c"] {
            assert!(check_path(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn paths_are_sent_segment_by_segment_and_escaped() {
        assert_eq!(encode_path("a/b c.txt"), "a/b%20c.txt");
        assert_eq!(encode_path("..%2F"), "..%252F");
    }
}
