//! The server's door, on loopback with bounded loops: a burst of 1,200 connections fits the
//! listen backlog and every one is answered; connections over the cap get 429 with Retry-After; a
//! client that never finishes its headers (slow-loris) and an idle keep-alive connection are
//! closed after their timeouts while a long request in flight is not; the bearer scheme is
//! case-insensitive; CORS is off unless asked; and the request log has a real time to first
//! token for non-streamed requests.

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wring_server::listen::ListenConfig;
use wring_server::{AppState, ServerConfig};

const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";

/// Sends `request` and reads until the server closes; the status line's code.
async fn exchange(mut tcp: TcpStream, request: &[u8]) -> std::io::Result<(u16, String)> {
    tcp.write_all(request).await?;
    let mut out = Vec::new();
    tcp.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((code, text))
}

/// Waits until the server closes `tcp` (a read of 0 bytes, or a reset); how long it took.
async fn closed_within(tcp: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout(limit.saturating_sub(t0.elapsed()), tcp.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(t0.elapsed()),
            Ok(Ok(_)) => continue,
        }
    }
}

fn with_listen(listen: ListenConfig) -> ServerConfig {
    ServerConfig { listen, ..config() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_1200_connections_fits_the_backlog_and_each_is_answered() {
    // More than the 1,024 of tokio's default listener, which the server had, and within the
    // kernel's own cap (net.core.somaxconn, 4,096 on current kernels).
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096);
    let n = 1200.min(somaxconn);
    // Both ends of every connection live in this process.
    wring_server::listen::raise_open_files_limit();
    let cfg = config();
    assert!(cfg.listen.backlog as usize >= n, "the default backlog");
    // Bound, but not yet accepting: only the kernel's queue holds the burst, as when every
    // worker is busy. With the old backlog of 128 most of these connects would hang.
    let listener =
        wring_server::listen::bind("127.0.0.1:0".parse().unwrap(), cfg.listen.backlog).unwrap();
    let addr = listener.local_addr().unwrap();
    let connects: Vec<_> = (0..n)
        .map(|_| {
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(addr)).await
            })
        })
        .collect();
    let mut streams = Vec::with_capacity(n);
    for c in connects {
        let stream = c
            .await
            .unwrap()
            .expect("a connect waited for the backlog")
            .expect("a connect was refused");
        streams.push(stream);
    }
    // Now serve: every queued connection is accepted and answered.
    let state = AppState::new(shared_engine().0, shared_engine().1, cfg);
    // Never shut down: that would stop the engine the other tests share.
    tokio::spawn(wring_server::serve(
        listener,
        state,
        std::future::pending::<()>(),
    ));
    let t0 = Instant::now();
    let answers: Vec<_> = streams
        .into_iter()
        .map(|s| tokio::spawn(exchange(s, HEALTH)))
        .collect();
    for a in answers {
        let (code, text) = a.await.unwrap().expect("no reset");
        assert_eq!(code, 200, "{text}");
    }
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "{n} queued connections took {:?}",
        t0.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_get_429_with_retry_after() {
    let srv = serve(
        shared_engine(),
        with_listen(ListenConfig {
            max_connections: 4,
            ..ListenConfig::default()
        }),
    )
    .await;
    let addr = srv.base.trim_start_matches("http://").to_string();
    // Four open connections (each mid-request: headers not finished) fill the cap…
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
        held.push(s);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // …so the fifth is answered 429 at once and closed.
    let extra = TcpStream::connect(&addr).await.unwrap();
    let (code, text) = tokio::time::timeout(Duration::from_secs(5), exchange(extra, HEALTH))
        .await
        .expect("the refusal is prompt")
        .unwrap();
    assert_eq!(code, 429, "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 1"),
        "{text}"
    );
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    // A slot freed is a slot served.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = TcpStream::connect(&addr).await.unwrap();
    let (code, _) = exchange(again, HEALTH).await.unwrap();
    assert_eq!(code, 200);
    drop(held);
    // No shutdown: the engine is shared with the other tests.
    drop(srv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_loris_is_closed_after_the_header_read_timeout() {
    let timeout = Duration::from_millis(400);
    let srv = serve(
        shared_engine(),
        with_listen(ListenConfig {
            header_read_timeout: Some(timeout),
            idle_timeout: Some(Duration::from_secs(30)),
            ..ListenConfig::default()
        }),
    )
    .await;
    let addr = srv.base.trim_start_matches("http://").to_string();
    // 200 clients each trickle a header line every 100 ms and never end the headers.
    let clients: Vec<_> = (0..200)
        .map(|_| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut s = TcpStream::connect(&addr).await.unwrap();
                s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\n")
                    .await
                    .unwrap();
                let t0 = Instant::now();
                for i in 0..100 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let line = format!("X-Slow-{i}: 1\r\n");
                    if s.write_all(line.as_bytes()).await.is_err() {
                        return Some(t0.elapsed()); // the server closed it
                    }
                    let mut buf = [0u8; 256];
                    match tokio::time::timeout(Duration::from_millis(1), s.read(&mut buf)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => return Some(t0.elapsed()),
                        _ => {}
                    }
                }
                None
            })
        })
        .collect();
    for c in clients {
        let closed = c
            .await
            .unwrap()
            .expect("a slow-loris connection stayed open for 10 s");
        assert!(
            closed < Duration::from_secs(3),
            "closed only after {closed:?}"
        );
    }
    // Ordinary requests still go through.
    let s = TcpStream::connect(&addr).await.unwrap();
    assert_eq!(exchange(s, HEALTH).await.unwrap().0, 200);
    // No shutdown: the engine is shared with the other tests.
    drop(srv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_close_but_requests_in_flight_do_not() {
    let idle = Duration::from_millis(300);
    let srv = serve(
        shared_engine(),
        with_listen(ListenConfig {
            idle_timeout: Some(idle),
            ..ListenConfig::default()
        }),
    )
    .await;
    let addr = srv.base.trim_start_matches("http://").to_string();
    // A keep-alive connection that answered one request and then sits idle is closed.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let closed = closed_within(&mut s, Duration::from_secs(5))
        .await
        .expect("an idle connection stayed open");
    assert!(closed >= idle - Duration::from_millis(50), "{closed:?}");
    // One that never sends anything is closed too.
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(5))
        .await
        .is_some());
    // A non-streamed generation that outlasts the idle timeout is answered in full.
    let body = json!({"model": "smol", "messages": [{"role": "user", "content": "Tell me a story."}],
                      "max_tokens": 40, "ignore_eos": true, "temperature": 0});
    let t0 = Instant::now();
    let resp = srv
        .post("/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 40);
    assert!(
        t0.elapsed() > idle,
        "the request must outlast the idle timeout to test anything ({:?})",
        t0.elapsed()
    );
    // No shutdown: the engine is shared with the other tests.
    drop(srv);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bearer_scheme_is_case_insensitive_and_cors_is_off_by_default() {
    let srv = serve(shared_engine(), config()).await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let r = srv
            .http
            .get(format!("{}/v1/models", srv.base))
            .header("Authorization", format!("{scheme} {KEY}"))
            .header("Origin", "http://app.test")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scheme}");
        assert!(r.headers().get("access-control-allow-origin").is_none());
    }
    let r = srv
        .http
        .get(format!("{}/v1/models", srv.base))
        .header("Authorization", format!("Basic {KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // No shutdown: the engine is shared with the other tests.
    drop(srv);
}

/// Log lines of this test binary, captured.
fn captured_log() -> Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        tracing_subscriber::fmt()
            .with_env_filter("wring::request=info")
            .with_ansi(false)
            .with_writer(move || Writer(sink.clone()))
            .init();
        buf
    })
    .clone()
}

struct Writer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streamed_requests_log_their_time_to_first_token() {
    let log = captured_log();
    let srv = serve(shared_engine(), config()).await;
    for body in [
        chat_body("What is 2+2?", 4),
        json!({"model": "smol", "prompt": "Hello", "max_tokens": 3}),
    ] {
        let path = if body.get("prompt").is_some() {
            "/v1/completions"
        } else {
            "/v1/chat/completions"
        };
        let resp = srv.post(path, &body).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        let id = v["id"].as_str().unwrap().to_string();
        let text = String::from_utf8(log.lock().unwrap().clone()).unwrap();
        let line = text
            .lines()
            .find(|l| l.contains(&id) && l.contains("request done"))
            .unwrap_or_else(|| panic!("no log line for {id}:\n{text}"));
        let ttft: f64 = line
            .split("ttft_ms=")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no ttft_ms number: {line}"));
        let latency: f64 = line
            .split("latency_ms=")
            .nth(1)
            .and_then(|t| t.split_whitespace().next())
            .and_then(|t| t.parse().ok())
            .unwrap();
        assert!(ttft.is_finite() && ttft > 0.0 && ttft <= latency, "{line}");
    }
    // No shutdown: the engine is shared with the other tests.
    drop(srv);
}
