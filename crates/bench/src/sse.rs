//! Incremental Server-Sent Events parser (the `data:` lines of an OpenAI streaming response).
//! Bytes arrive in arbitrary chunks; events end at a blank line; `\n`, `\r\n` and `\r` all end lines.

/// One `data` payload (multi-line `data:` fields joined with `\n`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    Data(String),
    /// The OpenAI end-of-stream marker `data: [DONE]`.
    Done,
}

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
    /// The previous byte was `\r` (so a following `\n` is part of the same line ending).
    after_cr: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.end_line(&line) {
                        events.push(event);
                    }
                }
                _ => self.line.push(b),
            }
        }
        events
    }

    /// Flushes an event left open when the stream ended without a final blank line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.end_line(&line);
        }
        self.dispatch()
    }

    fn end_line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(b":") {
            return None; // comment / keep-alive
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            let value = String::from_utf8_lossy(value);
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            }
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let data = self.data.take()?;
        Some(if data.trim() == "[DONE]" {
            SseEvent::Done
        } else {
            SseEvent::Data(data)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_split_across_chunks() {
        let stream = b"data: {\"a\":1}\n\ndata: {\"b\"\r\n\r\n: keep-alive\n\ndata: [DONE]\n\n";
        for split in 0..stream.len() {
            let mut p = SseParser::new();
            let mut events = p.push(&stream[..split]);
            events.extend(p.push(&stream[split..]));
            assert_eq!(
                events,
                vec![
                    SseEvent::Data("{\"a\":1}".into()),
                    SseEvent::Data("{\"b\"".into()),
                    SseEvent::Done
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn multi_line_data_and_other_fields() {
        let mut p = SseParser::new();
        let events = p.push(b"event: x\nid: 3\ndata: one\ndata:two\n\n");
        assert_eq!(events, vec![SseEvent::Data("one\ntwo".into())]);
    }

    #[test]
    fn unterminated_final_event_is_flushed() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: {\"x\":2}").is_empty());
        assert_eq!(p.finish(), Some(SseEvent::Data("{\"x\":2}".into())));
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn bare_cr_line_endings() {
        let mut p = SseParser::new();
        assert_eq!(
            p.push(b"data: a\r\rdata: b\r\r"),
            vec![SseEvent::Data("a".into()), SseEvent::Data("b".into())]
        );
    }
}
