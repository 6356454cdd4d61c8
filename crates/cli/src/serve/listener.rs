//! The accept loop: HTTP/1.1 connections (as uvicorn serves the reference) with a header
//! timeout, and a graceful shutdown bounded in time.
//!
//! hyper's header timeout runs whenever a connection waits for a request's headers: on a new
//! connection and between the requests of a keep-alive one. So it is also the idle timeout:
//! a client that connects and says nothing, or stays connected after its answer, is closed
//! after it. The body's timeout is the body reader's (`body.rs`). A write that makes no progress
//! for the write timeout (a client that stopped reading its answers) closes the connection.

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
    /// Time requests in flight get to finish once shutdown starts; then their connections close.
    pub shutdown: Duration,
}

/// What is told of a request hyper refused itself, malformed HTTP: its status and why.
pub(super) type Malformed = std::sync::Arc<dyn Fn(StatusCode, &hyper::Error) + Send + Sync>;

/// Serves `app` on `listener` until `shutdown` completes, then lets requests in flight finish
/// for at most `timeouts.shutdown`. Requests too malformed to reach `app` are answered by hyper
/// and told to `malformed`.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: Timeouts,
    shutdown: impl Future<Output = ()>,
    malformed: Malformed,
) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(timeouts.header);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: the connections open now still close in time.
                    eprintln!("decider: accepting a connection: {e}");
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
    if tokio::time::timeout(timeouts.shutdown, graceful.shutdown()).await.is_err() {
        eprintln!(
            "decider: closing the connections still open {} s after shutdown began ({open} were open then)",
            timeouts.shutdown.as_secs()
        );
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
