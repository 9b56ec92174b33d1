//! The socket side of the server: a listener with a configurable backlog, an accept loop
//! that never waits on anything but `accept`, a cap on open connections (one more gets
//! `429` with `Retry-After` and is closed, as a full queue is answered), and two
//! per-connection timeouts: a request's headers must arrive within the header-read timeout
//! of its first byte (a slow-loris client is closed), and a keep-alive connection with no
//! request in flight is closed after the idle timeout. A request in flight (a long
//! non-streamed generation, a stream) is never timed out here.
//!
//! Connections are served by hyper (HTTP/1.1, and HTTP/2 with prior knowledge) with the
//! axum router as the service; `TCP_NODELAY` is set on each (see [`nodelay_enabled`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tower::ServiceExt;

use crate::error::ApiError;

/// uvicorn's default backlog (what vLLM's server runs with); Linux caps it at
/// `net.core.somaxconn` (4096 on current kernels).
pub const DEFAULT_BACKLOG: u32 = 2048;
/// Open connections served at once; one more is answered 429 and closed.
pub const DEFAULT_MAX_CONNECTIONS: usize = 2048;
/// From a request's first byte to the end of its headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// An open connection with no request in flight (uvicorn's `timeout_keep_alive`, as vLLM
/// runs it).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Socket settings of `wring serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenConfig {
    /// Pending connections the kernel queues before `accept`.
    pub backlog: u32,
    /// Open connections served at once (at least 1).
    pub max_connections: usize,
    /// None = no limit.
    pub header_read_timeout: Option<Duration>,
    /// None = no limit.
    pub idle_timeout: Option<Duration>,
}

impl Default for ListenConfig {
    fn default() -> Self {
        Self {
            backlog: DEFAULT_BACKLOG,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_read_timeout: Some(DEFAULT_HEADER_READ_TIMEOUT),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
        }
    }
}

/// A listener on `addr` with `backlog` pending connections (`SO_REUSEADDR`, so a restart
/// does not wait for old sockets in TIME_WAIT).
pub fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Accepts and serves connections until `shutdown` resolves; then stops accepting, asks
/// every open connection to finish its request in flight and close, and returns once all
/// have closed.
pub async fn run(
    listener: TcpListener,
    router: Router,
    config: ListenConfig,
    retry_after_s: u64,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let max = config.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let nodelay = nodelay_enabled();
    let mut refused = RefusalLog::default();
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);
    loop {
        let (tcp, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_error(&e).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        prepare(&tcp, nodelay);
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let conn = Conn {
                    builder: builder.clone(),
                    router: router.clone(),
                    config,
                    stop: stop_rx.clone(),
                };
                tokio::spawn(async move {
                    conn.serve(tcp).await;
                    drop(slot);
                });
            }
            Err(_) => {
                refused.note(max);
                tokio::spawn(refuse(tcp, retry_after_s));
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every slot back = every connection closed.
    let _ = slots.acquire_many(max as u32).await;
    Ok(())
}

/// Whether accepted connections get `TCP_NODELAY`. Why they do: a stream is many small SSE
/// writes, and with Nagle's algorithm each small write that follows an unacknowledged one
/// waits for the client's delayed ACK (40 ms on Linux). Measured on the H200: a ~40 ms stall
/// in nearly every stream, a median first token of 31 ms instead of 17, and each finished
/// request's last event held back while its slot sat idle. `WRING_HTTP_NODELAY=off` keeps
/// Nagle on: only for measuring what this costs.
pub fn nodelay_enabled() -> bool {
    std::env::var("WRING_HTTP_NODELAY").map_or(true, |v| v.trim() != "off")
}

/// Socket options of an accepted connection: `TCP_NODELAY` (see [`nodelay_enabled`]).
pub fn prepare(tcp: &TcpStream, nodelay: bool) {
    if nodelay {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY could not be set on a connection: {e}");
        }
    }
}

/// What `accept` failing means: a connection that died in the queue is nothing; running
/// out of file descriptors is worth a warning and a short pause (the cap should keep us
/// below the limit; `wring serve` raises the soft limit at start-up).
async fn accept_error(e: &std::io::Error) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    ) {
        return;
    }
    tracing::warn!("accept failed: {e}; retrying in 10 ms");
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// Logs refused connections at most once a second.
#[derive(Default)]
struct RefusalLog {
    since_log: u64,
    last: Option<Instant>,
}

impl RefusalLog {
    fn note(&mut self, max: usize) {
        self.since_log += 1;
        if self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            tracing::warn!(
                "connection cap reached ({max} open, --max-connections): refused {} connection(s) with 429",
                self.since_log
            );
            self.since_log = 0;
            self.last = Some(Instant::now());
        }
    }
}

/// Answers a connection over the cap: `429` with `Retry-After` and an OpenAI-shaped body,
/// then close (after reading what the client sent, briefly, so the close is not a reset
/// that loses the answer).
async fn refuse(mut tcp: TcpStream, retry_after_s: u64) {
    let body = ApiError::queue_full(
        "The server has too many open connections; retry later.",
        retry_after_s,
    )
    .body_json();
    let head = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: {retry_after_s}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let answer = async {
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(body.as_bytes()).await?;
        tcp.shutdown().await?;
        let mut sink = [0u8; 4096];
        loop {
            use tokio::io::AsyncReadExt;
            if tcp.read(&mut sink).await? == 0 {
                return Ok::<_, std::io::Error>(());
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), answer).await;
}

/// One accepted connection and what serving it needs.
struct Conn {
    builder: hyper_util::server::conn::auto::Builder<TokioExecutor>,
    router: Router,
    config: ListenConfig,
    stop: watch::Receiver<bool>,
}

impl Conn {
    async fn serve(mut self, tcp: TcpStream) {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            inner: tcp,
            activity: activity.clone(),
        });
        let router = self.router.clone();
        let on_request = activity.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let in_flight = InFlight::begin(on_request.clone());
                let router = router.clone();
                async move {
                    let resp = router.oneshot(req.map(Body::new)).await?;
                    Ok::<_, std::convert::Infallible>(resp.map(|body| {
                        Body::new(GuardedBody {
                            inner: body,
                            _in_flight: in_flight,
                        })
                    }))
                }
            });
        let conn = self.builder.serve_connection(io, service);
        tokio::pin!(conn);
        let mut stopping = *self.stop.borrow();
        if stopping {
            conn.as_mut().graceful_shutdown();
        }
        loop {
            let deadline = activity.deadline(&self.config);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = activity.changed.notified() => {}
                _ = sleep_until(deadline) => {
                    if let Some(why) = activity.expired(&self.config) {
                        tracing::debug!("closing a connection: {why}");
                        return; // dropping the connection closes the socket
                    }
                }
                changed = self.stop.changed(), if !stopping => {
                    stopping = true;
                    if changed.is_ok() {
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// What a connection is doing, for its timeouts: requests in flight (from the end of their
/// headers until their response body is dropped), when the last one ended, and when the
/// first byte of the next request's head arrived.
struct Activity {
    in_flight: AtomicUsize,
    state: Mutex<Quiet>,
    /// Wakes the connection's watch when its deadline may have moved.
    changed: tokio::sync::Notify,
}

#[derive(Clone, Copy)]
struct Quiet {
    /// Accept, or the end of the last response.
    idle_since: Instant,
    /// The first byte read while no request was in flight.
    head_started: Option<Instant>,
}

impl Activity {
    fn new() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            state: Mutex::new(Quiet {
                idle_since: Instant::now(),
                head_started: None,
            }),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn quiet(&self) -> Quiet {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut Quiet)) {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn on_read(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0 {
            let mut first = false;
            self.update(|q| {
                if q.head_started.is_none() {
                    q.head_started = Some(Instant::now());
                    first = true;
                }
            });
            if first {
                self.changed.notify_one();
            }
        }
    }

    /// When the connection should be looked at again; None while a request is in flight.
    fn deadline(&self, c: &ListenConfig) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let q = self.quiet();
        match q.head_started {
            Some(t) => c.header_read_timeout.map(|d| t + d),
            None => c.idle_timeout.map(|d| q.idle_since + d),
        }
    }

    /// Why the connection must close now, if it must.
    fn expired(&self, c: &ListenConfig) -> Option<&'static str> {
        let due = self.deadline(c)?;
        if Instant::now() < due {
            return None;
        }
        Some(if self.quiet().head_started.is_some() {
            "request headers not complete within the header-read timeout"
        } else {
            "idle past the keep-alive timeout"
        })
    }
}

/// A request in flight on a connection; dropped with its response body.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.update(|q| q.head_started = None);
        activity.changed.notify_one();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.update(|q| {
            q.idle_since = Instant::now();
            q.head_started = None;
        });
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.changed.notify_one();
    }
}

/// A response body that keeps its request counted as in flight until hyper drops it.
struct GuardedBody {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, noting when bytes arrive.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.on_read();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Raises this process's soft limit on open files to its hard limit (a server with
/// thousands of connections needs more than the usual 1,024) and returns the limit now in
/// force; None where it cannot be read.
pub fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        #[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux, not everywhere
        Some(lim.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    None
}
