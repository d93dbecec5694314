//! The X-Ray daemon's UDP side: segment documents ([`weft_translate::xray`]), counted as
//! every UDP port is ([`crate::receivers::udp`]).

use std::sync::Arc;

use crate::app::AppState;

/// Serves the UDP port until `stop` fires.
pub async fn serve_udp(
    st: Arc<AppState>,
    socket: tokio::net::UdpSocket,
    stats: Arc<crate::receivers::udp::UdpStats>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let decode = |d: &[u8]| {
        let doc = weft_translate::xray::parse(weft_translate::xray::split_datagram(d)?)?;
        doc.to_otlp()
    };
    crate::receivers::udp::serve(st, socket, decode, stats, stop).await;
}
