//! Stop strings over streamed text: text that could still become a stop string is
//! held back; when one appears, the output is cut exactly where it starts.

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// No stop string yet; this text may be sent now.
    Continue(String),
    /// A stop string appeared; this is the last text to send.
    Stopped(String),
}

#[derive(Debug, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    /// Text generated and not yet released (a possible stop-string prefix).
    held: String,
}

impl StopStrings {
    pub fn new(stops: &[String]) -> Self {
        Self {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            held: String::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// Feeds newly decoded text.
    pub fn push(&mut self, text: &str) -> StopOutcome {
        if self.stops.is_empty() {
            return StopOutcome::Continue(text.to_string());
        }
        self.held.push_str(text);
        // Earliest stop string wins; a match can only start inside the held text,
        // because everything released before could not begin one.
        if let Some(cut) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min()
        {
            let out = self.held[..cut].to_string();
            self.held.clear();
            return StopOutcome::Stopped(out);
        }
        let keep = self.longest_stop_prefix_suffix();
        let release_to = self.held.len() - keep;
        let out = self.held[..release_to].to_string();
        self.held.drain(..release_to);
        StopOutcome::Continue(out)
    }

    /// At the end (EOS, length, abort): the held text is not a stop string; release it.
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Byte length of the longest suffix of `held` that is a proper prefix of a stop string.
    fn longest_stop_prefix_suffix(&self) -> usize {
        let h = &self.held;
        for (start, _) in h.char_indices() {
            let suffix = &h[start..];
            if self
                .stops
                .iter()
                .any(|s| s.len() > suffix.len() && s.starts_with(suffix))
            {
                return suffix.len();
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut s = StopStrings::new(&stops);
        let mut out = String::new();
        for p in pieces {
            match s.push(p) {
                StopOutcome::Continue(t) => out.push_str(&t),
                StopOutcome::Stopped(t) => {
                    out.push_str(&t);
                    return (out, true);
                }
            }
        }
        out.push_str(&s.flush());
        (out, false)
    }

    #[test]
    fn cuts_exactly_at_a_stop_string_split_across_pieces() {
        assert_eq!(
            run(&["END"], &["hello E", "N", "D world"]),
            ("hello ".into(), true)
        );
        assert_eq!(run(&["\n\n"], &["a\n", "\nb"]), ("a".into(), true));
    }

    #[test]
    fn holds_back_only_possible_prefixes_and_releases_them_at_the_end() {
        let stops = vec!["STOP".to_string()];
        let mut s = StopStrings::new(&stops);
        assert_eq!(s.push("abc ST"), StopOutcome::Continue("abc ".into()));
        assert_eq!(s.push("x"), StopOutcome::Continue("STx".into()));
        assert_eq!(s.push("S"), StopOutcome::Continue("".into()));
        assert_eq!(s.flush(), "S");
    }

    #[test]
    fn earliest_of_several_stops_wins_and_multibyte_text_is_safe() {
        assert_eq!(run(&["ü!", "b"], &["aü", "!b"]), ("a".into(), true));
        assert_eq!(run(&["日本"], &["こ日", "x日本"]), ("こ日x".into(), true));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
        assert_eq!(run(&[""], &["a"]), ("a".into(), false));
    }
}
