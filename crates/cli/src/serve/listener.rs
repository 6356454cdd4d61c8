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

/// Serves `app` on `listener` until `shutdown` completes, then lets requests in flight finish
/// for at most `timeouts.shutdown`.
pub(super) async fn serve(listener: TcpListener, app: Router, timeouts: Timeouts, shutdown: impl Future<Output = ()>) {
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
        let connection = graceful.watch(http.serve_connection(TokioIo::new(Box::pin(stream)), TowerToHyperService::new(app.clone())));
        tokio::spawn(connection);
    }
    drop(listener);
    let open = graceful.count();
    if tokio::time::timeout(timeouts.shutdown, graceful.shutdown()).await.is_err() {
        eprintln!("decider: closing the connections still open {} s after shutdown began ({open} were open then)", timeouts.shutdown.as_secs());
    }
}
