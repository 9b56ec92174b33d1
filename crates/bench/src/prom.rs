//! Prometheus text exposition parsing, enough to read counters from `/metrics`.

use std::collections::BTreeMap;

/// One sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Parses every sample line; comment lines and malformed lines are skipped (a scrape from an
/// unknown server must not fail the benchmark).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if rest.starts_with('{') {
        let (parsed, after) = parse_labels(&rest[1..])?;
        labels = parsed;
        rest = after;
    }
    let value_text = rest.split_whitespace().next()?;
    let value = match value_text {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` (the text after `{`); returns labels and the text after `}`.
fn parse_labels(text: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let bytes = text.as_bytes();
    let mut labels = BTreeMap::new();
    let mut i = 0;
    loop {
        while i < bytes.len() && (bytes[i] == b',' || bytes[i].is_ascii_whitespace()) {
            i += 1;
        }
        if *bytes.get(i)? == b'}' {
            return Some((labels, &text[i + 1..]));
        }
        let eq = i + text[i..].find('=')?;
        let key = text[i..eq].trim().to_string();
        i = eq + 1;
        if bytes.get(i) != Some(&b'"') {
            return None;
        }
        i += 1;
        let mut value = String::new();
        loop {
            let c = text[i..].chars().next()?;
            i += c.len_utf8();
            match c {
                '\\' => {
                    let escaped = text[i..].chars().next()?;
                    i += escaped.len_utf8();
                    value.push(if escaped == 'n' { '\n' } else { escaped });
                }
                '"' => break,
                other => value.push(other),
            }
        }
        labels.insert(key, value);
    }
}

/// Sum of every sample of `name` over all label sets (e.g. one per engine); `None` if absent.
pub fn sum(samples: &[Sample], name: &str) -> Option<f64> {
    let mut found = false;
    let total = samples
        .iter()
        .filter(|s| s.name == name)
        .inspect(|_| found = true)
        .map(|s| s.value)
        .sum();
    found.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM_LIKE: &str = r#"# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 120.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 99.0
vllm:num_requests_running{model_name="a \"quoted\", label}"} 3
process_start_time_seconds 1.7e9
vllm:time_to_first_token_seconds_bucket{le="+Inf"} +Inf
garbage line without value
"#;

    #[test]
    fn parses_names_labels_and_values() {
        let samples = parse(VLLM_LIKE);
        assert_eq!(samples.len(), 6);
        assert_eq!(samples[2].labels["position"], "0");
        assert_eq!(samples[3].labels["model_name"], "a \"quoted\", label}");
        assert_eq!(samples[3].value, 3.0);
        assert_eq!(samples[4].value, 1.7e9);
        assert_eq!(samples[5].value, f64::INFINITY);
    }

    #[test]
    fn sums_over_label_sets_and_reports_absence() {
        let samples = parse(VLLM_LIKE);
        assert_eq!(
            sum(&samples, "vllm:spec_decode_num_drafts_total"),
            Some(150.0)
        );
        assert_eq!(
            sum(&samples, "vllm:spec_decode_num_draft_tokens_total"),
            None
        );
    }
}
