//! The compression of record batches: LZ4 frames written as Kafka's producer writes them, and
//! snappy, LZ4, gzip and zstd batches inflated within a bound.

use crate::Error;
use crate::wire::Get;
use bytes::Bytes;

/// Writes one LZ4 frame (the LZ4 frame format, version 1) of independent blocks of at most
/// 64 KiB, without checksums: what Kafka's own producer writes, and the only block mode its
/// reader takes. Blocks are compressed with `lz4_flex`'s block compressor, with buffers reused
/// across batches: its `FrameEncoder` allocates them per frame, and measured 3 to 6 times
/// slower than the block compressor in a single-threaded loop over record batches. In the
/// distributor the compression itself stays about a quarter of the CPU (docs/benchmarks/cluster.md,
/// "2026-11-26: LZ4 by default, no copy in the split, fetches read a batch at a time").
pub(super) struct Lz4Frame<'a> {
    out: &'a mut Vec<u8>,
    /// The block being filled.
    block: Vec<u8>,
    /// Where a block is compressed before it is appended.
    packed: Vec<u8>,
}

const LZ4_BLOCK: usize = 64 << 10;

thread_local! {
    /// Block and output buffers, reused by every batch written on the thread.
    static LZ4_BUFFERS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

impl<'a> Lz4Frame<'a> {
    pub(super) fn begin(out: &'a mut Vec<u8>) -> Lz4Frame<'a> {
        // Magic 0x184D2204; FLG 0x60 (version 01, independent blocks, no checksums, no content
        // size); BD 0x40 (64 KiB blocks); HC 0x82, the second byte of XXH32 of FLG and BD.
        out.extend_from_slice(&[0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82]);
        let (mut block, mut packed) = LZ4_BUFFERS.with_borrow_mut(std::mem::take);
        block.clear();
        block.reserve(LZ4_BLOCK);
        packed.resize(lz4_flex::block::get_maximum_output_size(LZ4_BLOCK), 0);
        Lz4Frame { out, block, packed }
    }

    pub(super) fn write(&mut self, mut b: &[u8]) {
        while !b.is_empty() {
            let n = b.len().min(LZ4_BLOCK - self.block.len());
            self.block.extend_from_slice(&b[..n]);
            b = &b[n..];
            if self.block.len() == LZ4_BLOCK {
                self.flush();
            }
        }
    }

    fn flush(&mut self) {
        if self.block.is_empty() {
            return;
        }
        match lz4_flex::block::compress_into(&self.block, &mut self.packed) {
            Ok(n) if n < self.block.len() => {
                self.out.extend_from_slice(&(n as u32).to_le_bytes());
                self.out.extend_from_slice(&self.packed[..n]);
            }
            // Incompressible (or, impossibly, no room): the block is stored as it is, flagged
            // by the size's high bit.
            _ => {
                self.out
                    .extend_from_slice(&(self.block.len() as u32 | 0x8000_0000).to_le_bytes());
                self.out.extend_from_slice(&self.block);
            }
        }
        self.block.clear();
    }

    pub(super) fn finish(mut self) {
        self.flush();
        self.out.extend_from_slice(&[0; 4]); // end mark
        let buffers = (std::mem::take(&mut self.block), std::mem::take(&mut self.packed));
        LZ4_BUFFERS.with_borrow_mut(|b| *b = buffers);
    }
}

/// The most bytes one compressed batch may inflate to. Far above any batch weft writes (one
/// request of at most `max_decompressed_bytes` per record), and a bound on what a batch built to
/// inflate without end can cost a reader.
pub(super) const MAX_INFLATED_BATCH: u64 = 1 << 30;

/// Inflates a snappy batch, in either form Kafka's producers write: the xerial framing of
/// Kafka's Java producer and kafka-python (a 16-byte header, `\x82SNAPPY\0` and two version
/// numbers, then blocks, each a big-endian length and a raw snappy block), or one raw snappy
/// block (librdkafka). Kafka's own reader takes both.
pub(super) fn inflate_snappy(body: &[u8], limit: u64, base_offset: i64) -> Result<Bytes, Error> {
    const XERIAL: &[u8] = b"\x82SNAPPY\x00";
    let fail = |e: &dyn std::fmt::Display| Error::Protocol(format!("snappy batch at offset {base_offset}: {e}"));
    let mut blocks = Vec::new();
    match body.strip_prefix(XERIAL) {
        Some(framed) => {
            let Some(mut rest) = framed.get(8..) else {
                return Err(fail(&"the xerial header is cut short"));
            };
            while !rest.is_empty() {
                let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                    return Err(fail(&"a block's length is cut short"));
                };
                let len = u32::from_be_bytes(*len) as usize;
                if len > tail.len() {
                    return Err(fail(&format!("a block of {len} bytes runs past the batch")));
                }
                if len > 0 {
                    blocks.push(&tail[..len]);
                }
                rest = &tail[len..];
            }
        }
        None => blocks.push(body),
    }
    // The room for every block, from their headers, before any is inflated: one allocation
    // of the exact size.
    let mut total = 0u64;
    for b in &blocks {
        let n = snap::raw::decompress_len(b).map_err(|e| fail(&e))?;
        // A snappy element of at most 3 bytes writes at most 64: a length far beyond that is
        // a lie, refused before room is made for it.
        if n > b.len().saturating_mul(32) {
            return Err(fail(&format!("a block of {} bytes claims to inflate to {n}", b.len())));
        }
        total += n as u64;
    }
    if total > limit {
        return Err(Error::Protocol(format!(
            "snappy batch at offset {base_offset} inflates past {limit} bytes"
        )));
    }
    let mut out = vec![0u8; total as usize];
    let mut decoder = snap::raw::Decoder::new();
    let mut at = 0;
    for b in blocks {
        at += decoder.decompress(b, &mut out[at..]).map_err(|e| fail(&e))?;
    }
    out.truncate(at);
    Ok(Bytes::from(out))
}

/// Inflates LZ4 frames. Frames of independent blocks (what Kafka's producers and weft write)
/// are decompressed block by block straight into the output; anything else (linked blocks, a
/// dictionary) goes through `lz4_flex`'s frame decoder, which copies each block once more.
pub(super) fn inflate_lz4(body: &[u8], limit: u64, base_offset: i64) -> Result<Bytes, Error> {
    match inflate_lz4_independent(body, limit) {
        Ok(Some(plain)) => Ok(Bytes::from(plain)),
        Ok(None) => inflate(lz4_flex::frame::FrameDecoder::new(body), limit, "lz4", base_offset),
        Err(e) => Err(Error::Protocol(format!("lz4 batch at offset {base_offset}: {e}"))),
    }
}

/// The content of `body`, a sequence of LZ4 frames of independent blocks; None when a frame is
/// of another kind. Checksums are skipped, not checked: the batch's CRC-32C covers the bytes.
fn inflate_lz4_independent(body: &[u8], limit: u64) -> Result<Option<Vec<u8>>, String> {
    let mut out: Vec<u8> = Vec::with_capacity(body.len().saturating_mul(4).min(limit as usize));
    let mut filled = 0usize; // bytes of `out` inflated so far
    let mut g = Get::new(body);
    let le32 = |g: &mut Get<'_>| -> Result<u32, String> {
        let b = g.bytes(4).map_err(|e| e.to_string())?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    while g.remaining() > 0 {
        if le32(&mut g)? != 0x184D_2204 {
            return Ok(None); // a skippable or legacy frame
        }
        let flg = g.i8().map_err(|e| e.to_string())? as u8;
        let bd = g.i8().map_err(|e| e.to_string())? as u8;
        if flg >> 6 != 1 || flg & 0x20 == 0 || flg & 0x01 != 0 || flg & 0x02 != 0 || bd & 0x8F != 0 {
            // Another version, linked blocks, a dictionary or reserved bits set: the frame
            // decoder reads it or refuses it.
            return Ok(None);
        }
        let max_block = match (bd >> 4) & 7 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            m => return Err(format!("frame with block size code {m}")),
        };
        let skip = if flg & 0x08 != 0 { 8 } else { 0 } + 1; // content size, header checksum
        g.bytes(skip).map_err(|e| e.to_string())?;
        loop {
            let size = le32(&mut g)?;
            if size == 0 {
                break; // end mark
            }
            let stored = size & 0x8000_0000 != 0;
            let size = (size & 0x7FFF_FFFF) as usize;
            if size > max_block {
                return Err(format!("block of {size} bytes in a frame of {max_block}-byte blocks"));
            }
            let block = g.bytes(size).map_err(|e| e.to_string())?;
            if filled as u64 > limit {
                return Err(format!("inflates past {limit} bytes"));
            }
            // `out` only grows: bytes past `filled` are zeroed once and reused, so blocks that
            // inflate to little (a 5-byte block can claim 4 MiB) cost no zeroing each.
            let room = if stored { size } else { max_block };
            if out.len() < filled + room {
                out.resize(filled + room, 0);
            }
            let n = if stored {
                out[filled..filled + size].copy_from_slice(block);
                size
            } else {
                lz4_flex::block::decompress_into(block, &mut out[filled..filled + max_block])
                    .map_err(|e| e.to_string())?
            };
            filled += n;
            if flg & 0x10 != 0 {
                g.bytes(4).map_err(|e| e.to_string())?; // block checksum
            }
        }
        if flg & 0x04 != 0 {
            g.bytes(4).map_err(|e| e.to_string())?; // content checksum
        }
    }
    if filled as u64 > limit {
        return Err(format!("inflates past {limit} bytes"));
    }
    out.truncate(filled);
    Ok(Some(out))
}

pub(super) fn inflate(reader: impl std::io::Read, limit: u64, codec: &str, base_offset: i64) -> Result<Bytes, Error> {
    use std::io::Read;
    let mut plain = Vec::new();
    reader
        .take(limit + 1)
        .read_to_end(&mut plain)
        .map_err(|e| Error::Protocol(format!("{codec} batch at offset {base_offset}: {e}")))?;
    if plain.len() as u64 > limit {
        return Err(Error::Protocol(format!(
            "{codec} batch at offset {base_offset} inflates past {limit} bytes"
        )));
    }
    Ok(Bytes::from(plain))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn lz4_frames_are_what_the_reference_encoder_and_decoder_agree_on() {
        use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};
        use std::io::{Read, Write};
        // Compressible, incompressible, several blocks, a partial last block, and empty.
        let mut noise = vec![0u8; 70_000];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for b in noise.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let text: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 977).to_le_bytes()).collect();
        for input in [&text[..], &noise[..], &text[..10], &[][..]] {
            let mut ours = Vec::new();
            let mut frame = Lz4Frame::begin(&mut ours);
            for chunk in input.chunks(10_007) {
                frame.write(chunk);
            }
            frame.finish();
            let info = FrameInfo::new()
                .block_size(BlockSize::Max64KB)
                .block_mode(BlockMode::Independent);
            let mut reference = FrameEncoder::with_frame_info(info, Vec::new());
            reference.write_all(input).unwrap();
            let reference = reference.finish().unwrap();
            assert_eq!(ours[..7], reference[..7], "frame header");
            let mut back = Vec::new();
            FrameDecoder::new(&ours[..]).read_to_end(&mut back).unwrap();
            assert_eq!(back, input);
        }
    }

    #[test]
    fn lz4_frames_of_every_kind_inflate() {
        use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
        use std::io::Write;
        let text: Vec<u8> = (0..200_000u32).flat_map(|i| (i % 977).to_le_bytes()).collect();
        let reference = |info: FrameInfo| {
            let mut enc = FrameEncoder::with_frame_info(info, Vec::new());
            enc.write_all(&text).unwrap();
            enc.finish().unwrap()
        };
        let independent = FrameInfo::new()
            .block_size(BlockSize::Max64KB)
            .block_mode(BlockMode::Independent);
        let frames = [
            // Independent blocks: read block by block (checksums and content size skipped).
            reference(independent.clone()),
            reference(
                independent
                    .clone()
                    .block_checksums(true)
                    .content_checksum(true)
                    .content_size(Some(text.len() as u64)),
            ),
            reference(independent.clone().block_size(BlockSize::Max256KB)),
            // Linked blocks: through the frame decoder.
            reference(FrameInfo::new().block_mode(BlockMode::Linked)),
        ];
        for frame in &frames {
            assert_eq!(inflate_lz4(frame, MAX_INFLATED_BATCH, 0).unwrap()[..], text[..]);
        }
        // Blocks of 4 MiB frames that inflate to nothing or one byte, stored and compressed
        // in turn: each costs its own bytes, not 4 MiB of zeroing (this loop would take
        // minutes otherwise).
        let mut tiny = vec![0x04, 0x22, 0x4D, 0x18, 0x60, 0x70, 0x00];
        for _ in 0..20_000 {
            tiny.extend_from_slice(&[2, 0, 0, 0, 0x10, b'x']); // compressed: one literal "x"
            tiny.extend_from_slice(&[1, 0, 0, 0x80, b'y']); // stored: "y"
        }
        tiny.extend_from_slice(&[0; 4]);
        let plain = inflate_lz4(&tiny, MAX_INFLATED_BATCH, 0).unwrap();
        assert_eq!(plain.len(), 40_000);
        assert_eq!(&plain[..4], b"xyxy");
        let mut reserved = frames[0].clone();
        reserved[4] |= 0x02;
        assert!(
            inflate_lz4(&reserved, MAX_INFLATED_BATCH, 0).is_err(),
            "reserved FLG bit"
        );
        let two = [&frames[0][..], &frames[1][..]].concat();
        assert_eq!(inflate_lz4(&two, MAX_INFLATED_BATCH, 0).unwrap().len(), 2 * text.len());
        let err = inflate_lz4(&frames[0], 100_000, 9).unwrap_err().to_string();
        assert!(
            err.contains("lz4 batch at offset 9: inflates past 100000 bytes"),
            "{err}"
        );
        let err = inflate_lz4(&frames[0][..frames[0].len() - 9], MAX_INFLATED_BATCH, 9).unwrap_err();
        assert!(err.to_string().contains("lz4 batch at offset 9"), "{err}");
    }

    /// The xerial framing Kafka's Java producer writes, with blocks of `block` bytes.
    pub(in crate::batch) fn xerial(plain: &[u8], block: usize) -> Vec<u8> {
        let mut out = b"\x82SNAPPY\x00".to_vec();
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        for chunk in plain.chunks(block) {
            let packed = snap::raw::Encoder::new().compress_vec(chunk).unwrap();
            out.extend_from_slice(&(packed.len() as u32).to_be_bytes());
            out.extend_from_slice(&packed);
        }
        out
    }

    #[test]
    fn damaged_snappy_is_refused_without_zeroing_what_it_claims() {
        let ok = xerial(&[7u8; 5000], 1 << 10);
        assert_eq!(inflate_snappy(&ok, 5000, 3).unwrap().len(), 5000);
        let err = inflate_snappy(&ok, 4999, 3).unwrap_err();
        assert!(
            err.to_string()
                .contains("snappy batch at offset 3 inflates past 4999 bytes"),
            "{err}"
        );
        // A 6-byte block claiming 4 GiB - 1: refused before any room is made for it.
        let liar = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        let err = inflate_snappy(&liar, MAX_INFLATED_BATCH, 3).unwrap_err();
        assert!(err.to_string().contains("claims to inflate"), "{err}");
        for cut in [&ok[..12], &ok[..18], &ok[..ok.len() - 1]] {
            let err = inflate_snappy(cut, MAX_INFLATED_BATCH, 3).unwrap_err();
            assert!(
                err.to_string().starts_with("Kafka protocol: snappy batch at offset 3"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_batch_that_inflates_past_the_bound_is_refused() {
        let packed = zstd::bulk::compress(&[0u8; 5000], 3).unwrap();
        let inflate_zstd = |limit| inflate(zstd::stream::read::Decoder::new(&packed[..]).unwrap(), limit, "zstd", 7);
        assert_eq!(inflate_zstd(5000).unwrap().len(), 5000);
        let err = inflate_zstd(4999).unwrap_err();
        assert!(
            err.to_string()
                .contains("zstd batch at offset 7 inflates past 4999 bytes"),
            "{err}"
        );
    }

    proptest::proptest! {
        /// Snappy bodies of any bytes, raw or behind the xerial header, inflate or are refused.
        #[test]
        fn any_snappy_body_is_inflated_or_refused_without_panic(
            xerial_header in proptest::prelude::any::<bool>(),
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
        ) {
            let body = if xerial_header { [&b"\x82SNAPPY\x00"[..], &data].concat() } else { data };
            let _ = inflate_snappy(&body, MAX_INFLATED_BATCH, 0);
        }
    }
}
