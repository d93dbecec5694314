//! `jaeger.api_v2.SamplingManager/GetSamplingStrategy`, unary, on the sampling gRPC port.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tonic::Status;
use weft_otlp::grpc::RawCodec;

use crate::app::AppState;

const PATH: &str = "/jaeger.api_v2.SamplingManager/GetSamplingStrategy";

type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send>>;

#[derive(Clone)]
pub struct SamplingManager {
    state: Arc<AppState>,
}

impl SamplingManager {
    pub fn new(state: Arc<AppState>) -> Self {
        SamplingManager { state }
    }
}

struct Get(Arc<AppState>);

impl tonic::server::UnaryService<Bytes> for Get {
    type Response = Bytes;
    type Future = BoxFut<Result<tonic::Response<Bytes>, Status>>;

    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        let state = self.0.clone();
        Box::pin(async move {
            let tenant = state
                .receiver()
                .tenant(req.metadata().as_ref())
                .map_err(|r| r.grpc_status())?;
            let service =
                weft_sampling::strategy::decode_parameters(req.get_ref()).map_err(Status::invalid_argument)?;
            if service.is_empty() {
                return Err(Status::invalid_argument("serviceName must be provided"));
            }
            let sampling = state
                .sampling
                .get()
                .ok_or_else(|| Status::unavailable("sampling is not running here"))?;
            Ok(tonic::Response::new(Bytes::from(
                sampling.strategy(&tenant, &service).to_proto(),
            )))
        })
    }
}

impl tower::Service<http::Request<hyper::body::Incoming>> for SamplingManager {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFut<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<hyper::body::Incoming>) -> Self::Future {
        let state = self.state.clone();
        Box::pin(async move {
            if req.uri().path() != PATH {
                return Ok(Status::unimplemented(format!("unknown method {}", req.uri().path())).into_http());
            }
            let mut grpc =
                tonic::server::Grpc::new(RawCodec).apply_max_message_size_config(Some(64 << 10), Some(4 << 20));
            Ok(grpc.unary(Get(state), req.map(tonic::body::Body::new)).await)
        })
    }
}
