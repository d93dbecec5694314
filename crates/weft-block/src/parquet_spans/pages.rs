//! Column readers over a row group's bytes that decompress zstd pages with one context per
//! thread.
//!
//! parquet's row group reader builds a codec for every column chunk it opens, and its zstd
//! codec makes a compression context and a decompression context each time
//! (`ZSTD_createCCtx`, `ZSTD_createDCtx`). A scan opens a few columns of every row group, so
//! those two calls took 17 % of a tag-value lookup over 3 M spans and 11 % of a Zipkin search
//! (perf, 2026-12-04). Here the page reader is given the chunk as uncompressed, and each zstd
//! page it returns is decompressed with this thread's context. Other codecs are left to
//! parquet.

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;
use parquet::basic::Compression;
use parquet::column::page::{Page, PageMetadata, PageReader};
use parquet::column::reader::{ColumnReader, get_column_reader};
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::RowGroupMetaData;
use parquet::file::metadata::page_index::RowGroupPageIndex;
use parquet::file::properties::ReaderPropertiesPtr;
use parquet::file::serialized_reader::SerializedPageReader;

use super::reader::RangeChunk;

/// The most bytes one page may decompress to: weft's pages are at most a row group's column
/// (a few MiB); a frame claiming more is damaged.
const MAX_PAGE_BYTES: u64 = 1 << 30;

thread_local! {
    static ZSTD: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn corrupt(msg: String) -> ParquetError {
    ParquetError::General(msg)
}

/// Decompresses one zstd frame (a page's compressed bytes).
fn unzstd(buf: &[u8]) -> Result<Bytes> {
    let size = match zstd::zstd_safe::get_frame_content_size(buf) {
        Ok(Some(n)) if n <= MAX_PAGE_BYTES => n as usize,
        Ok(Some(n)) => return Err(corrupt(format!("zstd page claims {n} bytes"))),
        // A frame without its size: read it as a stream, within the same bound.
        Ok(None) => {
            use std::io::Read;
            let mut out = Vec::new();
            zstd::stream::read::Decoder::new(buf)
                .map_err(|e| corrupt(format!("zstd: {e}")))?
                .take(MAX_PAGE_BYTES + 1)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("zstd: {e}")))?;
            if out.len() as u64 > MAX_PAGE_BYTES {
                return Err(corrupt("zstd page larger than 1 GiB".into()));
            }
            return Ok(out.into());
        }
        Err(_) => return Err(corrupt("zstd page: not a zstd frame".into())),
    };
    ZSTD.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell.is_none() {
            *cell = Some(zstd::bulk::Decompressor::new().map_err(|e| corrupt(format!("zstd: {e}")))?);
        }
        let d = cell.as_mut().expect("set above");
        let out = d.decompress(buf, size).map_err(|e| corrupt(format!("zstd: {e}")))?;
        if out.len() != size {
            return Err(corrupt(format!(
                "zstd page holds {} bytes, its frame says {size}",
                out.len()
            )));
        }
        Ok(Bytes::from(out))
    })
}

/// The pages of a zstd column chunk read as uncompressed, decompressed as they are returned.
struct ZstdPages<P>(P);

impl<P: PageReader> ZstdPages<P> {
    fn inflate(page: Page) -> Result<Page> {
        Ok(match page {
            Page::DataPage {
                buf,
                num_values,
                encoding,
                def_level_encoding,
                rep_level_encoding,
                statistics,
            } => Page::DataPage {
                buf: unzstd(&buf)?,
                num_values,
                encoding,
                def_level_encoding,
                rep_level_encoding,
                statistics,
            },
            Page::DictionaryPage {
                buf,
                num_values,
                encoding,
                is_sorted,
            } => Page::DictionaryPage {
                buf: unzstd(&buf)?,
                num_values,
                encoding,
                is_sorted,
            },
            Page::DataPageV2 {
                buf,
                num_values,
                encoding,
                num_nulls,
                num_rows,
                def_levels_byte_len,
                rep_levels_byte_len,
                is_compressed,
                statistics,
            } => {
                // The levels come first, uncompressed; the values after them may be compressed.
                let levels = (def_levels_byte_len as usize).saturating_add(rep_levels_byte_len as usize);
                let buf = if is_compressed && levels <= buf.len() {
                    let values = unzstd(&buf[levels..])?;
                    let mut out = Vec::with_capacity(levels + values.len());
                    out.extend_from_slice(&buf[..levels]);
                    out.extend_from_slice(&values);
                    Bytes::from(out)
                } else if is_compressed {
                    return Err(corrupt("data page v2: levels longer than the page".into()));
                } else {
                    buf
                };
                Page::DataPageV2 {
                    buf,
                    num_values,
                    encoding,
                    num_nulls,
                    num_rows,
                    def_levels_byte_len,
                    rep_levels_byte_len,
                    is_compressed,
                    statistics,
                }
            }
        })
    }
}

impl<P: PageReader> Iterator for ZstdPages<P> {
    type Item = Result<Page>;

    fn next(&mut self) -> Option<Result<Page>> {
        self.get_next_page().transpose()
    }
}

impl<P: PageReader> PageReader for ZstdPages<P> {
    fn get_next_page(&mut self) -> Result<Option<Page>> {
        self.0.get_next_page()?.map(Self::inflate).transpose()
    }

    fn peek_next_page(&mut self) -> Result<Option<PageMetadata>> {
        self.0.peek_next_page()
    }

    fn skip_next_page(&mut self) -> Result<()> {
        self.0.skip_next_page()
    }

    fn supports_deferred_dictionary(&self) -> bool {
        self.0.supports_deferred_dictionary()
    }

    fn take_deferred_dictionary(&mut self) -> Result<Option<Page>> {
        self.0.take_deferred_dictionary()?.map(Self::inflate).transpose()
    }

    fn at_record_boundary(&mut self) -> Result<bool> {
        self.0.at_record_boundary()
    }
}

/// A row group of a data file whose bytes are in memory: its column readers.
pub(crate) struct RowGroup<'a> {
    pub(crate) meta: &'a RowGroupMetaData,
    pub(crate) page_index: RowGroupPageIndex,
    pub(crate) chunk: Arc<RangeChunk>,
    pub(crate) props: ReaderPropertiesPtr,
}

impl RowGroup<'_> {
    /// The pages of column `i`.
    pub(crate) fn get_column_page_reader(&self, i: usize) -> Result<Box<dyn PageReader>> {
        let col = self.meta.column(i);
        let rows = usize::try_from(self.meta.num_rows())?;
        let locations = self.page_index.page_locations(i).cloned();
        if matches!(col.compression(), Compression::ZSTD(_)) {
            let plain = col
                .clone()
                .into_builder()
                .set_compression(Compression::UNCOMPRESSED)
                .build()?;
            let pages = SerializedPageReader::new_with_properties(
                self.chunk.clone(),
                &plain,
                rows,
                locations,
                self.props.clone(),
            )?;
            return Ok(Box::new(ZstdPages(pages)));
        }
        Ok(Box::new(SerializedPageReader::new_with_properties(
            self.chunk.clone(),
            col,
            rows,
            locations,
            self.props.clone(),
        )?))
    }

    /// A reader of column `i`'s values.
    pub(crate) fn get_column_reader(&self, i: usize) -> Result<ColumnReader> {
        let descr = self.meta.column(i).column_descr_ptr();
        Ok(get_column_reader(descr, self.get_column_page_reader(i)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_decompresses_with_or_without_its_size_in_the_frame() {
        let plain: Vec<u8> = (0..100_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        let sized = zstd::bulk::compress(&plain, 3).unwrap();
        assert_eq!(&unzstd(&sized).unwrap()[..], &plain[..]);
        // A streamed frame does not say its size.
        let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        e.include_contentsize(false).unwrap();
        std::io::Write::write_all(&mut e, &plain).unwrap();
        let unsized_frame = e.finish().unwrap();
        assert_eq!(zstd::zstd_safe::get_frame_content_size(&unsized_frame).unwrap(), None);
        assert_eq!(&unzstd(&unsized_frame).unwrap()[..], &plain[..]);
        // Twice on one thread: the context is reused.
        assert_eq!(&unzstd(&sized).unwrap()[..], &plain[..]);
    }

    #[test]
    fn damaged_pages_are_errors_not_panics() {
        let sized = zstd::bulk::compress(b"hello hello hello hello", 3).unwrap();
        assert!(unzstd(b"not zstd at all").is_err());
        assert!(unzstd(&sized[..sized.len() - 3]).is_err(), "truncated");
        let mut wrong = sized.clone();
        let last = wrong.len() - 1;
        wrong[last] ^= 0xff;
        let _ = unzstd(&wrong);
        assert!(unzstd(&[]).is_err());
    }
}
