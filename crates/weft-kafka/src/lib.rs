//! A small Kafka client, written for weft's scale-out write path (ADR 0008).
//!
//! It does what distributors and block builders need and nothing else:
//! - [`Producer`]: an idempotent producer (`InitProducerId`, per-partition sequence numbers,
//!   `acks=all`). A send takes pre-marshaled values as slices and writes each partition's
//!   records as one batch, all partitions led by one broker in one `Produce` request. Values
//!   are copied once, into the request; nothing is decoded or re-encoded.
//! - [`Client`]: metadata, `Fetch`, `ListOffsets`, `CreateTopics`, and committed offsets of a
//!   consumer group (`FindCoordinator`, `OffsetCommit`, `OffsetFetch`) for static partition
//!   assignment, where the group has no members and offsets are simply stored.
//!
//! Connections can be TLS (system roots or a CA bundle, mTLS) and authenticated with SASL
//! `PLAIN`, `SCRAM-SHA-256/512` or `OAUTHBEARER` ([`Security`], security.rs).
//!
//! Every request uses a fixed, non-flexible protocol version that brokers from 2.1 through 4.x
//! serve; [`Client::connect`] checks them with `ApiVersions` and names any the broker lacks.
//! Connections are pipelined (conn.rs). Record batches are magic 2 (batch.rs). The records
//! weft itself writes (key, format header, partition of a trace) are [`record`]'s.

mod batch;
mod client;
mod conn;
mod producer;
pub mod record;
mod security;
mod wire;

#[cfg(test)]
mod broker_tests;

pub use batch::{
    Compression, FetchedRecord, ProducerStamp, ReadBatch, Record, RecordBatches, read_batches, write_batch,
};
pub use client::{Client, ClientConfig, Fetched, OffsetAt};
pub use producer::{PartitionRecords, Producer, ProducerStats};
pub use security::{Sasl, Secret, Security, Tls, TlsOptions, TokenSource};

/// What went wrong talking to Kafka.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Connecting, reading or writing failed, or a broker did not answer in time.
    #[error("{0}")]
    Io(String),
    /// A broker answered with something this client cannot read.
    #[error("Kafka protocol: {0}")]
    Protocol(String),
    /// A broker answered with an error code.
    #[error("Kafka {name} ({code}) {context}")]
    Broker {
        code: i16,
        name: &'static str,
        context: String,
    },
    /// The request cannot succeed as configured (missing topic, unsupported broker).
    #[error("{0}")]
    Config(String),
    /// TLS or SASL failed: an untrusted or misnamed certificate, a refused mechanism, wrong
    /// credentials, an expired token. Retrying cannot help.
    #[error("{0}")]
    Security(String),
}

impl Error {
    pub(crate) fn broker(code: i16, context: impl Into<String>) -> Error {
        Error::Broker {
            code,
            name: error_name(code),
            context: context.into(),
        }
    }

    /// Whether trying again (after refreshing metadata) may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Io(_) => true,
            Error::Broker { code, .. } => retriable_code(*code),
            Error::Protocol(_) | Error::Config(_) | Error::Security(_) => false,
        }
    }

    /// The broker's error code, if this is a broker error.
    pub fn code(&self) -> Option<i16> {
        match self {
            Error::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }
}

pub(crate) fn retriable_code(code: i16) -> bool {
    matches!(
        code,
        3 | 5 | 6 | 7 | 13 | 14 | 15 | 16 | 19 | 20 | 45 | 56 | 74 | 75 | 89
    )
}

/// Names of the error codes this client meets (Kafka's `Errors` enum).
pub fn error_name(code: i16) -> &'static str {
    match code {
        -1 => "UNKNOWN_SERVER_ERROR",
        0 => "NONE",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        4 => "INVALID_FETCH_SIZE",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        10 => "MESSAGE_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        14 => "COORDINATOR_LOAD_IN_PROGRESS",
        15 => "COORDINATOR_NOT_AVAILABLE",
        16 => "NOT_COORDINATOR",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        22 => "ILLEGAL_GENERATION",
        25 => "UNKNOWN_MEMBER_ID",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        30 => "GROUP_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        33 => "UNSUPPORTED_SASL_MECHANISM",
        34 => "ILLEGAL_SASL_STATE",
        35 => "UNSUPPORTED_VERSION",
        36 => "TOPIC_ALREADY_EXISTS",
        37 => "INVALID_PARTITIONS",
        38 => "INVALID_REPLICATION_FACTOR",
        40 => "INVALID_CONFIG",
        42 => "INVALID_REQUEST",
        45 => "OUT_OF_ORDER_SEQUENCE_NUMBER",
        46 => "DUPLICATE_SEQUENCE_NUMBER",
        47 => "INVALID_PRODUCER_EPOCH",
        56 => "KAFKA_STORAGE_ERROR",
        58 => "SASL_AUTHENTICATION_FAILED",
        59 => "UNKNOWN_PRODUCER_ID",
        74 => "FENCED_LEADER_EPOCH",
        75 => "UNKNOWN_LEADER_EPOCH",
        87 => "INVALID_RECORD",
        89 => "THROTTLING_QUOTA_EXCEEDED",
        _ => "error",
    }
}
