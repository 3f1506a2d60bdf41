//! An incremental Server-Sent Events reader: bytes in, `data` payloads out.

/// One event's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    /// The event's `data` lines, joined with `\n`.
    Data(String),
    /// An `error:` line, as llama.cpp's server sends when a stream fails.
    Error(String),
}

/// Splits a byte stream into SSE events. Comments and fields other than `data` and
/// `error` are skipped; lines may end in `\n`, `\r\n` or `\r`.
#[derive(Debug, Default)]
pub struct SseReader {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// `data` of the event being read, if any line of it had one.
    data: Option<String>,
    /// `error` of the event being read, if any.
    error: Option<String>,
    /// The last byte seen was a `\r`, so a following `\n` ends nothing new.
    after_cr: bool,
}

impl SseReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; appends the payload of every event they complete to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    self.end_line(out);
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(b);
                }
            }
        }
    }

    /// The payload of an event left unterminated when the stream ended, if any (lenient:
    /// the SSE specification would drop it).
    pub fn finish(mut self) -> Option<SseEvent> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut out);
        }
        self.end_line(&mut out);
        out.pop()
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        if self.line.is_empty() {
            // An event with an error reports the error, whatever data came with it.
            if let Some(error) = self.error.take() {
                self.data = None;
                out.push(SseEvent::Error(error));
            } else if let Some(data) = self.data.take() {
                out.push(SseEvent::Data(data));
            }
            return;
        }
        let line = String::from_utf8_lossy(&self.line);
        let (field, value) = match line.find(':') {
            Some(0) => ("", ""), // a comment
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&*line, ""),
        };
        let slot = match field {
            "data" => &mut self.data,
            "error" => &mut self.error,
            _ => {
                self.line.clear();
                return;
            }
        };
        match slot {
            Some(d) => {
                d.push('\n');
                d.push_str(value);
            }
            None => *slot = Some(value.to_owned()),
        }
        self.line.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> SseEvent {
        SseEvent::Data(s.to_owned())
    }

    fn read_all(chunks: &[&[u8]]) -> (Vec<SseEvent>, Option<SseEvent>) {
        let mut r = SseReader::new();
        let mut out = Vec::new();
        for c in chunks {
            r.push(c, &mut out);
        }
        (out, r.finish())
    }

    #[test]
    fn events_split_across_reads() {
        let (events, rest) = read_all(&[b"data: {\"a\"", b":1}\n", b"\ndata: [DONE]\n\n"]);
        assert_eq!(events, vec![d("{\"a\":1}"), d("[DONE]")]);
        assert_eq!(rest, None);
    }

    #[test]
    fn crlf_comments_and_multiline_data() {
        let (events, _) = read_all(&[b": ping\r\n\r\nevent: x\r\ndata:a\r\ndata: b\r\n\r\n"]);
        assert_eq!(events, vec![d("a\nb")]);
        // A `\r\n` split across reads is one line ending, not two.
        let (events, _) = read_all(&[b"data: x\r", b"\n\r", b"\n"]);
        assert_eq!(events, vec![d("x")]);
    }

    #[test]
    fn unterminated_event_is_returned_by_finish() {
        let (events, rest) = read_all(&[b"data: 1\n\ndata: [DONE]"]);
        assert_eq!(events, vec![d("1")]);
        assert_eq!(rest, Some(d("[DONE]")));
    }

    #[test]
    fn error_field_is_an_error_event() {
        let (events, _) = read_all(&[b"error: {\"message\":\"x\"}\n\ndata: 2\n\n"]);
        assert_eq!(
            events,
            vec![SseEvent::Error("{\"message\":\"x\"}".to_owned()), d("2")]
        );
        let (_, rest) = read_all(&[b"error: late"]);
        assert_eq!(rest, Some(SseEvent::Error("late".to_owned())));
    }
}
