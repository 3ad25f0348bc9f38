//! The answers hyper writes itself, to a request head it cannot parse (a
//! URI over 65,534 bytes: 414; headers over its buffer: 431; a request line
//! or header that is not HTTP/1.1: 400), before any route sees a request:
//! a status, `content-length: 0`, and the connection closed. A caller then
//! learns nothing of what to fix, so the connection's writes are watched
//! and such an answer is written as the problem the API promises for
//! every 4xx ([`problem_for`]). The service's own answers always have a
//! body, so a bodiless 4xx or 5xx head on the wire is hyper's.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::service::http::problem::{PROBLEM_JSON, Problem};

/// The problem of hyper's bare answer with `status`.
pub(crate) fn problem_for(status: u16) -> Problem {
    match status {
        414 => Problem::new(
            "uri-too-long",
            "URI too long",
            414,
            "the request's path and query are over 65,534 bytes, more than a role (at most 32,767 bytes, percent-encoded) and a token (<producer id>:<producer epoch>, at most 26 characters) need: shorten them, or check many tokens with POST /authority/check",
        )
        .with_field("uri"),
        431 => Problem::new(
            "headers-too-large",
            "Request headers too large",
            431,
            "the request's headers are over the limit of the server (about 400 KiB, or more than 100 headers): send fewer or shorter headers",
        )
        .with_field("headers"),
        400 => Problem::new(
            "invalid-request",
            "Invalid request",
            400,
            "the request line or a header is not HTTP/1.1 (RFC 9112): check the method, the path (no spaces or control characters: percent-encode them), the version and each header's name and value",
        )
        .with_field("request"),
        other => Problem::new(
            "unreadable-request",
            "Unreadable request",
            other,
            "the server could not read the request as HTTP/1.1: check it against RFC 9112",
        )
        .with_field("request"),
    }
}

/// The status of `head` when it is a whole bodiless 4xx or 5xx head.
fn bare_error(head: &[u8]) -> Option<u16> {
    let status = head.strip_prefix(b"HTTP/1.1 ")?.get(..3)?;
    let status: u16 = std::str::from_utf8(status).ok()?.parse().ok()?;
    let whole = head.ends_with(b"\r\n\r\n");
    let bodiless = head
        .windows(b"\r\ncontent-length: 0\r\n".len())
        .any(|w| w.eq_ignore_ascii_case(b"\r\ncontent-length: 0\r\n"));
    ((400..600).contains(&status) && whole && bodiless).then_some(status)
}

/// The bytes written instead of hyper's bare answer with `status`.
fn answer(status: u16, reason: &str) -> Vec<u8> {
    let mut body = serde_json::to_vec(&problem_for(status)).unwrap_or_default();
    body.push(b'\n');
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {PROBLEM_JSON}\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// A connection whose bare error answers are written as problems.
#[derive(Debug)]
pub(crate) struct ProblemHeads<IO> {
    inner: IO,
    /// An answer being written instead of a head of `len` bytes: the
    /// bytes, how many are written.
    instead: Option<(Vec<u8>, usize, usize)>,
}

impl<IO> ProblemHeads<IO> {
    pub(crate) fn new(inner: IO) -> ProblemHeads<IO> {
        ProblemHeads {
            inner,
            instead: None,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for ProblemHeads<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for ProblemHeads<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.instead.is_none() {
            match bare_error(buf) {
                None => return Pin::new(&mut this.inner).poll_write(cx, buf),
                Some(status) => {
                    let reason = axum::http::StatusCode::from_u16(status)
                        .ok()
                        .and_then(|s| s.canonical_reason())
                        .unwrap_or("Error");
                    this.instead = Some((answer(status, reason), 0, buf.len()));
                }
            }
        }
        let Some((bytes, written, len)) = &mut this.instead else {
            return Poll::Ready(Ok(0));
        };
        while *written < bytes.len() {
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        let len = *len;
        this.instead = None;
        Poll::Ready(Ok(len))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_bodiless_error_head_is_hypers() {
        let hyper = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: Sat, 05 Dec 2026 21:35:00 GMT\r\n\r\n";
        assert_eq!(bare_error(hyper), Some(414));
        let ours = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/problem+json\r\ncontent-length: 120\r\n\r\n";
        assert_eq!(bare_error(ours), None);
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_error(ok), None);
        let body = b"{\"status\":\"HTTP/1.1 400 \"}";
        assert_eq!(bare_error(body), None);
        let answer = String::from_utf8(answer(414, "URI Too Long")).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let problem: Problem = serde_json::from_str(body).unwrap();
        assert_eq!(
            (problem.status, problem.field.as_deref()),
            (414, Some("uri"))
        );
    }
}
