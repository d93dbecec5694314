//! OTLP: direct protobuf encoding of span batches, response decoding and retry rules.

mod decode;
mod encode;
pub mod retry;

pub use self::decode::{DecodeError, PartialSuccess, decode_export_response, decode_grpc_retry_delay};
pub use self::encode::{AnyKeyValue, AnyValue, Encoder, FLAG_HAS_IS_REMOTE, FLAG_IS_REMOTE, OtlpAttribute, span_flags};
