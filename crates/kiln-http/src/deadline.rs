//! A deadline for a request's whole body. An idle-between-reads timeout does not stop a
//! client that trickles one byte at a time, so the clock runs from the request's head
//! to the body's end. The body fails with [`BodyTimeout`] past it; the route that reads
//! the body turns that into a 408 ([`is_body_timeout`]). Responses are not touched.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{sleep, Sleep};

/// The error a body past its deadline fails with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimeout(pub Duration);

/// Middleware: gives each request's body `limit` from now to arrive.
pub async fn body_deadline(limit: Duration, req: Request, next: Next) -> Response {
    let req = req.map(|body| {
        Body::new(DeadlineBody {
            inner: body,
            limit,
            sleep: Box::pin(sleep(limit)),
        })
    });
    next.run(req).await
}

/// Whether `e` (or an error it wraps) is a [`BodyTimeout`].
pub fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<BodyTimeout>() {
            return true;
        }
        cur = e.source();
    }
    false
}

struct DeadlineBody {
    inner: Body,
    limit: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(self.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
