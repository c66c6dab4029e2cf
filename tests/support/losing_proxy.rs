//! A proxy between a client and PostgreSQL that loses one answer after the
//! server committed it: the fault of a network that drops a connection at the
//! worst moment, made on cue.
//!
//! Once the server sends a data row holding the proxy's marker, nothing more
//! goes to the client on that connection; when the server then says it is ready
//! for the next query outside any transaction (the statement has committed), the
//! proxy closes both sides. Every other connection, and every byte before the
//! marker, passes unchanged. It reads the server's messages (a type byte and a
//! length), so the client must not ask for TLS ([`LosingProxy::options`] turns
//! it off).

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
};

use sqlx::postgres::{PgConnectOptions, PgSslMode};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{TcpListener, TcpStream, UnixStream},
    task::JoinHandle,
};

/// Where the proxy connects: the server of some connect options.
#[derive(Clone)]
enum Upstream {
    Tcp(String, u16),
    Unix(PathBuf),
}

/// A running proxy; it stops when dropped.
pub struct LosingProxy {
    port: u16,
    lost: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

/// What the connections of one proxy share.
struct Cue {
    marker: Vec<u8>,
    /// Cleared by the connection that loses the answer: one per proxy.
    armed: AtomicBool,
    lost: Arc<AtomicUsize>,
}

impl LosingProxy {
    /// Starts a proxy on a free local port to the server `server` names; the
    /// first answer holding `marker` is lost.
    pub async fn start(server: &PgConnectOptions, marker: &str) -> Self {
        let host = server.get_host().to_owned();
        let upstream = if host.starts_with('/') {
            Upstream::Unix(PathBuf::from(format!(
                "{host}/.s.PGSQL.{}",
                server.get_port()
            )))
        } else {
            Upstream::Tcp(host, server.get_port())
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("local address").port();
        let lost = Arc::new(AtomicUsize::new(0));
        let cue = Arc::new(Cue {
            marker: marker.as_bytes().to_vec(),
            armed: AtomicBool::new(true),
            lost: lost.clone(),
        });
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, cue) = (upstream.clone(), cue.clone());
                tokio::spawn(async move {
                    match upstream {
                        Upstream::Tcp(host, port) => {
                            if let Ok(s) = TcpStream::connect((host.as_str(), port)).await {
                                relay(client, s, &cue).await;
                            }
                        }
                        Upstream::Unix(path) => {
                            if let Ok(s) = UnixStream::connect(path).await {
                                relay(client, s, &cue).await;
                            }
                        }
                    }
                });
            }
        });
        Self { port, lost, task }
    }

    /// `base` pointed at the proxy, without TLS.
    pub fn options(&self, base: &PgConnectOptions) -> PgConnectOptions {
        base.clone()
            .host("127.0.0.1")
            .port(self.port)
            .ssl_mode(PgSslMode::Disable)
    }

    /// Answers lost so far: 0 or 1.
    pub fn answers_lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }
}

impl Drop for LosingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies the client's bytes to the server unchanged and the server's messages
/// back, until either side closes or the answer is lost.
async fn relay<S: AsyncRead + AsyncWrite + Unpin>(client: TcpStream, server: S, cue: &Cue) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = tokio::io::split(server);
    let to_server = tokio::io::copy(&mut client_rx, &mut server_tx);
    let to_client = answers(&mut server_rx, &mut client_tx, cue);
    tokio::select! {
        _ = to_server => {}
        _ = to_client => {}
    }
    // Dropping both halves of both sockets closes them.
}

/// Forwards the server's messages to the client whole, losing the rest of the
/// answer that holds the marker (see the module).
async fn answers(
    server: &mut (impl AsyncRead + Unpin),
    client: &mut (impl AsyncWrite + Unpin),
    cue: &Cue,
) -> std::io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut losing = false;
    loop {
        let n = server.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut at = 0;
        // A message: a type byte, then its length (counting itself) as an i32.
        while buf.len() >= at + 5 {
            let len = i32::from_be_bytes(buf[at + 1..at + 5].try_into().expect("4 bytes"));
            let end = at + 1 + usize::try_from(len).expect("a length PostgreSQL sent");
            if buf.len() < end {
                break;
            }
            let msg = &buf[at..end];
            if !losing
                && msg[0] == b'D'
                && msg.windows(cue.marker.len()).any(|w| w == cue.marker)
                && cue.armed.swap(false, Ordering::SeqCst)
            {
                losing = true;
            }
            if !losing {
                out.extend_from_slice(msg);
            } else if msg[0] == b'Z' && msg.get(5) == Some(&b'I') {
                // Committed, and the client heard none of it.
                client.write_all(&out).await?;
                cue.lost.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            at = end;
        }
        buf.drain(..at);
        client.write_all(&out).await?;
    }
}
