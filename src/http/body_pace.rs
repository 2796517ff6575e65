//! Request bodies must keep moving: one that sends nothing for `--body-idle-timeout` seconds, or that
//! has arrived slower than `--body-min-rate` bytes a second on average once that long has passed, is
//! cut, and the request answered with what the handler makes of a failed body (a 4xx). Without it a
//! client dripping a byte every few seconds holds a connection, a request and its staged file forever.

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures_util::{Stream, StreamExt};

#[derive(Clone, Copy, Debug)]
pub struct BodyPace {
    pub idle_timeout: Duration,
    /// Bytes a second, on average from the body's start, once `idle_timeout` has passed.
    pub min_rate: u64,
}

/// The middleware: bodies that are not already complete are read through [`paced`].
pub async fn pace_bodies(State(pace): State<BodyPace>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let paced = Body::from_stream(paced(body.into_data_stream(), pace));
    next.run(Request::from_parts(parts, paced)).await
}

struct Progress<S> {
    inner: S,
    started: Instant,
    received: u64,
    finished: bool,
}

fn cut(detail: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, detail)
}

/// `inner`'s chunks, or an error that ends the body when it stalls or crawls.
pub fn paced<S, E>(inner: S, pace: BodyPace) -> impl Stream<Item = Result<Bytes, std::io::Error>>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::error::Error + Send + Sync + 'static,
{
    let progress = Progress {
        inner,
        started: Instant::now(),
        received: 0,
        finished: false,
    };
    futures_util::stream::unfold(progress, move |mut progress| async move {
        if progress.finished {
            return None;
        }
        let next = tokio::time::timeout(pace.idle_timeout, progress.inner.next()).await;
        let item = match next {
            Err(_) => Err(cut(format!(
                "the request body sent nothing for {} s (--body-idle-timeout)",
                pace.idle_timeout.as_secs_f64()
            ))),
            Ok(None) => return None,
            Ok(Some(Err(err))) => Err(std::io::Error::other(err)),
            Ok(Some(Ok(chunk))) => {
                let length = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
                progress.received = progress.received.saturating_add(length);
                let elapsed = progress.started.elapsed();
                let due = pace.min_rate.saturating_mul(elapsed.as_secs());
                if elapsed > pace.idle_timeout && progress.received < due {
                    Err(cut(format!(
                        "the request body arrived at under {} bytes/s ({} bytes in {} s; \
                         --body-min-rate)",
                        pace.min_rate,
                        progress.received,
                        elapsed.as_secs()
                    )))
                } else {
                    Ok(chunk)
                }
            }
        };
        progress.finished = item.is_err();
        Some((item, progress))
    })
}
