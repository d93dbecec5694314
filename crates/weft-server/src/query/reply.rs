//! Replies every query API shares: trace IDs, reads that failed (503 when storage is
//! unreachable), answers that skipped damaged blocks, and spans as shown outside Zipkin.

use axum::http::{StatusCode, header};
use axum::response::Response;

/// Parses a trace ID the way Tempo does: 1 to 32 hex digits, left-padded with zeros.
pub fn parse_trace_id(s: &str) -> Result<[u8; 16], String> {
    let s = s.trim();
    if s.is_empty() || s.len() > 32 {
        return Err(format!("invalid trace id {s:?}: expected 1 to 32 hex characters"));
    }
    if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("invalid trace id {s:?}: not hexadecimal"));
    }
    let padded = format!("{s:0>32}");
    let mut id = [0u8; 16];
    hex::decode_to_slice(&padded, &mut id).map_err(|e| format!("invalid trace id {s:?}: {e}"))?;
    Ok(id)
}

/// skipped some, so the answer may be missing spans.
pub const PARTIAL_HEADER: &str = "x-weft-partial-damaged-blocks";

/// Marks a reply partial ([`PARTIAL_HEADER`]) when `damaged_blocks` were left out.
fn mark_partial(mut r: Response, damaged_blocks: u64) -> Response {
    if damaged_blocks > 0 {
        r.headers_mut().insert(PARTIAL_HEADER, damaged_blocks.into());
    }
    r
}

/// Marks a reply partial for what `stats` says a scan left out: damaged blocks
/// ([`PARTIAL_HEADER`]) and live stores that did not answer
/// ([`super::LIVE_STORES_PARTIAL_HEADER`]).
pub(crate) fn mark_scanned(r: Response, stats: &weft_querier::scan::ScanStats) -> Response {
    let mut r = mark_partial(r, stats.damaged_blocks);
    if stats.unanswered_live_stores > 0 {
        r.headers_mut()
            .insert(super::LIVE_STORES_PARTIAL_HEADER, stats.unanswered_live_stores.into());
    }
    r
}

/// Seconds a client is asked to wait before retrying a read that storage could not serve.
pub const RETRY_AFTER_SECS: u64 = 5;

/// The reply to a read that failed: 503 with `Retry-After` when storage could not be reached
/// (the same query may succeed later; no block is blamed), 500 for anything else. `render`
/// builds the reply in the API's own error shape from the status and the message.
pub(crate) fn read_failed(
    e: &weft_querier::QueryError,
    what: &str,
    render: impl FnOnce(StatusCode, String) -> Response,
) -> Response {
    if e.is_transient() {
        tracing::warn!(error = %e, "{what} failed: storage unavailable");
        let mut r = render(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{what} failed: storage is unavailable, try again later: {e}"),
        );
        r.headers_mut().insert(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
        r
    } else {
        tracing::error!(error = %e, "{what} failed");
        render(StatusCode::INTERNAL_SERVER_ERROR, format!("{what} failed: {e}"))
    }
}

/// The message of an answer that skipped `n` damaged blocks.
pub fn damaged_message(n: u64) -> String {
    format!(
        "{n} damaged block{} skipped: the answer may be missing spans (the blocks are quarantined; see weft_block_quarantined in /metrics)",
        if n == 1 { " was" } else { "s were" }
    )
}

/// The message of an answer that `n` live stores did not answer for.
pub fn live_stores_message(n: u64) -> String {
    format!(
        "{n} live store{} did not answer: spans not yet in a block may be missing",
        if n == 1 { "" } else { "s" }
    )
}

/// What a scan left out, as one message, or `None` when it read everything: the text of
/// Tempo's `PARTIAL` status (`message`), beside the `x-weft-partial-*` headers.
pub(crate) fn partial_message(stats: &weft_querier::scan::ScanStats) -> Option<String> {
    let mut parts = Vec::new();
    if stats.damaged_blocks > 0 {
        parts.push(damaged_message(stats.damaged_blocks));
    }
    if stats.unanswered_live_stores > 0 {
        parts.push(live_stores_message(stats.unanswered_live_stores));
    }
    if stats.truncated_traces > 0 {
        parts.push(format!(
            "{} trace{} larger than the read cap were evaluated on their earliest spans only",
            stats.truncated_traces,
            if stats.truncated_traces == 1 { "" } else { "s" }
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// [`partial_message`] of a trace read.
pub(crate) fn trace_partial_message(found: &weft_querier::FoundTrace) -> Option<String> {
    partial_message(&found.stats())
}

/// Spans as every API but Zipkin's shows them, in place:
/// - `zipkin.original` taken out: weft's note of what an OpenTelemetry Zipkin exporter's span
///   said that OTLP cannot hold, which only the Zipkin API reads back (spec/formats/zipkin.md);
/// - the children of a Zipkin shared server span placed under it ([`reparent_shared_children`]).
pub(crate) fn hide_zipkin_original(rows: &mut [weft_block::row::SpanRow]) {
    for r in rows.iter_mut() {
        if let Some(a) = weft_translate::zipkin::without_original(&r.attributes) {
            r.attributes = a.into();
        }
    }
    reparent_shared_children(rows);
}

/// The (shared ID, server span's own ID) of a Zipkin shared server span: weft gave it its own ID,
/// derived from the ID it shared with its client span, which is its parent
/// ([`weft_translate::zipkin::shared_span_id`]).
fn shared_server(r: &weft_block::row::SpanRow) -> Option<([u8; 8], [u8; 8])> {
    (r.kind == 2
        && r.parent_span_id != [0; 8]
        && r.span_id == weft_translate::zipkin::shared_span_id(&r.parent_span_id))
    .then_some((r.parent_span_id, r.span_id))
}

/// Spans that name a shared span ID as their parent hang under the server side of it, as
/// Jaeger's and Tempo's span-ID de-duplication places them: the server's spans were children
/// of the span the server joined. The client span and the server span keep their parents.
pub(crate) fn reparent_shared_children(rows: &mut [weft_block::row::SpanRow]) {
    let moved: std::collections::HashMap<[u8; 8], [u8; 8]> = rows.iter().filter_map(shared_server).collect();
    if moved.is_empty() {
        return;
    }
    for r in rows.iter_mut() {
        if let Some(server) = moved.get(&r.parent_span_id)
            && r.span_id != *server
        {
            r.parent_span_id = *server;
        }
    }
}

/// Borrowed spans as every API but Zipkin's shows them ([`hide_zipkin_original`]); copied
/// only when one needs a change, as nearly none do.
pub(crate) fn shown(rows: &[weft_block::row::SpanRow]) -> std::borrow::Cow<'_, [weft_block::row::SpanRow]> {
    if !rows
        .iter()
        .any(|r| weft_translate::zipkin::may_have_original(&r.attributes) || shared_server(r).is_some())
    {
        return std::borrow::Cow::Borrowed(rows);
    }
    let mut out = rows.to_vec();
    hide_zipkin_original(&mut out);
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_ids_parse_like_tempo() {
        assert_eq!(parse_trace_id("1").unwrap()[15], 1);
        assert_eq!(parse_trace_id("ABCDEF0123456789abcdef0123456789").unwrap()[0], 0xab);
        assert!(parse_trace_id("").is_err());
        assert!(parse_trace_id("xyz").is_err());
        assert!(parse_trace_id(&"a".repeat(33)).is_err());
        assert_eq!(parse_trace_id("0102").unwrap()[14..], [1, 2]);
    }

    #[test]
    fn children_of_a_shared_span_hang_under_its_server_side() {
        use weft_block::row::SpanRow;
        let shared = [7u8; 8];
        let server_id = weft_translate::zipkin::shared_span_id(&shared);
        let span = |id: [u8; 8], parent: [u8; 8], kind: u8| SpanRow {
            span_id: id,
            parent_span_id: parent,
            kind,
            ..Default::default()
        };
        let rows = vec![
            span(shared, [1; 8], 3),    // the client
            span(server_id, shared, 2), // the server that joined its ID
            span([9; 8], shared, 4),    // the server's child, naming the shared ID
            span([5; 8], [1; 8], 1),    // unrelated
        ];
        let shown = shown(&rows);
        let parents: Vec<[u8; 8]> = shown.iter().map(|r| r.parent_span_id).collect();
        assert_eq!(parents, vec![[1; 8], shared, server_id, [1; 8]]);
        // Nothing shared: nothing copied.
        assert!(matches!(super::shown(&rows[3..]), std::borrow::Cow::Borrowed(_)));
        // A SERVER span whose ID is not derived from its parent's is not a shared one.
        let plain = vec![span([3; 8], shared, 2), span([9; 8], shared, 4)];
        assert!(matches!(super::shown(&plain), std::borrow::Cow::Borrowed(_)));
    }
}

/// Text sent per chunk of a streamed reply ([`streamed`]), and chunks buffered ahead of a
/// slow client.
const CHUNK_BYTES: usize = 64 << 10;
const CHUNKS_AHEAD: usize = 4;

/// How long a reply's client may take no text at all before the reply is given up: as a
/// server's write timeout, so that a client that stopped reading does not keep a producer
/// thread waiting for ever.
pub(crate) const REPLY_STALL: std::time::Duration = std::time::Duration::from_secs(30);

/// What the producer of a [`streamed`] reply sends: text, an error that cuts the reply short,
/// or its end. A channel that closes without the end (the producer panicked or gave up) cuts
/// the reply short too, so that a client never takes a truncated reply for a whole one.
enum Piece {
    Text(bytes::Bytes),
    Fail(std::io::Error),
    End,
}

/// Where the producer of a [`streamed`] reply writes.
pub(crate) struct Chunks {
    /// Text written and not sent yet.
    pub buf: Vec<u8>,
    tx: tokio::sync::mpsc::Sender<Piece>,
    rt: tokio::runtime::Handle,
}

/// The client of a [`streamed`] reply went away, or took nothing for [`REPLY_STALL`]: stop
/// writing.
#[derive(Debug)]
pub(crate) struct Gone;

impl Chunks {
    /// Sends what was written once it is a chunk's worth.
    pub fn flush_if_full(&mut self) -> Result<(), Gone> {
        if self.buf.len() < CHUNK_BYTES {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK_BYTES + (CHUNK_BYTES >> 2)));
        self.send(Piece::Text(chunk.into()))
    }

    fn send(&self, piece: Piece) -> Result<(), Gone> {
        match self.rt.block_on(tokio::time::timeout(REPLY_STALL, self.tx.send(piece))) {
            Ok(Ok(())) => Ok(()),
            _ => Err(Gone),
        }
    }

    /// Ends the reply with an error, the text not yet sent dropped: the client sees the
    /// response cut short. The producer returns the [`Gone`] this gives.
    pub fn fail(&mut self, msg: String) -> Gone {
        self.buf.clear();
        let _ = self.send(Piece::Fail(std::io::Error::other(msg)));
        Gone
    }
}

/// A response body that `produce` writes on a blocking thread of the current runtime (the
/// query runtime), sent to the client a chunk at a time as it is written. A large reply so
/// costs a few chunks of text, not its whole text; the runtime's threads stay free for other
/// requests; and when the client goes away (or takes nothing for [`REPLY_STALL`]) the next
/// chunk's send fails and the producer stops (a reply of 10,000 Jaeger traces is seconds of
/// CPU after the read). A reply the producer did not finish (it failed, gave up or panicked)
/// ends in an error, never as if it were whole.
pub(crate) fn streamed(produce: impl FnOnce(&mut Chunks) -> Result<(), Gone> + Send + 'static) -> axum::body::Body {
    let (tx, rx) = tokio::sync::mpsc::channel(CHUNKS_AHEAD);
    let rt = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut out = Chunks {
            buf: Vec::with_capacity(CHUNK_BYTES + (CHUNK_BYTES >> 2)),
            tx,
            rt,
        };
        if produce(&mut out).is_ok() {
            let rest = std::mem::take(&mut out.buf);
            if rest.is_empty() || out.send(Piece::Text(rest.into())).is_ok() {
                let _ = out.send(Piece::End);
            }
        }
    });
    axum::body::Body::new(ChannelBody { rx, ended: false })
}

/// `prefix`, the JSON of each of `items` separated by commas, then `suffix`: a JSON array
/// (maybe inside an object), [`streamed`]. Each item is converted only when the client has
/// taken the text before it.
pub(crate) fn streamed_json_items<I>(prefix: String, items: I, suffix: String) -> axum::body::Body
where
    I: Iterator<Item = serde_json::Value> + Send + 'static,
{
    streamed(move |out| {
        out.buf.extend_from_slice(prefix.as_bytes());
        for (i, item) in items.enumerate() {
            if i > 0 {
                out.buf.push(b',');
            }
            serde_json::to_writer(&mut out.buf, &item).expect("writing to memory");
            out.flush_if_full()?;
        }
        out.buf.extend_from_slice(suffix.as_bytes());
        Ok(())
    })
}

/// A response body fed by a [`streamed`] reply's producer.
struct ChannelBody {
    rx: tokio::sync::mpsc::Receiver<Piece>,
    ended: bool,
}

impl http_body::Body for ChannelBody {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        use std::task::Poll;
        if self.ended {
            return Poll::Ready(None);
        }
        Poll::Ready(match std::task::ready!(self.rx.poll_recv(cx)) {
            Some(Piece::Text(b)) => Some(Ok(http_body::Frame::data(b))),
            Some(Piece::Fail(e)) => {
                self.ended = true;
                Some(Err(e))
            }
            Some(Piece::End) => {
                self.ended = true;
                None
            }
            None => {
                self.ended = true;
                Some(Err(std::io::Error::other(
                    "the reply's producer stopped before its end",
                )))
            }
        })
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod streamed_tests {
    use super::*;

    async fn collect(body: axum::body::Body) -> Result<Vec<u8>, String> {
        axum::body::to_bytes(body, usize::MAX)
            .await
            .map(|b| b.to_vec())
            .map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_reply_is_whole_or_ends_in_an_error() {
        // Whole: every chunk, in order, then the end.
        let text: Vec<u8> = (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let t = text.clone();
        let body = streamed(move |out| {
            for c in t.chunks(1000) {
                out.buf.extend_from_slice(c);
                out.flush_if_full()?;
            }
            Ok(())
        });
        assert_eq!(collect(body).await.unwrap(), text);
        // A producer that panics half way, fails or gives up never looks like a whole reply.
        let body = streamed(|out| {
            out.buf.extend_from_slice(&[7; 200_000]);
            out.flush_if_full()?;
            panic!("a bug in a conversion");
        });
        assert!(collect(body).await.is_err(), "a panic must cut the reply short");
        let body = streamed(|out| Err(out.fail("stored trace does not decode".into())));
        assert!(collect(body).await.unwrap_err().contains("does not decode"));
        let body = streamed(|_| Err(Gone));
        assert!(collect(body).await.is_err());
        // An empty reply is whole.
        assert_eq!(collect(streamed(|_| Ok(()))).await.unwrap(), Vec::<u8>::new());
    }
}
