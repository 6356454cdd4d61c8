//! The accept loop: HTTP/1.1 connections (as uvicorn serves the reference) with a header
//! timeout, and a graceful shutdown bounded in time.
//!
//! hyper's header timeout runs whenever a connection waits for a request's headers: on a new
//! connection and between the requests of a keep-alive one. So it is also the idle timeout:
//! a client that connects and says nothing, or stays connected after its answer, is closed
//! after it. The body's timeout is the body reader's (`body.rs`). A write that makes no progress
//! for the write timeout (a client that stopped reading its answers) closes the connection.
//!
//! What a connection holds outside the memory budget is bounded: its read buffer by
//! [`HEAD_BUFFER_BYTES`] (a request head that does not fit is a 431), and the task and buffers
//! hyper keeps per connection.
//!
//! A client that closes its side of the connection (a FIN) has left: its request is dropped, and
//! its rows and memory released (`queue.rs`). A client that only half-closes after its request
//! cannot be told from one that left, so by default it gets no answer either, as uvicorn (which
//! serves the reference), vLLM and llama-server treat it: answering it would have the model run
//! the work of every client that left. `--half-close` answers it, at that price.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_io_timeout::TimeoutStream;

#[derive(Clone, Copy)]
pub(super) struct Timeouts {
    /// Time a connection may wait for (or take to send) a request's headers.
    pub header: Duration,
    /// Time one write of an answer may wait for the client to read.
    pub write: Duration,
    /// Time requests in flight get to finish once shutdown starts; then those still waiting for
    /// the model are answered 503, and the connections close.
    pub shutdown: Duration,
}

/// How connections are served: their timeouts, and whether a client that half-closes after its
/// request is answered (`--half-close`).
#[derive(Clone, Copy)]
pub(super) struct Connections {
    pub timeouts: Timeouts,
    pub half_close: bool,
}

/// Bytes a connection buffers while it reads a request head, at most: an unfinished head holds
/// no more. uvicorn, which serves the reference, refuses heads past 16 KiB (h11's
/// `max_incomplete_event_size`); this is hyper's minimum times eight.
pub(super) const HEAD_BUFFER_BYTES: usize = 64 << 10;

/// What is told of a request hyper refused itself, malformed HTTP: its status and why.
pub(super) type Malformed = std::sync::Arc<dyn Fn(StatusCode, &hyper::Error) + Send + Sync>;

/// Time the 503s of requests cut off by the shutdown timeout get to be written.
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// Serves `app` on `listener` until `shutdown` completes, then lets requests in flight finish
/// for at most `connections.timeouts.shutdown`; then sets `deadline` (the requests still waiting for the
/// model answer 503) and closes what is still open [`ANSWER_GRACE`] later. Requests too
/// malformed to reach `app` are answered by hyper and told to `malformed`.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    connections: Connections,
    shutdown: impl Future<Output = ()>,
    deadline: tokio::sync::watch::Sender<bool>,
    malformed: Malformed,
) {
    let Connections { timeouts, half_close } = connections;
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .max_buf_size(HEAD_BUFFER_BYTES)
        .half_close(half_close);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: the connections open now still close in time.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let mut stream = TimeoutStream::new(stream);
        stream.set_write_timeout(Some(timeouts.write));
        let connection = graceful
            .watch(http.serve_connection(TokioIo::new(Box::pin(stream)), TowerToHyperService::new(app.clone())));
        let malformed = malformed.clone();
        tokio::spawn(async move {
            if let Err(e) = connection.await
                && e.is_parse()
            {
                malformed(hyper_status(&e), &e);
            }
        });
    }
    drop(listener);
    let open = graceful.count();
    let mut closed = std::pin::pin!(graceful.shutdown());
    if tokio::time::timeout(timeouts.shutdown, &mut closed).await.is_err() {
        tracing::warn!(
            "answering 503 to the requests still waiting {} s after shutdown began ({open} connections were open then)",
            timeouts.shutdown.as_secs()
        );
        deadline.send_replace(true);
        if tokio::time::timeout(ANSWER_GRACE, closed).await.is_err() {
            tracing::warn!("closing the connections still open");
        }
    }
}

/// The status hyper answers a parse error with (`proto/h1/role.rs`, `Server::on_error`): 431
/// for a head too large, 414 for a URI too long, 400 otherwise.
fn hyper_status(e: &hyper::Error) -> StatusCode {
    match e.is_parse_too_large() {
        true if e.to_string().contains("URI") => StatusCode::URI_TOO_LONG,
        true => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        false => StatusCode::BAD_REQUEST,
    }
}
