//! Streaming reader for a top-level JSON array whose tail may be cut off.
//!
//! The PyPI copy of ShareGPT is a 125 MB JSON array truncated mid-record, so a normal parser
//! rejects the whole file. This scanner finds each top-level element's byte span (tracking string
//! and escape state and nesting depth), hands complete elements to serde one at a time, and stops
//! cleanly at the first element that ends before its closing bracket.

use std::io::{BufRead, BufReader, Read};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;

/// What the scan found besides the elements themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArrayScan {
    /// Complete elements handed to the callback.
    pub complete: usize,
    /// True when the input ended inside an element or before the closing `]`.
    pub truncated: bool,
}

/// Calls `on_element` for every complete element of the top-level array in `reader`, in order.
/// `on_element` returns `false` to stop early (the scan is then reported as not truncated).
pub fn for_each_array_element<T, R, F>(reader: R, mut on_element: F) -> Result<ArrayScan>
where
    T: DeserializeOwned,
    R: Read,
    F: FnMut(T) -> Result<bool>,
{
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let mut scan = ArrayScan::default();
    let mut seen_open = false;
    let mut element: Vec<u8> = Vec::new();
    let mut depth = 0usize; // nesting inside the current element
    let mut in_string = false;
    let mut escaped = false;
    loop {
        let chunk = reader.fill_buf().context("reading JSON array")?;
        if chunk.is_empty() {
            scan.truncated = true;
            return Ok(scan);
        }
        let len = chunk.len();
        let mut start_of_element_in_chunk: Option<usize> = if depth > 0 { Some(0) } else { None };
        for (i, &b) in chunk.iter().enumerate() {
            if depth == 0 {
                // Between elements: whitespace, commas, the opening and closing brackets.
                match b {
                    b' ' | b'\n' | b'\r' | b'\t' => {}
                    b'[' if !seen_open => seen_open = true,
                    b',' if seen_open => {}
                    b']' if seen_open => return Ok(scan),
                    b'{' | b'[' if seen_open => {
                        depth = 1;
                        start_of_element_in_chunk = Some(i);
                    }
                    _ => bail!(
                        "expected a JSON array of objects or arrays, found byte {:?} between elements",
                        b as char
                    ),
                }
                continue;
            }
            if in_string {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_string = false;
                }
                continue;
            }
            match b {
                b'"' => in_string = true,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        let start = start_of_element_in_chunk.take().unwrap_or(0);
                        element.extend_from_slice(&chunk[start..=i]);
                        let value: T = serde_json::from_slice(&element).with_context(|| {
                            format!("element {} of the JSON array", scan.complete)
                        })?;
                        element.clear();
                        scan.complete += 1;
                        if !on_element(value)? {
                            return Ok(scan);
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(start) = start_of_element_in_chunk {
            element.extend_from_slice(&chunk[start..]);
        }
        reader.consume(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(text: &str) -> Result<(Vec<serde_json::Value>, ArrayScan)> {
        let mut out = Vec::new();
        let scan = for_each_array_element(text.as_bytes(), |v: serde_json::Value| {
            out.push(v);
            Ok(true)
        })?;
        Ok((out, scan))
    }

    #[test]
    fn complete_array_reads_every_element() {
        let (v, scan) = scan_all(r#"[ {"a": "x]}\"{"}, {"b": [1, {"c": 2}]} ]"#).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0]["a"], "x]}\"{");
        assert_eq!(
            scan,
            ArrayScan {
                complete: 2,
                truncated: false
            }
        );
    }

    #[test]
    fn truncated_array_stops_at_last_complete_element() {
        let (v, scan) = scan_all(r#"[{"a": 1}, {"a": 2}, {"a": "cut mid"#).unwrap();
        assert_eq!(v.len(), 2);
        assert!(scan.truncated);
    }

    #[test]
    fn non_array_is_an_error() {
        assert!(scan_all(r#"{"a": 1}"#).is_err());
        assert!(scan_all(r#"[1, 2]"#).is_err());
    }

    #[test]
    fn early_stop_is_not_truncation() {
        let mut n = 0;
        let scan = for_each_array_element(
            r#"[{"a":1},{"a":2},{"a":3}]"#.as_bytes(),
            |_: serde_json::Value| {
                n += 1;
                Ok(n < 2)
            },
        )
        .unwrap();
        assert_eq!(
            scan,
            ArrayScan {
                complete: 2,
                truncated: false
            }
        );
    }
}
