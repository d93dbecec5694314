//! UDP receivers (the Jaeger agent's ports, the X-Ray daemon's): one datagram, one payload,
//! converted once and pushed like an OTLP request.
//!
//! UDP carries no acknowledgement: a datagram is accepted or dropped, and every drop is counted
//! in `/metrics` (`weft_udp_datagrams_refused_total{port,reason}`) with reasons `parse` (not a
//! payload of the port's protocol), `overloaded` (more datagrams being made durable than
//! [`UDP_IN_FLIGHT`]) and `refused` (the ingester refused the spans: limits, back-pressure).
//! Datagrams go to the tenant `--udp-tenant`, since UDP has no headers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use weft_ingest::metrics::RefuseReason;
use weft_translate::TranslateError;

use crate::AppState;

/// Datagrams being pushed at once per UDP port; more are dropped (and counted), since UDP
/// cannot push back. Pushes in flight share the WAL's group commit.
pub const UDP_IN_FLIGHT: usize = 256;

/// Counters of one UDP port.
#[derive(Default)]
pub struct UdpStats {
    pub received: AtomicU64,
    pub spans: AtomicU64,
    pub refused_parse: AtomicU64,
    pub refused_overloaded: AtomicU64,
    pub refused_refused: AtomicU64,
}

/// Serves one UDP port until `stop` fires: `decode` turns a datagram into an OTLP request and
/// its span count.
pub async fn serve(
    st: Arc<AppState>,
    socket: tokio::net::UdpSocket,
    decode: impl Fn(&[u8]) -> Result<(Vec<u8>, usize), TranslateError>,
    stats: Arc<UdpStats>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(UDP_IN_FLIGHT));
    let tenant: Arc<str> = st.cfg.udp_tenant.as_str().into();
    // The largest UDP payload is 65,507 bytes; a bigger buffer never truncates one.
    let mut buf = vec![0u8; 65_536];
    loop {
        let n = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok((n, _)) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "UDP receive failed");
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        stats.received.fetch_add(1, Ordering::Relaxed);
        let (otlp, count) = match decode(&buf[..n]) {
            Ok(r) => r,
            Err(e) => {
                stats.refused_parse.fetch_add(1, Ordering::Relaxed);
                st.receiver().refused(&tenant, RefuseReason::Invalid);
                tracing::debug!(error = %e, "UDP datagram refused");
                continue;
            }
        };
        if count == 0 {
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            stats.refused_overloaded.fetch_add(1, Ordering::Relaxed);
            st.receiver().refused(&tenant, RefuseReason::Overloaded);
            continue;
        };
        let (st2, stats2, tenant2) = (st.clone(), stats.clone(), tenant.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match st2.receiver().push(&tenant2, Bytes::from(otlp), None).await {
                Ok(r)
                    if r.partial_success
                        .as_ref()
                        .is_some_and(|p| p.rejected_spans as usize >= count) =>
                {
                    stats2.refused_refused.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {
                    stats2.spans.fetch_add(count as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    stats2.refused_refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}
