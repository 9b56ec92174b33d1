//! `--kv-events-endpoint`: publishes the engine's KV-cache events over ZMQ in the wire
//! format vLLM's `ZmqEventPublisher` uses, which llm-d's KV-cache indexer and Dynamo's KV
//! router consume.
//!
//! Each message is three frames: the topic (`--kv-events-topic`; llm-d reads the pod and
//! model from `kv@<pod>@<model>`), an 8-byte big-endian sequence number (0, 1, … per
//! message), and a msgpack payload shaped like vLLM's `KVEventBatch` (msgspec structs with
//! `array_like=True`, tagged by class name):
//!
//! ```text
//! [ts, [event, ...]]
//! ["BlockStored", [hash, ...], parent_hash | nil, [token_id, ...], block_size, lora_id = nil, medium]
//! ["BlockRemoved", [hash, ...], medium]
//! ["AllBlocksCleared"]
//! ```
//!
//! Hashes are unsigned 64-bit integers (`kv_events.rs` in the engine says how they are
//! computed). The endpoint is bound when it names a wildcard host (`tcp://*:5557`) or an
//! ipc path, and connected to otherwise (`tcp://epp:5557`), as vLLM does. The publisher runs
//! on its own thread: it batches whatever the engine has reported since its last message.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::ser::{Serialize, SerializeSeq, SerializeTuple, Serializer};
use wring_engine::{KvEvent, KvEventSource};
use zeromq::{Socket, SocketSend, ZmqMessage};

/// Most events in one message.
const MAX_BATCH: usize = 4096;
/// Time a connected subscriber gets to send its subscription before the first message.
const SUBSCRIBE_SETTLE: std::time::Duration = std::time::Duration::from_millis(300);

/// Where and how events are published.
#[derive(Debug, Clone)]
pub struct KvPublisherConfig {
    pub endpoint: String,
    pub topic: String,
    /// Tokens per block (`block_size` of every `BlockStored`).
    pub block_size: usize,
    /// The cache tier events name: `GPU` for a CUDA device, `CPU` for host memory.
    pub medium: String,
}

/// Whether `endpoint` is one to bind (a wildcard host or an ipc path), as vLLM decides it.
pub fn binds(endpoint: &str) -> bool {
    endpoint.contains('*') || endpoint.contains("::") || endpoint.starts_with("ipc://")
}

/// Checks an endpoint's form before anything starts: `tcp://HOST:PORT` or `ipc://PATH`.
pub fn check_endpoint(endpoint: &str) -> anyhow::Result<()> {
    let ok = if let Some(rest) = endpoint.strip_prefix("tcp://") {
        rest.rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
    } else {
        endpoint
            .strip_prefix("ipc://")
            .is_some_and(|p| !p.is_empty())
    };
    if ok {
        Ok(())
    } else {
        anyhow::bail!(
            "{endpoint:?} is not a ZMQ endpoint: expected tcp://HOST:PORT (tcp://*:5557 binds on every interface) or ipc://PATH"
        )
    }
}

/// The zeromq crate binds to an address, not `*`: the wildcard becomes 0.0.0.0.
fn bind_address(endpoint: &str) -> String {
    endpoint.replacen("tcp://*:", "tcp://0.0.0.0:", 1)
}

/// Starts the publisher thread: binds (or starts connecting) before returning, so a port
/// in use fails the server's start-up. The thread ends when the engine drops its sink.
pub fn spawn(
    cfg: KvPublisherConfig,
    source: KvEventSource,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    check_endpoint(&cfg.endpoint)?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    let thread = std::thread::Builder::new()
        .name("wring-kv-events".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            runtime.block_on(publish(cfg, source, ready_tx));
        })
        .context("starting the KV-event publisher thread")?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(thread),
        Ok(Err(e)) => Err(e),
        Err(_) => anyhow::bail!("the KV-event publisher thread ended before it was ready"),
    }
}

async fn publish(
    cfg: KvPublisherConfig,
    mut source: KvEventSource,
    ready: std::sync::mpsc::Sender<anyhow::Result<()>>,
) {
    let mut socket = zeromq::PubSocket::new();
    if binds(&cfg.endpoint) {
        let addr = bind_address(&cfg.endpoint);
        match socket.bind(&addr).await {
            Ok(at) => tracing::info!("KV events: publishing on {at} (topic {:?})", cfg.topic),
            Err(e) => {
                let _ = ready.send(Err(anyhow::anyhow!(
                    "--kv-events-endpoint {}: cannot bind: {e}",
                    cfg.endpoint
                )));
                return;
            }
        }
        let _ = ready.send(Ok(()));
    } else {
        // A subscriber that binds (llm-d's indexer) may not be up yet: the server starts
        // anyway, and events wait in the channel (dropped past its capacity) until the
        // connection stands.
        let _ = ready.send(Ok(()));
        loop {
            match socket.connect(&cfg.endpoint).await {
                Ok(()) => {
                    tracing::info!(
                        "KV events: connected to {} (topic {:?})",
                        cfg.endpoint,
                        cfg.topic
                    );
                    // The subscriber's SUBSCRIBE arrives after the handshake; a message sent
                    // before it would be filtered out (ZMQ's slow joiner).
                    tokio::time::sleep(SUBSCRIBE_SETTLE).await;
                    break;
                }
                Err(e) => {
                    tracing::warn!("KV events: cannot connect to {} yet: {e}", cfg.endpoint);
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
    }
    let topic = bytes::Bytes::from(cfg.topic.clone().into_bytes());
    let mut seq: u64 = 0;
    let mut batch = Vec::new();
    while let Some(first) = source.rx.recv().await {
        batch.clear();
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match source.rx.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        let payload = match encode_batch(unix_seconds(), &batch, cfg.block_size, &cfg.medium) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("KV events: encoding a batch failed: {e:#}");
                continue;
            }
        };
        let frames = vec![
            topic.clone(),
            bytes::Bytes::copy_from_slice(&seq.to_be_bytes()),
            bytes::Bytes::from(payload),
        ];
        let msg = ZmqMessage::try_from(frames).expect("three frames");
        if let Err(e) = socket.send(msg).await {
            tracing::warn!("KV events: sending message {seq} failed: {e}");
        }
        seq += 1;
    }
    tracing::debug!("KV events: engine stopped after {seq} messages");
}

fn unix_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One message's payload: `[ts, [event, ...]]` in msgpack, adjacent removals merged into
/// one `BlockRemoved`.
pub fn encode_batch(
    ts: f64,
    events: &[KvEvent],
    block_size: usize,
    medium: &str,
) -> anyhow::Result<Vec<u8>> {
    let mut wire: Vec<Wire> = Vec::with_capacity(events.len());
    for e in events {
        match (e, wire.last_mut()) {
            (KvEvent::Removed { hashes }, Some(Wire::Removed(acc))) => acc.extend(hashes),
            (KvEvent::Removed { hashes }, _) => wire.push(Wire::Removed(hashes.clone())),
            (other, _) => wire.push(Wire::Event(other)),
        }
    }
    let batch = Batch {
        ts,
        events: &wire,
        block_size: block_size as u64,
        medium,
    };
    rmp_serde::to_vec(&batch).context("msgpack")
}

enum Wire<'a> {
    Event(&'a KvEvent),
    Removed(Vec<u64>),
}

struct Batch<'a> {
    ts: f64,
    events: &'a [Wire<'a>],
    block_size: u64,
    medium: &'a str,
}

struct WireEvent<'a> {
    event: &'a Wire<'a>,
    block_size: u64,
    medium: &'a str,
}

impl Serialize for Batch<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Events<'b>(&'b Batch<'b>);
        impl Serialize for Events<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.events.len()))?;
                for event in self.0.events {
                    seq.serialize_element(&WireEvent {
                        event,
                        block_size: self.0.block_size,
                        medium: self.0.medium,
                    })?;
                }
                seq.end()
            }
        }
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&self.ts)?;
        t.serialize_element(&Events(self))?;
        t.end()
    }
}

impl Serialize for WireEvent<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.event {
            Wire::Event(KvEvent::Stored {
                hashes,
                parent,
                tokens,
            }) => {
                let mut t = s.serialize_tuple(7)?;
                t.serialize_element("BlockStored")?;
                t.serialize_element(hashes)?;
                t.serialize_element(parent)?;
                t.serialize_element(tokens)?;
                t.serialize_element(&self.block_size)?;
                t.serialize_element(&None::<u64>)?; // lora_id: no adapters
                t.serialize_element(self.medium)?;
                t.end()
            }
            Wire::Event(KvEvent::Removed { hashes }) | Wire::Removed(hashes) => {
                let mut t = s.serialize_tuple(3)?;
                t.serialize_element("BlockRemoved")?;
                t.serialize_element(hashes)?;
                t.serialize_element(self.medium)?;
                t.end()
            }
            Wire::Event(KvEvent::AllCleared) => {
                let mut t = s.serialize_tuple(1)?;
                t.serialize_element("AllBlocksCleared")?;
                t.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_encode_as_vllm_array_like_msgpack() {
        let events = [
            KvEvent::AllCleared,
            KvEvent::Stored {
                hashes: vec![u64::MAX, 7],
                parent: None,
                tokens: vec![1, 300],
            },
            KvEvent::Removed { hashes: vec![5] },
            KvEvent::Removed { hashes: vec![6] },
        ];
        let bytes = encode_batch(1.5, &events, 1, "GPU").unwrap();
        let v: rmpv::Value = rmpv::decode::read_value(&mut &bytes[..]).unwrap();
        let expected = rmpv::Value::Array(vec![
            1.5.into(),
            rmpv::Value::Array(vec![
                rmpv::Value::Array(vec!["AllBlocksCleared".into()]),
                rmpv::Value::Array(vec![
                    "BlockStored".into(),
                    rmpv::Value::Array(vec![u64::MAX.into(), 7u64.into()]),
                    rmpv::Value::Nil,
                    rmpv::Value::Array(vec![1u32.into(), 300u32.into()]),
                    1u64.into(),
                    rmpv::Value::Nil,
                    "GPU".into(),
                ]),
                rmpv::Value::Array(vec![
                    "BlockRemoved".into(),
                    rmpv::Value::Array(vec![5u64.into(), 6u64.into()]),
                    "GPU".into(),
                ]),
            ]),
        ]);
        assert_eq!(v, expected);
    }

    #[test]
    fn endpoints_are_checked_and_wildcards_bind() {
        assert!(check_endpoint("tcp://*:5557").is_ok());
        assert!(check_endpoint("tcp://epp.default.svc:5557").is_ok());
        assert!(check_endpoint("ipc:///tmp/kv").is_ok());
        for bad in [
            "5557",
            "tcp://:5557",
            "tcp://host",
            "tcp://host:99999",
            "udp://x:1",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
        assert!(binds("tcp://*:5557") && !binds("tcp://epp:5557"));
        assert_eq!(bind_address("tcp://*:5557"), "tcp://0.0.0.0:5557");
    }
}
