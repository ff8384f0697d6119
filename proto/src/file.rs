//! A file's content as the execution API carries it: UTF-8 text as a JSON string, or any bytes
//! as `{"base64": "..."}` (standard alphabet, padded).

use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};

/// What a base64 content must look like (standard alphabet, padded): the OpenAPI document's
/// pattern, and what [`decode_base64`] takes.
pub const BASE64_PATTERN: &str =
    r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$";

/// Decodes base64 as [`BASE64_PATTERN`] describes it.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    LENIENT
        .decode(text.as_bytes())
        .map_err(|e| format!("not base64: {e}"))
}

/// Standard base64, padded, that also takes a last symbol with bits past the data set (as
/// most encoders never write but JSON Schema's pattern admits).
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The content of a file sent with an execution or returned from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileContent {
    Text(String),
    Bytes(Vec<u8>),
}

impl FileContent {
    /// Text when `bytes` are UTF-8, else bytes: what a returned file comes back as.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        match String::from_utf8(bytes) {
            Ok(text) => Self::Text(text),
            Err(e) => Self::Bytes(e.into_bytes()),
        }
    }

    /// Size in bytes (of the decoded content).
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Text(text) => text.as_bytes(),
            Self::Bytes(bytes) => bytes,
        }
    }

    /// The text, when this is text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text(text) => Some(text),
            Self::Bytes(_) => None,
        }
    }
}

impl From<String> for FileContent {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<&str> for FileContent {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

/// A file's content: a string for UTF-8 text, or `{"base64": "..."}` for any bytes. (The
/// wire form of [`FileContent`], and its schema in the OpenAPI document.)
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(as = FileContent)]
pub enum FileContentWire {
    /// UTF-8 text.
    Text(String),
    /// Any bytes.
    Base64 {
        /// The content, base64 (standard alphabet, padded).
        #[schema(pattern = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$")]
        base64: String,
    },
}

impl Serialize for FileContent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Text(text) => serializer.serialize_str(text),
            Self::Bytes(bytes) => FileContentWire::Base64 {
                base64: STANDARD.encode(bytes),
            }
            .serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for FileContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match FileContentWire::deserialize(deserializer)? {
            FileContentWire::Text(text) => Ok(Self::Text(text)),
            FileContentWire::Base64 { base64 } => decode_base64(&base64)
                .map(Self::Bytes)
                .map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_a_string_and_bytes_are_base64_both_ways() {
        let text = FileContent::from("héllo");
        assert_eq!(serde_json::to_string(&text).unwrap(), r#""héllo""#);
        let bytes = FileContent::from_bytes(vec![0, 159, 146, 150, 255]);
        assert_eq!(bytes, FileContent::Bytes(vec![0, 159, 146, 150, 255]));
        let json = serde_json::to_string(&bytes).unwrap();
        assert_eq!(json, r#"{"base64":"AJ+Slv8="}"#);
        for value in [text, bytes] {
            let json = serde_json::to_vec(&value).unwrap();
            assert_eq!(serde_json::from_slice::<FileContent>(&json).unwrap(), value);
            let packed = rmp_serde::to_vec_named(&value).unwrap();
            assert_eq!(
                rmp_serde::from_slice::<FileContent>(&packed).unwrap(),
                value
            );
        }
        assert_eq!(
            FileContent::from_bytes(b"ok".to_vec()),
            FileContent::from("ok")
        );
        let bad = serde_json::from_str::<FileContent>(r#"{"base64":"%%"}"#).unwrap_err();
        assert!(bad.to_string().contains("not base64"), "{bad}");
        assert!(serde_json::from_str::<FileContent>("3").is_err());
        // Bits past the data in the last symbol are dropped, not refused.
        let loose = serde_json::from_str::<FileContent>(r#"{"base64":"QR=="}"#).unwrap();
        // The schema's pattern is the constant's (an attribute cannot name a constant).
        let schema =
            serde_json::to_value(<FileContentWire as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(
            schema["oneOf"][1]["properties"]["base64"]["pattern"],
            BASE64_PATTERN
        );
        assert_eq!(loose, FileContent::Bytes(b"A".to_vec()));
    }
}
