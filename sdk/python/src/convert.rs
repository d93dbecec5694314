//! Conversions between Python values and the `opentelemetry` attribute model.
//!
//! Invalid attributes never raise into the application: like the official SDK, they are
//! dropped with a (rate-limited) warning.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::SpanKind;
use opentelemetry::{Array, KeyValue, StringValue, Value};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::globals;

/// Converts an attribute value; `None` (with a warning) for a type OTLP attributes cannot hold.
pub(crate) fn value(v: &Bound<'_, PyAny>) -> Option<Value> {
    // Exact-type checks first: they are pointer compares, and str/int/float/bool are nearly
    // every attribute value seen in instrumentation.
    if let Ok(s) = v.downcast_exact::<PyString>() {
        return s.to_str().ok().map(|s| Value::String(s.to_owned().into()));
    }
    if v.is_exact_instance_of::<PyBool>() {
        return Some(Value::Bool(v.is_truthy().ok()?));
    }
    if let Ok(i) = v.downcast_exact::<PyInt>() {
        return i.extract::<i64>().ok().map(Value::I64);
    }
    if let Ok(f) = v.downcast_exact::<PyFloat>() {
        return Some(Value::F64(f.value()));
    }
    if v.is_instance_of::<PyBool>() {
        return Some(Value::Bool(v.is_truthy().ok()?));
    }
    if let Ok(s) = v.downcast::<PyString>() {
        return s.to_str().ok().map(|s| Value::String(s.to_owned().into()));
    }
    if let Ok(i) = v.downcast::<PyInt>() {
        return i.extract::<i64>().ok().map(Value::I64);
    }
    if let Ok(f) = v.downcast::<PyFloat>() {
        return Some(Value::F64(f.value()));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        return array(v);
    }
    None
}

/// A homogeneous sequence of str, bool, int or float (`None` members are skipped, as OTLP arrays
/// of scalars cannot hold them).
fn array(v: &Bound<'_, PyAny>) -> Option<Value> {
    enum Kind {
        Unknown,
        S(Vec<StringValue>),
        B(Vec<bool>),
        I(Vec<i64>),
        F(Vec<f64>),
    }
    let mut k = Kind::Unknown;
    for item in v.try_iter().ok()? {
        let item = item.ok()?;
        if item.is_none() {
            continue;
        }
        let x = value(&item)?;
        k = match (k, x) {
            (Kind::Unknown, Value::String(s)) => Kind::S(vec![s]),
            (Kind::Unknown, Value::Bool(b)) => Kind::B(vec![b]),
            (Kind::Unknown, Value::I64(i)) => Kind::I(vec![i]),
            (Kind::Unknown, Value::F64(f)) => Kind::F(vec![f]),
            (Kind::S(mut a), Value::String(s)) => {
                a.push(s);
                Kind::S(a)
            }
            (Kind::B(mut a), Value::Bool(b)) => {
                a.push(b);
                Kind::B(a)
            }
            (Kind::I(mut a), Value::I64(i)) => {
                a.push(i);
                Kind::I(a)
            }
            (Kind::F(mut a), Value::F64(f)) => {
                a.push(f);
                Kind::F(a)
            }
            _ => return None,
        };
    }
    Some(Value::Array(match k {
        Kind::Unknown => Array::String(Vec::new()),
        Kind::S(a) => Array::String(a),
        Kind::B(a) => Array::Bool(a),
        Kind::I(a) => Array::I64(a),
        Kind::F(a) => Array::F64(a),
    }))
}

/// Converts one attribute, warning about and skipping an invalid key or value.
pub(crate) fn key_value(py: Python<'_>, k: &Bound<'_, PyAny>, v: &Bound<'_, PyAny>) -> Option<KeyValue> {
    let key = match k.downcast::<PyString>().ok().and_then(|s| s.to_str().ok()) {
        Some(s) if !s.is_empty() => s,
        _ => {
            globals::warn(
                py,
                format!("invalid attribute key {k}: keys are non-empty strings; dropped"),
            );
            return None;
        }
    };
    match value(v) {
        Some(val) => Some(KeyValue::new(key.to_owned(), val)),
        None => {
            globals::warn(
                py,
                format!(
                    "invalid type {} for attribute {key:?}: values are str, bool, int (64-bit), float \
                     or sequences of one of them; dropped",
                    v.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                ),
            );
            None
        }
    }
}

/// Converts an attributes mapping (`None` gives an empty list).
pub(crate) fn attributes(py: Python<'_>, attrs: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<KeyValue>> {
    let Some(a) = attrs.filter(|a| !a.is_none()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    if let Ok(d) = a.downcast::<PyDict>() {
        out.reserve(d.len());
        for (k, v) in d.iter() {
            out.extend(key_value(py, &k, &v));
        }
        return Ok(out);
    }
    // Any other mapping (e.g. BoundedAttributes, MappingProxyType).
    let items = a.call_method0(pyo3::intern!(py, "items")).map_err(|_| {
        pyo3::exceptions::PyTypeError::new_err(format!(
            "attributes must be a mapping of str to values, not {}",
            a.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    for item in items.try_iter()? {
        let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item?.extract()?;
        out.extend(key_value(py, &k, &v));
    }
    Ok(out)
}

/// Converts a value back to Python (for the in-memory exporter).
pub(crate) fn to_py(py: Python<'_>, v: &Value) -> PyResult<PyObject> {
    Ok(match v {
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::I64(i) => i.into_pyobject(py)?.into_any().unbind(),
        Value::F64(f) => f.into_pyobject(py)?.into_any().unbind(),
        Value::String(s) => PyString::new(py, s.as_str()).into_any().unbind(),
        Value::Array(Array::Bool(a)) => PyTuple::new(py, a)?.into_any().unbind(),
        Value::Array(Array::I64(a)) => PyTuple::new(py, a)?.into_any().unbind(),
        Value::Array(Array::F64(a)) => PyTuple::new(py, a)?.into_any().unbind(),
        Value::Array(Array::String(a)) => PyTuple::new(py, a.iter().map(|s| s.as_str()))?.into_any().unbind(),
        other => PyBytes::new(py, format!("{other:?}").as_bytes()).into_any().unbind(),
    })
}

/// A dict of attributes.
pub(crate) fn attrs_to_py(py: Python<'_>, attrs: &[KeyValue]) -> PyResult<PyObject> {
    let d = PyDict::new(py);
    for kv in attrs {
        d.set_item(kv.key.as_str(), to_py(py, &kv.value)?)?;
    }
    Ok(d.into_any().unbind())
}

/// `opentelemetry.trace.SpanKind` (or its integer value) to the Rust kind.
#[inline]
pub(crate) fn span_kind(kind: Option<&Bound<'_, PyAny>>) -> PyResult<SpanKind> {
    let Some(k) = kind.filter(|k| !k.is_none()) else {
        return Ok(SpanKind::Internal);
    };
    let n: i64 = match k.downcast::<PyInt>() {
        Ok(i) => i.extract()?,
        Err(_) => k.getattr(pyo3::intern!(k.py(), "value"))?.extract()?,
    };
    Ok(match n {
        0 => SpanKind::Internal,
        1 => SpanKind::Server,
        2 => SpanKind::Client,
        3 => SpanKind::Producer,
        4 => SpanKind::Consumer,
        _ => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "invalid span kind {k}: expected an opentelemetry.trace.SpanKind"
            )));
        }
    })
}

pub(crate) fn kind_to_int(k: &SpanKind) -> u8 {
    match k {
        SpanKind::Internal => 0,
        SpanKind::Server => 1,
        SpanKind::Client => 2,
        SpanKind::Producer => 3,
        SpanKind::Consumer => 4,
    }
}

/// Unix nanoseconds (Python's `time.time_ns()` convention) to `SystemTime`.
pub(crate) fn system_time(ns: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns)
}

/// Reads an optional timestamp argument: an `int` of Unix nanoseconds.
pub(crate) fn timestamp(t: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match t.filter(|t| !t.is_none()) {
        None => Ok(None),
        Some(t) => t.extract::<u64>().map(Some).map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "timestamps are int nanoseconds since the Unix epoch (time.time_ns()), not {t}"
            ))
        }),
    }
}
