//! The AWS X-Ray daemon's protocol on its port (default 2000): segment documents over UDP
//! ([`receiver`]), and on TCP the two calls X-Ray SDKs make to the daemon for centralized
//! sampling ([`sampling`]): the rules are X-Ray's default rule (the first request each second
//! and 5% of the others) or those of `--xray-sampling-rules`, and each rule's reservoir is
//! split between the SDK instances that report using it, as the X-Ray service splits it;
//! behind several distributors, between those of every distributor ([`share`]).

pub mod receiver;
pub mod sampling;
pub mod share;

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::routing::post;
use clap::Args;

use crate::apis::Api;
use crate::app::{Runtime, Server};
use crate::modules::Module;

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "AWS X-Ray")]
pub struct XrayOptions {
    /// AWS X-Ray daemon port: segment documents over UDP, sampling rules and targets over TCP;
    /// 0 turns it off.
    #[arg(long, env = "WEFT_XRAY_PORT", default_value_t = 2000)]
    pub xray_port: u16,
    /// X-Ray SDKs' local sampling-rules file (JSON, version 1 or 2) that the daemon port's
    /// `/GetSamplingRules` answers with [default: X-Ray's default rule, 1/s and 5%].
    #[arg(long, env = "WEFT_XRAY_SAMPLING_RULES")]
    pub xray_sampling_rules: Option<PathBuf>,
}

impl Api for XrayOptions {
    async fn build(&self, s: &mut Server) -> anyhow::Result<()> {
        if !s.runs(Module::Receivers) || self.xray_port == 0 {
            return Ok(());
        }
        let rules = Arc::new(sampling::SamplingRules::load(self.xray_sampling_rules.as_deref())?);
        let udp = s.bind_udp("xray", self.xray_port, "the X-Ray daemon protocol").await?;
        let tcp = s.bind("xray", self.xray_port, "X-Ray sampling (TCP)").await?;
        if let Some((sock, stats)) = udp {
            tokio::spawn(receiver::serve_udp(s.state.clone(), sock, stats, s.stop_signal()));
        }
        let quotas = Arc::new(sampling::Quotas::default());
        if s.runs(Module::Distributor) {
            // Behind several distributors, a rule's reservoir is split among all their clients.
            let (quotas, kafka, stop) = (quotas.clone(), s.cfg().kafka.clone(), s.stop_signal());
            tokio::spawn(async move {
                if let Err(e) = share::run(quotas, kafka, stop).await {
                    tracing::error!(error = %e, "X-Ray quotas cannot be shared: this distributor splits reservoirs among its own clients");
                }
            });
        }
        let r = Router::new()
            .route("/GetSamplingRules", post(sampling::sampling_rules))
            .route("/SamplingTargets", post(sampling::sampling_targets))
            .layer(axum::Extension(rules))
            .layer(axum::Extension(quotas))
            .fallback(crate::ops::not_found)
            .with_state(s.state.clone());
        s.serve("xray", tcp, r, Runtime::Ingest, None);
        Ok(())
    }
}
