//! A Jaeger sampling strategy (`jaeger.api_v2.SamplingStrategyResponse`) and its two shapes:
//! the JSON the agent's HTTP port answers (`/sampling`) and the protobuf of
//! `SamplingManager/GetSamplingStrategy`.

use prost::Message;

/// The sampler a service's spans use where no per-operation entry applies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Base {
    /// `TraceIdRatioBased(rate)`.
    Probabilistic(f64),
    /// At most this many new traces a second.
    RateLimiting(u32),
}

/// Per-operation probabilities, each with a guaranteed lower bound of traces a second.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PerOperation {
    /// For operations not listed.
    pub default_probability: f64,
    /// Every operation is sampled at least this often (traces a second).
    pub lower_bound_tps: f64,
    /// Jaeger's optional cap (0: none); kept for clients that read it.
    pub upper_bound_tps: f64,
    pub operations: Vec<(String, f64)>,
}

/// What one service is told to sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Strategy {
    pub base: Base,
    pub per_operation: Option<PerOperation>,
}

impl Strategy {
    pub fn probabilistic(rate: f64) -> Strategy {
        Strategy {
            base: Base::Probabilistic(rate),
            per_operation: None,
        }
    }

    /// The JSON form of `SamplingStrategyResponse` with camelCase members and the strategy
    /// type as its name, which Jaeger's agent answers on `/sampling` and every remote sampler
    /// reads (the OpenTelemetry ones parse it as protobuf JSON; older Jaeger clients compare
    /// the name). Every member is written, zeros included.
    pub fn to_json(&self) -> String {
        use serde_json::{Value, json};
        let mut v = match self.base {
            Base::Probabilistic(rate) => json!({
                "strategyType": "PROBABILISTIC",
                "probabilisticSampling": {"samplingRate": rate},
            }),
            Base::RateLimiting(n) => json!({
                "strategyType": "RATE_LIMITING",
                "rateLimitingSampling": {"maxTracesPerSecond": n},
            }),
        };
        if let Some(ops) = &self.per_operation {
            let list: Vec<Value> = ops
                .operations
                .iter()
                .map(|(name, rate)| json!({"operation": name, "probabilisticSampling": {"samplingRate": rate}}))
                .collect();
            v["operationSampling"] = json!({
                "defaultSamplingProbability": ops.default_probability,
                "defaultLowerBoundTracesPerSecond": ops.lower_bound_tps,
                "perOperationStrategies": list,
                "defaultUpperBoundTracesPerSecond": ops.upper_bound_tps,
            });
        }
        v.to_string()
    }

    /// The encoded `jaeger.api_v2.SamplingStrategyResponse`.
    pub fn to_proto(&self) -> Vec<u8> {
        let mut m = pb::SamplingStrategyResponse::default();
        match self.base {
            Base::Probabilistic(rate) => {
                m.strategy_type = pb::PROBABILISTIC;
                m.probabilistic_sampling = Some(pb::ProbabilisticSamplingStrategy { sampling_rate: rate });
            }
            Base::RateLimiting(n) => {
                m.strategy_type = pb::RATE_LIMITING;
                m.rate_limiting_sampling = Some(pb::RateLimitingSamplingStrategy {
                    max_traces_per_second: n.min(i32::MAX as u32) as i32,
                });
            }
        }
        if let Some(ops) = &self.per_operation {
            m.operation_sampling = Some(pb::PerOperationSamplingStrategies {
                default_sampling_probability: ops.default_probability,
                default_lower_bound_traces_per_second: ops.lower_bound_tps,
                per_operation_strategies: ops
                    .operations
                    .iter()
                    .map(|(name, rate)| pb::OperationSamplingStrategy {
                        operation: name.clone(),
                        probabilistic_sampling: Some(pb::ProbabilisticSamplingStrategy { sampling_rate: *rate }),
                    })
                    .collect(),
                default_upper_bound_traces_per_second: ops.upper_bound_tps,
            });
        }
        m.encode_to_vec()
    }
}

/// The service name of a `SamplingStrategyParameters` message (`jaeger.api_v2`).
pub fn decode_parameters(buf: &[u8]) -> Result<String, String> {
    pb::SamplingStrategyParameters::decode(buf)
        .map(|p| p.service_name)
        .map_err(|e| format!("invalid SamplingStrategyParameters: {e}"))
}

/// `jaeger.api_v2` sampling messages (`sampling.proto` of jaeger-idl), by field number.
pub mod pb {
    pub const PROBABILISTIC: i32 = 0;
    pub const RATE_LIMITING: i32 = 1;

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SamplingStrategyParameters {
        #[prost(string, tag = "1")]
        pub service_name: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProbabilisticSamplingStrategy {
        #[prost(double, tag = "1")]
        pub sampling_rate: f64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimitingSamplingStrategy {
        #[prost(int32, tag = "1")]
        pub max_traces_per_second: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OperationSamplingStrategy {
        #[prost(string, tag = "1")]
        pub operation: String,
        #[prost(message, optional, tag = "2")]
        pub probabilistic_sampling: Option<ProbabilisticSamplingStrategy>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PerOperationSamplingStrategies {
        #[prost(double, tag = "1")]
        pub default_sampling_probability: f64,
        #[prost(double, tag = "2")]
        pub default_lower_bound_traces_per_second: f64,
        #[prost(message, repeated, tag = "3")]
        pub per_operation_strategies: Vec<OperationSamplingStrategy>,
        #[prost(double, tag = "4")]
        pub default_upper_bound_traces_per_second: f64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SamplingStrategyResponse {
        #[prost(int32, tag = "1")]
        pub strategy_type: i32,
        #[prost(message, optional, tag = "2")]
        pub probabilistic_sampling: Option<ProbabilisticSamplingStrategy>,
        #[prost(message, optional, tag = "3")]
        pub rate_limiting_sampling: Option<RateLimitingSamplingStrategy>,
        #[prost(message, optional, tag = "4")]
        pub operation_sampling: Option<PerOperationSamplingStrategies>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adaptive() -> Strategy {
        Strategy {
            base: Base::Probabilistic(0.001),
            per_operation: Some(PerOperation {
                default_probability: 0.001,
                lower_bound_tps: 1.0 / 60.0,
                upper_bound_tps: 0.0,
                operations: vec![("GET /".into(), 0.5), ("POST /pay".into(), 1.0)],
            }),
        }
    }

    #[test]
    fn json_names_the_type_and_writes_every_member() {
        let v: serde_json::Value = serde_json::from_str(&adaptive().to_json()).unwrap();
        assert_eq!(v["strategyType"], "PROBABILISTIC");
        assert_eq!(v["probabilisticSampling"]["samplingRate"], 0.001);
        let ops = &v["operationSampling"];
        assert_eq!(ops["defaultSamplingProbability"], 0.001);
        assert_eq!(ops["defaultUpperBoundTracesPerSecond"], 0.0);
        assert_eq!(ops["perOperationStrategies"][1]["operation"], "POST /pay");
        assert_eq!(
            ops["perOperationStrategies"][1]["probabilisticSampling"]["samplingRate"],
            1.0
        );
        let r: serde_json::Value = serde_json::from_str(
            &Strategy {
                base: Base::RateLimiting(7),
                per_operation: None,
            }
            .to_json(),
        )
        .unwrap();
        assert_eq!(r["strategyType"], "RATE_LIMITING");
        assert_eq!(r["rateLimitingSampling"]["maxTracesPerSecond"], 7);
        assert!(r.get("operationSampling").is_none());
    }

    #[test]
    fn protobuf_carries_the_same_strategy() {
        let m = pb::SamplingStrategyResponse::decode(&adaptive().to_proto()[..]).unwrap();
        assert_eq!(m.strategy_type, pb::PROBABILISTIC);
        let ops = m.operation_sampling.unwrap();
        assert_eq!(ops.default_lower_bound_traces_per_second, 1.0 / 60.0);
        assert_eq!(ops.per_operation_strategies[0].operation, "GET /");
        assert_eq!(
            ops.per_operation_strategies[0]
                .probabilistic_sampling
                .as_ref()
                .unwrap()
                .sampling_rate,
            0.5
        );
        // Field numbers, by hand: strategyType is field 1 (varint), probabilisticSampling 2.
        let bytes = Strategy {
            base: Base::RateLimiting(5),
            per_operation: None,
        }
        .to_proto();
        assert_eq!(bytes, vec![0x08, 0x01, 0x1a, 0x02, 0x08, 0x05]);
        assert_eq!(decode_parameters(&[0x0a, 0x03, b'a', b'p', b'i']).unwrap(), "api");
        assert!(decode_parameters(&[0x0a, 0x09]).is_err());
    }
}
