//! Server-sent events framing for the OpenAI-style streams of `serve --http` and of the
//! HTTP system under test (WHATWG HTML Living Standard, §9.2 "Server-sent events": the
//! `text/event-stream` format). Our own small module: the HTTP layer (hyper, ureq) carries
//! the bytes, and no lean, maintained crate offers just the framing for both ends.
//!
//! - [`event`]: one `data:` event as bytes (the payload is JSON, one line);
//! - [`SseDecoder`]: an incremental decoder of a byte stream into events' data fields, with a
//!   cap on the length of a line so a hostile server cannot grow it without bound.

/// One event with `data` as its only field: `data: <payload>` and a blank line.
pub fn event(data: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 8);
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.trim_end_matches('\r').as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("event-stream line longer than {cap} bytes")]
    LineTooLong { cap: usize },
    #[error("event-stream line is not UTF-8")]
    NotUtf8,
}

/// Incremental decoder: feed bytes as they arrive ([`SseDecoder::push`]) and take the `data`
/// of every event completed by them. Lines end with LF, CR or CRLF; `:` lines are comments;
/// fields other than `data` (`event`, `id`, `retry`) are accepted and ignored; an event's
/// data lines are joined with LF; an event with no data line is not dispatched.
#[derive(Debug)]
pub struct SseDecoder {
    line: Vec<u8>,
    data: Option<String>,
    cap: usize,
    /// The previous byte was CR (a following LF belongs to the same line end).
    after_cr: bool,
}

impl SseDecoder {
    /// A decoder refusing lines longer than `cap` bytes.
    pub fn new(cap: usize) -> Self {
        SseDecoder {
            line: Vec::new(),
            data: None,
            cap,
            after_cr: false,
        }
    }

    /// Feeds `bytes`; returns the data of each event they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseError> {
        let mut out = Vec::new();
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
                    self.end_line(&line, &mut out)?;
                }
                _ => {
                    if self.line.len() >= self.cap {
                        return Err(SseError::LineTooLong { cap: self.cap });
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(out)
    }

    /// Bytes held for an unfinished line or event (a stream that ends here was cut).
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.data.is_some()
    }

    fn end_line(&mut self, line: &[u8], out: &mut Vec<String>) -> Result<(), SseError> {
        if line.is_empty() {
            if let Some(d) = self.data.take() {
                out.push(d);
            }
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut SseDecoder, chunks: &[&[u8]]) -> Vec<String> {
        chunks.iter().flat_map(|c| d.push(c).unwrap()).collect()
    }

    #[test]
    fn events_split_anywhere_decode_the_same() {
        let stream = b"data: {\"a\":1}\n\n: keep-alive\n\nevent: x\ndata: two\ndata: lines\n\ndata: [DONE]\n\n";
        let whole = all(&mut SseDecoder::new(1024), &[stream]);
        assert_eq!(whole, vec!["{\"a\":1}", "two\nlines", "[DONE]"]);
        for cut in 0..stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(
                all(&mut SseDecoder::new(1024), &[a, b]),
                whole,
                "cut at {cut}"
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(all(&mut SseDecoder::new(1024), &bytes), whole);
    }

    #[test]
    fn line_ends_cr_crlf_and_lf_are_equivalent() {
        let lf = all(&mut SseDecoder::new(64), &[b"data: x\n\ndata:y\n\n"]);
        let crlf = all(
            &mut SseDecoder::new(64),
            &[b"data: x\r\n\r\ndata:y\r\n\r\n"],
        );
        let cr = all(&mut SseDecoder::new(64), &[b"data: x\r\rdata:y\r\r"]);
        // "data:y" has no space to strip: the value is "y" either way.
        assert_eq!(lf, vec!["x", "y"]);
        assert_eq!(crlf, lf);
        assert_eq!(cr, lf);
        // A CRLF split between two pushes is still one line end.
        let mut d = SseDecoder::new(64);
        assert!(d.push(b"data: x\r").unwrap().is_empty());
        assert_eq!(d.push(b"\n\r\n").unwrap(), vec!["x"]);
    }

    #[test]
    fn encoder_round_trips_through_decoder() {
        for payload in ["{}", "a\nb", "", "data: nested"] {
            let got = SseDecoder::new(64).push(&event(payload)).unwrap();
            assert_eq!(got, vec![payload.to_string()]);
        }
    }

    #[test]
    fn hostile_streams_are_refused_or_held() {
        let mut d = SseDecoder::new(8);
        assert_eq!(
            d.push(b"data: 0123456789"),
            Err(SseError::LineTooLong { cap: 8 })
        );
        let mut d = SseDecoder::new(64);
        assert_eq!(d.push(b"data: \xff\xfe\n"), Err(SseError::NotUtf8));
        let mut d = SseDecoder::new(64);
        assert!(d.push(b"data: cut").unwrap().is_empty());
        assert!(d.has_partial());
        let mut d = SseDecoder::new(64);
        assert!(d.push(b"data: whole\n").unwrap().is_empty());
        assert!(
            d.has_partial(),
            "an event without its blank line is unfinished"
        );
    }
}
