//! Prometheus' text exposition format (version 0.0.4): `# HELP` and
//! `# TYPE` once per family, then its samples, label values escaped.

use std::fmt::Write;

use tally_engine::latency::{BUCKETS_US, LatencySnapshot};

/// The content type of the format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A page of metric families being written.
#[derive(Default)]
pub(crate) struct Page {
    out: String,
}

/// Labels of one sample: name and value pairs.
pub(crate) type Labels<'a> = &'a [(&'a str, &'a str)];

impl Page {
    /// Starts a family: `kind` is `counter`, `gauge` or `histogram`.
    pub(crate) fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample of the current family.
    pub(crate) fn sample(&mut self, name: &str, labels: Labels, value: f64) {
        self.out.push_str(name);
        write_labels(&mut self.out, labels, None);
        let _ = writeln!(self.out, " {}", number(value));
    }

    /// A family of one unlabelled sample.
    pub(crate) fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// One histogram of the current family, in seconds.
    pub(crate) fn histogram(&mut self, name: &str, labels: Labels, h: &LatencySnapshot) {
        for (bound, count) in BUCKETS_US.iter().zip(&h.cumulative) {
            let le = number(*bound as f64 / 1e6);
            let _ = write!(self.out, "{name}_bucket");
            write_labels(&mut self.out, labels, Some(&le));
            let _ = writeln!(self.out, " {count}");
        }
        let _ = write!(self.out, "{name}_bucket");
        write_labels(&mut self.out, labels, Some("+Inf"));
        let _ = writeln!(self.out, " {}", h.count);
        self.sample(&format!("{name}_sum"), labels, h.sum_us as f64 / 1e6);
        self.sample(&format!("{name}_count"), labels, h.count as f64);
    }

    /// The page.
    pub(crate) fn finish(self) -> String {
        self.out
    }
}

fn write_labels(out: &mut String, labels: Labels, le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
        if !first {
            out.push(',');
        }
        first = false;
        let _ = write!(out, "{k}=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
}

/// A value as Prometheus reads it: integers without a fraction.
fn number(v: f64) -> String {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_histograms_in_the_text_format() {
        let mut p = Page::default();
        p.single("tally_up", "gauge", "Whether it runs.", 1.0);
        p.family("tally_cmds_total", "counter", "Commands.");
        p.sample("tally_cmds_total", &[("command", "in\"cr\\\n")], 3.0);
        p.family("tally_add_seconds", "histogram", "Adds.");
        let h = LatencySnapshot {
            cumulative: vec![1; BUCKETS_US.len()],
            count: 2,
            sum_us: 1_500_000,
        };
        p.histogram("tally_add_seconds", &[("cl", "quorum")], &h);
        let text = p.finish();
        assert!(
            text.starts_with(
                "# HELP tally_up Whether it runs.\n# TYPE tally_up gauge\ntally_up 1\n"
            )
        );
        assert!(text.contains("tally_cmds_total{command=\"in\\\"cr\\\\\\n\"} 3\n"));
        assert!(text.contains("tally_add_seconds_bucket{cl=\"quorum\",le=\"0.00005\"} 1\n"));
        assert!(text.contains("tally_add_seconds_bucket{cl=\"quorum\",le=\"10\"} 1\n"));
        assert!(text.contains("tally_add_seconds_bucket{cl=\"quorum\",le=\"+Inf\"} 2\n"));
        assert!(text.contains("tally_add_seconds_sum{cl=\"quorum\"} 1.5\n"));
        assert!(text.contains("tally_add_seconds_count{cl=\"quorum\"} 2\n"));
    }
}
