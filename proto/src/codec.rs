//! The one MessagePack encoding of everything that crosses a process through RabbitMQ or
//! Redis: named fields (`rmp_serde::to_vec_named`), so a field added by a newer process is
//! skipped by an older one and a reordered struct still decodes.

use serde::Serialize;
use serde::de::DeserializeOwned;

pub type DecodeError = rmp_serde::decode::Error;

/// Encodes `value` with named fields.
///
/// # Panics
/// Only for a type that cannot be serialized at all (a map with non-string keys is fine in
/// MessagePack): every type of this crate serializes.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("the contract types always serialize")
}

pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    rmp_serde::from_slice(bytes)
}
