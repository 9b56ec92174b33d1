//! A small writer for the Prometheus text exposition format (version 0.0.4).

use std::fmt::Write;

/// Builds one exposition; each metric family gets its HELP and TYPE lines once.
pub struct PromText {
    out: String,
    /// Labels put on every sample (e.g. `model_name`).
    common: Vec<(String, String)>,
}

impl PromText {
    pub fn new(common: &[(&str, &str)]) -> Self {
        Self {
            out: String::with_capacity(8 << 10),
            common: common
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        let all = self
            .common
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(labels.iter().copied());
        let mut first = true;
        for (k, v) in all {
            self.out.push(if first { '{' } else { ',' });
            first = false;
            let _ = write!(self.out, "{k}=\"{}\"", escape(v));
        }
        if !first {
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
    }

    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, "gauge", help);
        self.sample(name, &[], value);
    }

    /// An info metric: one sample of value 1 whose labels carry the information (vLLM's
    /// `*_info` gauges, e.g. `vllm:cache_config_info`).
    pub fn info(&mut self, name: &str, help: &str, labels: &[(&str, &str)]) {
        self.header(name, "gauge", help);
        self.sample(name, labels, 1.0);
    }

    /// `name` must end in `_total`.
    pub fn counter(&mut self, name: &str, help: &str, value: f64) {
        self.labeled_counter(name, help, &[(&[], value)]);
    }

    /// One counter family with a sample per label set.
    pub fn labeled_counter(&mut self, name: &str, help: &str, samples: &[(&[(&str, &str)], f64)]) {
        debug_assert!(name.ends_with("_total"));
        self.header(name, "counter", help);
        for (labels, v) in samples {
            self.sample(name, labels, *v);
        }
    }

    /// `bounds` are the upper bounds of the finite buckets; `counts[i]` is how many
    /// observations fell in bucket i alone (`counts.len() == bounds.len() + 1`, the last
    /// being the overflow bucket). Written cumulatively, as Prometheus wants.
    pub fn histogram(&mut self, name: &str, help: &str, bounds: &[f64], counts: &[u64], sum: f64) {
        self.header(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        for (i, c) in counts.iter().enumerate() {
            cumulative += c;
            let le = bounds
                .get(i)
                .map_or("+Inf".to_string(), |b| format_value(*b));
            self.sample(&bucket, &[("le", &le)], cumulative as f64);
        }
        if counts.len() <= bounds.len() {
            // No overflow bucket given: +Inf equals the last cumulative count.
            self.sample(&bucket, &[("le", "+Inf")], cumulative as f64);
        }
        self.sample(&format!("{name}_sum"), &[], sum);
        self.sample(&format!("{name}_count"), &[], cumulative as f64);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_families_with_common_labels() {
        let mut p = PromText::new(&[("model_name", "m\"x")]);
        p.gauge("vllm:num_requests_running", "Running.", 3.0);
        p.labeled_counter(
            "vllm:request_success_total",
            "Finished.",
            &[
                (&[("finished_reason", "stop")], 2.0),
                (&[("finished_reason", "length")], 0.0),
            ],
        );
        p.histogram(
            "vllm:e2e_request_latency_seconds",
            "E2E.",
            &[0.1, 1.0],
            &[1, 2, 1],
            4.5,
        );
        let text = p.finish();
        let expected = "\
# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name=\"m\\\"x\"} 3
# HELP vllm:request_success_total Finished.
# TYPE vllm:request_success_total counter
vllm:request_success_total{model_name=\"m\\\"x\",finished_reason=\"stop\"} 2
vllm:request_success_total{model_name=\"m\\\"x\",finished_reason=\"length\"} 0
# HELP vllm:e2e_request_latency_seconds E2E.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{model_name=\"m\\\"x\",le=\"0.1\"} 1
vllm:e2e_request_latency_seconds_bucket{model_name=\"m\\\"x\",le=\"1\"} 3
vllm:e2e_request_latency_seconds_bucket{model_name=\"m\\\"x\",le=\"+Inf\"} 4
vllm:e2e_request_latency_seconds_sum{model_name=\"m\\\"x\"} 4.5
vllm:e2e_request_latency_seconds_count{model_name=\"m\\\"x\"} 4
";
        assert_eq!(text, expected);
    }
}
