//! Dedicated columns: attributes moved to their own columns round-trip, and their footer
//! statistics bound the values written.

use super::*;

#[tokio::test]
async fn dedicated_columns_round_trip_every_field() {
    let req = with_dedicatable_attributes(sample_request(600, 5, 5));
    let cols = columns_of(&req);
    let store = MemoryStorage::new();
    let opts = WriteOptions {
        row_group_rows: 500,
        dedicated_columns: true,
        ..Default::default()
    };
    let meta = write_block(&store, &cols, "t", Origin::default(), &opts).await.unwrap();
    assert_eq!(meta.version, meta::FORMAT_VERSION);
    let chosen: Vec<(meta::DedicatedScope, &str, meta::ValueType)> = meta
        .dedicated_columns
        .iter()
        .map(|c| (c.scope, c.name.as_str(), c.value_type))
        .collect();
    use meta::{DedicatedScope as S, ValueType as T};
    for want in [
        (S::Span, "http.method", T::String),
        (S::Span, "mixed", T::Int),
        (S::Span, "int", T::Int),
        (S::Span, "dbl", T::Double),
        (S::Span, "bool", T::Bool),
        (S::Resource, "service.name", T::String),
        (S::Resource, "host", T::String),
    ] {
        assert!(chosen.contains(&want), "{want:?} is dedicated: {chosen:?}");
    }
    assert!(
        !chosen.iter().any(|c| c.1 == "str"),
        "a string with a value per trace stays generic: {chosen:?}"
    );
    // A column is complete when no occurrence of its key stayed in the blob: `http.method` is
    // sometimes repeated and `mixed` sometimes a string.
    for c in meta.dedicated_columns.iter().filter(|c| c.scope == S::Span) {
        let complete = !matches!(c.name.as_str(), "http.method" | "mixed");
        assert_eq!(c.complete, complete, "{c:?}");
    }
    let block = Block::open(&store, &block_prefix("t", &meta.block_id)).await.unwrap();
    for id in trace_ids(&req).iter().step_by(7) {
        let rows = block.find_trace(&store, id).await.unwrap();
        assert_eq!(normalized(decode_rows(&rows)), normalized(spans_of(&req, id)));
    }
    // Whole row groups, and the prefilter's attribute column, carry the moved values too.
    let mut all = Vec::new();
    for rg in 0..block.row_group_count() {
        let data = block.fetch_row_group(&store, rg).await.unwrap();
        let rows = data.rows().unwrap();
        let needs = Needs {
            attributes: true,
            ..Default::default()
        };
        let f = data.filter_columns(needs).unwrap();
        let ranges = [0..1, 3..7, rows.len() - 2..rows.len()];
        let want: Vec<SpanRow> = ranges.iter().flat_map(|r| rows[r.clone()].to_vec()).collect();
        assert_eq!(data.rows_in(&ranges).unwrap(), want, "rows_in is rows() restricted");
        for (i, r) in rows.iter().enumerate() {
            use row::SpanFields;
            assert_eq!(f.row(i).attributes(), &r.attributes[..]);
        }
        all.extend(rows);
    }
    assert_eq!(normalized(decode_rows(&all)), normalized(flatten(&req.resource_spans)));

    // Rewriting the rows (compaction) keeps every value; the same data without dedicated
    // columns is larger.
    let mut again = SpanColumns::default();
    for r in &all {
        again.push_row(r);
    }
    again.end_run();
    let meta2 = write_block(&store, &again, "t", Origin::default(), &opts)
        .await
        .unwrap();
    assert_eq!(meta2.dedicated_columns, meta.dedicated_columns);
    let generic = WriteOptions {
        dedicated_columns: false,
        ..opts.clone()
    };
    let plain = write_block(&store, &cols, "t", Origin::default(), &generic)
        .await
        .unwrap();
    assert!(plain.dedicated_columns.is_empty());
    println!(
        "sample bytes per span: {} with dedicated columns, {} without",
        meta.size_bytes / meta.span_count,
        plain.size_bytes / plain.span_count
    );
}

/// The footer statistics of dedicated columns bound the values written: null counts exact,
/// NaN left out of double bounds, a zero bound written -0.0 (min) and +0.0 (max), strings cut to
/// 64 bytes at a character boundary (the max rounded up), and no bounds for an all-null chunk.
#[test]
fn dedicated_column_statistics_bound_their_values() {
    use parquet::column::reader::get_typed_column_reader;
    use parquet::data_type::{ByteArrayType, DataType, DoubleType, Int64Type};
    use parquet::file::reader::{FileReader, RowGroupReader};
    let mut req = sample_request(300, 4, 21);
    let long = "é".repeat(40); // 80 bytes
    let mut i = 0usize;
    for rs in &mut req.resource_spans {
        for ss in &mut rs.scope_spans {
            for sp in &mut ss.spans {
                i += 1;
                sp.attributes
                    .push(kv("d", V::DoubleValue([f64::NAN, -0.0, 0.0, 2.5, -7.25, 0.0][i % 6])));
                sp.attributes
                    .push(kv("long", V::StringValue(format!("{long}{}", i % 3))));
                // Only in the traces that start first: the last row groups (time slices) have
                // no value.
                if sp.start_time_unix_nano < 1_700_000_000_000_000_000 + 60 * 1_000_000 {
                    sp.attributes.push(kv("early", V::IntValue((i % 7) as i64 - 3)));
                }
            }
        }
    }
    let cols = columns_of(&req);
    let opts = WriteOptions {
        row_group_rows: 100,
        dedicated_columns: true,
        ..Default::default()
    };
    let enc = encode(&cols, &opts).unwrap();
    let file = parquet::file::serialized_reader::SerializedFileReader::new(enc.data.clone()).unwrap();
    let column = |name: &str| {
        let k = enc.dedicated.iter().position(|d| d.name == name);
        k.map(|k| 16 + k)
            .unwrap_or_else(|| panic!("{name} is dedicated: {:?}", enc.dedicated))
    };
    fn values<T: DataType>(rg: &dyn RowGroupReader, c: usize, n: usize) -> (Vec<T::T>, usize) {
        let mut r = get_typed_column_reader::<T>(rg.get_column_reader(c).unwrap());
        let (mut vals, mut def) = (Vec::new(), Vec::new());
        r.read_records(n, Some(&mut def), None, &mut vals).unwrap();
        (vals, def.iter().filter(|&&d| d == 0).count())
    }
    let mut all_null_chunks = 0;
    for rg in 0..file.num_row_groups() {
        let reader = file.get_row_group(rg).unwrap();
        let n = reader.metadata().num_rows() as usize;
        let stats = |c: usize| reader.metadata().column(c).statistics().cloned().expect("statistics");

        let c = column("d");
        let (v, nulls) = values::<DoubleType>(&*reader, c, n);
        let st = stats(c);
        assert_eq!(st.null_count_opt(), Some(nulls as u64));
        let finite: Vec<f64> = v.iter().copied().filter(|d| !d.is_nan()).collect();
        let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let as_f64 = |b: Option<&[u8]>| f64::from_le_bytes(b.unwrap().try_into().unwrap());
        let (slo, shi) = (as_f64(st.min_bytes_opt()), as_f64(st.max_bytes_opt()));
        assert_eq!(slo, lo);
        assert_eq!(shi, hi);
        if lo == 0.0 {
            assert!(slo.is_sign_negative(), "a zero minimum is -0.0");
        }
        if hi == 0.0 {
            assert!(shi.is_sign_positive(), "a zero maximum is +0.0");
        }

        let c = column("long");
        let (v, nulls) = values::<ByteArrayType>(&*reader, c, n);
        let st = stats(c);
        assert_eq!(st.null_count_opt(), Some(nulls as u64));
        let lo = v.iter().map(|b| b.data()).min().unwrap();
        let hi = v.iter().map(|b| b.data()).max().unwrap();
        let (smin, smax) = (st.min_bytes_opt().unwrap(), st.max_bytes_opt().unwrap());
        assert!(smin.len() <= 64 && smax.len() <= 64);
        assert!(smin <= lo && smax >= hi, "the bounds hold");
        assert!(lo.starts_with(smin), "the minimum is a prefix");
        assert!(std::str::from_utf8(smin).is_ok() && std::str::from_utf8(smax).is_ok());
        assert!(!st.min_is_exact() && !st.max_is_exact());

        let c = column("early");
        let (v, nulls) = values::<Int64Type>(&*reader, c, n);
        let st = stats(c);
        assert_eq!(st.null_count_opt(), Some(nulls as u64));
        if v.is_empty() {
            all_null_chunks += 1;
            assert!(st.min_bytes_opt().is_none() && st.max_bytes_opt().is_none());
        } else {
            let as_i64 = |b: Option<&[u8]>| i64::from_le_bytes(b.unwrap().try_into().unwrap());
            assert_eq!(as_i64(st.min_bytes_opt()), *v.iter().min().unwrap());
            assert_eq!(as_i64(st.max_bytes_opt()), *v.iter().max().unwrap());
        }
    }
    assert!(all_null_chunks > 0, "some row group has no `early` value");
}
